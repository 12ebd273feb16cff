// The external variant (test clock), and remote mode against the embedded core's HTTP API.
import { setTimeout as sleep } from 'node:timers/promises';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { renewalJobId } from '../../../jobs/renewals.js';
import { chainIdOf } from '../../../src/chains/keys.js';
import { ChainStore } from '../../../src/chains/store.js';
import { type Clock, manualClock, systemClock } from '../../../src/clock.js';
import { addTerms } from '../../../src/domain/periods.js';
import { webhookJobId } from '../../../src/intake/webhooks.js';
import { partnerKeys } from '../../../src/provisioning/keys.js';
import type { Partner } from '../../../src/provisioning/records.js';
import { QUEUE_PREFIX } from '../../../src/queues.js';
import { startProxy } from '../../helpers/proxy.js';
import { DAY, leftByDeadJob, orderPlaced, type System, startSystem } from '../../helpers/system.js';

/** Runs the reconcile job now, as its scheduler would, so delays are recomputed from the clock. */
async function reconcileNow(system: System) {
  const redis = new Redis(system.redisUrl, { maxRetriesPerRequest: null });
  const queue = new Queue('maintenance', { connection: redis, prefix: QUEUE_PREFIX });
  await queue.add('reconcile now', {});
  await queue.close();
  await redis.quit();
}

describe('the external variant', () => {
  const clock = manualClock(systemClock.now());
  let system: System;

  beforeAll(async () => {
    system = await startSystem({ clock, env: { PARTNER_VARIANT: 'external' } });
  });
  afterAll(async () => system.close());

  it('places a first order (createFirstOrder, starting now) and renews it with createRenewalOrder', async () => {
    const placedAt = clock.now();
    await system.send('order.placed', orderPlaced({ order: 'X-1', licenses: 3 }));
    const placed = await system.waitForChain('X-1', () => true);
    expect(placed.term).toEqual({
      orderId: 'X-1',
      count: 1,
      startsAt: placedAt,
      expiresAt: addTerms(placedAt, 'monthly', 1),
    });

    // 25 days later the renewal is due; reconcile moves its job to now by the test clock.
    clock.advance(25 * DAY);
    await reconcileNow(system);
    const renewed = await system.waitForChain('X-1', (c) => c.term.count === 2);
    expect(renewed.term).toEqual({
      orderId: 'X-1.r2',
      count: 2,
      startsAt: placed.term.expiresAt,
      expiresAt: addTerms(placedAt, 'monthly', 2),
    });
    expect(renewed.licenses).toBe(3);
  });

  it('suspends a renewal replayed for a suspended chain, by the chain first order', async () => {
    await system.send('order.placed', orderPlaced({ order: 'X-S', licenses: 2 }));
    await system.waitForChain('X-S', () => true);
    clock.advance(20 * DAY);
    // A renewal job died before sending; the payment went overdue and the chain was suspended.
    await system.started.provisioning.suspendOrder({ id: 'X-S' });
    await leftByDeadJob(system, 'X-S', 'dead-renewal-job', () => ({
      autoRenew: true,
      payment: 'overdue',
      status: 'suspended',
      nextRenewalAt: clock.now(),
      intent: {
        kind: 'renewal',
        method: 'createRenewalOrder',
        orderId: 'X-S.r2',
        params: { parent: 'X-S', id: 'X-S.r2' },
        jobId: 'dead',
      },
    }));
    await reconcileNow(system);
    const chain = await system.waitForChain('X-S', (c) => c.term.count === 2);
    expect(chain.status).toBe('suspended');
    expect((await system.providerOrder('X-S.r2'))?.status).toBe('suspended');
  });
});

/**
 * Workers in remote mode against a provider: the embedded core served over HTTP by a system of
 * its own (API role, no workers), where the workers have a partner account. Started in
 * beforeAll, closed in afterAll.
 */
