// An add-on cancelled by itself (its own order named) while its family is suspended for
// non-payment: the cancel's answer and every view show it cancelled, not the family's suspension.
import { describe, expect, it } from 'vitest';
import type { ChainView } from '../../../src/chains/view.js';
import { manualClock, systemClock } from '../../../src/clock.js';
import { DAY, orderPlaced, useSystem } from '../../helpers/system.js';

describe('a marketplace add-on cancelled alone while its family is suspended', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({ clock, env: { SEAT_INCREASE: 'addon', PAYMENT_GRACE_DAYS: '0' } });

  it('is answered, and shown, cancelled; its main chain stays suspended', async () => {
    const startsAt = clock.now() - 10 * DAY;
    await system.send('order.placed', orderPlaced({ order: 'SUSP-AO-1', licenses: 5, startsAt }));
    await system.waitForChain('SUSP-AO-1', () => true);
    expect((await system.send('seats.changed', { order: 'SUSP-AO-1', licenses: 8 })).status).toBe(
      202,
    );
    await system.waitForChain('SUSP-AO-1', (c) => c.addOns.length === 1);
    await system.send('payment.overdue', { order: 'SUSP-AO-1' });
    await system.waitForChain('SUSP-AO-1', (c) => c.status === 'suspended');

    const res = await system.ops('POST', '/ops/chains/SUSP-AO-1.a1/cancel');
    expect(res.status).toBe(200);
    expect((await system.providerOrder('SUSP-AO-1.a1'))?.status).toBe('cancelled');
    expect((res.body as ChainView).status).toBe('cancelled');
    expect((await system.chain('SUSP-AO-1.a1')).status).toBe('cancelled');
    const main = await system.chain('SUSP-AO-1');
    expect(main.status).toBe('suspended');
    expect(main.addOns[0]).toMatchObject({ status: 'cancelled', needsReactivation: false });
  });
});
