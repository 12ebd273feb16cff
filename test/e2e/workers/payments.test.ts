// Payment delays end to end: grace periods, suspension, payment, reactivation, waiting renewals.
import type { Job, Queue } from 'bullmq';
import { describe, expect, it } from 'vitest';
import {
  ensureSuspensionJob,
  makeProcessor as makePaymentProcessor,
  suspensionJobId,
} from '../../../jobs/payment-signals.js';
import { makeRenewalProcessor, renewalJobId } from '../../../jobs/renewals.js';
import { makeProcessor as makeSeatProcessor } from '../../../jobs/seat-changes.js';
import { chainIdOf } from '../../../src/chains/keys.js';
import { ChainStore } from '../../../src/chains/store.js';
import type { ChainView } from '../../../src/chains/view.js';
import type { ProvisioningClient } from '../../../src/client/provisioning-client.js';
import { type ManualClock, manualClock, systemClock } from '../../../src/clock.js';
import { addOnOrderId, renewalOrderId } from '../../../src/domain/ids.js';
import { RefusalError, TransientError } from '../../../src/errors.js';
import { formatInstant } from '../../../src/format.js';
import { webhookDedupKey, webhookJobId } from '../../../src/intake/webhooks.js';
import { makeChainOperations } from '../../../src/ops/chain-operations.js';
import {
  DAY,
  jobState,
  lastEvent,
  leftByDeadJob,
  metricValue,
  orderPlaced,
  paidAwaitingReactivation,
  renewalIntentOf,
  renewalJobOffMs,
  runAgain,
  type System,
  slowToUnsuspend,
  useSystem,
  workerDepsOf,
} from '../../helpers/system.js';

/** Suspensions as operators count them: every chain recorded suspended, however it came to be. */
const SUSPENDS = 'billing_suspensions_total{action="suspend"}';

/** The orders GET /ops/renewals lists within 60 days. */
async function upcomingOrders(system: System): Promise<string[]> {
  const res = await system.ops('GET', '/ops/renewals?within=60');
  return (res.body as { renewals: { order: string }[] }).renewals.map((r) => r.order);
}

async function providerStatus(system: System, order: string) {
  return (await system.providerOrder(order))?.status;
}

/**
 * Places `order`, raises it to `licenses` (an add-on order, with SEAT_INCREASE=addon or the
 * external variant), and lets its payment go overdue: both orders end up suspended.
 */
async function suspendedWithAddOn(system: System, order: string, licenses: number) {
  await system.send('order.placed', orderPlaced({ order }));
  await system.waitForChain(order, () => true);
  await system.send('seats.changed', { order, licenses });
  await system.waitForChain(order, (c) => c.addOns.length === 1);
  await system.send('payment.overdue', { order });
  await system.waitForChain(order, (c) => c.status === 'suspended');
  expect(await providerStatus(system, order)).toBe('suspended');
  expect(await providerStatus(system, `${order}.a1`)).toBe('suspended');
}

/**
 * Places `order`, lets it be suspended (no grace), then raises it to 8 licenses: the purchase
 * (`bought`, recorded as `event`) is suspended on arrival and says so, since the suspension's
 * entry was written before it existed; the payment unsuspends it with the rest.
 */
async function boughtWhileSuspended(system: System, order: string, bought: string, event: string) {
  await system.send('order.placed', orderPlaced({ order }));
  await system.waitForChain(order, () => true);
  await system.send('payment.overdue', { order });
  await system.waitForChain(order, (c) => c.status === 'suspended');
  await system.send('seats.changed', { order, licenses: 8 });
  const after = await system.waitForChain(order, (c) => lastEvent(c) === event);
  expect(await providerStatus(system, bought)).toBe('suspended');
  expect(after.history.at(-1)?.detail).toContain('suspended on arrival');

  await system.send('payment.received', { order });
  await system.waitForChain(order, (c) => c.status === 'active');
  expect(await providerStatus(system, bought)).toBe('active');
}

/**
 * Places `order` (5 licenses from `startsAt`), raises it to 8 (an add-on order, with
 * SEAT_INCREASE=addon), and lets its payment go overdue.
 */
async function overdueWithAddOn(system: System, order: string, startsAt: number) {
  await system.send('order.placed', orderPlaced({ order, startsAt }));
  const placed = await system.waitForChain(order, () => true);
  await system.send('seats.changed', { order, licenses: 8 });
  const [addOn] = (await system.waitForChain(order, (c) => c.addOns.length === 1)).addOns;
  if (!addOn) throw new Error('no add-on');
  await system.send('payment.overdue', { order });
  await system.waitForChain(order, (c) => c.payment === 'overdue');
  return { placed, addOn };
}

/**
 * An increase from 8 to 10 needed now while the main chain (5) is expired, its renewal waiting
 * for an overdue payment, and its add-on (3), bought 10 days before the term ended, is still in
 * force; then the payment. `placed`: the chain of `order` with 5 licenses, 20 days into its
 * term, `clock` at that moment. `split`: the next counts the increase sets, main and add-on.
 * Answers the family once the payment renewed it.
 */
async function increaseWhileExpiredUnpaid(
  system: System,
  clock: ManualClock,
  order: string,
  placed: ChainView,
  split = { main: 7, addOn: 3 },
): Promise<ChainView> {
  await system.send('seats.changed', { order, licenses: 8 });
  const [addOn] = (await system.waitForChain(order, (c) => c.addOns.length === 1)).addOns;
  expect(addOn?.term.expiresAt).toBeGreaterThan(placed.term.expiresAt + 10 * DAY);
  await system.send('payment.overdue', { order });
  await system.waitForChain(order, (c) => c.payment === 'overdue');
  // The renewal falls due and waits for the payment, past the end of the term: expired.
  const job = renewalJobId(chainIdOf(order), 2);
  clock.set(placed.term.expiresAt - DAY);
  await system.promote('renewals', job);
  await expect
    .poll(async () => (await system.queue('renewals').getJob(job))?.data.deferredUntil)
    .toBeGreaterThan(clock.now());
  clock.set(placed.term.expiresAt + DAY);
  await system.promote('renewals', job);
  await system.waitForChain(order, (c) => c.status === 'expired');

  await system.send('seats.changed', { order, licenses: 10 });
  const set = await system.waitForChain(order, (c) => lastEvent(c) === 'seats.changed');
  expect(set).toMatchObject({ nextLicenses: split.main, addOns: [{ nextLicenses: split.addOn }] });
  expect(set.history.at(-1)?.detail).toContain('nothing to buy now (needed from the next term)');

  clock.advance(3600);
  await system.send('payment.received', { order });
  return system.waitForChain(order, (c) => c.term.count === 2);
}

/**
 * `order` (5 licenses, 2 days into its term) with its payment overdue and an add-on of 3 that a
 * seat job decided the day before the term ended, whose call went away (a provider outage of
 * days): the term and the grace period ended, and the suspension found nothing in force.
 * Answers the add-on's order id.
 */
async function addOnLeftPastEmptySuspension(
  system: System,
  clock: ManualClock,
  order: string,
  variant: 'marketplace' | 'external',
): Promise<string> {
  await system.send('order.placed', orderPlaced({ order, startsAt: clock.now() - 2 * DAY }));
  const placed = await system.waitForChain(order, () => true);
  await system.send('payment.overdue', { order });
  await system.waitForChain(order, (c) => c.payment === 'overdue');
  const boughtAt = placed.term.expiresAt - DAY;
  const orderId = addOnOrderId(order, 1);
  clock.set(placed.term.expiresAt + DAY);
  await leftByDeadJob(system, order, 'dead-seat-job', (chain) => {
    const params = {
      customer: chain.customer,
      id: orderId,
      product: chain.product,
      licenses: 3,
      duration: chain.duration,
    };
    return {
      addOnCount: chain.addOnCount + 1,
      intent: {
        kind: 'addon',
        ...(variant === 'marketplace'
          ? { method: 'createOrder', params: { ...params, startsAt: boughtAt } }
          : { method: 'createFirstOrder', params }),
        orderId,
        jobId: 'dead',
        event: { webhookId: `lost-seat-${order}`, occurredAt: boughtAt, total: 8 },
      },
    };
  });
  const suspension = suspensionJobId(chainIdOf(order), 1);
  await system.promote('payment-signals', suspension);
  const queue = system.queue('payment-signals');
  await expect
    .poll(async () => (await queue.getJob(suspension))?.returnvalue)
    .toBe('skipped: nothing in force');
  return orderId;
}

