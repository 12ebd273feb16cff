// README (Reconcile): reconcile takes the lock only of the chains where something looks off, and
// leaves alone a renewal job that put itself off (payment overdue, the provider's window). A
// customer who never pays keeps a suspended chain whose due renewal puts itself off every 6
// hours for years: its lock-free check must know that, or every round locks it for nothing.
import { describe, expect, it } from 'vitest';
import { suspensionJobId } from '../../../jobs/payment-signals.js';
import { renewalJobId } from '../../../jobs/renewals.js';
import { chainIdOf } from '../../../src/chains/keys.js';
import { ChainStore, type LockResult } from '../../../src/chains/store.js';
import { manualClock } from '../../../src/clock.js';
import { DAY, orderPlaced, reconcileRound, useSystem } from '../../helpers/system.js';

const T0 = Date.UTC(2026, 0, 1, 9) / 1000;

describe('a suspended chain whose due renewal waits for a payment that never comes', () => {
  const clock = manualClock(T0);
  const system = useSystem({ clock, env: { RECONCILE_INTERVAL_SECONDS: '86400' } });

  it('costs reconcile no lock once its renewal job has put itself off', async () => {
    const order = 'NP-1';
    const id = chainIdOf(order);
    await system.send('order.placed', orderPlaced({ order, startsAt: T0 }));
    await system.waitForChain(order, () => true);
    await system.send('payment.overdue', { order });
    await system.waitForChain(order, (c) => c.payment === 'overdue');
    // The grace period ends: suspended.
    clock.set(T0 + 4 * DAY);
    await system.promote('payment-signals', suspensionJobId(id, 1));
    await system.waitForChain(order, (c) => c.status === 'suspended');
    // The renewal falls due and puts itself off: the payment is overdue.
    const due = (await system.chain(order)).nextRenewalAt as number;
    clock.set(due + 60);
    const job = renewalJobId(id, 2);
    await system.promote('renewals', job);
    await expect
      .poll(async () => (await system.queue('renewals').getJob(job))?.data.deferredUntil)
      .toBeGreaterThan(due);
    await expect
      .poll(async () =>
        system
          .queue('renewals')
          .getJob(job)
          .then((j) => j?.getState()),
      )
      .toBe('delayed');

    const locked: string[] = [];
    class CountingLocks extends ChainStore {
      override lock(chainId: string, token: string, leaseMs?: number): Promise<LockResult> {
        locked.push(chainId);
        return super.lock(chainId, token, leaseMs);
      }
    }
    const chains = new CountingLocks(system.started.runtime.redis);
    const before = await system.chain(order);
    for (const round of [1, 2, 3]) {
      clock.advance(300);
      await reconcileRound(system, `round-${round}`, { chains });
    }
    // Nothing changed, and no round took the chain's lock.
    expect(await system.chain(order)).toEqual(before);
    expect(locked).toEqual([]);
  });
});
