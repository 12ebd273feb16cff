// A lead as long as the partner's window, longer than a 28-day February: a term ordered ahead
// is in force before the next is ordered, so a chain never holds more than one term ahead.
import { describe, expect, it } from 'vitest';
import { renewalJobId } from '../../../jobs/renewals.js';
import { chainIdOf } from '../../../src/chains/keys.js';
import { manualClock } from '../../../src/clock.js';
import { jobState, orderPlaced, useSystem } from '../../helpers/system.js';

const T0 = Date.UTC(2025, 11, 31, 9) / 1000; // Dec 31: terms end Jan 31, Feb 28, Mar 31
const JAN_31 = Date.UTC(2026, 0, 31, 9) / 1000;

describe('a monthly chain with a 30-day lead across February', () => {
  const clock = manualClock(T0);
  const system = useSystem({
    clock,
    env: { PARTNER_RENEWAL_WINDOW_DAYS: '30', RENEWAL_LEAD_DAYS: '30' },
  });

  it('orders the March term when February starts, not while January is still in force', async () => {
    await system.send('order.placed', orderPlaced({ order: 'L-1', startsAt: T0 }));
    await system.waitForChain('L-1', () => true);
    clock.set(Date.UTC(2026, 0, 1, 9) / 1000); // 30 days before the end of January
    await system.promote('renewals', renewalJobId(chainIdOf('L-1'), 2));
    const placed = await system.waitForChain('L-1', (c) => c.term.count === 2);
    expect(placed.term).toMatchObject({ orderId: 'L-1.r2', startsAt: JAN_31 });
    // 30 days before the end of February is Jan 29: term 2 has not started.
    expect(placed.nextRenewalAt).toBe(JAN_31);

    clock.set(Date.UTC(2026, 0, 29, 9) / 1000);
    const job = renewalJobId(chainIdOf('L-1'), 3);
    await system.promote('renewals', job);
    await expect.poll(() => jobState(system.queue('renewals'), job)).toBe('delayed');
    expect((await system.chain('L-1')).term.count).toBe(2);
    expect(await system.providerOrder('L-1.r3')).toBeNull();

    clock.set(JAN_31);
    await system.promote('renewals', job);
    const renewed = await system.waitForChain('L-1', (c) => c.term.count === 3);
    expect(renewed.term.startsAt).toBe(Date.UTC(2026, 1, 28, 9) / 1000);

    // A cancel reaches every order in force or ahead: none is left out of the record.
    const cancelled = await system.ops('POST', '/ops/chains/L-1/cancel');
    expect(cancelled.status).toBe(200);
    for (const order of ['L-1.r2', 'L-1.r3']) {
      expect((await system.providerOrder(order))?.status).toBe('cancelled');
    }
  });
});