describe('marketplace, 3 days of grace', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({ clock, env: { PAYMENT_GRACE_DAYS: '3' } });

  it('does not suspend a chain paid inside the grace period', async () => {
    await system.send('order.placed', orderPlaced({ order: 'P-1' }));
    await system.waitForChain('P-1', () => true);
    await system.send('payment.overdue', { order: 'P-1', invoice: 'INV-1' });
    const overdue = await system.waitForChain('P-1', (c) => c.payment === 'overdue');
    expect(overdue.status).toBe('active');
    const job = await system.queue('payment-signals').getJob(suspensionJobId(chainIdOf('P-1'), 1));
    expect(await job?.getState()).toBe('delayed');

    clock.advance(2 * DAY);
    await system.send('payment.received', { order: 'P-1', invoice: 'INV-1' });
    const paid = await system.waitForChain('P-1', (c) => c.payment === 'ok');
    expect(paid.status).toBe('active');
    expect(
      await system.queue('payment-signals').getJob(suspensionJobId(chainIdOf('P-1'), 1)),
    ).toBeUndefined();
    expect(await providerStatus(system, 'P-1')).toBe('active');
  });

  it('suspends every order in force after the grace period, and unsuspends them when paid', async () => {
    const placed = await (async () => {
      await system.send(
        'order.placed',
        orderPlaced({ order: 'P-2', startsAt: clock.now() - 10 * DAY }),
      );
      return system.waitForChain('P-2', () => true);
    })();
    await system.send('seats.changed', { order: 'P-2', licenses: 8 });
    await system.waitForChain('P-2', (c) => c.partials.length === 1);

    await system.send('payment.overdue', { order: 'P-2' });
    await system.waitForChain('P-2', (c) => c.payment === 'overdue');
    clock.advance(3 * DAY);
    await system.promote('payment-signals', suspensionJobId(chainIdOf('P-2'), 1));
    const suspended = await system.waitForChain('P-2', (c) => c.status === 'suspended');
    expect(lastEvent(suspended)).toBe('chain.suspended');
    expect(await providerStatus(system, 'P-2')).toBe('suspended');
    expect(await providerStatus(system, 'P-2.p1')).toBe('suspended');

    await system.send('payment.received', { order: 'P-2.p1' });
    const restored = await system.waitForChain('P-2', (c) => c.status === 'active');
    expect(restored.payment).toBe('ok');
    expect(lastEvent(restored)).toBe('chain.unsuspended');
    expect(await providerStatus(system, 'P-2')).toBe('active');
    expect(await providerStatus(system, 'P-2.p1')).toBe('active');
    expect(placed.term.count).toBe(1);
  });

  it('suspends a next term already ordered with the term in force, and unsuspends both', async () => {
    await system.send(
      'order.placed',
      orderPlaced({ order: 'P-NEXT', startsAt: clock.now() - 25 * DAY }),
    );
    // Renewed ahead of time: the next term is ordered while the first is still in force.
    await system.waitForChain('P-NEXT', (c) => c.term.count === 2);

    await system.send('payment.overdue', { order: 'P-NEXT' });
    await system.waitForChain('P-NEXT', (c) => c.payment === 'overdue');
    clock.advance(3 * DAY);
    await system.promote('payment-signals', suspensionJobId(chainIdOf('P-NEXT'), 1));
    const suspended = await system.waitForChain('P-NEXT', (c) => c.status === 'suspended');
    expect(suspended.history.at(-1)?.detail).toContain('suspended P-NEXT, P-NEXT.r2');
    expect(await providerStatus(system, 'P-NEXT')).toBe('suspended');
    expect(await providerStatus(system, 'P-NEXT.r2')).toBe('suspended');

    await system.send('payment.received', { order: 'P-NEXT' });
    await system.waitForChain('P-NEXT', (c) => c.status === 'active');
    expect(await providerStatus(system, 'P-NEXT')).toBe('active');
    expect(await providerStatus(system, 'P-NEXT.r2')).toBe('active');
  });

  it('ignores a payment event older than the last applied one', async () => {
    await system.send('order.placed', orderPlaced({ order: 'P-3' }));
    await system.waitForChain('P-3', () => true);
    const t = clock.now();
    await system.send('payment.received', { order: 'P-3', occurredAt: t });
    await system.waitForChain('P-3', (c) => lastEvent(c) === 'payment.received');
    await system.send('payment.overdue', { order: 'P-3', occurredAt: t - 3600 });
    const chain = await system.waitForChain(
      'P-3',
      (c) => lastEvent(c) === 'payment.overdue.ignored',
    );
    expect(chain.payment).toBe('ok');
  });

  it('holds a due renewal while payment is overdue and makes it when paid, starting then if the term ended', async () => {
    const startsAt = clock.now() - 25 * DAY;
    await system.send('order.placed', orderPlaced({ order: 'P-4', startsAt, autoRenew: false }));
    const placed = await system.waitForChain('P-4', () => true);
    await system.send('payment.overdue', { order: 'P-4' });
    await system.waitForChain('P-4', (c) => c.payment === 'overdue');

    await system.ops('PUT', '/ops/chains/P-4/auto-renew', { enabled: true });
    // The renewal job runs, sees the overdue payment and waits.
    const job = renewalJobId(chainIdOf('P-4'), 2);
    await expect
      .poll(() => jobState(system.queue('renewals'), job), {
        timeout: 10_000,
      })
      .toBe('delayed');
    expect((await system.chain('P-4')).term.count).toBe(1);

    clock.set(placed.term.expiresAt + 2 * DAY);
    await system.send('payment.received', { order: 'P-4' });
    const renewed = await system.waitForChain('P-4', (c) => c.term.count === 2);
    expect(renewed.term.startsAt).toBe(clock.now());
  });

  it('shows no renewal time for an expired chain waiting for its payment, and renews it when paid', async () => {
    const startsAt = clock.now() - 40 * DAY;
    await system.send('order.placed', orderPlaced({ order: 'P-10', startsAt, autoRenew: false }));
    await system.waitForChain('P-10', (c) => c.status === 'expired');
    await system.send('payment.overdue', { order: 'P-10' });
    await system.waitForChain('P-10', (c) => c.payment === 'overdue');

    const on = await system.ops('PUT', '/ops/chains/P-10/auto-renew', { enabled: true });
    expect(on.status).toBe(200);
    // Its renewal job runs, sees the overdue payment and waits: no time can be named (DESIGN §5).
    const job = renewalJobId(chainIdOf('P-10'), 2);
    await expect
      .poll(() => jobState(system.queue('renewals'), job), {
        timeout: 10_000,
      })
      .toBe('delayed');
    expect(await system.chain('P-10')).toMatchObject({
      status: 'expired',
      autoRenew: true,
      nextRenewalAt: null,
    });
    expect(await upcomingOrders(system)).not.toContain('P-10');

    await system.send('payment.received', { order: 'P-10' });
    const renewed = await system.waitForChain('P-10', (c) => c.term.count === 2);
    expect(renewed.status).toBe('active');
    expect(renewed.nextRenewalAt).not.toBeNull();
    expect(await upcomingOrders(system)).toContain('P-10');
  });

  /** A chain due for renewal whose payment is overdue, its renewal job waiting for the payment. */
  async function renewalWaitingForPayment(order: string) {
    const startsAt = clock.now() - 25 * DAY;
    await system.send('order.placed', orderPlaced({ order, startsAt, autoRenew: false }));
    const placed = await system.waitForChain(order, () => true);
    await system.send('payment.overdue', { order });
    await system.waitForChain(order, (c) => c.payment === 'overdue');
    await system.ops('PUT', `/ops/chains/${order}/auto-renew`, { enabled: true });
    const job = renewalJobId(chainIdOf(order), 2);
    await expect
      .poll(async () => (await system.queue('renewals').getJob(job))?.data.deferredUntil, {
        timeout: 10_000,
      })
      .toBeGreaterThan(clock.now());
    // Its data says so before it moves to the delayed set, with a delay read from the clock then:
    // a test moving the clock before that would see it fire at once.
    await expect.poll(() => jobState(system.queue('renewals'), job)).toBe('delayed');
    return { placed, job };
  }

  it('expires a chain whose term ends while its renewal waits for payment, and renews it when paid, starting then', async () => {
    const { placed, job } = await renewalWaitingForPayment('P-EXP-1');
    clock.set(placed.term.expiresAt + DAY);
    await system.promote('renewals', job);
    const expired = await system.waitForChain('P-EXP-1', (c) => c.status === 'expired');
    expect(expired).toMatchObject({ payment: 'overdue', autoRenew: true, nextRenewalAt: null });
    expect(expired.history.at(-1)).toMatchObject({
      event: 'chain.expired',
      detail: expect.stringContaining('ended while the payment is overdue'),
      cause: { jobId: job },
    });
    expect(await upcomingOrders(system)).not.toContain('P-EXP-1');
    // Still waiting for the payment, not skipped: the payment moves it to now.
    await expect
      .poll(() => jobState(system.queue('renewals'), job), {
        timeout: 10_000,
      })
      .toBe('delayed');

    // A seat change meanwhile is for the term the payment brings (an expired chain that will
    // not renew ignores it).
    await system.send('seats.changed', { order: 'P-EXP-1', licenses: 9 });
    await system.waitForChain('P-EXP-1', (c) => c.nextLicenses === 9);

    clock.set(clock.now() + DAY);
    await system.send('payment.received', { order: 'P-EXP-1' });
    const renewed = await system.waitForChain('P-EXP-1', (c) => c.term.count === 2);
    expect(renewed).toMatchObject({ status: 'active', payment: 'ok', licenses: 9 });
    expect(renewed.term.startsAt).toBe(clock.now());
    expect(renewed.history.map((h) => h.detail)).toContainEqual(
      expect.stringContaining('payment received after the term ended'),
    );
  });

  it('finishes a seat event left between its steps on a chain expired waiting for its payment', async () => {
    const { placed, job } = await renewalWaitingForPayment('P-EXP-U');
    clock.set(placed.term.expiresAt + DAY);
    await system.promote('renewals', job);
    await system.waitForChain('P-EXP-U', (c) => c.status === 'expired');
    // A seat job for 9 from before the term ended bought its first step and died: by now nothing
    // of it is missing (the term ended), so the event ends, and the payment's renewal carries 9.
    const neededAt = placed.term.expiresAt - DAY;
    await leftByDeadJob(system, 'P-EXP-U', 'crashed-seat-job-u', () => ({
      nextLicenses: 9,
      lastSeatEventAt: neededAt,
      unfinishedSeatEvent: {
        webhookId: 'lost-seat-p-exp-u',
        occurredAt: neededAt,
        total: 9,
        neededAt,
        style: 'coterm',
      },
    }));
    await system.send('payment.received', { order: 'P-EXP-U' });
    const renewed = await system.waitForChain('P-EXP-U', (c) => c.term.count === 2);
    expect(renewed).toMatchObject({ status: 'active', licenses: 9, partials: [] });
    expect(renewed.history.map((h) => h.detail)).toContainEqual(
      '9 licenses: none missing any more, nothing left to buy',
    );
  });

  it('lets reconcile expire a chain whose term ended while its renewal waits for payment', async () => {
    const { placed, job } = await renewalWaitingForPayment('P-EXP-2');
    clock.set(placed.term.expiresAt + DAY);
    // Its renewal job lost too (a Redis restored without it): given back in the same round.
    await (await system.queue('renewals').getJob(job))?.remove();
    const reconcile = await system.queue('maintenance').add('reconcile now', {});
    await expect.poll(async () => reconcile.getState(), { timeout: 10_000 }).toBe('completed');
    const expired = await system.chain('P-EXP-2');
    expect(expired).toMatchObject({ status: 'expired', payment: 'overdue', nextRenewalAt: null });
    expect(expired.history.at(-1)?.detail).toContain('ended while the payment is overdue');
    expect(await system.queue('renewals').getJob(job)).toBeDefined();

    await system.send('payment.received', { order: 'P-EXP-2' });
    const renewed = await system.waitForChain('P-EXP-2', (c) => c.term.count === 2);
    expect(renewed.status).toBe('active');
    expect(renewed.term.startsAt).toBe(clock.now());
  });

  it("names the producer's invoice in the history its payment events write", async () => {
    await system.send('order.placed', orderPlaced({ order: 'P-INV' }));
    await system.waitForChain('P-INV', () => true);
    await system.send('payment.overdue', { order: 'P-INV', invoice: 'INV-7' });
    const overdue = await system.waitForChain('P-INV', (c) => c.payment === 'overdue');
    expect(overdue.history.at(-1)?.detail).toMatch(/^invoice INV-7: payment overdue \(episode 1\)/);
    await system.send('payment.received', { order: 'P-INV', invoice: 'INV-7' });
    const paid = await system.waitForChain('P-INV', (c) => c.payment === 'ok');
    expect(paid.history.at(-1)?.detail).toBe(
      'invoice INV-7: paid within the grace period: no suspension',
    );
    // Without one, the entries say nothing of invoices.
    await system.send('payment.overdue', { order: 'P-INV' });
    const again = await system.waitForChain('P-INV', (c) => c.payment === 'overdue');
    expect(again.history.at(-1)?.detail).toMatch(/^payment overdue \(episode 2\)/);
  });

  it('restores a missing suspension job when the overdue event is repeated', async () => {
    await system.send('order.placed', orderPlaced({ order: 'P-5' }));
    await system.waitForChain('P-5', () => true);
    await system.send('payment.overdue', { order: 'P-5' });
    await system.waitForChain('P-5', (c) => c.payment === 'overdue');
    const id = suspensionJobId(chainIdOf('P-5'), 1);
    await (await system.queue('payment-signals').getJob(id))?.remove();

    await system.send('payment.overdue', { order: 'P-5' });
    await system.waitForChain(
      'P-5',
      (c) => c.history.filter((h) => h.event === 'payment.overdue').length === 2,
    );
    expect(await jobState(system.queue('payment-signals'), id)).toBe('delayed');
  });

  it('applies a payment event once when its job runs again after its save', async () => {
    await system.send('order.placed', orderPlaced({ order: 'P-8' }));
    await system.waitForChain('P-8', () => true);
    const queue = system.queue('payment-signals');
    for (const type of ['payment.overdue', 'payment.received'] as const) {
      const sent = await system.send(type, { order: 'P-8' });
      const job = await queue.getJob(webhookJobId((sent.body as { id: string }).id));
      await expect.poll(async () => job?.getState(), { timeout: 10_000 }).toBe('completed');
      const before = await system.chain('P-8');
      // As after a crash between its save and its completion: the same job runs again.
      await job?.retry('completed');
      await expect
        .poll(async () => (await queue.getJob(job?.id ?? ''))?.returnvalue, {
          timeout: 10_000,
        })
        .toMatch(/^already applied: /);
      expect(await system.chain('P-8')).toEqual(before);
    }
    const history = (await system.chain('P-8')).history.map((h) => h.event);
    expect(history.filter((e) => e.startsWith('payment.'))).toEqual([
      'payment.overdue',
      'payment.received',
    ]);
    // The suspension the overdue event scheduled was removed by the payment, not restored.
    expect(await queue.getJob(suspensionJobId(chainIdOf('P-8'), 1))).toBeUndefined();
  });

  it('applies another event sent under a webhook id forgotten since, and the same one once', async () => {
    await system.send('order.placed', orderPlaced({ order: 'P-11' }));
    await system.waitForChain('P-11', () => true);
    const id = 'pay-reused-P-11';
    await system.send('payment.overdue', { order: 'P-11' }, { id });
    await system.waitForChain('P-11', (c) => c.payment === 'overdue');
    const forget = () => system.started.runtime.redis.del(webhookDedupKey(id));

    // WEBHOOK_DEDUP_DAYS later the intake forgot the id; the producer reuses it for the payment.
    await forget();
    expect((await system.send('payment.received', { order: 'P-11' }, { id })).status).toBe(202);
    const paid = await system.waitForChain('P-11', (c) => c.payment === 'ok');
    expect(paid.history.at(-1)?.cause).toMatchObject({ webhookId: id });

    // The same payment once more, its job gone (kept for 7 days) and the id forgotten again:
    // the chain knows it.
    const queue = system.queue('payment-signals');
    await (await queue.getJob(webhookJobId(id)))?.remove();
    await forget();
    await system.send('payment.received', { order: 'P-11' }, { id });
    await expect
      .poll(async () => (await queue.getJob(webhookJobId(id)))?.returnvalue, { timeout: 10_000 })
      .toBe(`already applied: ${id}`);
    expect(await system.chain('P-11')).toEqual(paid);
  });

  it('suspends at the time the chain recorded, not an earlier job left by a dead attempt', async () => {
    await system.send('order.placed', orderPlaced({ order: 'P-9' }));
    const placed = await system.waitForChain('P-9', () => true);
    const chainId = chainIdOf('P-9');
    const queue = system.queue('payment-signals');
    // An attempt that died after scheduling the suspension (3 days from now), before its save.
    await ensureSuspensionJob(queue, { ...placed, id: chainId }, 1, clock.now() + 3 * DAY, clock);
    clock.advance(2 * DAY);
    await system.send('payment.overdue', { order: 'P-9' });
    const overdue = await system.waitForChain('P-9', (c) => c.payment === 'overdue');
    const suspendAt = clock.now() + 3 * DAY;
    expect(overdue.history.at(-1)?.detail).toContain(formatInstant(suspendAt));

    // Past the dead attempt's time, before the chain's: the job puts itself off again.
    clock.advance(2 * DAY);
    const id = suspensionJobId(chainId, 1);
    await system.promote('payment-signals', id);
    await expect.poll(() => jobState(queue, id), { timeout: 10_000 }).toBe('delayed');
    expect((await system.chain('P-9')).status).toBe('active');
    clock.set(suspendAt);
    await system.promote('payment-signals', id);
    await system.waitForChain('P-9', (c) => c.status === 'suspended');
  });

  it('keeps a renewal that waits for payment waiting through reconcile', async () => {
    const startsAt = clock.now() - 25 * DAY;
    await system.send('order.placed', orderPlaced({ order: 'P-6', startsAt, autoRenew: false }));
    await system.waitForChain('P-6', () => true);
    await system.send('payment.overdue', { order: 'P-6' });
    await system.waitForChain('P-6', (c) => c.payment === 'overdue');
    await system.ops('PUT', '/ops/chains/P-6/auto-renew', { enabled: true });
    const queue = system.queue('renewals');
    const id = renewalJobId(chainIdOf('P-6'), 2);
    await expect
      .poll(async () => (await queue.getJob(id))?.data.deferredUntil, { timeout: 10_000 })
      .toBeGreaterThan(clock.now());

    const client = await queue.backend.client;
    const firesAt = () => client.zscore(queue.keys.delayed as string, id);
    // The job writes its deferral first, then moves itself to the delayed set.
    await expect.poll(firesAt, { timeout: 10_000 }).not.toBeNull();
    const before = await firesAt();
    const reconcile = await system.queue('maintenance').add('reconcile now', {});
    await expect.poll(async () => reconcile.getState(), { timeout: 10_000 }).toBe('completed');
    // Not pulled forward and re-run: the same place in the delayed set.
    expect(await firesAt()).toBe(before);
    expect(await jobState(queue, id)).toBe('delayed');
    expect((await system.chain('P-6')).term.count).toBe(1);
  });

  it('keeps a payment received right after an overdue notice of the same second, whatever reaches the chain first', async () => {
    await system.send('order.placed', orderPlaced({ order: 'P-SAME' }));
    await system.waitForChain('P-SAME', () => true);
    const queue = system.queue('payment-signals');
    const t = clock.now();
    await queue.pause();
    try {
      await system.send('payment.overdue', { order: 'P-SAME', occurredAt: t }, { id: 'same-1' });
      await system.send('payment.received', { order: 'P-SAME', occurredAt: t }, { id: 'same-2' });
      // The overdue notice reaches the chain second, as when its job waited for the chain's lock.
      const late = await queue.getJob(webhookJobId('same-1'));
      if (!late) throw new Error('the overdue job was not enqueued');
      await late.remove();
      await queue.resume();
      await system.waitForChain('P-SAME', (c) => lastEvent(c) === 'payment.received');
      await queue.add(late.name, late.data, { ...late.opts, jobId: late.id });
    } finally {
      await queue.resume();
    }
    const chain = await system.waitForChain(
      'P-SAME',
      (c) => lastEvent(c) === 'payment.overdue.ignored',
    );
    expect(chain.payment).toBe('ok');
    expect(chain.history.at(-1)?.detail).toContain(
      'accepted before the last applied payment event',
    );
  });
});