function useRemote(
  options: {
    /** Reach the provider through a proxy that can hold an answer. */
    viaProxy?: boolean;
    /** The provider's window for the workers' partner (default 15 days). */
    renewalWindowDays?: number;
    /** One clock for both sides, so the provider's window moves with the workers' time. */
    clock?: Clock;
    env?: Record<string, string>;
  } = {},
) {
  const remote = {} as {
    provider: System;
    system: System;
    proxy: Awaited<ReturnType<typeof startProxy>> | undefined;
    /** The workers' partner at the provider. */
    partner: Partner;
  };
  const clock = options.clock ? { clock: options.clock } : {};
  beforeAll(async () => {
    remote.provider = await startSystem({ role: 'api', ...clock });
    const { runtime } = remote.provider.started;
    const { partner, apiKey } = await runtime.partners.create({
      name: 'remote-workers',
      variant: 'marketplace',
      renewalWindowDays: options.renewalWindowDays,
      now: runtime.clock.now(),
    });
    remote.partner = partner;
    remote.proxy = options.viaProxy ? await startProxy(remote.provider.baseUrl) : undefined;
    remote.system = await startSystem({
      ...clock,
      env: {
        PROVISIONING_URL: remote.proxy?.url ?? `${remote.provider.baseUrl}/provisioning`,
        PROVISIONING_API_KEY: apiKey,
        PARTNER_VARIANT: 'marketplace',
        ...options.env,
      },
    });
  });
  afterAll(async () => {
    await remote.system?.close();
    await remote.proxy?.close();
    await remote.provider?.close();
  });
  return remote;
}

describe('remote mode', () => {
  const remote = useRemote();

  it('drives the remote service over HTTP: first order and renewal exist there', async () => {
    const { system, provider } = remote;
    const startsAt = systemClock.now() - 25 * DAY;
    await system.send('order.placed', orderPlaced({ order: 'R-1', startsAt }));
    const chain = await system.waitForChain('R-1', (c) => c.term.count === 2);
    expect(chain.term.startsAt).toBe(addTerms(startsAt, 'monthly', 1));

    const { partner } = remote;
    const first = await provider.started.runtime.store.getOrder(partner, 'R-1');
    const renewal = await provider.started.runtime.store.getOrder(partner, 'R-1.r2');
    expect(first).toMatchObject({ startsAt, licenses: 5 });
    // Without extensions a remote marketplace renewal is a plain controlled-start order.
    expect(renewal).toMatchObject({ startsAt: chain.term.startsAt, parent: 'R-1.r2', count: 1 });
  });

  it('is not a provisioning service itself', async () => {
    const res = await fetch(`${remote.system.baseUrl}/provisioning`, { method: 'POST' });
    expect(res.status).toBe(404);
  });
});

describe('remote mode when the answer to a renewal order is lost', () => {
  // The workers reach the provider through a proxy that can lose an answer on its way back.
  const remote = useRemote({ viaProxy: true, env: { PROVISIONING_TIMEOUT_MS: '500' } });

  it('retries the job, which sends the same order again and records the one the lost answer carried', async () => {
    const { system, provider } = remote;
    const proxy = remote.proxy as NonNullable<typeof remote.proxy>;
    const lost = proxy.holdNext('createOrder', 'LOSS-1.r2');
    await system.send(
      'order.placed',
      orderPlaced({ order: 'LOSS-1', startsAt: systemClock.now() - 25 * DAY }),
    );
    const lostOrder = JSON.parse(await lost) as { id: string; startsAt: number };

    const chain = await system.waitForChain('LOSS-1', (c) => c.term.count === 2, 30_000);
    expect(chain.term).toMatchObject({ orderId: 'LOSS-1.r2', startsAt: lostOrder.startsAt });
    expect(chain.history.filter((h) => h.event === 'renewal.ordered')).toHaveLength(1);
    // The first attempt timed out after the provider made the order; the retry replayed it.
    const sent = proxy.calls.filter(
      (c) => c.method === 'createOrder' && c.params.id === 'LOSS-1.r2',
    );
    expect(sent).toHaveLength(2);
    expect(sent[1]?.params).toEqual(sent[0]?.params);
    // The second attempt recorded the term; it is counted once the job completes.
    const jobId = renewalJobId(chainIdOf('LOSS-1'), 2);
    await expect
      .poll(async () => (await system.queue('renewals').getJob(jobId))?.attemptsMade)
      .toBe(2);

    const { partner } = remote;
    const { runtime } = provider.started;
    const orders = await runtime.redis.hkeys(partnerKeys(partner.id).orders);
    expect(orders.sort()).toEqual(['LOSS-1', 'LOSS-1.r2']);
    expect((await runtime.store.getOrder(partner, 'LOSS-1.r2'))?.id).toBe(lostOrder.id);
  });
});

