// README (Reconcile): reconcile takes the lock only of the chains where something looks off, and
// leaves alone a renewal job that put itself off (payment overdue, the provider's window). A
// customer who never pays keeps a suspended chain whose due renewal puts itself off every 6
// hours for years: its lock-free check must know that, or every round locks it for nothing. So
// must a chain in its grace period whose suspension job stands: a book with many late payers
// would otherwise cost every round a lock (and several round trips) per overdue chain.
import { describe, expect, it } from 'vitest';
import { suspensionJobId } from '../../../jobs/payment-signals.js';
import { renewalJobId } from '../../../jobs/renewals.js';
import { chainIdOf } from '../../../src/chains/keys.js';
import { ChainStore, type LockResult } from '../../../src/chains/store.js';
import { manualClock } from '../../../src/clock.js';
import {
  DAY,
  jobState,
  orderPlaced,
  reconcileRound,
  type System,
  useSystem,
} from '../../helpers/system.js';

const T0 = Date.UTC(2026, 0, 1, 9) / 1000;

/** A chain store that notes every chain whose lock is taken. */
function countingLocks(system: System): { chains: ChainStore; locked: string[] } {
  const locked: string[] = [];
  class CountingLocks extends ChainStore {
    override lock(chainId: string, token: string, leaseMs?: number): Promise<LockResult> {
      locked.push(chainId);
      return super.lock(chainId, token, leaseMs);
    }
  }
  return { chains: new CountingLocks(system.started.runtime.redis), locked };
}

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
    await expect.poll(() => jobState(system.queue('renewals'), job)).toBe('delayed');

    const { chains, locked } = countingLocks(system);
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

describe('a chain in its grace period, its renewal and suspension jobs in place', () => {
  const clock = manualClock(T0);
  const system = useSystem({
    clock,
    env: { PAYMENT_GRACE_DAYS: '3', RECONCILE_INTERVAL_SECONDS: '86400' },
  });

  it('costs reconcile no lock, and one whose suspension job was lost gets it back', async () => {
    const order = 'GR-1';
    const id = chainIdOf(order);
    await system.send('order.placed', orderPlaced({ order, startsAt: T0 - 2 * DAY }));
    await system.waitForChain(order, () => true);
    await system.send('payment.overdue', { order });
    await system.waitForChain(order, (c) => c.payment === 'overdue');
    const suspension = suspensionJobId(id, 1);
    expect(await jobState(system.queue('payment-signals'), suspension)).toBe('delayed');

    const { chains, locked } = countingLocks(system);
    const before = await system.chain(order);
    await reconcileRound(system, 'grace-round-1', { chains });
    expect(await system.chain(order)).toEqual(before);
    expect(locked).toEqual([]);

    // Lost (a Redis restored from an older backup): the lock-free check sees it, and the
    // round under the lock brings it back.
    await (await system.queue('payment-signals').getJob(suspension))?.remove();
    await reconcileRound(system, 'grace-round-2', { chains });
    expect(locked).toEqual([id]);
    expect(await jobState(system.queue('payment-signals'), suspension)).toBe('delayed');
  });
});