describe('marketplace with add-on seat increases, 3 days of grace', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({ clock, env: { PAYMENT_GRACE_DAYS: '3', SEAT_INCREASE: 'addon' } });

  it('makes the add-on renewal that waited for payment when paid, as the main one', async () => {
    await system.send(
      'order.placed',
      orderPlaced({ order: 'P-7', startsAt: clock.now() - 2 * DAY }),
    );
    await system.waitForChain('P-7', () => true);
    await system.send('seats.changed', { order: 'P-7', licenses: 8 });
    const [addOn] = (await system.waitForChain('P-7', (c) => c.addOns.length === 1)).addOns;
    if (!addOn) throw new Error('no add-on');
    await system.send('payment.overdue', { order: 'P-7' });
    await system.waitForChain('P-7', (c) => c.payment === 'overdue');

    // Both terms fall due while the payment is overdue (inside the grace period): both wait.
    clock.set(addOn.term.expiresAt - 2 * DAY);
    const queue = system.queue('renewals');
    const ids = [renewalJobId(chainIdOf('P-7'), 2), renewalJobId(chainIdOf(addOn.order), 2)];
    for (const id of ids) {
      await system.promote('renewals', id);
      await expect
        .poll(async () => (await queue.getJob(id))?.data.deferredUntil, { timeout: 10_000 })
        .toBeGreaterThan(clock.now());
    }

    await system.send('payment.received', { order: 'P-7' });
    // The add-on's renewal is moved to now with the main one's, not left to wait 6 hours.
    const renewed = await system.waitForChain(
      'P-7',
      (c) => c.term.count === 2 && c.addOns[0]?.term.count === 2,
    );
    expect(renewed.addOns[0]?.term.startsAt).toBe(addOn.term.expiresAt);
  });

  it('expires an add-on with its main chain when both terms end while the payment is overdue', async () => {
    const { placed, addOn } = await overdueWithAddOn(system, 'P-EXP-3', clock.now() - 2 * DAY);

    // Past both ends, with nothing renewed: the grace period ended too, and the suspension
    // finds nothing in force. The add-on's job reads the payment of its main chain.
    clock.set(Math.max(placed.term.expiresAt, addOn.term.expiresAt) + DAY);
    await system.promote('payment-signals', suspensionJobId(chainIdOf('P-EXP-3'), 1));
    for (const order of ['P-EXP-3', addOn.order]) {
      await system.promote('renewals', renewalJobId(chainIdOf(order), 2));
    }
    const expired = await system.waitForChain(
      'P-EXP-3',
      (c) => c.status === 'expired' && c.addOns[0]?.status === 'expired',
    );
    expect(expired.addOns[0]).toMatchObject({ nextRenewalAt: null, payment: 'overdue' });
    // The same total again: the add-on, renewing when paid, keeps its share of it.
    await system.send('seats.changed', { order: 'P-EXP-3', licenses: 8 });
    const resent = await system.waitForChain('P-EXP-3', (c) => lastEvent(c) === 'seats.changed');
    expect(resent).toMatchObject({ nextLicenses: 5, addOns: [{ nextLicenses: 3 }] });

    await system.send('payment.received', { order: 'P-EXP-3' });
    const renewed = await system.waitForChain(
      'P-EXP-3',
      (c) => c.term.count === 2 && c.addOns[0]?.term.count === 2,
    );
    expect(renewed.term.startsAt).toBe(clock.now());
    expect(renewed.addOns[0]).toMatchObject({
      status: 'active',
      licenses: 3,
      term: { startsAt: clock.now() },
    });
  });

  it('suspends an add-on renewal sent after the suspension found nothing in force, and its family', async () => {
    const suspends = await metricValue(system, SUSPENDS);
    const { placed, addOn } = await overdueWithAddOn(system, 'P-EXP-5', clock.now() - 2 * DAY);
    // The add-on's renewal was decided inside its lead and its call went away (a provider
    // outage of days); both terms ended and the grace period too, and the suspension found
    // nothing in force, so the family was not recorded suspended.
    clock.set(Math.max(placed.term.expiresAt, addOn.term.expiresAt) + DAY);
    const orderId = renewalOrderId(addOn.order, 2);
    await leftByDeadJob(system, addOn.order, 'dead-addon-renewal', (chain) => ({
      intent: renewalIntentOf(chain),
    }));
    await system.promote('payment-signals', suspensionJobId(chainIdOf('P-EXP-5'), 1));
    const queue = system.queue('payment-signals');
    await expect
      .poll(async () => (await queue.getJob(suspensionJobId(chainIdOf('P-EXP-5'), 1)))?.returnvalue)
      .toBe('skipped: nothing in force');

    // The provider is back: the add-on's job sends its call again. Its term starts now and is
    // in force while the payment is overdue, so it joins the suspension, and the family is
    // suspended from then.
    await system.promote('renewals', renewalJobId(chainIdOf(addOn.order), 2));
    const joined = await system.waitForChain('P-EXP-5', (c) => c.status === 'suspended');
    expect(joined.history.at(-1)?.detail).toContain(
      `its renewal ${orderId}, ordered after the suspension found nothing in force, is suspended on arrival`,
    );
    await expect.poll(async () => providerStatus(system, orderId)).toBe('suspended');
    // Counted as a suspension, which its payment's unsuspension undoes.
    expect(await metricValue(system, SUSPENDS)).toBe(suspends + 1);
    // Its own term ended: it renews when paid, so no time is shown, as for an expired chain
    // (the add-on's term is in force: its renewal keeps its time).
    expect(joined.nextRenewalAt).toBeNull();
    const upcoming = await system.ops('GET', '/ops/renewals?within=60');
    const { renewals } = upcoming.body as { renewals: { order: string }[] };
    expect(renewals.map((r) => r.order).filter((o) => o.startsWith('P-EXP-5'))).toEqual([
      addOn.order,
    ]);

    // Paid: the add-on's order is unsuspended, and the main chain renews at once.
    await system.send('payment.received', { order: 'P-EXP-5' });
    const paid = await system.waitForChain('P-EXP-5', (c) => c.term.count === 2);
    expect(paid).toMatchObject({
      status: 'active',
      payment: 'ok',
      term: { startsAt: clock.now() },
    });
    expect(paid.history.find((h) => h.event === 'chain.unsuspended')?.detail).toBe(
      `payment received: unsuspended ${orderId}`,
    );
    expect(await providerStatus(system, orderId)).toBe('active');
  });

  it('gives an increase made while expired waiting for payment to the renewal the payment brings', async () => {
    // It comes first: it carries the 2 more, not the add-on's own renewal weeks later.
    await system.send(
      'order.placed',
      orderPlaced({ order: 'P-EXP-7', startsAt: clock.now() - 20 * DAY }),
    );
    const placed = await system.waitForChain('P-EXP-7', () => true);
    const renewed = await increaseWhileExpiredUnpaid(system, clock, 'P-EXP-7', placed);
    expect(renewed).toMatchObject({ status: 'active', licenses: 7, addOns: [{ licenses: 3 }] });
    expect(renewed.term.startsAt).toBe(clock.now());
  });

  it('suspends an add-on bought after the suspension found nothing in force, and its family', async () => {
    const suspends = await metricValue(system, SUSPENDS);
    const orderId = await addOnLeftPastEmptySuspension(system, clock, 'P-EXP-6', 'marketplace');

    // The provider is back and reconcile finishes the purchase: the add-on, in force while the
    // payment is overdue, joins the suspension, and the family is suspended from then.
    const reconcile = await system.queue('maintenance').add('reconcile now', {});
    await expect.poll(async () => reconcile.getState(), { timeout: 10_000 }).toBe('completed');
    const joined = await system.waitForChain('P-EXP-6', (c) => c.addOns.length === 1);
    expect(joined.status).toBe('suspended');
    expect(joined.history.at(-1)?.detail).toContain('suspended on arrival');
    expect(await providerStatus(system, orderId)).toBe('suspended');
    expect(await metricValue(system, SUSPENDS)).toBe(suspends + 1);

    await system.send('payment.received', { order: 'P-EXP-6' });
    const paid = await system.waitForChain('P-EXP-6', (c) => c.term.count === 2);
    expect(paid).toMatchObject({ status: 'active', payment: 'ok' });
    expect(await providerStatus(system, orderId)).toBe('active');
  });
});