describe('remote mode through an outage longer than the unexpected failures are retried', () => {
  const remote = useRemote({ viaProxy: true });

  /** Runs the job's retries at once instead of after their waits, until it has made `n` attempts. */
  async function attemptsPass(queue: Queue, jobId: string, n: number) {
    for (;;) {
      // The state first: a job read after it is at least as new.
      const state = await queue.getJobState(jobId);
      const job = await queue.getJob(jobId);
      if (state === 'failed' || state === 'completed' || (job?.attemptsMade ?? 0) >= n) return job;
      if (state === 'delayed') await job?.promote().catch(() => {});
      await sleep(10);
    }
  }

  it('keeps the events accepted meanwhile, and applies them once the service is back', async () => {
    const { system } = remote;
    const proxy = remote.proxy as NonNullable<typeof remote.proxy>;
    await system.send('order.placed', orderPlaced({ order: 'OUT-2' }));
    await system.waitForChain('OUT-2', () => true);

    proxy.outage(true);
    const placed = await system.send('order.placed', orderPlaced({ order: 'OUT-1' }));
    const cancelled = await system.send('order.cancelled', { order: 'OUT-2' });
    const orders = system.queue('orders');
    const jobIds = [placed, cancelled].map((r) => webhookJobId((r.body as { id: string }).id));
    for (const id of jobIds) {
      const job = await attemptsPass(orders, id, 20);
      // Still waiting for the service, well past the 12 attempts of an unexpected failure.
      expect(await job?.getState()).toBe('delayed');
      expect(job?.failedReason).toContain('answered 503');
    }

    proxy.outage(false);
    for (const id of jobIds) await system.promote('orders', id);
    await system.waitForChain('OUT-1', () => true);
    const chain = await system.waitForChain('OUT-2', (c) => c.status === 'cancelled');
    expect(chain.nextRenewalAt).toBeNull();
  });
});

describe('remote mode against a provider whose window is shorter than the lead', () => {
  const clock = manualClock(systemClock.now());
  // The workers believe the default 15-day window and renew 7 days ahead; the provider's is 3.
  const remote = useRemote({
    clock,
    renewalWindowDays: 3,
    env: { PROVISIONING_EXTENSIONS: 'true' },
  });

  it('defers a renewal the provider refuses for its window, and renews once the window opens', async () => {
    const { system } = remote;
    const startsAt = clock.now() - 25 * DAY;
    await system.send('order.placed', orderPlaced({ order: 'WIN-1', startsAt }));
    const deferred = await system.waitForChain('WIN-1', (c) =>
      c.history.some((h) => h.event === 'renewal.deferred'),
    );
    expect(deferred.term.count).toBe(1);
    expect(deferred.flagged).toBeNull();
    expect(deferred.history.at(-1)?.detail).toMatch(
      /^the provider refused WIN-1\.r2 \(renewal refused: \d+ days remain in the current term \(window: 3 days\)\); trying again later$/,
    );
    // The job records the deferral first, then puts itself off: an hour later, without the
    // intent prepared before the refusal.
    await vi.waitFor(async () => {
      const job = await system.queue('renewals').getJob(renewalJobId(chainIdOf('WIN-1'), 2));
      expect(await job?.getState()).toBe('delayed');
      expect(job?.data.deferredUntil).toBe(clock.now() + 3600);
      expect(job?.data.prepared).toBeUndefined();
    });

    // Inside the provider's window the retried job renews.
    clock.set(deferred.term.expiresAt - 2 * DAY);
    await system.promote('renewals', renewalJobId(chainIdOf('WIN-1'), 2));
    const renewed = await system.waitForChain('WIN-1', (c) => c.term.count === 2);
    expect(renewed.term.startsAt).toBe(deferred.term.expiresAt);
  });
});

