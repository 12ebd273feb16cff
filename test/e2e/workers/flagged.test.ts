// A flagged chain: its renewal refused for good, its failed job waiting for a person. Nothing of
// its family renews until that person acts, whatever else happens to it meanwhile.
import { setTimeout as delay } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { renewalJobId } from '../../../jobs/renewals.js';
import { chainIdOf } from '../../../src/chains/keys.js';
import { manualClock, systemClock } from '../../../src/clock.js';
import { RefusalError } from '../../../src/errors.js';
import {
  DAY,
  leftByDeadJob,
  orderPlaced,
  reconcileRound,
  type System,
  useSystem,
} from '../../helpers/system.js';

/** Flags the chain as a refused renewal does, its failed job gone from the delayed set. */
async function flag(system: System, order: string) {
  await leftByDeadJob(system, order, 'flagging-job', () => ({
    flagged: `the provider refused ${order}.r2: for the test`,
  }));
  await (await system.queue('renewals').getJob(renewalJobId(chainIdOf(order), 2)))?.remove();
}

describe('the add-on of a flagged main chain', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({ clock, env: { SEAT_INCREASE: 'addon' } });

  it('shows no renewal time once the main chain expired', async () => {
    await system.send(
      'order.placed',
      orderPlaced({ order: 'RF-1', licenses: 5, startsAt: clock.now() - 10 * DAY }),
    );
    const placed = await system.waitForChain('RF-1', () => true);
    expect((await system.send('seats.changed', { order: 'RF-1', licenses: 8 })).status).toBe(202);
    const withAddOn = await system.waitForChain('RF-1', (c) => c.addOns.length === 1);

    await flag(system, 'RF-1');

    clock.set(placed.term.expiresAt + 3600);
    expect(await reconcileRound(system, 'reconcile-rf1')).toMatchObject({ expired: 1 });
    const view = await system.chain('RF-1');
    expect(view).toMatchObject({ status: 'expired', nextRenewalAt: null });
    // An add-on's nextRenewalAt is null while the main chain does not renew.
    expect(view.addOns[0]).toMatchObject({
      order: withAddOn.addOns[0]?.order,
      nextRenewalAt: null,
    });
  });

  it('orders no renewal of the add-on, until the main chain renews', async () => {
    const [addOn] = (await system.chain('RF-1')).addOns;
    if (!addOn) throw new Error('no add-on');
    clock.set(addOn.term.expiresAt - 7 * DAY);
    const id = renewalJobId(chainIdOf('RF-1.a1'), 2);
    const renewals = system.queue('renewals');
    // Its job, run now if reconcile left it, skips: the main chain is flagged.
    if (await renewals.getJob(id)) {
      await system.promote('renewals', id);
      await expect
        .poll(async () => (await renewals.getJob(id))?.returnvalue)
        .toBe('skipped: main_flagged');
    }
    await reconcileRound(system, 'reconcile-rf1-due');
    expect(await renewals.getJob(id)).toBeUndefined();
    expect(await system.providerOrder('RF-1.a1.r2')).toBeNull();

    // The cause fixed, an operator switches the main chain's auto-renew off and on: it renews,
    // and its add-on with it.
    await system.ops('PUT', '/ops/chains/RF-1/auto-renew', { enabled: false });
    await system.ops('PUT', '/ops/chains/RF-1/auto-renew', { enabled: true });
    await system.waitForChain('RF-1', (c) => c.term.count === 2 && c.flagged === null);
    await expect.poll(() => system.providerOrder('RF-1.a1.r2'), { timeout: 10_000 }).not.toBeNull();
  });
});