describe('marketplace with add-on seat increases, 3 days of grace: reconcile', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({ clock, env: { PAYMENT_GRACE_DAYS: '3', SEAT_INCREASE: 'addon' } });

  it("expires an add-on whose term ended while its main chain's payment is overdue", async () => {
    const { placed, addOn } = await overdueWithAddOn(system, 'P-EXP-4', clock.now());

    // Both terms ended: the main chain's renewal job, due since, has marked it expired already
    // (its job holds the main chain's lock a moment, which would leave the add-on for a round).
    clock.set(Math.max(placed.term.expiresAt, addOn.term.expiresAt) + 60);
    await system.promote('renewals', renewalJobId(chainIdOf('P-EXP-4'), 2));
    await system.waitForChain('P-EXP-4', (c) => c.status === 'expired');
    const reconcile = await system.queue('maintenance').add('reconcile now', {});
    await expect.poll(async () => reconcile.getState(), { timeout: 10_000 }).toBe('completed');
    const own = await system.chain(addOn.order);
    expect(own.status).toBe('expired');
    expect(own.history.at(-1)?.detail).toContain('ended while the payment is overdue');
  });
});

describe('marketplace with no grace', () => {
  const system = useSystem({ env: { PAYMENT_GRACE_DAYS: '0' } });

  it('says a partial bought while suspended is suspended on arrival', async () => {
    await boughtWhileSuspended(system, 'N-8', 'N-8.p1', 'seats.partial_ordered');
  });

  it('records a partial bought while suspended that the provider refuses to suspend, active', async () => {
    await system.send('order.placed', orderPlaced({ order: 'N-9' }));
    await system.waitForChain('N-9', () => true);
    await system.send('payment.overdue', { order: 'N-9' });
    await system.waitForChain('N-9', (c) => c.status === 'suspended');
    const { provisioning } = system.started;
    const refusing: ProvisioningClient = Object.create(provisioning);
    refusing.suspendOrder = async (params) => {
      if (params.id === 'N-9.p1') throw new RefusalError('provisioning_refused', 'not now');
      return provisioning.suspendOrder(params);
    };
    const at = systemClock.now();
    const seatJob = {
      id: 'seats-N-9',
      name: 'seats.changed N-9',
      data: {
        webhookId: 'wh-seats-n9',
        type: 'seats.changed',
        data: { order: 'N-9', licenses: 8 },
        occurredAt: at,
        receivedAt: at,
        sequence: 1,
      },
    } as unknown as Job;
    // The order is made: it is recorded, not left as an intent every later job would meet.
    await makeSeatProcessor(workerDepsOf(system, { provisioning: refusing }))(seatJob);
    const chain = await system.chain('N-9');
    expect(chain).toMatchObject({ status: 'suspended', nextLicenses: 8 });
    expect(chain.partials.map((p) => p.orderId)).toEqual(['N-9.p1']);
    expect(chain.history.at(-1)).toMatchObject({
      event: 'seats.partial_ordered',
      detail: expect.stringContaining(
        '; the provider refused to suspend it ("not now"): it stays active while the payment is overdue',
      ),
    });
    expect(await providerStatus(system, 'N-9.p1')).toBe('active');

    await system.send('payment.received', { order: 'N-9' });
    await system.waitForChain('N-9', (c) => c.status === 'active');
    expect(await providerStatus(system, 'N-9')).toBe('active');
  });

  it('applies a payment event run again after its save once, also with events applied since', async () => {
    const now = systemClock.now();
    await system.send('order.placed', orderPlaced({ order: 'N-7', startsAt: now - 2 * DAY }));
    await system.waitForChain('N-7', () => true);
    const t = now - 100;
    // Overdue and suspended at once; its worker dies before it reports the job done.
    await system.send('payment.overdue', { order: 'N-7', occurredAt: t }, { id: 'wh-n7-o' });
    await system.waitForChain('N-7', (c) => c.status === 'suspended');
    // Paid in the same second, then an older overdue arrives and is ignored.
    await system.send('payment.received', { order: 'N-7', occurredAt: t }, { id: 'wh-n7-r' });
    await system.waitForChain('N-7', (c) => c.status === 'active');
    await system.send('payment.overdue', { order: 'N-7', occurredAt: t - 5 }, { id: 'wh-n7-x' });
    await system.waitForChain('N-7', (c) => lastEvent(c) === 'payment.overdue.ignored');

    // The stalled check gives both jobs back; each runs again.
    const queue = system.queue('payment-signals');
    await runAgain(queue, webhookJobId('wh-n7-o'));
    await runAgain(queue, webhookJobId('wh-n7-r'));
    const chain = await system.chain('N-7');
    expect(chain).toMatchObject({ status: 'active', payment: 'ok' });
    expect(await providerStatus(system, 'N-7')).toBe('active');
    const entriesOf = (id: string) =>
      chain.history.filter((h) => h.cause.webhookId === id).map((h) => h.event);
    expect(entriesOf('wh-n7-o')).toEqual(['payment.overdue']);
    expect(entriesOf('wh-n7-r')).toEqual(['payment.received', 'chain.unsuspended']);
    expect(entriesOf('wh-n7-x')).toEqual(['payment.overdue.ignored']);
  });

  /**
   * `order` and its partial suspended, then a payment.received job that unsuspended `order` and
   * died before the partial: answers that job, to run again.
   */
  async function halfUnsuspended(order: string): Promise<Job> {
    const startsAt = systemClock.now() - 10 * DAY;
    await system.send('order.placed', orderPlaced({ order, startsAt }));
    await system.waitForChain(order, () => true);
    await system.send('seats.changed', { order, licenses: 8 });
    await system.waitForChain(order, (c) => c.partials.length === 1);
    await system.send('payment.overdue', { order, occurredAt: systemClock.now() - 100 });
    await system.waitForChain(order, (c) => c.status === 'suspended');

    const { provisioning } = system.started;
    const dying = Object.create(provisioning) as typeof provisioning;
    dying.unsuspendOrder = async (params) => {
      await provisioning.unsuspendOrder(params);
      throw new TransientError('provisioning_unavailable', 'killed after the call');
    };
    const received = {
      id: `rcv-${order}`,
      name: `payment.received ${order}`,
      data: {
        webhookId: `wh-rcv-${order}`,
        type: 'payment.received',
        data: { order },
        occurredAt: systemClock.now() - 50,
        receivedAt: systemClock.now() - 50,
      },
    } as unknown as Job;
    const paying = makePaymentProcessor(workerDepsOf(system, { provisioning: dying }));
    await expect(paying(received)).rejects.toThrow('killed after the call');
    expect(await providerStatus(system, order)).toBe('active');
    expect(await providerStatus(system, `${order}.p1`)).toBe('suspended');
    return received;
  }

  it('finishes an unsuspension a payment job left half done, before a newer overdue event', async () => {
    const received = await halfUnsuspended('N-4');
    // Before its retry, the next invoice goes overdue: a new episode, after the unsuspension.
    await system.send('payment.overdue', { order: 'N-4', occurredAt: systemClock.now() - 10 });
    const suspensions = (c: ChainView) =>
      c.history.filter((h) => h.event === 'chain.suspended').length;
    const chain = await system.waitForChain('N-4', (c) => suspensions(c) === 2);
    expect(chain.history.map((h) => h.event).slice(-3)).toEqual([
      'chain.unsuspended',
      'payment.overdue',
      'chain.suspended',
    ]);
    expect(chain).toMatchObject({ status: 'suspended', payment: 'overdue' });
    // The retry finds its payment applied; the family is whole either way.
    expect(await makePaymentProcessor(workerDepsOf(system))(received)).toMatch(/^ignored|^already/);
    expect(await providerStatus(system, 'N-4')).toBe('suspended');
    expect(await providerStatus(system, 'N-4.p1')).toBe('suspended');
  });

  it('finishes in reconcile an unsuspension whose payment job gave up halfway', async () => {
    await halfUnsuspended('N-5');
    const reconcile = await system.queue('maintenance').add('reconcile now', {});
    await expect.poll(async () => reconcile.getState(), { timeout: 10_000 }).toBe('completed');
    const chain = await system.chain('N-5');
    expect(chain).toMatchObject({ status: 'active', payment: 'ok' });
    expect(chain.history.map((h) => h.event).slice(-2)).toEqual([
      'payment.received',
      'chain.unsuspended',
    ]);
    expect(await providerStatus(system, 'N-5.p1')).toBe('active');
  });

  describe('finishing it with a provider that takes seconds per call', () => {
    /** Workers' deps whose provider answers unsuspendOrder after 3 s (the timeout allows 10). */
    const slowDeps = () =>
      workerDepsOf(system, { provisioning: slowToUnsuspend(system.started.provisioning, 3_000) });

    it("the job's retry leaves the renewal job at the chain's renewal time", async () => {
      const received = await halfUnsuspended('N-20');
      expect(await makePaymentProcessor(slowDeps())(received)).toBe('already applied: wh-rcv-N-20');
      expect(lastEvent(await system.chain('N-20'))).toBe('chain.unsuspended');
      // Not moved by the calls' seconds (the clock's whole seconds leave less than one).
      expect(await renewalJobOffMs(system, 'N-20')).toBeLessThan(1_000);
    });

    it('a newer payment that finishes it leaves the renewal job on time', async () => {
      const received = await halfUnsuspended('N-21');
      const newer = {
        ...received,
        id: 'rcv-N-21-b',
        data: { ...received.data, webhookId: 'wh-rcv-N-21-b', occurredAt: systemClock.now() - 5 },
      } as Job;
      expect(await makePaymentProcessor(slowDeps())(newer)).toBe('paid');
      expect(await renewalJobOffMs(system, 'N-21')).toBeLessThan(1_000);
    });
  });

  it('drops an unsuspension left half done when the chain is cancelled meanwhile', async () => {
    const received = await halfUnsuspended('N-6');
    const cancelled = await system.ops('POST', '/ops/chains/N-6/cancel');
    expect(cancelled.status).toBe(200);
    expect(await makePaymentProcessor(workerDepsOf(system))(received)).toBe(
      'already applied: wh-rcv-N-6',
    );
    expect((await system.chain('N-6')).status).toBe('cancelled');
  });

  it('suspends at once', async () => {
    await system.send('order.placed', orderPlaced({ order: 'N-1' }));
    await system.waitForChain('N-1', () => true);
    await system.send('payment.overdue', { order: 'N-1' });
    await system.waitForChain('N-1', (c) => c.status === 'suspended');
    expect(await providerStatus(system, 'N-1')).toBe('suspended');

    // Marketplace chains come back with the payment (unsuspendOrder), not by hand.
    const refused = await system.ops('POST', '/ops/chains/N-1/reactivated');
    expect(refused.status).toBe(422);
    expect(refused.body).toMatchObject({ error: 'not_external' });
    expect((await system.chain('N-1')).status).toBe('suspended');
  });

  it('does not suspend a chain whose term ended with nothing in force', async () => {
    const startsAt = systemClock.now() - 40 * DAY;
    await system.send('order.placed', orderPlaced({ order: 'N-3', startsAt, autoRenew: false }));
    await system.waitForChain('N-3', () => true);
    await system.send('payment.overdue', { order: 'N-3' });
    await system.waitForChain('N-3', (c) => c.payment === 'overdue');
    const job = await system.queue('payment-signals').getJob(suspensionJobId(chainIdOf('N-3'), 1));
    await expect.poll(async () => job?.getState(), { timeout: 10_000 }).toBe('completed');
    expect((await system.queue('payment-signals').getJob(job?.id ?? ''))?.returnvalue).toBe(
      'skipped: nothing in force',
    );
    expect((await system.chain('N-3')).status).not.toBe('suspended');
  });

  it('suspends when an overdue job that died after scheduling the suspension runs again', async () => {
    await system.send('order.placed', orderPlaced({ order: 'N-2' }));
    const placed = await system.waitForChain('N-2', () => true);
    // What the dead attempt left: the suspension job scheduled, the chain not yet overdue. The
    // job runs at once (no grace), finds the chain paid and skips.
    const chainId = chainIdOf('N-2');
    const queue = system.queue('payment-signals');
    const { clock } = system.started.runtime;
    await ensureSuspensionJob(queue, { ...placed, id: chainId }, 1, clock.now(), clock);
    const dead = await queue.getJob(suspensionJobId(chainId, 1));
    await expect.poll(async () => dead?.getState(), { timeout: 10_000 }).toBe('completed');

    // The retry (the same event, the same path) schedules it again rather than add in vain.
    await system.send('payment.overdue', { order: 'N-2' });
    const chain = await system.waitForChain('N-2', (c) => c.status === 'suspended');
    expect(chain.payment).toBe('overdue');
    expect(await providerStatus(system, 'N-2')).toBe('suspended');
  });
});