describe('remote mode when a payment arrives while a suspension is half done', () => {
  // The suspension job's second suspendOrder times out (the proxy holds its answer), so the job
  // waits to retry with one order suspended, while the chain still reads active.
  const remote = useRemote({
    viaProxy: true,
    env: { PROVISIONING_TIMEOUT_MS: '500', PAYMENT_GRACE_DAYS: '0' },
  });

  it('unsuspends every order the half-done suspension reached', async () => {
    const { system, provider, partner } = remote;
    const proxy = remote.proxy as NonNullable<typeof remote.proxy>;
    await system.send('order.placed', orderPlaced({ order: 'HALF-1', licenses: 5 }));
    await system.waitForChain('HALF-1', () => true);
    await system.send('seats.changed', { order: 'HALF-1', licenses: 7 });
    await system.waitForChain('HALF-1', (c) => c.partials.length === 1);

    const held = proxy.holdNext('suspendOrder', 'HALF-1.p1');
    await system.send('payment.overdue', { order: 'HALF-1', invoice: 'INV-1' });
    await held;
    const suspension = await system
      .queue('payment-signals')
      .getJob(`suspend-${chainIdOf('HALF-1')}-1`);
    await vi.waitFor(
      async () => {
        expect(await suspension?.getState()).toBe('delayed');
      },
      { timeout: 10_000 },
    );
    expect((await system.chain('HALF-1')).status).toBe('active');

    await system.send('payment.received', { order: 'HALF-1', invoice: 'INV-1' });
    const paid = await system.waitForChain('HALF-1', (c) => c.payment === 'ok');
    expect(paid.status).toBe('active');
    expect(paid.history.at(-1)).toMatchObject({ event: 'chain.unsuspended' });
    const { store } = provider.started.runtime;
    expect((await store.getOrder(partner, 'HALF-1'))?.status).toBe('active');
    expect((await store.getOrder(partner, 'HALF-1.p1'))?.status).toBe('active');
  });
});

