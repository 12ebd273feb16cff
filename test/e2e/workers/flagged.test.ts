// A flagged chain: its renewal refused for good, its failed job waiting for a person. Nothing of
// its family renews until that person acts, whatever else happens to it meanwhile.
import { describe, expect, it } from 'vitest';
import { renewalJobId } from '../../../jobs/renewals.js';
import { chainIdOf } from '../../../src/chains/keys.js';
import { type ManualClock, manualClock, systemClock } from '../../../src/clock.js';
import { RefusalError } from '../../../src/errors.js';
import { webhookJobId } from '../../../src/intake/webhooks.js';
import {
  DAY,
  jobState,
  leftByDeadJob,
  orderPlaced,
  reconcileRound,
  runAgain,
  type System,
  useSystem,
} from '../../helpers/system.js';

/**
 * Sends a payment.received for the order and waits for its job to finish: completed, or failed
 * asking for a manual reactivation (external). Answers that job's state.
 */
async function paymentReceived(system: System, order: string) {
  const id = `evt-paid-${order}`;
  expect((await system.send('payment.received', { order }, { id })).status).toBe(202);
  const queue = system.queue('payment-signals');
  let state: string | undefined;
  await expect
    .poll(
      async () => {
        state = await jobState(queue, webhookJobId(id));
        return state === 'completed' || state === 'failed';
      },
      { timeout: 10_000 },
    )
    .toBe(true);
  return state;
}

/**
 * A chain of 5 licenses placed 10 days ago, and an add-on of 3 bought for a seat increase to 8
 * (SEAT_INCREASE=addon).
 */
async function placedWithAddOn(system: System, clock: ManualClock, order: string) {
  await system.send(
    'order.placed',
    orderPlaced({ order, licenses: 5, startsAt: clock.now() - 10 * DAY }),
  );
  const placed = await system.waitForChain(order, () => true);
  expect((await system.send('seats.changed', { order, licenses: 8 })).status).toBe(202);
  const withAddOn = await system.waitForChain(order, (c) => c.addOns.length === 1);
  const [addOn] = withAddOn.addOns;
  if (!addOn) throw new Error(`no add-on of ${order}`);
  return { placed, addOn };
}

/**
 * The chain's next renewal refused by the provider when it falls due (`method`, and the core's
 * one-step renewal), which flags it: its job failed, waiting for a person. Answers that job's id.
 */
async function refusedRenewal(
  system: System,
  clock: ManualClock,
  order: string,
  method: 'createOrder' | 'createRenewalOrder' = 'createOrder',
) {
  const chain = await system.chain(order);
  const provisioning = system.started.provisioning as unknown as Record<string, unknown>;
  const saved = { [method]: provisioning[method], createRecorded: provisioning.createRecorded };
  const refuse = async () => {
    throw new RefusalError('provisioning_refused', 'product suite-std is on hold');
  };
  const id = renewalJobId(chainIdOf(order), chain.term.count + 1);
  try {
    Object.assign(provisioning, { [method]: refuse, createRecorded: refuse });
    clock.set(chain.term.expiresAt - 7 * DAY);
    await system.promote('renewals', id);
    await system.waitForChain(order, (c) => c.flagged !== null);
    await expect.poll(() => jobState(system.queue('renewals'), id)).toBe('failed');
  } finally {
    Object.assign(provisioning, saved);
  }
  return id;
}

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
    const { placed, addOn } = await placedWithAddOn(system, clock, 'RF-1');

    await flag(system, 'RF-1');

    clock.set(placed.term.expiresAt + 3600);
    expect(await reconcileRound(system, 'reconcile-rf1')).toMatchObject({ expired: 1 });
    const view = await system.chain('RF-1');
    expect(view).toMatchObject({ status: 'expired', nextRenewalAt: null });
    // An add-on's nextRenewalAt is null while the main chain does not renew.
    expect(view.addOns[0]).toMatchObject({
      order: addOn.order,
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
      .poll(() => jobState(system.queue('renewals'), id), {
        timeout: 10_000,
      })
      .toBe('failed');

    clock.advance(3600);
    expect((await system.send('payment.overdue', { order: 'RP-1' })).status).toBe(202);
    await system.waitForChain('RP-1', (c) => c.payment === 'overdue');
    clock.set(placed.term.expiresAt + DAY);
    expect(await reconcileRound(system, 'reconcile-rp1')).toMatchObject({ expired: 1 });

    expect(await paymentReceived(system, 'RP-1')).toBe('completed');
    // The payment's job is done: the failed renewal job is still the person's.
    expect(await jobState(system.queue('renewals'), id)).toBe('failed');
    const after = await system.chain('RP-1');
    expect(after.history.find((h) => h.event === 'payment.received')?.detail).toBe(
      'payment received after the term ended',
    );
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
    const id = await refusedRenewal(system, clock, 'RB-1');
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
    expect(upcoming.body).toEqual({ renewals: [], next: null });

    // The cause fixed, the operator switches auto-renew off and on: the term starts now.
    clock.advance(3600);
    await system.ops('PUT', '/ops/chains/FLAG-X/auto-renew', { enabled: false });
    await system.ops('PUT', '/ops/chains/FLAG-X/auto-renew', { enabled: true });
    const renewed = await system.waitForChain('FLAG-X', (c) => c.term.count === 2);
    expect(renewed).toMatchObject({ status: 'active', flagged: null });
    expect(renewed.term.startsAt).toBe(clock.now());
  });
});