describe('the external variant', () => {
  const system = useSystem({ env: { PARTNER_VARIANT: 'external', PAYMENT_GRACE_DAYS: '0' } });

  it('stays suspended after payment until an operator confirms the manual reactivation', async () => {
    // Two more seats: an add-on order of its own in the external variant.
    await suspendedWithAddOn(system, 'X-1', 7);

    const paid = await system.send('payment.received', { order: 'X-1' });
    const chain = await system.waitForChain('X-1', (c) => c.needsReactivation);
    expect(chain).toMatchObject({ status: 'suspended', payment: 'ok', nextRenewalAt: null });
    expect(lastEvent(chain)).toBe('reactivation.needed');
    // The reason names every order to reactivate, the add-on's too.
    expect(chain.history.at(-1)?.detail).toContain('reactivate X-1, X-1.a1 by hand');
    // The job failed with the reason, for an operator to see in Bull Board.
    const job = await system
      .queue('payment-signals')
      .getJob(webhookJobId((paid.body as { id: string }).id));
    await expect.poll(async () => job?.getState(), { timeout: 5_000 }).toBe('failed');

    const res = await system.ops('POST', '/ops/chains/X-1/reactivated');
    expect(res.body).toMatchObject({ status: 'active', needsReactivation: false });
    expect((res.body as ChainView).nextRenewalAt).not.toBeNull();
  });

  /**
   * Places `order`, lets it be suspended and paid: the payment's job asked for the manual
   * reactivation and failed. Answers the payment-signals queue and that job's id.
   */
  async function reactivationAsked(order: string) {
    await system.send('order.placed', orderPlaced({ order }));
    await system.waitForChain(order, () => true);
    await system.send('payment.overdue', { order });
    await system.waitForChain(order, (c) => c.status === 'suspended');
    const paid = await system.send('payment.received', { order });
    await system.waitForChain(order, (c) => c.needsReactivation);
    const queue = system.queue('payment-signals');
    const id = webhookJobId((paid.body as { id: string }).id);
    await expect.poll(() => jobState(queue, id)).toBe('failed');
    return { queue, id };
  }

  it('fails again, for Bull Board, a payment job run again after it asked for the reactivation', async () => {
    const { queue, id } = await reactivationAsked('X-11');

    // Its worker died after the save and before the failure: the stalled job runs again.
    await runAgain(queue, id);
    const job = await queue.getJob(id);
    expect(await job?.getState()).toBe('failed');
    expect(job?.failedReason).toContain('reactivate X-11 by hand');
    const chain = await system.chain('X-11');
    expect(chain.history.filter((h) => h.event === 'reactivation.needed')).toHaveLength(1);
  });

  it('completes a payment job run again once the reactivation it asked for was confirmed', async () => {
    const { queue, id } = await reactivationAsked('X-14');
    expect((await system.ops('POST', '/ops/chains/X-14/reactivated')).status).toBe(200);
    // A later episode asks for a reactivation of its own.
    await system.send('payment.overdue', { order: 'X-14' });
    await system.waitForChain('X-14', (c) => c.status === 'suspended' && c.payment === 'overdue');
    await system.send('payment.received', { order: 'X-14' });
    await system.waitForChain('X-14', (c) => c.needsReactivation && c.payment === 'ok');

    // The first payment's job, run again (retried by hand in Bull Board): its request was
    // answered long ago, and the open one is the later payment's.
    await runAgain(queue, id);
    const job = await queue.getJob(id);
    expect(await job?.getState()).toBe('completed');
    expect(job?.returnvalue).toMatch(/^already applied/);
  });

  it('leaves active an add-on bought while it awaits its reactivation, paid', async () => {
    await system.send('order.placed', orderPlaced({ order: 'X-2' }));
    await system.waitForChain('X-2', () => true);
    await paidAwaitingReactivation(system, 'X-2');

    // The customer has paid: nothing would ever reactivate an add-on suspended now.
    await system.send('seats.changed', { order: 'X-2', licenses: 7 });
    await system.waitForChain('X-2', (c) => c.addOns.length === 1);
    expect(await providerStatus(system, 'X-2.a1')).toBe('active');

    // Overdue again: at the end of the grace period the family is suspended again, the new
    // add-on too, and the reactivation the first payment asked for waits for this one.
    await system.send('payment.overdue', { order: 'X-2' });
    const suspended = await system.waitForChain('X-2', (c) => lastEvent(c) === 'chain.suspended');
    expect(suspended).toMatchObject({
      status: 'suspended',
      payment: 'overdue',
      needsReactivation: true,
    });
    expect(await providerStatus(system, 'X-2')).toBe('suspended');
    expect(await providerStatus(system, 'X-2.a1')).toBe('suspended');
    const early = await system.ops('POST', '/ops/chains/X-2/reactivated');
    expect(early).toMatchObject({ status: 422, body: { error: 'payment_overdue' } });

    await system.send('payment.received', { order: 'X-2' });
    const paid = await system.waitForChain('X-2', (c) => c.payment === 'ok');
    expect(paid.history.at(-1)?.detail).toContain('reactivate X-2, X-2.a1 by hand');
    const res = await system.ops('POST', '/ops/chains/X-2/reactivated');
    expect(res.body).toMatchObject({ status: 'active', payment: 'ok', needsReactivation: false });
  });

  it('refuses to confirm a reactivation nobody asked for: the payment is still overdue', async () => {
    await system.send('order.placed', orderPlaced({ order: 'X-4' }));
    await system.waitForChain('X-4', () => true);
    await system.send('payment.overdue', { order: 'X-4' });
    const before = await system.waitForChain('X-4', (c) => c.status === 'suspended');
    const res = await system.ops('POST', '/ops/chains/X-4/reactivated');
    expect(res).toMatchObject({ status: 422, body: { error: 'payment_overdue' } });
    expect(await system.chain('X-4')).toEqual(before);
  });
});