describe('remote mode: an add-on renewal in flight while its family is paid, suspended or cancelled', () => {
  // An add-on's renewal decides from its main chain read without the main chain's lock: a
  // payment, a suspension or a cancel may list the family while the order is in flight.
  const remote = useRemote({
    viaProxy: true,
    // A client timeout longer than any hold, so the held attempt is the one that goes on.
    env: { PAYMENT_GRACE_DAYS: '0', SEAT_INCREASE: 'addon', PROVISIONING_TIMEOUT_MS: '60000' },
  });

  /** A main chain with one add-on (3 licenses): the main chain's view and the add-on's. */
  async function familyWithAddOn(order: string) {
    const { system } = remote;
    await system.send('order.placed', orderPlaced({ order, licenses: 5 }));
    await system.waitForChain(order, () => true);
    await system.send('seats.changed', { order, licenses: 8 });
    const main = await system.waitForChain(order, (c) => c.addOns.length === 1);
    const addOn = main.addOns[0] as NonNullable<(typeof main.addOns)[0]>;
    return { addOn, renewalId: `${addOn.order}.r2` };
  }

  /** A suspended main chain whose add-on has a renewal intent that a dead job left. */
  async function suspendedWithReplayedAddOn(order: string) {
    const { system } = remote;
    const { addOn, renewalId } = await familyWithAddOn(order);
    await system.send('payment.overdue', { order });
    await system.waitForChain(order, (c) => c.status === 'suspended');
    const params = {
      customer: addOn.customer,
      id: renewalId,
      product: addOn.product,
      licenses: addOn.licenses,
      duration: addOn.duration,
      startsAt: addOn.term.expiresAt,
    };
    await leftByDeadJob(system, addOn.order, 'dead-addon-renewal', () => ({
      nextRenewalAt: systemClock.now(),
      intent: {
        kind: 'renewal',
        method: 'createOrder',
        orderId: renewalId,
        params,
        jobId: 'dead',
      },
    }));
    return { addOn: addOn.order, renewalId, params };
  }

  /** An add-on whose term ends in 3 days: its renewal is due, to be decided afresh. */
  async function dueAddOn(order: string) {
    const { addOn, renewalId } = await familyWithAddOn(order);
    const now = systemClock.now();
    await leftByDeadJob(remote.system, addOn.order, 'test-make-due', (chain) => ({
      term: { ...chain.term, expiresAt: now + 3 * DAY },
      nextRenewalAt: now,
    }));
    return { addOn: addOn.order, renewalId };
  }

  const status = async (id: string) =>
    (await remote.provider.started.runtime.store.getOrder(remote.partner, id))?.status;

  /** The add-on's renewal sent, its answer held at the proxy: made there, not yet recorded. */
  async function inFlight({ addOn, renewalId }: { addOn: string; renewalId: string }) {
    const { system } = remote;
    const proxy = remote.proxy as NonNullable<typeof remote.proxy>;
    const held = proxy.hold('createOrder', renewalId);
    await reconcileNow(system);
    await held.answer;
    const job = await system.queue('renewals').getJob(renewalJobId(chainIdOf(addOn), 2));
    const completed = async () => {
      await expect.poll(async () => job?.getState(), { timeout: 10_000 }).toBe('completed');
      // One order call: the held attempt went on (no timeout and retry took the other path).
      const sent = proxy.calls.filter(
        (c) => c.method === 'createOrder' && c.params.id === renewalId,
      );
      expect(sent).toHaveLength(1);
    };
    return { addOn, renewalId, inFlight: held, job, completed };
  }

  const addOnRenewalInFlight = async (order: string) =>
    inFlight(await suspendedWithReplayedAddOn(order));
  const freshAddOnRenewalInFlight = async (order: string) => inFlight(await dueAddOn(order));

  /** The payment, completed while the renewal's answer is still held (then released). */
  async function paidWhileInFlight(order: string) {
    const renewal = await addOnRenewalInFlight(order);
    // The payment unsuspends every order the family has recorded: not the one in flight.
    await remote.system.send('payment.received', { order });
    await remote.system.waitForChain(order, (c) => c.status === 'active');
    renewal.inFlight.release();
    await renewal.completed();
    return renewal;
  }

  it('leaves the renewal order active when the payment unsuspended the family first', async () => {
    const { addOn, renewalId } = await paidWhileInFlight('AJ-1');
    expect((await remote.system.chain(addOn)).term.count).toBe(2);
    expect(await status(renewalId)).toBe('active');
    expect(await status(addOn)).toBe('active');
    expect(await status('AJ-1')).toBe('active');
  });

  it('leaves the renewal order active when the payment read the family before its record', async () => {
    const { system } = remote;
    const proxy = remote.proxy as NonNullable<typeof remote.proxy>;
    const { addOn, renewalId, inFlight, completed } = await addOnRenewalInFlight('AJ-2');
    // The payment has read the family (without the order in flight) and is unsuspending it.
    const unsuspend = proxy.hold('unsuspendOrder', 'AJ-2');
    await system.send('payment.received', { order: 'AJ-2' });
    await unsuspend.answer;
    inFlight.release();
    // Recorded while the payment is halfway: the renewal waits for the main chain to align.
    await system.waitForChain(addOn, (c) => c.term.count === 2);
    unsuspend.release();
    await completed();

    await system.waitForChain('AJ-2', (c) => c.status === 'active');
    expect(await status(renewalId)).toBe('active');
    expect(await status(addOn)).toBe('active');
  });

  it('unsuspends it on a retry, when the job died after suspending it and the main chain is paid', async () => {
    const { renewalId, job, completed } = await paidWhileInFlight('AJ-3');
    // As a job that died between its suspend and its follow-up would leave it.
    await remote.system.started.provisioning.suspendOrder({ id: renewalId });
    await job?.retry('completed');
    await completed();
    expect(await status(renewalId)).toBe('active');
  });

  it('unsuspends it when the job died after suspending it, before its record, and the main chain was paid', async () => {
    const { system } = remote;
    const { addOn, renewalId, params } = await suspendedWithReplayedAddOn('AJ-4');
    // What the dead job did before it died: the order made, and suspended to join the family.
    await system.started.provisioning.createOrder(params);
    await system.started.provisioning.suspendOrder({ id: renewalId });
    await system.send('payment.received', { order: 'AJ-4' });
    await system.waitForChain('AJ-4', (c) => c.status === 'active');

    await reconcileNow(system);
    await system.waitForChain(addOn, (c) => c.term.count === 2);
    await expect.poll(() => status(renewalId), { timeout: 10_000 }).toBe('active');
  });

  it('suspends a fresh renewal order when the family was suspended while it was in flight', async () => {
    const { system } = remote;
    const { addOn, renewalId, inFlight } = await freshAddOnRenewalInFlight('AJ-5');
    // No grace: the suspension lists the family while the renewal's order is in flight.
    await system.send('payment.overdue', { order: 'AJ-5' });
    await system.waitForChain('AJ-5', (c) => c.status === 'suspended');
    inFlight.release();
    await system.waitForChain(addOn, (c) => c.term.count === 2);
    await expect.poll(() => status(renewalId), { timeout: 10_000 }).toBe('suspended');
    expect(await status(addOn)).toBe('suspended');
  });

  it('cancels a renewal order recorded after its main chain was cancelled', async () => {
    const { system } = remote;
    const { addOn, renewalId, inFlight, completed } = await freshAddOnRenewalInFlight('AJ-6');
    // The cancel lists the family while the renewal's order is in flight.
    await system.send('order.cancelled', { order: 'AJ-6' });
    await system.waitForChain('AJ-6', (c) => c.status === 'cancelled');
    inFlight.release();
    await completed();
    expect(await status(renewalId)).toBe('cancelled');
    expect(await status(addOn)).toBe('cancelled');
    const main = await system.chain('AJ-6');
    expect(main.addOns[0]).toMatchObject({ status: 'cancelled', term: { orderId: renewalId } });
  });

  it('records the add-on cancelled on a retry that finds its main chain cancelled', async () => {
    const { system } = remote;
    const { addOn, renewalId, inFlight, job, completed } = await freshAddOnRenewalInFlight('AJ-7');
    inFlight.release();
    await completed();
    // The main chain is cancelled while a job holds the add-on, so the cancel cannot mark it
    // (it cancels the add-on's orders at the provider all the same).
    const chains = new ChainStore(system.started.runtime.redis);
    const token = 'test-holds-the-add-on';
    await chains.lock(chainIdOf(addOn), token);
    await system.send('order.cancelled', { order: 'AJ-7' });
    await system.waitForChain('AJ-7', (c) => c.status === 'cancelled');
    await chains.unlock(chainIdOf(addOn), token);
    // (The ops view shows an add-on with its main chain's status; the record is its own.)
    expect((await chains.get(chainIdOf(addOn)))?.status).toBe('active');

    await job?.retry('completed');
    await completed();
    expect((await chains.get(chainIdOf(addOn)))?.status).toBe('cancelled');
    const history = await chains.history(chainIdOf(addOn));
    expect(history.at(-1)?.detail).toContain(renewalId);
    expect(await status(renewalId)).toBe('cancelled');
  });
});