describe('a payment for an expired flagged chain', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({ clock, env: { PAYMENT_GRACE_DAYS: '90' } });

  it('leaves its renewal to a person, as its history entry says', async () => {
    await system.send('order.placed', orderPlaced({ order: 'RP-1', startsAt: clock.now() }));
    const placed = await system.waitForChain('RP-1', () => true);
    const id = renewalJobId(chainIdOf('RP-1'), 2);
    await flag(system, 'RP-1');
    // Its renewal job failed for good (as flagChain leaves it): a job of that id in Failed.
    await system.queue('renewals').add('poison', {}, { jobId: id, attempts: 1 });
    await expect
      .poll(async () => (await system.queue('renewals').getJob(id))?.getState(), {
        timeout: 10_000,
      })
      .toBe('failed');

    clock.advance(3600);
    expect((await system.send('payment.overdue', { order: 'RP-1' })).status).toBe(202);
    await system.waitForChain('RP-1', (c) => c.payment === 'overdue');
    clock.set(placed.term.expiresAt + DAY);
    expect(await reconcileRound(system, 'reconcile-rp1')).toMatchObject({ expired: 1 });

    expect((await system.send('payment.received', { order: 'RP-1' })).status).toBe(202);
    const paid = await system.waitForChain('RP-1', (c) => c.payment === 'ok');
    expect(paid.history.find((h) => h.event === 'payment.received')?.detail).toBe(
      'payment received after the term ended',
    );
    await delay(3000);
    const after = await system.chain('RP-1');
    expect(after.history.map((h) => h.event)).not.toContain('renewal.ordered');
    expect(after.term.count).toBe(1);
    expect(await system.providerOrder('RP-1.r2')).toBeNull();
  });
});

describe('a person retrying the failed renewal of an expired flagged chain in Bull Board', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({ clock });

  it('renews it from now and clears the flag', async () => {
    await system.send('order.placed', orderPlaced({ order: 'RB-1', startsAt: clock.now() }));
    const placed = await system.waitForChain('RB-1', () => true);
    const provisioning = system.started.provisioning as unknown as Record<string, unknown>;
    const saved = {
      createOrder: provisioning.createOrder,
      createRecorded: provisioning.createRecorded,
    };
    const refuse = async () => {
      throw new RefusalError('provisioning_refused', 'product suite-std is on hold');
    };
    const id = renewalJobId(chainIdOf('RB-1'), 2);
    try {
      provisioning.createOrder = refuse;
      provisioning.createRecorded = refuse;
      clock.set(placed.term.expiresAt - 7 * DAY);
      await system.promote('renewals', id);
      await system.waitForChain('RB-1', (c) => c.flagged !== null);
      await expect
        .poll(async () => (await system.queue('renewals').getJob(id))?.getState())
        .toBe('failed');
    } finally {
      Object.assign(provisioning, saved);
    }
    clock.set(placed.term.expiresAt + DAY);
    expect(await reconcileRound(system, 'reconcile-rb1')).toMatchObject({ expired: 1 });
    await (await system.queue('renewals').getJob(id))?.retry('failed');
    const renewed = await system.waitForChain('RB-1', (c) => c.term.count === 2);
    expect(renewed).toMatchObject({ status: 'active', flagged: null });
    expect(renewed.term.startsAt).toBe(clock.now());
  });
});
describe('a flagged chain whose term ends', () => {
  const T0 = Date.UTC(2026, 0, 31, 9) / 1000;
  const clock = manualClock(T0);
  const system = useSystem({ clock });

  it('is marked expired, shows and lists no renewal, and renews from then once an operator acts', async () => {
    await system.send('order.placed', orderPlaced({ order: 'FLAG-X', startsAt: T0 }));
    const placed = await system.waitForChain('FLAG-X', () => true);
    const { expiresAt } = placed.term;
    await flag(system, 'FLAG-X');
    expect((await system.chain('FLAG-X')).nextRenewalAt).toBeNull();

    clock.set(expiresAt + DAY);
    expect(await reconcileRound(system, 'reconcile-flagged')).toMatchObject({ expired: 1 });
    const expired = await system.chain('FLAG-X');
    expect(expired).toMatchObject({ status: 'expired', nextRenewalAt: null });
    expect(expired.history.at(-1)).toMatchObject({ event: 'chain.expired' });
    const upcoming = await system.ops('GET', '/ops/renewals?within=30');
    expect(upcoming.body).toEqual({ renewals: [] });

    // The cause fixed, the operator switches auto-renew off and on: the term starts now.
    clock.advance(3600);
    await system.ops('PUT', '/ops/chains/FLAG-X/auto-renew', { enabled: false });
    await system.ops('PUT', '/ops/chains/FLAG-X/auto-renew', { enabled: true });
    const renewed = await system.waitForChain('FLAG-X', (c) => c.term.count === 2);
    expect(renewed).toMatchObject({ status: 'active', flagged: null });
    expect(renewed.term.startsAt).toBe(clock.now());
  });
});