describe('the external variant, no grace: a family paid after its terms ended', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({
    clock,
    env: { PARTNER_VARIANT: 'external', PAYMENT_GRACE_DAYS: '0' },
  });

  it('asks to reactivate every chain the suspension reached, an add-on ended since too', async () => {
    const t0 = clock.now();
    await system.send('order.placed', orderPlaced({ order: 'XE-1', licenses: 2 }));
    await system.waitForChain('XE-1', () => true);
    clock.set(t0 + 3 * DAY);
    await system.send('seats.changed', { order: 'XE-1', licenses: 4 });
    await system.waitForChain('XE-1', (c) => c.addOns.length === 1);
    clock.set(t0 + 20 * DAY);
    await system.send('payment.overdue', { order: 'XE-1' });
    const suspended = await system.waitForChain('XE-1', (c) => c.status === 'suspended');
    expect(suspended.history.at(-1)?.detail).toContain('suspended XE-1, XE-1.a1');

    // Paid late: both terms ended meanwhile, and reconcile has seen them end. The add-on's chain
    // is still suspended at the provider, and it renews once the reactivation is confirmed.
    clock.set(t0 + 40 * DAY);
    const reconcile = await system.queue('maintenance').add('reconcile now', {});
    await expect.poll(async () => reconcile.getState(), { timeout: 10_000 }).toBe('completed');
    await system.send('payment.received', { order: 'XE-1' });
    const paid = await system.waitForChain('XE-1', (c) => c.needsReactivation);
    expect(await providerStatus(system, 'XE-1.a1')).toBe('suspended');
    expect(paid.addOns[0]?.nextLicenses).toBe(2);
    expect(paid.history.at(-1)?.detail).toContain('reactivate XE-1, XE-1.a1 by hand');
  });
});