describe('a flagged chain restored by an operator while its payment is overdue, then paid', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({ clock, env: { PAYMENT_GRACE_DAYS: '90' } });

  it('renews at once when paid, as any overdue chain does', async () => {
    await system.send('order.placed', orderPlaced({ order: 'PF-1', startsAt: clock.now() }));
    await system.waitForChain('PF-1', () => true);
    const id = await refusedRenewal(system, clock, 'PF-1');
    // The payment falls overdue; the cause fixed, a person switches auto-renew off and on.
    clock.advance(3600);
    expect((await system.send('payment.overdue', { order: 'PF-1' })).status).toBe(202);
    await system.waitForChain('PF-1', (c) => c.payment === 'overdue');
    await system.ops('PUT', '/ops/chains/PF-1/auto-renew', { enabled: false });
    await system.ops('PUT', '/ops/chains/PF-1/auto-renew', { enabled: true });
    // Its job runs at once and waits for the payment (6 hours).
    await expect
      .poll(async () => (await system.queue('renewals').getJob(id))?.data?.deferredUntil, {
        timeout: 10_000,
      })
      .toBeDefined();
    // Paid: the renewal that waited for it is made now.
    clock.advance(60);
    expect((await system.send('payment.received', { order: 'PF-1' })).status).toBe(202);
    const renewed = await system.waitForChain('PF-1', (c) => c.term.count === 2);
    expect(renewed).toMatchObject({ payment: 'ok', flagged: null });
  });
});

describe('external: a flagged chain paid after its suspension, its reactivation confirmed', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({
    clock,
    env: { PARTNER_VARIANT: 'external', PAYMENT_GRACE_DAYS: '0' },
  });

  it('leaves the refused renewal to a person, as a marketplace payment does', async () => {
    await system.send('order.placed', orderPlaced({ order: 'XF-1', startsAt: clock.now() }));
    await system.waitForChain('XF-1', () => true);
    const id = await refusedRenewal(system, clock, 'XF-1', 'createRenewalOrder');
    clock.advance(3600);
    expect((await system.send('payment.overdue', { order: 'XF-1' })).status).toBe(202);
    await system.waitForChain('XF-1', (c) => c.status === 'suspended');
    clock.advance(3600);
    await paymentReceived(system, 'XF-1');
    // The operator confirms the manual reactivation at the provider (nothing about the renewal).
    const res = await system.ops('POST', '/ops/chains/XF-1/reactivated');
    expect(res.status).toBe(200);
    expect(await jobState(system.queue('renewals'), id)).toBe('failed');
    const after = await system.chain('XF-1');
    expect({
      count: after.term.count,
      renewals: after.history.filter((h) => h.event === 'renewal.ordered').length,
      flagged: after.flagged,
      order: (await system.providerOrder('XF-1.r2'))?.id ?? null,
    }).toEqual({
      count: 1,
      renewals: 0,
      flagged: 'the provider refused XF-1.r2: product suite-std is on hold',
      order: null,
    });
  });
});

describe('an add-on expired while its main chain was flagged', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({ clock, env: { SEAT_INCREASE: 'addon' } });

  it('renews from now, with its share, once a person retries the main chain in Bull Board', async () => {
    const { addOn } = await placedWithAddOn(system, clock, 'EA-1');
    const id = await refusedRenewal(system, clock, 'EA-1');
    const renewals = system.queue('renewals');
    // The add-on's job fires when due: it skips.
    const addOnJob = renewalJobId(chainIdOf(addOn.order), 2);
    clock.set(addOn.term.expiresAt - 7 * DAY);
    await system.promote('renewals', addOnJob);
    await expect
      .poll(async () => (await renewals.getJob(addOnJob))?.returnvalue)
      .toBe('skipped: main_flagged');
    clock.set(addOn.term.expiresAt + DAY);
    await reconcileRound(system, 'reconcile-ea1');
    const expired = await system.chain('EA-1');
    expect(expired.status).toBe('expired');
    expect(expired.addOns[0]?.status).toBe('expired');

    await (await renewals.getJob(id))?.retry('failed');
    const renewed = await system.waitForChain('EA-1', (c) => c.term.count === 2);
    expect(renewed).toMatchObject({ flagged: null, status: 'active' });
    expect(renewed.term.startsAt).toBe(clock.now());
    const addOnRenewed = await system.waitForChain(
      'EA-1',
      (c) => c.addOns[0]?.term.count === 2,
      10_000,
    );
    expect(addOnRenewed.addOns[0]).toMatchObject({ status: 'active', licenses: 3 });
    expect(addOnRenewed.addOns[0]?.term.startsAt).toBe(clock.now());
    expect(await system.providerOrder(`${addOn.order}.r2`)).not.toBeNull();
  });
});

describe('the main chain renewal of a flagged family, run again after it was recorded', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({ clock, env: { SEAT_INCREASE: 'addon' } });

  it('gives the add-on its job back, as the first run would have', async () => {
    const { addOn } = await placedWithAddOn(system, clock, 'RA-1');
    const id = await refusedRenewal(system, clock, 'RA-1');
    const renewals = system.queue('renewals');
    const addOnJob = renewalJobId(chainIdOf(addOn.order), 2);
    // Reconcile takes the add-on's job away while its main chain is flagged.
    await reconcileRound(system, 'reconcile-ra1');
    expect(await renewals.getJob(addOnJob)).toBeUndefined();
    await (await renewals.getJob(id))?.retry('failed');
    await system.waitForChain('RA-1', (c) => c.term.count === 2);
    // Simulate the state a crash right after the record leaves: the add-on's skipped job.
    await expect.poll(() => jobState(renewals, addOnJob)).toBe('delayed');
    await (await renewals.getJob(addOnJob))?.remove();
    // The main chain's job is run again (stalled after its record): already renewed.
    await runAgain(renewals, id);
    expect((await renewals.getJob(id))?.returnvalue).toBe('skipped: already_renewed');
    expect(await jobState(renewals, addOnJob)).toBe('delayed');
  });
});
