// README (Reconcile, flagged chains): fix the cause, then retry in Bull Board or switch
// auto-renew off and on. For an add-on the switch names its main order, and restores both.
import { describe, expect, it } from 'vitest';
import { renewalJobId } from '../../../jobs/renewals.js';
import { chainIdOf } from '../../../src/chains/keys.js';
import { manualClock, systemClock } from '../../../src/clock.js';
import { RefusalError } from '../../../src/errors.js';
import { DAY, jobState, orderPlaced, useSystem } from '../../helpers/system.js';

describe('an add-on whose renewal was refused, the cause fixed, auto-renew switched off and on', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({ clock, env: { SEAT_INCREASE: 'addon' } });

  it('gets its renewal back with its main chain', async () => {
    await system.send(
      'order.placed',
      orderPlaced({ order: 'OF-1', licenses: 5, startsAt: clock.now() - 10 * DAY }),
    );
    await system.waitForChain('OF-1', () => true);
    await system.send('seats.changed', { order: 'OF-1', licenses: 8 });
    const family = await system.waitForChain('OF-1', (c) => c.addOns.length === 1);
    const addOn = family.addOns[0] as NonNullable<(typeof family.addOns)[0]>;
    const jobId = renewalJobId(chainIdOf(addOn.order), 2);

    // The provider refuses the add-on's renewal once: flagged, its job failed for a person.
    const provisioning = system.started.provisioning as unknown as Record<string, unknown>;
    const saved = {
      createOrder: provisioning.createOrder,
      createRecorded: provisioning.createRecorded,
    };
    const refuse = async () => {
      throw new RefusalError('provisioning_refused', 'product suite-std is on hold');
    };
    Object.assign(provisioning, { createOrder: refuse, createRecorded: refuse });
    try {
      clock.set(addOn.term.expiresAt - 7 * DAY);
      await system.promote('renewals', jobId);
      await system.waitForChain('OF-1', (c) => c.addOns[0]?.flagged != null);
      await expect.poll(() => jobState(system.queue('renewals'), jobId)).toBe('failed');
    } finally {
      Object.assign(provisioning, saved);
    }

    // The cause fixed, the person switches auto-renew off and on, naming the main order (an
    // add-on's own order is refused 422 add_on_governed).
    expect(
      (await system.ops('PUT', '/ops/chains/OF-1/auto-renew', { enabled: false })).status,
    ).toBe(200);
    expect((await system.ops('PUT', '/ops/chains/OF-1/auto-renew', { enabled: true })).status).toBe(
      200,
    );
    // The add-on is due: its renewal is made now, and the flag cleared.
    const renewed = await system.waitForChain('OF-1', (c) => c.addOns[0]?.term.count === 2, 8_000);
    expect(renewed.addOns[0]?.flagged).toBeNull();
  });
});