describe('the external variant, 3 days of grace', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({
    clock,
    env: { PARTNER_VARIANT: 'external', PAYMENT_GRACE_DAYS: '3' },
  });

  /** An order with one add-on (7 licenses in all), its payment overdue: a family to suspend. */
  async function overdueWithAddOn(order: string): Promise<ChainView> {
    await system.send('order.placed', orderPlaced({ order }));
    await system.waitForChain(order, () => true);
    await system.send('seats.changed', { order, licenses: 7 });
    const family = await system.waitForChain(order, (c) => c.addOns.length === 1);
    await system.send('payment.overdue', { order });
    await system.waitForChain(order, (c) => c.payment === 'overdue');
    return family;
  }

  /** Overdue past its grace: the episode's suspension job, run now. */
  async function graceEnds(order: string, episode: number) {
    clock.advance(3 * DAY);
    await system.promote('payment-signals', suspensionJobId(chainIdOf(order), episode));
  }

  it('gives an increase made while expired waiting for payment to the renewal the payment brings', async () => {
    // The external variant's first order starts now: 20 days into its term, as the helper needs.
    await system.send('order.placed', orderPlaced({ order: 'X-EXP-7', licenses: 5 }));
    const placed = await system.waitForChain('X-EXP-7', () => true);
    clock.advance(20 * DAY);
    const renewed = await increaseWhileExpiredUnpaid(system, clock, 'X-EXP-7', placed);
    expect(renewed).toMatchObject({ status: 'active', licenses: 7, addOns: [{ licenses: 3 }] });
  });

  it('asks no reactivation for a purchase its payment finishes after a suspension found nothing in force', async () => {
    const orderId = await addOnLeftPastEmptySuspension(system, clock, 'X-EXP-8', 'external');

    // The payment's job finishes the purchase first: it is not suspended for the payment that
    // settles it, so nothing waits for a manual reactivation, and the main chain renews.
    await system.send('payment.received', { order: 'X-EXP-8' });
    const paid = await system.waitForChain('X-EXP-8', (c) => c.term.count === 2);
    expect(paid).toMatchObject({ status: 'active', payment: 'ok', needsReactivation: false });
    expect(paid.history.map((h) => h.event)).not.toContain('reactivation.needed');
    expect(await providerStatus(system, orderId)).toBe('active');
  });

  /** Suspended, then paid (awaiting its manual reactivation), then overdue again. */
  async function overdueAgainAwaitingReactivation(order: string): Promise<ChainView> {
    await system.send('order.placed', orderPlaced({ order }));
    await system.waitForChain(order, () => true);
    await system.send('payment.overdue', { order });
    await system.waitForChain(order, (c) => c.payment === 'overdue');
    await graceEnds(order, 1);
    await system.waitForChain(order, (c) => c.status === 'suspended');
    await system.send('payment.received', { order });
    await system.waitForChain(order, (c) => c.needsReactivation);
    await system.send('payment.overdue', { order });
    return system.waitForChain(order, (c) => c.payment === 'overdue');
  }

  it("keeps an add-on bought in a newer payment's grace active until that grace ends", async () => {
    await overdueAgainAwaitingReactivation('X-10');
    await system.send('seats.changed', { order: 'X-10', licenses: 7 });
    await system.waitForChain('X-10', (c) => c.addOns.length === 1);
    expect(await providerStatus(system, 'X-10.a1')).toBe('active');

    // Still unpaid when the grace ends: the episode's suspension takes it along.
    await graceEnds('X-10', 2);
    const suspended = await system.waitForChain('X-10', (c) =>
      c.history.some((h) => h.event === 'chain.suspended' && h.detail.includes('episode 2')),
    );
    expect(suspended.history.at(-1)?.detail).toContain('X-10.a1');
    expect(await providerStatus(system, 'X-10.a1')).toBe('suspended');
  });

  it("runs a newer episode's suspension again after its save without suspending twice", async () => {
    await overdueAgainAwaitingReactivation('X-12');
    await graceEnds('X-12', 2);
    const ofEpisode2 = (c: ChainView) =>
      c.history.filter((h) => h.event === 'chain.suspended' && h.detail.includes('episode 2'));
    await system.waitForChain('X-12', (c) => ofEpisode2(c).length === 1);

    // Its worker died after the save: the stalled job runs again and finds it done.
    const queue = system.queue('payment-signals');
    const id = suspensionJobId(chainIdOf('X-12'), 2);
    await runAgain(queue, id);
    expect((await queue.getJob(id))?.returnvalue).toBe('skipped: suspended');
    const chain = await system.chain('X-12');
    expect(ofEpisode2(chain)).toHaveLength(1);
    expect(chain).toMatchObject({
      status: 'suspended',
      payment: 'overdue',
      needsReactivation: true,
    });
  });

  it("reactivated during a newer payment's grace, is suspended again when it ends", async () => {
    const overdue = await overdueAgainAwaitingReactivation('X-5');
    expect(overdue.history.at(-1)?.detail).toContain('awaiting its manual reactivation');

    // Within the grace period the operator confirms: active until it ends. A repeat (its
    // answer was lost) keeps the suspension to come.
    const res = await system.ops('POST', '/ops/chains/X-5/reactivated');
    expect(res.body).toMatchObject({ status: 'active', payment: 'overdue' });
    const repeat = await system.ops('POST', '/ops/chains/X-5/reactivated');
    expect(repeat.status).toBe(200);
    await graceEnds('X-5', 2);
    const chain = await system.waitForChain('X-5', (c) => c.status === 'suspended');
    expect(chain).toMatchObject({ payment: 'overdue', needsReactivation: false });
    expect(await providerStatus(system, 'X-5')).toBe('suspended');
  });

  it('paid while its suspension was half done, is suspended in full by a newer episode', async () => {
    await overdueWithAddOn('X-6');
    // The suspension suspended X-6 and died before X-6.a1, in a record from before the calls
    // begun were kept in it: any order in force may be suspended.
    await system.started.provisioning.suspendOrder({ id: 'X-6' });
    await leftByDeadJob(system, 'X-6', 'dead-suspension', () => ({ suspending: 1 }));
    await (
      await system.queue('payment-signals').getJob(suspensionJobId(chainIdOf('X-6'), 1))
    )?.remove();

    await system.send('payment.received', { order: 'X-6' });
    const paid = await system.waitForChain('X-6', (c) => c.needsReactivation);
    // Half suspended at the provider: recorded suspended, as the reactivation it asks for says.
    expect(paid).toMatchObject({ status: 'suspended', payment: 'ok' });
    expect(paid.history.at(-1)?.detail).toContain('reactivate X-6, X-6.a1 by hand');

    await system.send('payment.overdue', { order: 'X-6' });
    await system.waitForChain('X-6', (c) => c.payment === 'overdue');
    await graceEnds('X-6', 2);
    const suspended = await system.waitForChain('X-6', (c) => lastEvent(c) === 'chain.suspended');
    expect(suspended.status).toBe('suspended');
    expect(await providerStatus(system, 'X-6.a1')).toBe('suspended');
    const res = await system.ops('POST', '/ops/chains/X-6/reactivated');
    expect(res).toMatchObject({ status: 422, body: { error: 'payment_overdue' } });
  });

  /**
   * Past the grace, the first episode's suspension job suspends the main order and its worker
   * dies before the next one (the job is left as it was, for the test to settle).
   */
  async function suspensionDiesAfterMainOrder(order: string): Promise<Job> {
    clock.advance(3 * DAY);
    const queue = system.queue('payment-signals');
    const real = (await queue.getJob(suspensionJobId(chainIdOf(order), 1))) as Job;
    const { provisioning } = system.started;
    const dying = Object.create(provisioning) as typeof provisioning;
    dying.suspendOrder = async (params) => {
      await provisioning.suspendOrder(params);
      throw new TransientError('provisioning_unavailable', 'killed after the call');
    };
    const suspending = makePaymentProcessor(workerDepsOf(system, { provisioning: dying }));
    await expect(suspending(real)).rejects.toThrow('killed after the call');
    return real;
  }

  /** The job gives up for good: a stand-in of its id, failed by the real worker (no job's data). */
  async function givesUp(job: Job): Promise<void> {
    const queue = system.queue('payment-signals');
    const { id, name, opts } = job;
    await job.remove();
    await queue.add(name, { broken: true }, { ...opts, jobId: id, delay: 0, attempts: 1 });
    await expect.poll(() => jobState(queue, id ?? '')).toBe('failed');
  }

  it('asks to reactivate only the orders a suspension that died halfway had reached', async () => {
    await overdueWithAddOn('X-8');
    await (await suspensionDiesAfterMainOrder('X-8')).remove();
    expect(await providerStatus(system, 'X-8')).toBe('suspended');
    expect(await providerStatus(system, 'X-8.a1')).toBe('active');

    await system.send('payment.received', { order: 'X-8' });
    const paid = await system.waitForChain('X-8', (c) => c.needsReactivation);
    expect(paid).toMatchObject({ status: 'suspended', payment: 'ok' });
    const reason = paid.history.at(-1)?.detail;
    expect(reason).toContain('reactivate X-8 by hand');
    expect(reason).not.toContain('X-8.a1');
    const res = await system.ops('POST', '/ops/chains/X-8/reactivated');
    expect(res.body).toMatchObject({ status: 'active', payment: 'ok', needsReactivation: false });
  });

  it('asks to reactivate only what a suspension reached, also once its job gave up', async () => {
    await overdueWithAddOn('X-15');
    // The same death on every attempt, until BullMQ gives the job up.
    await givesUp(await suspensionDiesAfterMainOrder('X-15'));
    expect(await providerStatus(system, 'X-15.a1')).toBe('active');

    await system.send('payment.received', { order: 'X-15' });
    const paid = await system.waitForChain('X-15', (c) => c.needsReactivation);
    const reason = paid.history.at(-1)?.detail;
    expect(reason).toContain('reactivate X-15 by hand');
    expect(reason).not.toContain('X-15.a1');
  });

  it('asks to reactivate an add-on renewal that joined a suspension left half done', async () => {
    const family = await overdueWithAddOn('X-9');
    const addOn = family.addOns[0]?.order ?? '';
    // The suspension reached X-9 and died; an add-on renewal sent before it is replayed after.
    const queue = system.queue('payment-signals');
    await (await queue.getJob(suspensionJobId(chainIdOf('X-9'), 1)))?.remove();
    await system.started.provisioning.suspendOrder({ id: 'X-9' });
    await leftByDeadJob(system, 'X-9', 'dead-suspension', () => ({
      suspending: 1,
      suspensionCalls: ['X-9'],
    }));
    const renewalId = renewalOrderId(addOn, 2);
    clock.advance(20 * DAY); // inside the provider's renewal window
    await leftByDeadJob(system, addOn, 'dead-addon-renewal', () => ({
      nextRenewalAt: clock.now(),
      intent: {
        kind: 'renewal',
        method: 'createRenewalOrder',
        orderId: renewalId,
        params: { parent: addOn, id: renewalId },
        jobId: 'dead',
      },
    }));
    // Its own job runs again (reconcile would give the suspension its job back as well, and
    // that one would suspend the family itself).
    await system.promote('renewals', renewalJobId(chainIdOf(addOn), 2));
    await system.waitForChain(addOn, (c) => c.term.count === 2);
    // It joined the family's suspension, and the suspension's record says so.
    await expect.poll(() => providerStatus(system, addOn), { timeout: 10_000 }).toBe('suspended');

    await system.send('payment.received', { order: 'X-9' });
    const paid = await system.waitForChain('X-9', (c) => c.needsReactivation);
    expect(paid.history.at(-1)?.detail).toContain(`reactivate X-9, ${addOn} by hand`);
  });

  it('asks to reactivate what a half-done suspension reached, also once its term ended', async () => {
    await system.send('order.placed', orderPlaced({ order: 'X-13' }));
    const placed = await system.waitForChain('X-13', () => true);
    await system.send('payment.overdue', { order: 'X-13' });
    await system.waitForChain('X-13', (c) => c.payment === 'overdue');
    // The suspension suspended X-13 and died; its retry comes only after the term ended.
    await system.started.provisioning.suspendOrder({ id: 'X-13' });
    await leftByDeadJob(system, 'X-13', 'dead-suspension', () => ({
      suspending: 1,
      suspensionCalls: ['X-13'],
    }));
    clock.set(placed.term.expiresAt + DAY);
    await system.promote('payment-signals', suspensionJobId(chainIdOf('X-13'), 1));
    const queue = system.queue('payment-signals');
    await expect
      .poll(async () => (await queue.getJob(suspensionJobId(chainIdOf('X-13'), 1)))?.returnvalue)
      .toBe('skipped: nothing in force');

    // X-13 names the whole chain at the provider, suspended there: as after a suspension done
    // in full whose term then ended, the payment asks for its reactivation first.
    await system.send('payment.received', { order: 'X-13' });
    const paid = await system.waitForChain('X-13', (c) => c.payment === 'ok');
    expect(paid).toMatchObject({ status: 'suspended', needsReactivation: true });
    expect(paid.history.at(-1)?.detail).toContain('reactivate X-13 by hand');
  });

  it('leaves a chain with nothing in force unsuspended, and renews it at once when paid', async () => {
    await system.send('order.placed', orderPlaced({ order: 'X-7', autoRenew: false }));
    const placed = await system.waitForChain('X-7', () => true);
    clock.set(placed.term.expiresAt + DAY);
    await system.send('payment.overdue', { order: 'X-7' });
    await system.waitForChain('X-7', (c) => c.payment === 'overdue');
    await graceEnds('X-7', 1);
    const queue = system.queue('payment-signals');
    const id = suspensionJobId(chainIdOf('X-7'), 1);
    await expect
      .poll(async () => (await queue.getJob(id))?.returnvalue)
      .toBe('skipped: nothing in force');
    expect((await system.chain('X-7')).status).not.toBe('suspended');

    await system.send('payment.received', { order: 'X-7' });
    const paid = await system.waitForChain('X-7', (c) => c.payment === 'ok');
    expect(paid.needsReactivation).toBe(false);
  });
});

describe('the external variant without extensions, 3 days of grace', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({
    clock,
    env: { PARTNER_VARIANT: 'external', PAYMENT_GRACE_DAYS: '3', PROVISIONING_EXTENSIONS: 'false' },
  });

  it('leaves an increase made while expired to the newest add-on: the main chain renews when paid', async () => {
    // A renewal cannot change its count here: the one that must is flagged for an operator, an
    // add-on's rather than the main chain's, whose flag would stop the family's renewals.
    await system.send('order.placed', orderPlaced({ order: 'XN-EXP-7', licenses: 5 }));
    const placed = await system.waitForChain('XN-EXP-7', () => true);
    clock.advance(20 * DAY);
    const renewed = await increaseWhileExpiredUnpaid(system, clock, 'XN-EXP-7', placed, {
      main: 5,
      addOn: 5,
    });
    expect(renewed).toMatchObject({ status: 'active', flagged: null, licenses: 5 });
  });
});

describe('a payment event meeting a seat purchase another job left half done', () => {
  const system = useSystem();

  it('records the provider refusal of that purchase and still applies the payment', async () => {
    await system.send('order.placed', orderPlaced({ order: 'HALF-S' }));
    await system.waitForChain('HALF-S', () => true);
    // A crashed seat job's purchase, which the provider will refuse (an unknown product).
    const now = systemClock.now();
    await leftByDeadJob(system, 'HALF-S', 'crashed-seat-job', (chain) => ({
      intent: {
        kind: 'partial',
        method: 'createOrder',
        orderId: 'HALF-S.p1',
        params: {
          customer: chain.customer,
          id: 'HALF-S.p1',
          product: 'no-such-product',
          licenses: 1,
          startsAt: now,
          expiresAt: chain.term.expiresAt,
        },
        jobId: 'crashed-seat-job',
        event: { webhookId: 'evt-crashed', occurredAt: now, total: 6 },
      },
    }));

    const sent = await system.send('payment.overdue', { order: 'HALF-S' });
    const chain = await system.waitForChain('HALF-S', (c) => c.payment === 'overdue');
    const events = chain.history.map((h) => h.event);
    expect(events).toContain('seats.refused');
    expect(events.at(-1)).toBe('payment.overdue');
    const job = await system
      .queue('payment-signals')
      .getJob(webhookJobId((sent.body as { id: string }).id));
    await expect.poll(async () => job?.getState(), { timeout: 5_000 }).toBe('completed');
  });
});

describe('marketplace with add-on seat increases', () => {
  const system = useSystem({ env: { PAYMENT_GRACE_DAYS: '0', SEAT_INCREASE: 'addon' } });

  it('suspends and unsuspends the add-on orders with the main order', async () => {
    await suspendedWithAddOn(system, 'MA-1', 8);

    await system.send('payment.received', { order: 'MA-1' });
    const paid = await system.waitForChain('MA-1', (c) => c.status === 'active');
    expect(paid.history.at(-1)?.detail).toContain('MA-1.a1');
    expect(await providerStatus(system, 'MA-1')).toBe('active');
    expect(await providerStatus(system, 'MA-1.a1')).toBe('active');
  });

  it('says an add-on bought while suspended is suspended on arrival', async () => {
    await boughtWhileSuspended(system, 'MA-5', 'MA-5.a1', 'seats.addon_ordered');
  });

  it('says which orders the provider refused to unsuspend, and why', async () => {
    await suspendedWithAddOn(system, 'MA-2', 8);
    // Cancelled at the provider behind the workers' back: it refuses the unsuspension.
    await system.started.provisioning.cancelOrder({ id: 'MA-2.a1' });

    await system.send('payment.received', { order: 'MA-2' });
    const paid = await system.waitForChain('MA-2', (c) => c.status === 'active');
    expect(paid.history.at(-1)).toMatchObject({
      event: 'chain.unsuspended',
      detail:
        'payment received: unsuspended MA-2; the provider refused to unsuspend MA-2.a1 ("order MA-2.a1 is cancelled")',
    });
    expect(await providerStatus(system, 'MA-2')).toBe('active');
  });

  it('suspends the rest of the family when the provider refuses one order, saying which and why', async () => {
    await system.send('order.placed', orderPlaced({ order: 'MA-4' }));
    await system.waitForChain('MA-4', () => true);
    await system.send('seats.changed', { order: 'MA-4', licenses: 8 });
    await system.waitForChain('MA-4', (c) => c.addOns.length === 1);
    await system.send('seats.changed', { order: 'MA-4', licenses: 10 });
    await system.waitForChain('MA-4', (c) => c.addOns.length === 2);
    // Cancelled at the provider, not recorded yet (its own order.cancelled job, which holds
    // only the add-on's lock, between its call and its record): the provider refuses it.
    await system.started.provisioning.cancelOrder({ id: 'MA-4.a1' });

    await system.send('payment.overdue', { order: 'MA-4' });
    const suspended = await system.waitForChain('MA-4', (c) => c.status === 'suspended');
    expect(suspended.history.at(-1)).toMatchObject({
      event: 'chain.suspended',
      detail:
        'payment still overdue after the grace period (episode 1): suspended MA-4, MA-4.a2; the provider refused to suspend MA-4.a1 ("order MA-4.a1 is cancelled")',
    });
    expect(await providerStatus(system, 'MA-4')).toBe('suspended');
    expect(await providerStatus(system, 'MA-4.a1')).toBe('cancelled');
    expect(await providerStatus(system, 'MA-4.a2')).toBe('suspended');
  });

  it('shows an add-on that ended under a suspended main chain as expired, with no renewal time', async () => {
    await suspendedWithAddOn(system, 'MA-3', 8);
    // Its term ended while the family stayed suspended, and reconcile marked it expired.
    await leftByDeadJob(system, 'MA-3.a1', 'term-ended', (addOn) => ({
      status: 'expired',
      term: { ...addOn.term, expiresAt: systemClock.now() - 60 },
    }));
    const chain = await system.chain('MA-3');
    expect(chain.status).toBe('suspended');
    expect(chain.addOns[0]).toMatchObject({ status: 'expired', nextRenewalAt: null });
    expect(await upcomingOrders(system)).not.toContain('MA-3.a1');
  });
});

describe('the external variant: a confirmation retried after its job update failed', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({
    clock,
    env: { PARTNER_VARIANT: 'external', PAYMENT_GRACE_DAYS: '0' },
  });

  /** The renewals queue as it is while Redis does not answer: the job update fails. */
  function unreachable(queue: Queue): Queue {
    return new Proxy(queue, {
      get(target, property, receiver) {
        if (property === 'getJob') {
          return async () => {
            throw new Error('Command timed out');
          };
        }
        return Reflect.get(target, property, receiver);
      },
    });
  }

  it('renews at once when the retried confirmation finds the chain reactivated already', async () => {
    const order = 'RV-1';
    await system.send('order.placed', orderPlaced({ order, autoRenew: false }));
    await system.waitForChain(order, () => true);
    // External first orders start now: let 25 days pass, so the renewal is due.
    clock.advance(25 * DAY);
    await system.send('payment.overdue', { order });
    await system.waitForChain(order, (c) => c.status === 'suspended');
    // Due, switched on: its renewal job runs and puts itself off for the overdue payment.
    expect(
      (await system.ops('PUT', `/ops/chains/${order}/auto-renew`, { enabled: true })).status,
    ).toBe(200);
    const job = renewalJobId(chainIdOf(order), 2);
    const renewals = system.queue('renewals');
    await expect
      .poll(async () => (await renewals.getJob(job))?.data.deferredUntil, { timeout: 10_000 })
      .toBeGreaterThan(clock.now());
    // Paid: external, so an operator reactivates by hand. The renewal still waits (6 h).
    await system.send('payment.received', { order });
    await system.waitForChain(order, (c) => c.needsReactivation && c.payment === 'ok');
    expect(await jobState(renewals, job)).toBe('delayed');

    // First confirmation: saved, then the job update fails (the operator gets a 503).
    const ops = makeChainOperations({
      chains: new ChainStore(system.started.runtime.redis),
      renewals: unreachable(renewals),
      paymentSignals: system.queue('payment-signals'),
      clock: system.started.clock,
      leadDays: system.settings.RENEWAL_LEAD_DAYS,
      variant: 'external',
    });
    await expect(ops.reactivated(order, { operator: 'first' })).rejects.toThrow('timed out');
    expect(await system.chain(order)).toMatchObject({ status: 'active', needsReactivation: false });

    // The operator retries, as the 503 says: the due renewal must be reconsidered now.
    const retry = await system.ops('POST', `/ops/chains/${order}/reactivated`);
    expect(retry.status).toBe(200);
    const renewed = await system.waitForChain(order, (c) => c.term.count === 2, 10_000);
    expect(renewed.term.count).toBe(2);
  }, 60_000);
});

describe('marketplace, 3 days of grace: a payment meeting a suspension half done', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({ clock, env: { PAYMENT_GRACE_DAYS: '3' } });
  const SUSPENDS = 'billing_suspensions_total{action="suspend"}';
  const UNSUSPENDS = 'billing_suspensions_total{action="unsuspend"}';

  it('counts no unsuspension of a chain never recorded suspended: the two balance', async () => {
    const startsAt = clock.now() - 10 * DAY;
    await system.send('order.placed', orderPlaced({ order: 'MB-1', startsAt }));
    await system.waitForChain('MB-1', () => true);
    await system.send('seats.changed', { order: 'MB-1', licenses: 8 });
    await system.waitForChain('MB-1', (c) => c.partials.length === 1);
    await system.send('payment.overdue', { order: 'MB-1' });
    await system.waitForChain('MB-1', (c) => c.payment === 'overdue');
    const before = [await metricValue(system, SUSPENDS), await metricValue(system, UNSUSPENDS)];

    // The grace period ends; the suspension suspends MB-1, then the provider fails on MB-1.p1
    // (its job waits to retry).
    clock.advance(3 * DAY);
    const { provisioning } = system.started;
    const failing: ProvisioningClient = Object.create(provisioning);
    failing.suspendOrder = async (params) => {
      if (params.id === 'MB-1.p1') throw new TransientError('provisioning_unavailable', 'away');
      return provisioning.suspendOrder(params);
    };
    const job = await system.queue('payment-signals').getJob(suspensionJobId(chainIdOf('MB-1'), 1));
    if (!job) throw new Error('no suspension job');
    await expect(
      makePaymentProcessor(workerDepsOf(system, { provisioning: failing }))(job),
    ).rejects.toThrow('away');
    expect(await providerStatus(system, 'MB-1')).toBe('suspended');

    // The payment unsuspends what the suspension reached.
    await system.send('payment.received', { order: 'MB-1' });
    const paid = await system.waitForChain('MB-1', (c) => lastEvent(c) === 'chain.unsuspended');
    expect(paid).toMatchObject({ status: 'active', payment: 'ok' });
    expect(await providerStatus(system, 'MB-1')).toBe('active');
    const after = [await metricValue(system, SUSPENDS), await metricValue(system, UNSUSPENDS)];
    expect(after).toEqual(before);
  }, 30_000);
});

describe('marketplace add-ons, no grace: an add-on renewal whose order lands in a suspended family', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({ clock, env: { PAYMENT_GRACE_DAYS: '0', SEAT_INCREASE: 'addon' } });

  it("says in the family's history that the order was suspended on arrival", async () => {
    const startsAt = clock.now() - 2 * DAY;
    await system.send('order.placed', orderPlaced({ order: 'AR-1', startsAt }));
    await system.waitForChain('AR-1', () => true);
    await system.send('seats.changed', { order: 'AR-1', licenses: 8 });
    const [addOn] = (await system.waitForChain('AR-1', (c) => c.addOns.length === 1)).addOns;
    if (!addOn) throw new Error('no add-on');
    const renewalOrder = `${addOn.order}.r2`;
    clock.set(addOn.term.expiresAt - 6 * DAY);

    // The provider takes its time with the add-on's renewal, decided while the payment was ok;
    // meanwhile the payment goes overdue and (no grace) the family is suspended.
    const { provisioning } = system.started;
    const slow: ProvisioningClient = Object.create(provisioning);
    // Through createOrder, not the one-step path that records the order with it.
    (slow as { createRecorded?: unknown }).createRecorded = undefined;
    slow.createOrder = async (params) => {
      if (params.id === renewalOrder) {
        await system.send('payment.overdue', { order: 'AR-1' });
        await system.waitForChain('AR-1', (c) => c.status === 'suspended');
      }
      return provisioning.createOrder(params);
    };
    const job = await system.queue('renewals').getJob(renewalJobId(chainIdOf(addOn.order), 2));
    if (!job) throw new Error('no add-on renewal job');
    const renew = makeRenewalProcessor(workerDepsOf(system, { provisioning: slow }));
    expect(await renew(job)).toBe(`renewed: ${renewalOrder}`);

    expect(await providerStatus(system, renewalOrder)).toBe('suspended');
    const family = await system.chain('AR-1');
    expect(family.history.at(-1)).toMatchObject({
      event: 'renewal.suspended',
      detail: `add-on ${addOn.order}: its renewal ${renewalOrder}, ordered while its family was suspended, is suspended on arrival: the payment is overdue`,
      cause: { orderId: renewalOrder },
    });
    // The payment unsuspends it with the rest.
    await system.send('payment.received', { order: 'AR-1' });
    await system.waitForChain('AR-1', (c) => c.status === 'active');
    expect(await providerStatus(system, renewalOrder)).toBe('active');
  }, 30_000);
});
