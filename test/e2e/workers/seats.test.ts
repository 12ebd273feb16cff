// Seat changes end to end: partials, add-ons, decreases, stale, repeated and concurrent events.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Job, Worker } from 'bullmq';
import { describe, expect, it, vi } from 'vitest';
import { lateOrderCheckJobId } from '../../../jobs/late-orders.js';
import { makeRenewalProcessor, renewalJobId } from '../../../jobs/renewals.js';
import { makeProcessor as makeSeatProcessor } from '../../../jobs/seat-changes.js';
import { ADD_ON_DUE, addOnJobId } from '../../../jobs/waiting-add-ons.js';
import { chainIdOf } from '../../../src/chains/keys.js';
import type { Chain } from '../../../src/chains/records.js';
import { ChainStore } from '../../../src/chains/store.js';
import type { ChainView } from '../../../src/chains/view.js';
import type { ProvisioningClient } from '../../../src/client/provisioning-client.js';
import { type ManualClock, manualClock, systemClock } from '../../../src/clock.js';
import { renewalOrderId } from '../../../src/domain/ids.js';
import { addTerms } from '../../../src/domain/periods.js';
import { RefusalError, TransientError } from '../../../src/errors.js';
import { formatInstant } from '../../../src/format.js';
import { webhookDedupKey, webhookJobId } from '../../../src/intake/webhooks.js';
import { delayedFireTime, QUEUE_PREFIX } from '../../../src/queues.js';
import { connectRedis } from '../../../src/redis/connection.js';
import {
  DAY,
  jobState,
  lastEvent,
  leftByDeadJob,
  orderPlaced,
  paidAwaitingReactivation,
  reconcileRound,
  runAgain,
  type System,
  useSystem,
  workerDepsOf,
} from '../../helpers/system.js';

const run = promisify(execFile);
const BIN = join(import.meta.dirname, '../../../bin/billing.js');

/** Places a chain and waits for it; its first term started `daysAgo` days ago. */
async function place(
  system: System,
  order: string,
  licenses: number,
  daysAgo = 10,
  options: { autoRenew?: boolean } = {},
) {
  const startsAt = system.started.runtime.clock.now() - daysAgo * DAY;
  await system.send('order.placed', orderPlaced({ order, licenses, startsAt, ...options }));
  return system.waitForChain(order, () => true);
}

async function seats(
  system: System,
  order: string,
  licenses: number,
  extra: Record<string, unknown> = {},
  id?: string,
) {
  const res = await system.send(
    'seats.changed',
    { order, licenses, ...extra },
    id === undefined ? {} : { id },
  );
  expect(res.status).toBe(202);
}

/**
 * Places a chain of `licenses`, sets its next count to `next`, renews it 7 days early and moves
 * on a day: term 1 is still in force, term 2 ordered with `next`.
 */
async function renewedEarly(
  system: System,
  clock: ManualClock,
  order: string,
  { licenses, next }: { licenses: number; next: number },
) {
  const placed = await place(system, order, licenses);
  await seats(system, order, next, { effectiveAt: placed.term.expiresAt });
  await system.waitForChain(order, (c) => c.nextLicenses === next);
  const renewed = await renewAt(system, clock, order, {
    count: 2,
    expiresAt: placed.term.expiresAt,
  });
  expect(renewed.licenses).toBe(next);
  clock.advance(DAY);
  return { placed, renewed };
}

/** Three totals needed from later days each (external: an add-on waits, then two totals). */
const QUEUED = [
  [7, 3],
  [10, 5],
  [12, 7],
] as const;

/** The day `order`'s waiting add-on is needed (external): its job buys it, the `nth` add-on. */
async function buyWaitingAddOn(
  system: System,
  clock: ManualClock,
  order: string,
  { at, nth }: { at: number; nth: number },
) {
  clock.set(at);
  await system.promote('seat-changes', addOnJobId(chainIdOf(order)));
  return system.waitForChain(order, (c) => c.addOns.length === nth);
}

/**
 * Sends seat totals to `order` one after another, each needed from its day (`at(day)`) and a
 * minute after the last; answers the chain once the last is applied.
 */
async function sendDatedTotals(
  system: System,
  clock: ManualClock,
  order: string,
  totals: readonly (readonly [licenses: number, day: number])[],
  at: (day: number) => number,
) {
  let chain = await system.chain(order);
  for (const [licenses, day] of totals) {
    clock.advance(60);
    const seen = chain.history.length;
    await seats(system, order, licenses, { effectiveAt: at(day) });
    chain = await system.waitForChain(order, (c) => c.history.length > seen);
  }
  return chain;
}

/** A chain's waiting add-on job as a test waits for it: the day it buys for, and its state. */
async function waitingAddOnJob(system: System, jobId: string) {
  const job = await system.queue('seat-changes').getJob(jobId);
  return job && [job.data.startsAt, await job.getState()];
}

/**
 * What concurrent seat events of one second must leave on `order` (its chain as `chain`): they
 * are applied in the order intake accepted them, so one that reaches the chain after a later
 * accepted one is stale. From the jobs' own data and the chain's history: the largest total
 * applied (what was bought up to), and the total of the last accepted event (the next count).
 */
async function concurrentSeatOutcome(system: System, order: string, chain: ChainView) {
  const jobs = await system.queue('seat-changes').getJobs(['completed']);
  const events = new Map(
    jobs
      .filter((job) => job.data.data?.order === order)
      .map((job) => [
        job.data.webhookId as string,
        { licenses: job.data.data.licenses as number, sequence: job.data.sequence as number },
      ]),
  );
  const applied = chain.history
    .filter(
      (h) => h.event.startsWith('seats.') && !['seats.buying', 'seats.stale'].includes(h.event),
    )
    .map((h) => events.get(h.cause.webhookId ?? '')?.licenses ?? Number.NaN);
  const last = [...events.values()].reduce((a, b) => (b.sequence > a.sequence ? b : a));
  return { largestApplied: Math.max(...applied), lastAccepted: last.licenses, events: events.size };
}

/**
 * Renews `order` (or, `firstAddOn`, its first add-on) to term `count` at its renewal time, 7 days
 * before `expiresAt`; resolves with the main chain's view once it is recorded.
 */
async function renewAt(
  system: System,
  clock: ManualClock,
  order: string,
  {
    count,
    expiresAt,
    firstAddOn = false,
  }: { count: number; expiresAt: number; firstAddOn?: boolean },
) {
  clock.set(expiresAt - 7 * DAY);
  const renewing = firstAddOn ? `${order}.a1` : order;
  await system.promote('renewals', renewalJobId(chainIdOf(renewing), count));
  return system.waitForChain(order, (c) =>
    firstAddOn ? c.addOns[0]?.term.count === count : c.term.count === count,
  );
}

/**
 * Raises `order` to `up`, which buys its first add-on now, then lowers it to `down`, which
 * leaves that add-on a share of 0. Resolves with when the add-on's term ends.
 */
async function firstAddOnGivenUp(
  system: System,
  clock: ManualClock,
  order: string,
  { up, down }: { up: number; down: number },
) {
  await seats(system, order, up);
  const bought = await system.waitForChain(order, (c) => c.addOns.length === 1);
  clock.advance(60);
  await seats(system, order, down);
  await system.waitForChain(order, (c) => c.addOns[0]?.nextLicenses === 0);
  return bought.addOns[0]?.term.expiresAt ?? 0;
}

/** The first add-on of `order`, left with a share of 0, stops when its renewal comes due. */
async function stopFirstAddOn(system: System, clock: ManualClock, order: string, addOnEnd: number) {
  clock.set(addOnEnd - 7 * DAY);
  await system.promote('renewals', renewalJobId(chainIdOf(`${order}.a1`), 2));
  return system.waitForChain(order, (c) => c.addOns[0]?.nextRenewalAt === null);
}

/**
 * `order` of 5 placed 20 days ago with an add-on of 3 bought now, and its term 2 ordered ahead
 * (the clock left at that renewal): the add-on renews inside term 2, some days before it ends.
 */
async function addOnRenewingInNextTerm(system: System, clock: ManualClock, order: string) {
  const placed = await place(system, order, 5, 20);
  await seats(system, order, 8);
  const bought = await system.waitForChain(order, (c) => c.addOns.length === 1);
  const a1End = bought.addOns[0]?.term.expiresAt ?? 0;
  const renewed = await renewAt(system, clock, order, {
    count: 2,
    expiresAt: placed.term.expiresAt,
  });
  const termEnd = renewed.term.expiresAt;
  expect(a1End).toBeLessThan(termEnd - 3 * DAY);
  return { a1End, termEnd };
}

/**
 * `order` of 5 with two add-ons, of 3 (bought 3 days in) and of 2 (6 days in), both given up
 * (the total back to 5) and stopped at their renewals after the main chain renewed: they end 3
 * apart inside its next term. Leaves the clock where that term starts; resolves with their ends.
 */
async function twoAddOnsStopped(system: System, clock: ManualClock, order: string) {
  const placed = await place(system, order, 5, 0);
  clock.advance(3 * DAY);
  await seats(system, order, 8);
  await system.waitForChain(order, (c) => c.addOns.length === 1);
  clock.advance(3 * DAY);
  await seats(system, order, 10);
  const both = await system.waitForChain(order, (c) => c.addOns.length === 2);
  clock.advance(60);
  await seats(system, order, 5);
  await system.waitForChain(order, (c) => c.addOns.every((a) => a.nextLicenses === 0));
  await renewAt(system, clock, order, { count: 2, expiresAt: placed.term.expiresAt });
  const ends = both.addOns.map((a) => a.term.expiresAt);
  for (const [i, end] of ends.entries()) {
    clock.set(end - 7 * DAY);
    await system.promote('renewals', renewalJobId(chainIdOf(`${order}.a${i + 1}`), 2));
    await system.waitForChain(order, (c) => c.addOns[i]?.nextRenewalAt === null);
  }
  clock.set(placed.term.expiresAt);
  const [first = 0, second = 0] = ends;
  expect(first).toBeGreaterThan(placed.term.expiresAt);
  expect(second).toBeGreaterThan(first);
  return { first, second };
}

/**
 * A chain renewed early (5 in force, 8 ordered) whose seat job, for 9 from now, bought its first
 * partial (the next term's 1) and died before the rest of the term in force (3). `chain`
 * changes the record besides (a product the provider refuses, say).
 */
async function leftBetweenPartials(
  system: System,
  clock: ManualClock,
  order: string,
  chain: Partial<Chain> = {},
) {
  const { placed, renewed } = await renewedEarly(system, clock, order, { licenses: 5, next: 8 });
  const t1 = clock.now();
  const first = {
    orderId: `${order}.p1`,
    licenses: 1,
    startsAt: t1,
    expiresAt: renewed.term.expiresAt,
  };
  await system.started.provisioning.createOrder({
    customer: renewed.customer,
    id: first.orderId,
    product: renewed.product,
    licenses: first.licenses,
    startsAt: first.startsAt,
    expiresAt: first.expiresAt,
  });
  await leftByDeadJob(system, order, 'crashed-seat-job', () => ({
    partials: [first],
    partialCount: 1,
    nextLicenses: 9,
    lastSeatEventAt: t1,
    unfinishedSeatEvent: {
      webhookId: `lost-seat-${order.toLowerCase().replace('-', '')}`,
      occurredAt: t1,
      total: 9,
      neededAt: t1,
      style: 'coterm',
    },
    ...chain,
  }));
  return { placed, renewed, t1 };
}

describe('marketplace, co-terminated partial orders (the default)', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({ clock });

  it('waits for the next attempt of a renewal left half done, not every 2 seconds, nor for a failed one', async () => {
    const placed = await place(system, 'W-1', 5);
    const renewal = renewalJobId(chainIdOf('W-1'), 2);
    const orderId = renewalOrderId('W-1', 2);
    // A renewal job whose provider went away after it wrote its intent: it retries in 30 s.
    await leftByDeadJob(system, 'W-1', 'renewal-waiting-to-retry', () => ({
      intent: {
        kind: 'renewal',
        method: 'createOrder',
        orderId,
        params: { customer: placed.customer, id: orderId, licenses: 5 },
        jobId: renewal,
      },
    }));
    const renewals = system.queue('renewals');
    await (await renewals.getJob(renewal))?.changeDelay(30_000);
    const ownerFiresAt = (await delayedFireTime(renewals, renewal)) as number;

    await seats(system, 'W-1', 7, {}, 'wait-for-owner');
    const seatQueue = system.queue('seat-changes');
    const seatJob = webhookJobId('wait-for-owner');
    // A second after the renewal's attempt, when its order is recorded.
    await expect
      .poll(() => delayedFireTime(seatQueue, seatJob), { timeout: 10_000 })
      .toBe(ownerFiresAt + 1000);

    /** Runs the seat job now, and answers how long (ms) it then waits, once it has looked. */
    const waitAfterRunning = async (atLeastMs: number) => {
      const from = Date.now();
      await system.promote('seat-changes', seatJob);
      const waits = async () => ((await delayedFireTime(seatQueue, seatJob)) ?? 0) - from;
      await expect.poll(waits, { timeout: 10_000 }).toBeGreaterThanOrEqual(atLeastMs);
      return waits();
    };
    // A renewal due much later may still run sooner (retried by a person): a minute at most.
    await (await renewals.getJob(renewal))?.changeDelay(10 * 60_000);
    expect(await waitAfterRunning(60_000)).toBeLessThan(70_000);

    // A renewal that failed for good runs again only when a person retries it: a minute too.
    const redis = system.started.runtime.redis;
    await redis.zrem(renewals.keys.delayed as string, renewal);
    await redis.zadd(renewals.keys.failed as string, Date.now(), renewal);
    expect(await renewals.getJobState(renewal)).toBe('failed');
    expect(await waitAfterRunning(60_000)).toBeLessThan(70_000);

    // With the renewal's job gone (reconcile gives it back), it looks again in 2 seconds.
    await (await renewals.getJob(renewal))?.remove();
    expect(await waitAfterRunning(2000)).toBeLessThan(10_000);
    expect((await system.chain('W-1')).nextLicenses).toBe(5);
  });

  it('applies another total sent under a webhook id forgotten since', async () => {
    await place(system, 'S-42', 10);
    const id = 'seats-reused-S-42';
    await seats(system, 'S-42', 6, {}, id);
    await system.waitForChain('S-42', (c) => c.nextLicenses === 6);
    // WEBHOOK_DEDUP_DAYS later the intake forgot the id; the producer reuses it for a new total.
    await system.started.runtime.redis.del(webhookDedupKey(id));
    await seats(system, 'S-42', 8, {}, id);
    const chain = await system.waitForChain('S-42', (c) => c.nextLicenses === 8);
    expect(chain.history.at(-1)?.cause).toMatchObject({ webhookId: id });
  });

  it('orders two seat events of the same second as intake accepted them, whichever runs first', async () => {
    await place(system, 'S-40', 10);
    const at = clock.now();
    const seatJob = (licenses: number, sequence: number) =>
      ({
        id: `seats-S-40-${sequence}`,
        name: 'seats.changed S-40',
        data: {
          webhookId: `wh-seats-s-40-${sequence}`,
          type: 'seats.changed',
          data: { order: 'S-40', licenses },
          occurredAt: at,
          receivedAt: at,
          sequence,
        },
      }) as unknown as Job;
    const process = makeSeatProcessor(workerDepsOf(system));
    // 11 was accepted first, but 12 reached the chain first (11's job waited on the lock).
    expect(await process(seatJob(12, 2))).toBe('partial: S-40.p1');
    expect(await process(seatJob(11, 1))).toBe('stale');
    const chain = await system.chain('S-40');
    expect(chain).toMatchObject({ nextLicenses: 12 });
    expect(chain.history.at(-1)).toMatchObject({
      event: 'seats.stale',
      detail: `event of ${formatInstant(at)} was accepted before the last applied seat event of the same second: ignored`,
    });
    // A later one of the same second still applies.
    expect(await process(seatJob(13, 3))).toBe('partial: S-40.p2');
  });

  it('buys the added licenses from the date needed to the end of the term, and renews with the total', async () => {
    const placed = await place(system, 'S-1', 5);
    const neededAt = clock.now() + 2 * DAY;
    await seats(system, 'S-1', 8, { effectiveAt: neededAt });
    const chain = await system.waitForChain('S-1', (c) => c.partials.length === 1);
    expect(chain.partials).toEqual([
      { orderId: 'S-1.p1', licenses: 3, startsAt: neededAt, expiresAt: placed.term.expiresAt },
    ]);
    expect(chain).toMatchObject({ licenses: 5, nextLicenses: 8 });
    const partial = await system.providerOrder('S-1.p1');
    expect(partial).toMatchObject({
      licenses: 3,
      duration: null,
      startsAt: neededAt,
      expiresAt: placed.term.expiresAt,
    });

    // The renewal carries the combined count.
    const renewed = await renewAt(system, clock, 'S-1', {
      count: 2,
      expiresAt: placed.term.expiresAt,
    });
    expect(renewed.licenses).toBe(8);
    expect((await system.providerOrder('S-1.r2'))?.licenses).toBe(8);
    // The partial runs to the end of term 1 (renewed ahead); once it has ended it is not shown.
    expect(renewed.partials.map((p) => p.orderId)).toEqual(['S-1.p1']);
    clock.set(placed.term.expiresAt);
    expect((await system.chain('S-1')).partials).toEqual([]);
  });

  it('buys nothing for a decrease, and then reuses the paid licenses before buying more', async () => {
    await place(system, 'S-2', 10);
    await seats(system, 'S-2', 6);
    const decreased = await system.waitForChain('S-2', (c) => c.nextLicenses === 6);
    expect(decreased.partials).toEqual([]);
    expect(lastEvent(decreased)).toBe('seats.changed');

    clock.advance(60);
    await seats(system, 'S-2', 12);
    const increased = await system.waitForChain('S-2', (c) => c.nextLicenses === 12);
    expect(increased.partials.map((p) => p.licenses)).toEqual([2]);
  });

  it('treats a date needed in the past as now, and one after the term as the next renewal only', async () => {
    const placed = await place(system, 'S-3', 4);
    await seats(system, 'S-3', 6, { effectiveAt: clock.now() - 5 * DAY });
    const now = await system.waitForChain('S-3', (c) => c.partials.length === 1);
    expect(now.partials[0]?.startsAt).toBe(clock.now());

    clock.advance(60);
    await seats(system, 'S-3', 9, { effectiveAt: placed.term.expiresAt + DAY });
    const later = await system.waitForChain('S-3', (c) => c.nextLicenses === 9);
    expect(later.partials).toHaveLength(1);
  });

  it('carries a decrease needed after the next term starts by the next renewal (DESIGN §4)', async () => {
    const placed = await place(system, 'S-41', 10);
    const from = placed.term.expiresAt + 10 * DAY;
    await seats(system, 'S-41', 6, { effectiveAt: from });
    const decreased = await system.waitForChain('S-41', (c) => c.nextLicenses === 6);
    expect(decreased.laterLicenses).toEqual([]);
    const renewed = await renewAt(system, clock, 'S-41', {
      count: 2,
      expiresAt: placed.term.expiresAt,
    });
    expect(renewed.licenses).toBe(6);
  });

  it('buys nothing for the days before a first term ordered to start later', async () => {
    const placed = await place(system, 'S-10', 5, -19);
    expect(placed.term.startsAt).toBe(clock.now() + 19 * DAY);
    await seats(system, 'S-10', 8);
    const chain = await system.waitForChain('S-10', (c) => c.partials.length === 1);
    expect(chain.partials).toEqual([
      {
        orderId: 'S-10.p1',
        licenses: 3,
        startsAt: placed.term.startsAt,
        expiresAt: placed.term.expiresAt,
      },
    ]);
  });

  it('ignores an event older than the last applied one, and a repeat of the same total', async () => {
    await place(system, 'S-4', 5);
    const t = clock.now();
    await system.send('seats.changed', { order: 'S-4', licenses: 9, occurredAt: t });
    await system.waitForChain('S-4', (c) => c.nextLicenses === 9);
    await system.send('seats.changed', { order: 'S-4', licenses: 20, occurredAt: t - 60 });
    const stale = await system.waitForChain('S-4', (c) => lastEvent(c) === 'seats.stale');
    expect(stale.nextLicenses).toBe(9);
    expect(stale.partials.map((p) => p.licenses)).toEqual([4]);

    await system.send('seats.changed', { order: 'S-4', licenses: 9, occurredAt: t });
    const repeat = await system.waitForChain('S-4', (c) => lastEvent(c) === 'seats.changed');
    expect(repeat.partials.map((p) => p.licenses)).toEqual([4]);
  });

  it('answers a repeated webhook id 202 and applies it once', async () => {
    await place(system, 'S-5', 2);
    const data = { order: 'S-5', licenses: 3 };
    await system.send('seats.changed', data, { id: 'seat-repeat' });
    await system.send('seats.changed', data, { id: 'seat-repeat' });
    const chain = await system.waitForChain('S-5', (c) => c.partials.length === 1);
    expect(chain.history.filter((h) => h.event === 'seats.partial_ordered')).toHaveLength(1);
  });

  it('never buys a license twice or loses one under concurrent events on one chain', async () => {
    await place(system, 'S-6', 5);
    const totals = [7, 12, 6, 15, 9, 11, 8, 14, 10, 13];
    await Promise.all(totals.map((licenses) => seats(system, 'S-6', licenses)));
    // The ten jobs take the chain one at a time, each waiting 0.25..1 s whenever it finds it
    // locked: on a loaded machine that can take longer than the default wait.
    const chain = await system.waitForChain(
      'S-6',
      (c) =>
        c.history.filter((h) => h.event.startsWith('seats.') && h.event !== 'seats.buying')
          .length === totals.length,
      45_000,
    );
    // Bought up to the largest total applied, once; the next count is the last accepted one's.
    const outcome = await concurrentSeatOutcome(system, 'S-6', chain);
    expect(outcome.events).toBe(totals.length);
    const bought = chain.partials.reduce((sum, p) => sum + p.licenses, 0);
    expect(bought).toBe(outcome.largestApplied - 5);
    expect(chain.nextLicenses).toBe(outcome.lastAccepted);
    const atProvider = await Promise.all(
      chain.partials.map((p) => system.providerOrder(p.orderId)),
    );
    expect(atProvider.reduce((sum, o) => sum + (o?.licenses ?? 0), 0)).toBe(bought);
  }, 60_000);

  it('finishes an event a job left between its steps as it began, with add-ons', async () => {
    // A seat job of SEAT_INCREASE=addon (before a restart with partials) died between steps.
    const placed = await place(system, 'S-9', 5);
    const neededAt = clock.now();
    await leftByDeadJob(system, 'S-9', 'crashed-addon-job', () => ({
      lastSeatEventAt: neededAt,
      unfinishedSeatEvent: {
        webhookId: 'lost-seat-s9',
        occurredAt: neededAt,
        total: 8,
        neededAt,
        style: 'addon',
      },
    }));
    clock.advance(60);
    await seats(system, 'S-9', 9);
    const chain = await system.waitForChain(
      'S-9',
      (c) => c.nextLicenses + c.addOns.reduce((n, a) => n + a.nextLicenses, 0) === 9,
    );
    expect(chain.addOns).toMatchObject([{ order: 'S-9.a1', licenses: 3 }]);
    expect(chain.partials).toMatchObject([{ licenses: 1, expiresAt: placed.term.expiresAt }]);
  });

  it('ends an event a job left between its steps on a chain that expired, not to renew', async () => {
    // Auto-renew off, its term over: the rest of the event (9) is not bought, nor is a newer one.
    const placed = await place(system, 'S-END', 5, 10, { autoRenew: false });
    const neededAt = clock.now();
    await leftByDeadJob(system, 'S-END', 'crashed-seat-job-end', () => ({
      status: 'expired',
      lastSeatEventAt: neededAt,
      unfinishedSeatEvent: {
        webhookId: 'lost-seat-s-end',
        occurredAt: neededAt,
        total: 9,
        neededAt,
        style: 'coterm',
      },
    }));
    clock.advance(60);
    await seats(system, 'S-END', 10);
    const chain = await system.waitForChain('S-END', (c) =>
      c.history.some((h) => h.detail.startsWith('10 licenses')),
    );
    expect(chain.history.slice(-2)).toMatchObject([
      { event: 'seats.ignored', detail: '9 licenses: the rest is not bought for an expired chain' },
      { event: 'seats.ignored', detail: '10 licenses asked for an expired chain: nothing to do' },
    ]);
    expect(chain).toMatchObject({ partials: [], addOns: [], nextLicenses: placed.nextLicenses });
  });

  it('retries an event for an order whose order.placed has not been processed yet', async () => {
    await seats(system, 'LATE-1', 7);
    const job = await system
      .queue('seat-changes')
      .getJobs(['delayed', 'waiting', 'active', 'failed']);
    expect(job.length).toBeGreaterThan(0);
    await place(system, 'LATE-1', 5);
    const chain = await system.waitForChain('LATE-1', (c) => c.nextLicenses === 7, 20_000);
    expect(chain.partials.map((p) => p.licenses)).toEqual([2]);
  });
});

describe('marketplace, after an early renewal', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({ clock });

  it('counts what the next term already carries, and co-terminates with that term', async () => {
    const placed = await place(system, 'R-1', 10);
    await seats(system, 'R-1', 12);
    await system.waitForChain('R-1', (c) => c.partials.length === 1);
    const renewed = await renewAt(system, clock, 'R-1', {
      count: 2,
      expiresAt: placed.term.expiresAt,
    });
    expect(renewed.licenses).toBe(12);

    // Still inside term 1: the 3 more licenses run to the end of term 2, already ordered.
    clock.advance(DAY);
    await seats(system, 'R-1', 15);
    const chain = await system.waitForChain('R-1', (c) => c.partials.length === 2);
    expect(chain.partials[1]).toMatchObject({
      orderId: 'R-1.p2',
      licenses: 3,
      expiresAt: renewed.term.expiresAt,
    });
    expect(chain.nextLicenses).toBe(15);
    expect((await system.providerOrder('R-1.p2'))?.licenses).toBe(3);
  });

  it('buys for the rest of the term in force when only the next term has the total', async () => {
    // 10 in force until term 1 ends; term 2 was ordered with 14 (asked from then on).
    const { placed } = await renewedEarly(system, clock, 'R-3', { licenses: 10, next: 14 });
    await seats(system, 'R-3', 14);
    const chain = await system.waitForChain('R-3', (c) => c.partials.length === 1);
    expect(chain.partials[0]).toMatchObject({
      orderId: 'R-3.p1',
      licenses: 4,
      startsAt: clock.now(),
      expiresAt: placed.term.expiresAt,
    });
    expect(await system.providerOrder('R-3.p1')).toMatchObject({
      licenses: 4,
      expiresAt: placed.term.expiresAt,
    });
    expect(chain.nextLicenses).toBe(14);
  });

  it('buys from the start of the next term when only it is short (a decrease renewed)', async () => {
    // 10 in force until term 1 ends; term 2 was ordered with 6 after a decrease.
    const { renewed } = await renewedEarly(system, clock, 'R-4', { licenses: 10, next: 6 });
    await seats(system, 'R-4', 8);
    const chain = await system.waitForChain('R-4', (c) => c.partials.length === 1);
    expect(chain.partials[0]).toMatchObject({
      orderId: 'R-4.p1',
      licenses: 2,
      startsAt: renewed.term.startsAt,
      expiresAt: renewed.term.expiresAt,
    });
    expect(chain.nextLicenses).toBe(8);
  });

  it('buys the next term exactly and the rest of the term in force with a second partial', async () => {
    // 5 in force, 8 ordered, 9 needed now: the next term lacks 1, the term in force 4.
    const { placed, renewed } = await renewedEarly(system, clock, 'R-5', { licenses: 5, next: 8 });
    await seats(system, 'R-5', 9);
    const chain = await system.waitForChain('R-5', (c) => c.partials.length === 2);
    expect(chain.partials).toEqual([
      { orderId: 'R-5.p1', licenses: 1, startsAt: clock.now(), expiresAt: renewed.term.expiresAt },
      { orderId: 'R-5.p2', licenses: 3, startsAt: clock.now(), expiresAt: placed.term.expiresAt },
    ]);
    expect(chain.nextLicenses).toBe(9);
    const ordered = chain.history.filter((h) => h.event === 'seats.partial_ordered');
    expect(ordered[0]?.detail).toContain('the rest of the event is bought next');
    expect(ordered.map((h) => h.cause.webhookId)).toEqual([
      ordered[0]?.cause.webhookId,
      ordered[0]?.cause.webhookId,
    ]);
  });

  it('makes an older event stale once the first of two partials is bought', async () => {
    const { renewed } = await renewedEarly(system, clock, 'R-6', { licenses: 5, next: 8 });
    const t1 = clock.now();
    // A job for 9 licenses died after writing its first partial's intent (the rest to follow).
    await leftByDeadJob(system, 'R-6', 'crashed-seat-job', (chain) => ({
      partialCount: 1,
      intent: {
        kind: 'partial',
        method: 'createOrder',
        orderId: 'R-6.p1',
        params: {
          customer: chain.customer,
          id: 'R-6.p1',
          product: chain.product,
          licenses: 1,
          startsAt: t1,
          expiresAt: renewed.term.expiresAt,
        },
        jobId: 'lost',
        event: { webhookId: 'lost-seat', occurredAt: t1, total: 9, rest: true },
      },
    }));
    // An older event for more arrives: it finishes that purchase, the first partial and the
    // rest of the term in force (5 + 1 paid, 9 needed), then finds itself stale.
    await system.send('seats.changed', { order: 'R-6', licenses: 12, occurredAt: t1 - 60 });
    const chain = await system.waitForChain('R-6', (c) => lastEvent(c) === 'seats.stale');
    expect(chain.partials.map((p) => [p.orderId, p.licenses])).toEqual([
      ['R-6.p1', 1],
      ['R-6.p2', 3],
    ]);
    expect(await system.providerOrder('R-6.p3')).toBeNull();
    expect(chain.nextLicenses).toBe(9);
  });

  it('buys the rest of an event a job left between its two partials before a newer event', async () => {
    const { placed, renewed, t1 } = await leftBetweenPartials(system, clock, 'R-7');
    // A newer event asks for 10 from the next term on: the term in force still gets its 9.
    clock.advance(60);
    await seats(system, 'R-7', 10, { effectiveAt: renewed.term.startsAt });
    const chain = await system.waitForChain('R-7', (c) => c.partials.length === 3);
    expect(chain.partials.map((p) => [p.orderId, p.licenses, p.startsAt, p.expiresAt])).toEqual([
      ['R-7.p1', 1, t1, renewed.term.expiresAt],
      ['R-7.p2', 3, clock.now(), placed.term.expiresAt],
      ['R-7.p3', 1, renewed.term.startsAt, renewed.term.expiresAt],
    ]);
    expect(chain.nextLicenses).toBe(10);
    // The first partial was recorded by the dead job's stand-in, without a history entry.
    const bought = chain.history.filter((h) => h.event === 'seats.partial_ordered');
    expect(bought.map((h) => [h.cause.orderId, h.cause.webhookId === 'lost-seat-r7'])).toEqual([
      ['R-7.p2', true],
      ['R-7.p3', false],
    ]);
  });

  it('buys nothing more for an event left between its two partials once the chain is cancelled', async () => {
    await leftBetweenPartials(system, clock, 'R-8');
    await system.send('order.cancelled', { order: 'R-8' });
    await system.waitForChain('R-8', (c) => c.status === 'cancelled');
    await seats(system, 'R-8', 9);
    await system.waitForChain('R-8', (c) => lastEvent(c) === 'seats.ignored');
    expect(await system.providerOrder('R-8.p2')).toBeNull();
  });

  it('applies an event whose rest the provider refused, so its own job does not buy again', async () => {
    const { t1 } = await leftBetweenPartials(system, clock, 'R-9', { product: 'no-such-product' });
    // The event's own job, retried: the rest is refused, and the event counts as applied.
    await system.send(
      'seats.changed',
      { order: 'R-9', licenses: 9, occurredAt: t1 },
      { id: 'lost-seat-r9' },
    );
    const chain = await system.waitForChain('R-9', (c) => lastEvent(c) === 'seats.refused');
    // The history is written before the job completes: read the job again until it has.
    const finished = async () =>
      (await system.queue('seat-changes').getJob(webhookJobId('lost-seat-r9')))?.returnvalue;
    await expect.poll(finished, { timeout: 5_000 }).toBe('already applied: lost-seat-r9');
    expect(chain.history.filter((h) => h.event === 'seats.refused')).toHaveLength(1);
    expect(chain.partials.map((p) => p.orderId)).toEqual(['R-9.p1']);
  });

  it('fails an event whose purchase another job found refused, so its own job buys nothing', async () => {
    const placed = await place(system, 'R-12', 5, 25, { autoRenew: false });
    const t1 = clock.now();
    // The event's own job decided a partial, then died before sending it.
    await leftByDeadJob(system, 'R-12', 'crashed-seat-job', () => ({
      partialCount: 1,
      intent: {
        kind: 'partial',
        method: 'createOrder',
        orderId: 'R-12.p1',
        params: {
          customer: placed.customer,
          id: 'R-12.p1',
          product: 'no-such-product',
          licenses: 3,
          startsAt: t1,
          expiresAt: placed.term.expiresAt,
        },
        jobId: webhookJobId('lost-seat-r12'),
        event: { webhookId: 'lost-seat-r12', occurredAt: t1, total: 8 },
      },
    }));
    // The renewal finds it first: the provider refuses it, and the renewal goes on.
    await system.ops('PUT', '/ops/chains/R-12/auto-renew', { enabled: true });
    await system.waitForChain('R-12', (c) => c.term.count === 2);

    // The event's own job, retried: it fails with that refusal instead of buying again.
    clock.advance(60);
    await seats(system, 'R-12', 8, { occurredAt: t1 }, 'lost-seat-r12');
    const seatJob = () => system.queue('seat-changes').getJob(webhookJobId('lost-seat-r12'));
    await expect.poll(async () => (await seatJob())?.getState()).toBe('failed');
    expect((await seatJob())?.failedReason).toContain('the provider refused R-12.p1');
    expect(await system.providerOrder('R-12.p2')).toBeNull();
    const chain = await system.chain('R-12');
    expect(chain.partials).toEqual([]);
    expect(chain.history.filter((h) => h.event === 'seats.refused')).toHaveLength(1);

    // Retried by a person (the cause fixed), it decides afresh, as any refused seat job does.
    await (await seatJob())?.retry();
    const bought = await system.waitForChain('R-12', (c) => c.partials.length === 1);
    expect(bought.partials[0]).toMatchObject({ orderId: 'R-12.p2', licenses: 3 });
  });

  it('finishes a purchase a crashed seat job left half done before renewing', async () => {
    const placed = await place(system, 'R-2', 4, 25, { autoRenew: false });
    const params = {
      customer: placed.customer,
      id: 'R-2.p1',
      product: placed.product,
      licenses: 2,
      startsAt: clock.now(),
      expiresAt: placed.term.expiresAt,
    };
    await leftByDeadJob(system, 'R-2', 'crashed-seat-job', () => ({
      partialCount: 1,
      intent: {
        kind: 'partial',
        method: 'createOrder',
        orderId: 'R-2.p1',
        params,
        jobId: 'lost',
        event: { webhookId: 'lost-seat', occurredAt: clock.now(), total: 6 },
      },
    }));
    // The order was made at the provider, then the job died before recording it.
    await system.started.provisioning.createOrder(params);

    await system.ops('PUT', '/ops/chains/R-2/auto-renew', { enabled: true });
    const chain = await system.waitForChain('R-2', (c) => c.term.count === 2);
    expect(chain.partials.map((p) => p.orderId)).toEqual(['R-2.p1']);
    expect(chain.licenses).toBe(6);
    expect(chain.history.map((h) => h.event)).toContain('seats.partial_ordered');
  });
});

describe('marketplace with SEAT_INCREASE=addon', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({ clock, env: { SEAT_INCREASE: 'addon' } });

  it('buys an add-on with its own term and renewals, and a decrease shrinks it first', async () => {
    await place(system, 'A-1', 5);
    const neededAt = clock.now() + DAY;
    await seats(system, 'A-1', 8, { effectiveAt: neededAt });
    const chain = await system.waitForChain('A-1', (c) => c.addOns.length === 1);
    const addOn = chain.addOns[0];
    expect(addOn).toMatchObject({
      order: 'A-1.a1',
      licenses: 3,
      autoRenew: true,
      term: {
        orderId: 'A-1.a1',
        count: 1,
        startsAt: neededAt,
        expiresAt: addTerms(neededAt, 'monthly', 1),
      },
    });
    expect(chain.nextLicenses).toBe(5);
    expect(addOn?.nextRenewalAt).toBe((addOn?.term.expiresAt ?? 0) - 7 * DAY);
    const job = await system.queue('renewals').getJob(renewalJobId(chainIdOf('A-1.a1'), 2));
    expect(await job?.getState()).toBe('delayed');
    const shown = await run(process.execPath, [BIN, 'chains', 'show', 'A-1'], {
      env: { ...process.env, REDIS_URL: system.redisUrl, DATA_DIR: system.settings.DATA_DIR },
    });
    expect(shown.stdout).toMatch(/^add-on {4}A-1\.a1: 3 licenses \(3 next\), term #1/m);
    expect(shown.stdout).toMatch(
      /^licenses {2}5 in A-1 \(add-ons below\), 5 at the next renewal$/m,
    );

    clock.advance(60);
    await seats(system, 'A-1', 6);
    const shrunk = await system.waitForChain('A-1', (c) => c.addOns[0]?.nextLicenses === 1);
    expect(shrunk.nextLicenses).toBe(5);

    // An add-on renews only while its main chain does.
    const off = await system.ops('PUT', '/ops/chains/A-1/auto-renew', { enabled: false });
    expect((off.body as ChainView).addOns[0]).toMatchObject({
      autoRenew: false,
      nextRenewalAt: null,
    });
    const addOnJob = renewalJobId(chainIdOf('A-1.a1'), 2);
    expect(await system.queue('renewals').getJob(addOnJob)).toBeUndefined();
    const upcoming = await system.ops('GET', '/ops/renewals?within=60');
    expect((upcoming.body as { renewals: unknown[] }).renewals).toEqual([]);
    await system.ops('PUT', '/ops/chains/A-1/auto-renew', { enabled: true });
    expect(await jobState(system.queue('renewals'), addOnJob)).toBe('delayed');

    clock.advance(60);
    await seats(system, 'A-1', 4);
    const stopped = await system.waitForChain('A-1', (c) => c.addOns[0]?.nextLicenses === 0);
    expect(stopped.nextLicenses).toBe(4);

    // At its renewal the emptied add-on stops instead of ordering zero licenses.
    const ended = await stopFirstAddOn(system, clock, 'A-1', addOn?.term.expiresAt ?? 0);
    expect(ended.addOns[0]?.history.at(-1)?.event).toBe('addon.stopped');
    // Its job run again (its worker died before reporting it done) writes nothing twice.
    await runAgain(system.queue('renewals'), addOnJob);
    const again = await system.chain('A-1.a1');
    expect(again.history.filter((h) => h.event === 'addon.stopped')).toHaveLength(1);
  });

  it('has the main renewal carry an increase needed after the term ends, before the add-on renews', async () => {
    const placed = await place(system, 'A-34', 5, 20);
    await seats(system, 'A-34', 8);
    const [addOn] = (await system.waitForChain('A-34', (c) => c.addOns.length === 1)).addOns;
    expect(addOn?.term.expiresAt).toBeGreaterThan(placed.term.expiresAt + 10 * DAY);
    clock.advance(60);
    // 10 from 2 days after the main term ends: the date only sets the next counts, and the
    // main chain's renewal is the last by then. The add-on's, weeks after the date, would leave
    // the 2 missing until it.
    await seats(system, 'A-34', 10, { effectiveAt: placed.term.expiresAt + 2 * DAY });
    const set = await system.waitForChain('A-34', (c) => lastEvent(c) === 'seats.changed');
    expect(set).toMatchObject({ nextLicenses: 7, addOns: [{ nextLicenses: 3 }] });
    const renewed = await renewAt(system, clock, 'A-34', {
      count: 2,
      expiresAt: placed.term.expiresAt,
    });
    expect(renewed).toMatchObject({ licenses: 7, addOns: [{ licenses: 3 }] });
  });

  it('keeps an add-on renewing before a decrease is needed at its count; the main chain takes the decrease', async () => {
    const { a1End, termEnd } = await addOnRenewingInNextTerm(system, clock, 'A-31');
    // 6 from 3 days after the add-on renews: it still needs its 3 until then, and renews a whole
    // term, so the main chain, which renews after the date, carries the rest: 3.
    const from = a1End + 3 * DAY;
    await seats(system, 'A-31', 6, { effectiveAt: from });
    const decreased = await system.waitForChain('A-31', (c) => c.nextLicenses === 3);
    expect(decreased.addOns[0]).toMatchObject({ nextLicenses: 3, laterLicenses: [] });

    await renewAt(system, clock, 'A-31', { count: 2, expiresAt: a1End, firstAddOn: true });
    expect((await system.providerOrder('A-31.a1.r2'))?.licenses).toBe(3);
    const main = await renewAt(system, clock, 'A-31', { count: 3, expiresAt: termEnd });
    // From then on the family carries the 6 exactly: 3 + 3.
    expect(main.licenses).toBe(3);
  });

  it('keeps an add-on renewing mid-term at its count for a decrease needed from the term end', async () => {
    const { a1End, termEnd } = await addOnRenewingInNextTerm(system, clock, 'A-33');
    await seats(system, 'A-33', 5, { effectiveAt: termEnd });
    const decreased = await system.waitForChain('A-33', (c) => c.nextLicenses === 2);
    expect(decreased.addOns[0]).toMatchObject({ nextLicenses: 3, laterLicenses: [] });
    await renewAt(system, clock, 'A-33', { count: 2, expiresAt: a1End, firstAddOn: true });
    expect((await system.providerOrder('A-33.a1.r2'))?.licenses).toBe(3);
  });

  it('keeps the count of an add-on renewing before the date when it alone carries the total, then stops it', async () => {
    const { a1End, termEnd } = await addOnRenewingInNextTerm(system, clock, 'A-32');
    // 3 from after the add-on renews: its 3 are needed until then, though they are the whole
    // total; from then the main chain alone carries it.
    const from = a1End + 3 * DAY;
    await seats(system, 'A-32', 3, { effectiveAt: from });
    const decreased = await system.waitForChain('A-32', (c) => c.nextLicenses === 3);
    expect(decreased.addOns[0]).toMatchObject({
      nextLicenses: 3,
      laterLicenses: [{ from, licenses: 0 }],
    });
    expect(decreased.history.at(-1)?.detail).toContain(
      `renewals that start before ${formatInstant(from)} carry 3 (main) + 3 (add-ons); from then on, the next renewals carry 3 (main) + 0 (add-ons)`,
    );
    const shown = await run(process.execPath, [BIN, 'chains', 'show', 'A-32'], {
      env: { ...process.env, REDIS_URL: system.redisUrl, DATA_DIR: system.settings.DATA_DIR },
    });
    expect(shown.stdout).toContain(
      `A-32.a1: 3 licenses (3 next, 0 from ${formatInstant(from)}), term #1`,
    );

    const renewed = await renewAt(system, clock, 'A-32', {
      count: 2,
      expiresAt: a1End,
      firstAddOn: true,
    });
    expect((await system.providerOrder('A-32.a1.r2'))?.licenses).toBe(3);
    expect(renewed.addOns[0]).toMatchObject({ nextLicenses: 0, laterLicenses: [] });
    const main = await renewAt(system, clock, 'A-32', { count: 3, expiresAt: termEnd });
    expect(main.licenses).toBe(3);
    clock.set((renewed.addOns[0]?.term.expiresAt ?? 0) - 7 * DAY);
    await system.promote('renewals', renewalJobId(chainIdOf('A-32.a1'), 3));
    const stopped = await system.waitForChain('A-32', (c) => c.addOns[0]?.nextRenewalAt === null);
    expect(stopped.addOns[0]?.history.at(-1)?.event).toBe('addon.stopped');
  });

  it('replaces an add-on that stopped and ends before the main term does, from its end', async () => {
    // 5 + an add-on of 3; the total falls back to 5, so the add-on stops at its renewal.
    const placed = await place(system, 'A-10', 5);
    const addOnEnd = await firstAddOnGivenUp(system, clock, 'A-10', { up: 8, down: 5 });
    // The main chain renews (term 2 runs past the add-on's end), then the add-on stops.
    const renewed = await renewAt(system, clock, 'A-10', {
      count: 2,
      expiresAt: placed.term.expiresAt,
    });
    expect(renewed.term.expiresAt).toBeGreaterThan(addOnEnd);
    await stopFirstAddOn(system, clock, 'A-10', addOnEnd);

    // 8 again: the stopped add-on's 3 end with it, so a new add-on buys them from its end:
    // no day is paid twice, and none is missing.
    clock.advance(DAY);
    await seats(system, 'A-10', 8);
    const chain = await system.waitForChain('A-10', (c) => c.addOns.length === 2);
    expect(chain.addOns[1]).toMatchObject({
      order: 'A-10.a2',
      licenses: 3,
      term: { startsAt: addOnEnd },
    });
    expect(await system.providerOrder('A-10.a2')).toMatchObject({ startsAt: addOnEnd });
    expect(chain.nextLicenses).toBe(5);
    expect(chain.addOns.map((a) => a.nextLicenses)).toEqual([0, 3]);

    // 9 while the replacement waits: 8 are in force until then and after, so 1 more from now.
    clock.advance(60);
    await seats(system, 'A-10', 9);
    const more = await system.waitForChain('A-10', (c) => c.addOns.length === 3);
    expect(more.addOns[2]).toMatchObject({ licenses: 1, term: { startsAt: clock.now() } });
  });

  it('buys in steps when stopped add-ons end on different days: each replacement from its end', async () => {
    const ends = await twoAddOnsStopped(system, clock, 'A-14');
    // 10 again: 3 go on the first end and 2 more on the second; one order from the first end
    // would pay the second add-on's last days twice.
    await seats(system, 'A-14', 10);
    const chain = await system.waitForChain('A-14', (c) => c.addOns.length === 4);
    expect(chain.addOns.slice(2)).toMatchObject([
      { order: 'A-14.a3', licenses: 3, term: { startsAt: ends.first } },
      { order: 'A-14.a4', licenses: 2, term: { startsAt: ends.second } },
    ]);
    expect(await system.providerOrder('A-14.a3')).toMatchObject({ startsAt: ends.first });
    expect(await system.providerOrder('A-14.a4')).toMatchObject({ startsAt: ends.second });
    expect(chain.nextLicenses).toBe(5);
    expect(chain.addOns.map((a) => a.nextLicenses)).toEqual([0, 0, 3, 2]);
    const ordered = chain.history.filter((h) => h.event === 'seats.addon_ordered');
    expect(ordered.at(-2)?.detail).toContain('the rest of the event is bought next');
  });

  it("keeps an add-on's renewal job when the operator switches its main chain on during reconcile", async () => {
    await place(system, 'A-21', 5);
    await seats(system, 'A-21', 8, { effectiveAt: clock.now() + DAY });
    await system.waitForChain('A-21', (c) => c.addOns.length === 1);
    const addOnJob = renewalJobId(chainIdOf('A-21.a1'), 2);
    const renewals = system.queue('renewals');
    const off = await system.ops('PUT', '/ops/chains/A-21/auto-renew', { enabled: false });
    expect(off.status).toBe(200);
    expect(await renewals.getJob(addOnJob)).toBeUndefined();

    // The operator's switch lands after reconcile, at the add-on, first read its main chain
    // (off): before reconcile acts on the add-on's job. Where reconcile reads the main chain
    // again, or takes its lock to read it, the switch comes right after that. (Reconcile reads
    // the main chains of a page's add-ons together first, to pass over what needs nothing.)
    const deps = workerDepsOf(system);
    const { chains } = deps;
    const mainId = chainIdOf('A-21');
    let switched: Promise<{ status: number }> | undefined;
    const switchOn = () => {
      switched ??= system.ops('PUT', '/ops/chains/A-21/auto-renew', { enabled: true });
      return switched;
    };
    // The page is read with getManyReadable; getMany reads the main chain for its add-ons.
    const getMany = chains.getMany.bind(chains);
    let manyReads = 0;
    chains.getMany = async (ids) => {
      const found = await getMany(ids);
      if (ids.includes(mainId) && ++manyReads === 1) await switchOn();
      return found;
    };
    const get = chains.get.bind(chains);
    let reads = 0;
    chains.get = async (id) => {
      const chain = await get(id);
      if (id === mainId && ++reads === 2) await switchOn();
      return chain;
    };
    const lock = chains.lock.bind(chains);
    chains.lock = async (id, token) => {
      const held = await lock(id, token);
      // Waits for reconcile to let go of the main chain.
      if (id === mainId && held.kind === 'held') void switchOn();
      return held;
    };
    await reconcileRound(system, 'reconcile-a21', deps);

    expect((await switched)?.status).toBe(200);
    expect((await system.chain('A-21')).autoRenew).toBe(true);
    expect(await jobState(renewals, addOnJob)).toBe('delayed');
  });

  it('cancels an add-on renewal recorded while its main chain was being cancelled', async () => {
    await place(system, 'A-11', 5);
    await seats(system, 'A-11', 8);
    const bought = await system.waitForChain('A-11', (c) => c.addOns.length === 1);
    const addOn = bought.addOns[0] as ChainView['addOns'][number];
    await renewAt(system, clock, 'A-11', {
      count: 2,
      expiresAt: addOn.term.expiresAt,
      firstAddOn: true,
    });
    // What the race leaves: the cancel listed the family while the add-on's renewal was in
    // flight, then marked the add-on (its renewal recorded by then) cancelled, its order live.
    await leftByDeadJob(system, 'A-11.a1', 'cancel-marking-addon', () => ({
      status: 'cancelled',
      nextRenewalAt: null,
    }));
    await system.ops('POST', '/ops/chains/A-11/cancel');
    expect((await system.providerOrder('A-11.a1.r2'))?.status).toBe('active');

    // The renewal job's retry finds its term recorded in a cancelled family: it cancels it.
    const retry = renewalJobId(chainIdOf('A-11.a1'), 2);
    await (await system.queue('renewals').getJob(retry))?.remove();
    await system.queue('renewals').add(
      'renew A-11.a1 term 2 (retry)',
      {
        chainId: chainIdOf('A-11.a1'),
        order: 'A-11.a1',
        customer: bought.customer,
        count: 2,
        dueAt: clock.now(),
      },
      { jobId: retry },
    );
    await expect
      .poll(async () => (await system.providerOrder('A-11.a1.r2'))?.status, { timeout: 5_000 })
      .toBe('cancelled');
  });

  /**
   * A chain with an add-on whose renewal job sent its order, lost the answer and waits to retry
   * (an hour from now), its intent on the add-on. Answers the order's params and the job's id.
   */
  async function addOnRenewalInFlight(order: string) {
    await place(system, order, 5);
    await seats(system, order, 8);
    const bought = await system.waitForChain(order, (c) => c.addOns.length === 1);
    const addOn = bought.addOns[0] as ChainView['addOns'][number];
    clock.set(addOn.term.expiresAt - 7 * DAY);
    const retry = renewalJobId(chainIdOf(addOn.order), 2);
    await (await system.queue('renewals').getJob(retry))?.changeDelay(60 * 60_000);
    const params = {
      customer: bought.customer,
      id: `${addOn.order}.r2`,
      product: addOn.product,
      licenses: 3,
      duration: addOn.duration,
      startsAt: addOn.term.expiresAt,
      parent: addOn.order,
    };
    await leftByDeadJob(system, addOn.order, 'retrying-renewal-job', () => ({
      intent: { kind: 'renewal', method: 'createOrder', orderId: params.id, params, jobId: null },
    }));
    return { addOn, params, retry };
  }

  /**
   * A chain with an add-on whose renewal job sent its order (made at the provider when `made`),
   * lost the answer and waits to retry, its intent on the add-on; then the main chain is
   * cancelled. Answers the retry's job id.
   */
  async function addOnRenewalInFlightAtCancel(order: string, { made }: { made: boolean }) {
    const { params, retry } = await addOnRenewalInFlight(order);
    if (made) await system.started.provisioning.createOrder(params);
    await system.ops('POST', `/ops/chains/${order}/cancel`);
    // The job is kept (due at once): it alone knows the order may be made.
    expect(await system.queue('renewals').getJob(retry)).toBeDefined();
    return system.waitForChain(
      order,
      (c) => c.addOns[0]?.history.at(-1)?.event === 'renewal.dropped',
    );
  }

  it('cancels an add-on renewal made while its main chain was cancelled, and records none', async () => {
    const chain = await addOnRenewalInFlightAtCancel('A-12', { made: true });
    expect((await system.providerOrder('A-12.a1.r2'))?.status).toBe('cancelled');
    expect(chain.addOns[0]).toMatchObject({ status: 'cancelled', term: { count: 1 } });
  });

  it('does not send an add-on renewal in flight once its main chain is cancelled', async () => {
    const chain = await addOnRenewalInFlightAtCancel('A-13', { made: false });
    expect(await system.providerOrder('A-13.a1.r2')).toBeNull();
    expect(chain.addOns[0]?.history.at(-1)?.detail).toContain('not sent');
    // Its request may still be made (an answer lost to a timeout): a check looks again later.
    const check = await system.queue('orders').getJob(lateOrderCheckJobId('A-13.a1.r2'));
    expect(check?.data).toMatchObject({ chainId: chainIdOf('A-13.a1'), orderId: 'A-13.a1.r2' });
    expect(await check?.getState()).toBe('delayed');
    expect(chain.addOns[0]).toMatchObject({ status: 'cancelled', term: { count: 1 } });
  });

  it.each([
    ['an operator', 'A-61'],
    ['order.cancelled', 'A-62'],
  ])(
    'marks the add-ons that a cancel which died after its save left, when %s repeats it',
    async (by, order) => {
      await place(system, order, 5);
      await seats(system, order, 8);
      const bought = await system.waitForChain(order, (c) => c.addOns.length === 1);
      const addOnId = chainIdOf((bought.addOns[0] as ChainView['addOns'][number]).order);
      // The cancel saved its main chain and died before it marked the add-on.
      await leftByDeadJob(system, order, 'dead-cancel', () => ({
        status: 'cancelled',
        nextRenewalAt: null,
      }));
      const stored = () => new ChainStore(system.started.runtime.redis).get(addOnId);
      expect(await stored()).toMatchObject({ status: 'active' });

      if (by === 'an operator') {
        expect((await system.ops('POST', `/ops/chains/${order}/cancel`)).status).toBe(200);
      } else {
        await system.send('order.cancelled', { order });
      }
      await expect
        .poll(async () => (await stored())?.status, { timeout: 10_000 })
        .toBe('cancelled');
    },
  );

  it('records an add-on cancelled in the same save as its dropped renewal', async () => {
    const { addOn, retry } = await addOnRenewalInFlight('A-60');
    // The main chain's cancel could not mark the add-on: its renewal job held it then.
    await leftByDeadJob(system, 'A-60', 'cancel-job', () => ({
      status: 'cancelled',
      nextRenewalAt: null,
    }));

    // The renewal job drops its intent; its worker dies right after its first save.
    const chains = new ChainStore(system.started.runtime.redis);
    const save = chains.save.bind(chains);
    let saves = 0;
    chains.save = async (input) => {
      saves += 1;
      if (saves > 1) throw new Error('the worker died');
      return save(input);
    };
    const job = await system.queue('renewals').getJob(retry);
    if (!job) throw new Error('no renewal job');
    await makeRenewalProcessor(workerDepsOf(system, { chains }))(job).catch(() => undefined);

    const stored = await new ChainStore(system.started.runtime.redis).get(chainIdOf(addOn.order));
    expect(stored).toMatchObject({ status: 'cancelled', intent: null, nextRenewalAt: null });
  });

  it('after an early renewal, starts an add-on with the next term when only that term is short', async () => {
    // 10 in force until term 1 ends; term 2 was ordered with 6 after a decrease.
    const { renewed } = await renewedEarly(system, clock, 'A-8', { licenses: 10, next: 6 });
    await seats(system, 'A-8', 8);
    const chain = await system.waitForChain('A-8', (c) => c.addOns.length === 1);
    expect(chain.addOns[0]).toMatchObject({
      order: 'A-8.a1',
      licenses: 2,
      term: { startsAt: renewed.term.startsAt },
    });
  });

  it('after an early renewal, buys no add-on for the last days of a term the next one covers', async () => {
    // 10 in force until term 1 ends; term 2 was ordered with 14 (asked from then on).
    await renewedEarly(system, clock, 'A-9', { licenses: 10, next: 14 });
    await seats(system, 'A-9', 14);
    const chain = await system.waitForChain(
      'A-9',
      (c) => c.history.filter((h) => h.event === 'seats.changed').length === 2,
    );
    expect(chain.history.at(-1)?.detail).toContain('an add-on would run a whole term');
    expect(chain.addOns).toEqual([]);
    expect(await system.providerOrder('A-9.a1')).toBeNull();
  });

  it('keeps a stopped add-on stopped: later totals go to the main chain', async () => {
    await place(system, 'A-2', 5);
    await seats(system, 'A-2', 8);
    const bought = await system.waitForChain('A-2', (c) => c.addOns.length === 1);
    clock.advance(60);
    await seats(system, 'A-2', 5);
    await system.waitForChain('A-2', (c) => c.addOns[0]?.nextLicenses === 0);
    await stopFirstAddOn(system, clock, 'A-2', bought.addOns[0]?.term.expiresAt ?? 0);

    clock.advance(60);
    await seats(system, 'A-2', 8);
    const chain = await system.waitForChain('A-2', (c) => c.nextLicenses === 8);
    expect(chain.addOns.map((a) => a.nextLicenses)).toEqual([0]);
  });

  it('gives an add-on bought while auto-renew is off its renewals once it is switched on', async () => {
    await system.send('order.placed', orderPlaced({ order: 'A-3', licenses: 2, autoRenew: false }));
    await system.waitForChain('A-3', () => true);
    await seats(system, 'A-3', 4);
    await system.waitForChain('A-3', (c) => c.addOns.length === 1);
    const addOnJob = renewalJobId(chainIdOf('A-3.a1'), 2);
    expect(await system.queue('renewals').getJob(addOnJob)).toBeUndefined();
    await system.ops('PUT', '/ops/chains/A-3/auto-renew', { enabled: true });
    expect(await jobState(system.queue('renewals'), addOnJob)).toBe('delayed');
  });

  it('shows an add-on named by its own order as its main chain governs it', async () => {
    await place(system, 'A-30', 3);
    await seats(system, 'A-30', 5);
    await system.waitForChain('A-30', (c) => c.addOns.length === 1);
    await system.ops('PUT', '/ops/chains/A-30/auto-renew', { enabled: false });
    const main = await system.waitForChain('A-30', (c) => !c.autoRenew);
    const alone = await system.ops('GET', '/ops/chains/A-30.a1');
    expect(alone.status).toBe(200);
    // The same as in its main chain's view: it renews no more while the main chain is off.
    const { history: _own, ...shown } = alone.body as ChainView;
    const { history: _inMain, ...inMain } = main.addOns[0] as ChainView['addOns'][number];
    expect(shown).toMatchObject({ ...inMain, autoRenew: false, nextRenewalAt: null, addOns: [] });
  });

  it('refuses auto-renew and reactivation on an add-on, which its main chain governs', async () => {
    await place(system, 'A-16', 3);
    await seats(system, 'A-16', 5);
    const before = await system.waitForChain('A-16', (c) => c.addOns.length === 1);
    for (const [method, path, body] of [
      ['PUT', '/ops/chains/A-16.a1/auto-renew', { enabled: false }],
      ['POST', '/ops/chains/A-16.a1/reactivated', undefined],
    ] as const) {
      const res = await system.ops(method, path, body);
      expect(res.status).toBe(422);
      expect(res.body).toMatchObject({
        error: 'add_on_governed',
        message: expect.stringContaining('name A-16'),
      });
    }
    expect(await system.chain('A-16')).toEqual(before);
    expect(before.addOns[0]?.nextRenewalAt).not.toBeNull();
  });

  it('lets reconcile expire an add-on whose main chain does not renew, once its term ended', async () => {
    await system.send('order.placed', orderPlaced({ order: 'A-5', licenses: 2, autoRenew: false }));
    await system.waitForChain('A-5', () => true);
    await seats(system, 'A-5', 3);
    const bought = await system.waitForChain('A-5', (c) => c.addOns.length === 1);
    clock.set((bought.addOns[0]?.term.expiresAt ?? 0) + DAY);
    const reconcile = await system.queue('maintenance').add('reconcile now', {});
    await expect.poll(async () => reconcile.getState(), { timeout: 10_000 }).toBe('completed');
    const chain = await system.chain('A-5');
    expect(chain.status).toBe('expired');
    expect(chain.addOns[0]?.status).toBe('expired');
  });

  it('cancels the add-ons with their main chain, at the provider too', async () => {
    await place(system, 'A-4', 3);
    await seats(system, 'A-4', 5);
    await system.waitForChain('A-4', (c) => c.addOns.length === 1);
    await system.send('order.cancelled', { order: 'A-4' });
    const chain = await system.waitForChain('A-4', (c) => c.status === 'cancelled');
    expect(chain.addOns[0]?.status).toBe('cancelled');
    expect((await system.providerOrder('A-4.a1'))?.status).toBe('cancelled');
    expect(
      await system.queue('renewals').getJob(renewalJobId(chainIdOf('A-4.a1'), 2)),
    ).toBeUndefined();
  });

  it('cancels one add-on alone by its own order: the main chain goes on', async () => {
    await place(system, 'A-40', 5);
    await seats(system, 'A-40', 8);
    await system.waitForChain('A-40', (c) => c.addOns.length === 1);
    const res = await system.ops('POST', '/ops/chains/A-40.a1/cancel');
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ order: 'A-40.a1', status: 'cancelled', nextRenewalAt: null });
    expect((await system.providerOrder('A-40.a1'))?.status).toBe('cancelled');
    expect((await system.providerOrder('A-40'))?.status).toBe('active');
    expect(
      await system.queue('renewals').getJob(renewalJobId(chainIdOf('A-40.a1'), 2)),
    ).toBeUndefined();
    const chain = await system.chain('A-40');
    expect(chain).toMatchObject({ status: 'active', nextLicenses: 5 });
    // It carries nothing into a next term any more: none is coming.
    expect(chain.addOns[0]).toMatchObject({ status: 'cancelled', nextLicenses: 0 });

    // The cancelled add-on is not paid and in force: the same total buys its licenses again.
    clock.advance(60);
    await seats(system, 'A-40', 8);
    const again = await system.waitForChain('A-40', (c) => c.addOns.length === 2);
    expect(again.addOns[1]).toMatchObject({ order: 'A-40.a2', licenses: 3, status: 'active' });
  });

  it('has a seat event wait for an add-on renewal in flight, then buy what it lacks', async () => {
    const placed = await place(system, 'A-17', 5);
    await seats(system, 'A-17', 8);
    const bought = await system.waitForChain('A-17', (c) => c.addOns.length === 1);
    const addOn = bought.addOns[0];
    if (!addOn) throw new Error('no add-on');
    clock.advance(60);
    await seats(system, 'A-17', 6);
    await system.waitForChain('A-17', (c) => c.addOns[0]?.nextLicenses === 1);
    clock.set(placed.term.expiresAt - 7 * DAY);
    await system.promote('renewals', renewalJobId(chainIdOf('A-17'), 2));
    await system.waitForChain('A-17', (c) => c.term.count === 2 && c.licenses === 5);

    // The add-on's renewal job wrote its intent (its share: 1) and died before sending it.
    clock.set(addOn.term.expiresAt - 7 * DAY);
    const jobId = renewalJobId(chainIdOf('A-17.a1'), 2);
    await leftByDeadJob(system, 'A-17.a1', 'dead-renewal-job', (chain) => ({
      intent: {
        kind: 'renewal',
        method: 'createOrder',
        orderId: 'A-17.a1.r2',
        params: {
          customer: chain.customer,
          id: 'A-17.a1.r2',
          product: chain.product,
          licenses: 1,
          duration: chain.duration,
          startsAt: chain.term.expiresAt,
          parent: chain.order,
        },
        jobId,
      },
    }));
    // Back to 8 while that renewal is in flight: applied now, 5 + 3 would look paid and the
    // add-on's share would go back to 3, which the renewal, sent with 1, never carries.
    clock.advance(60);
    await seats(system, 'A-17', 8);
    await expect.poll(async () => (await system.queue('seat-changes').getDelayed()).length).toBe(1);
    expect((await system.chain('A-17')).addOns[0]?.nextLicenses).toBe(1);
    const [waiting] = await system.queue('seat-changes').getDelayed();

    await system.promote('renewals', jobId);
    await system.waitForChain('A-17', (c) => c.addOns[0]?.term.count === 2);
    // The seat job waits for the renewal job's next attempt, due later than it was promoted.
    await system.promote('seat-changes', waiting?.id ?? '');
    const settled = await system.waitForChain('A-17', (c) => c.addOns.length === 2);
    expect(settled.addOns[0]).toMatchObject({ licenses: 1, term: { count: 2 } });
    // From the day the add-on's first term ends, 5 + 1 + 2 are in force: the total asked for.
    expect(settled.addOns[1]).toMatchObject({ order: 'A-17.a2', licenses: 2 });
    const at = addOn.term.expiresAt;
    const inForce = settled.addOns
      .filter((a) => a.term.startsAt <= at && at < a.term.expiresAt)
      .reduce((n, a) => n + a.licenses, settled.licenses);
    expect(inForce).toBe(8);
  });

  it("decides an add-on's renewal under its main chain's lock, with the share a seat job left", async () => {
    await place(system, 'A-18', 5);
    await seats(system, 'A-18', 8);
    const bought = await system.waitForChain('A-18', (c) => c.addOns.length === 1);
    const addOn = bought.addOns[0];
    if (!addOn) throw new Error('no add-on');
    const chains = new ChainStore(system.started.runtime.redis);
    const main = chainIdOf('A-18');
    const token = 'test-seat-job';
    const held = await chains.lock(main, token);
    if (held.kind !== 'held' || !held.chain) throw new Error('main chain not locked');

    // The add-on's renewal comes due while a seat job holds the main chain: it decides nothing.
    clock.set(addOn.term.expiresAt - 7 * DAY);
    const jobId = renewalJobId(chainIdOf('A-18.a1'), 2);
    await system.promote('renewals', jobId);
    await expect
      .poll(async () => (await system.queue('renewals').getJob(jobId))?.attemptsStarted ?? 0)
      .toBeGreaterThan(0);
    await expect
      .poll(async () =>
        system
          .queue('renewals')
          .getJob(jobId)
          .then((j) => j?.getState()),
      )
      .toBe('delayed');
    expect((await chains.get(chainIdOf('A-18.a1')))?.intent).toBeNull();

    // The seat job leaves the add-on a share of 2, then releases the main chain.
    await chains.save({
      chainId: main,
      token,
      previous: held.chain,
      next: { ...held.chain, addOnNextLicenses: { [chainIdOf('A-18.a1')]: 2 } },
      release: true,
    });
    await system.promote('renewals', jobId);
    const renewed = await system.waitForChain('A-18', (c) => c.addOns[0]?.term.count === 2);
    expect(renewed.addOns[0]?.licenses).toBe(2);
    expect((await system.providerOrder('A-18.a1.r2'))?.licenses).toBe(2);
  });

  it("finishes a seat purchase half done on the main chain before deciding an add-on's renewal", async () => {
    await place(system, 'A-19', 5);
    await seats(system, 'A-19', 8);
    const bought = await system.waitForChain('A-19', (c) => c.addOns.length === 1);
    const addOn = bought.addOns[0];
    if (!addOn) throw new Error('no add-on');
    // A seat job for 10 wrote its purchase (2 more, an add-on) on the main chain and died
    // before sending it; nothing else takes the main chain until the add-on's renewal.
    const { provisioning } = system.started;
    const dying = Object.create(provisioning) as typeof provisioning;
    dying.createOrder = async () => {
      throw new TransientError('provisioning_unavailable', 'died before the call');
    };
    const seatJob = {
      id: 'seats-A-19',
      name: 'seats.changed A-19',
      data: {
        webhookId: 'wh-seats-a-19',
        type: 'seats.changed',
        data: { order: 'A-19', licenses: 10 },
        occurredAt: clock.now(),
        receivedAt: clock.now(),
      },
    } as unknown as Job;
    const seatProcessor = makeSeatProcessor(workerDepsOf(system, { provisioning: dying }));
    await expect(seatProcessor(seatJob)).rejects.toThrow('died before the call');
    expect((await system.chain('A-19')).inFlight).toMatchObject({ orderId: 'A-19.a2' });

    const renewed = await renewAt(system, clock, 'A-19', {
      count: 2,
      expiresAt: addOn.term.expiresAt,
      firstAddOn: true,
    });
    expect(renewed.inFlight).toBeNull();
    expect(renewed.addOns.map((a) => [a.order, a.licenses])).toEqual([
      ['A-19.a1', 3],
      ['A-19.a2', 2],
    ]);
    expect((await system.providerOrder('A-19.a1.r2'))?.licenses).toBe(3);
  });

  it('leaves a bought add-on with its renewal job when the seat job runs again', async () => {
    await place(system, 'A-20', 5);
    await system.send('seats.changed', { order: 'A-20', licenses: 8 }, { id: 'wh-a20' });
    await system.waitForChain('A-20', (c) => c.addOns.length === 1);
    const renewals = system.queue('renewals');
    const jobId = renewalJobId(chainIdOf('A-20.a1'), 2);
    // The job died after recording the purchase and before reporting itself done, and the
    // add-on's job is not there (as when it died before adding it).
    await (await renewals.getJob(jobId))?.remove();
    await runAgain(system.queue('seat-changes'), webhookJobId('wh-a20'));
    expect(await jobState(renewals, jobId)).toBe('delayed');
  });

  it('lets reconcile record an add-on cancelled that another job held during the cancel', async () => {
    await place(system, 'A-15', 3);
    await seats(system, 'A-15', 5);
    await system.waitForChain('A-15', (c) => c.addOns.length === 1);
    const chains = new ChainStore(system.started.runtime.redis);
    const addOn = chainIdOf('A-15.a1');
    const token = 'test-holds-the-add-on';
    await chains.lock(addOn, token);
    await system.send('order.cancelled', { order: 'A-15' });
    await system.waitForChain('A-15', (c) => c.status === 'cancelled');
    await chains.unlock(addOn, token);
    // The cancel could not mark it (the ops view shows its main chain's status, not its own).
    expect((await chains.get(addOn))?.status).toBe('active');

    const reconcile = await system.queue('maintenance').add('reconcile now', {});
    await expect.poll(async () => reconcile.getState(), { timeout: 10_000 }).toBe('completed');
    expect((await chains.get(addOn))?.status).toBe('cancelled');
    expect((await chains.history(addOn)).at(-1)?.detail).toContain('recorded by reconcile');
    expect((await system.providerOrder('A-15.a1'))?.status).toBe('cancelled');
  });

  it.each([
    ['its payment is overdue', 'A-EXP-1'],
    ['auto-renew is off', 'A-EXP-2'],
  ])(
    'buys an add-on that ended while %s again once, and the old one no longer renews',
    async (reason, order) => {
      const placed = await place(system, order, 5);
      await seats(system, order, 8);
      const one = await system.waitForChain(order, (c) => c.addOns.length === 1);
      const a1End = one.addOns[0]?.term.expiresAt ?? 0;
      // The main chain renews early: its latest term runs past the add-on's end.
      await renewAt(system, clock, order, { count: 2, expiresAt: placed.term.expiresAt });
      clock.set(a1End - 8 * DAY);
      const resume = async () => {
        if (reason === 'auto-renew is off') {
          await system.ops('PUT', `/ops/chains/${order}/auto-renew`, { enabled: true });
        } else {
          await system.send('payment.received', { order });
        }
      };
      if (reason === 'auto-renew is off') {
        await system.ops('PUT', `/ops/chains/${order}/auto-renew`, { enabled: false });
      } else {
        await system.send('payment.overdue', { order });
        await system.waitForChain(order, (c) => c.payment === 'overdue');
      }
      clock.set(a1End + 3600);
      const reconcile = await system.queue('maintenance').add('reconcile now', {});
      await expect.poll(async () => reconcile.getState(), { timeout: 10_000 }).toBe('completed');
      await system.waitForChain(order, (c) => c.addOns[0]?.status === 'expired');

      // 8 asked for again: a1's 3 ended, so a2 buys them; a1 must not renew them as well.
      clock.advance(60);
      await seats(system, order, 8);
      const two = await system.waitForChain(order, (c) => c.addOns.length === 2);
      expect(two.addOns.map((a) => [a.order, a.licenses, a.nextLicenses])).toEqual([
        [`${order}.a1`, 3, 0],
        [`${order}.a2`, 3, 3],
      ]);
      clock.advance(60);
      await resume();
      // Its renewal, due since its term ended, runs and stops it instead of ordering its 3.
      const a1Renewal = renewalJobId(chainIdOf(`${order}.a1`), 2);
      await expect
        .poll(async () => (await system.queue('renewals').getJob(a1Renewal))?.returnvalue, {
          timeout: 10_000,
        })
        .toBe('skipped: no licenses for the next term');
      expect(await system.providerOrder(`${order}.a1.r2`)).toBeNull();
      const now = clock.now();
      const after = await system.chain(order);
      const inForce = after.addOns
        .filter((a) => a.term.startsAt <= now && a.term.expiresAt > now)
        .reduce((sum, a) => sum + a.licenses, after.licenses);
      expect(inForce).toBe(8);
    },
  );

  it('starts an add-on for a first term ordered to start later with that term', async () => {
    const placed = await place(system, 'A-22', 5, -19);
    await seats(system, 'A-22', 8);
    const chain = await system.waitForChain('A-22', (c) => c.addOns.length === 1);
    expect(chain.addOns[0]?.term).toMatchObject({
      startsAt: placed.term.startsAt,
      expiresAt: placed.term.expiresAt,
    });
  });
});

describe('the external variant (add-ons only)', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({ clock, env: { PARTNER_VARIANT: 'external' } });

  it('cancels, by its first order, an ended add-on whose renewal was in flight at the cancel', async () => {
    const placed = await place(system, 'E-6', 5, 0);
    await seats(system, 'E-6', 8);
    const bought = await system.waitForChain('E-6', (c) => c.addOns.length === 1);
    const addOn = bought.addOns[0] as ChainView['addOns'][number];
    // The main chain renews; then the add-on's term ends while its renewal is in flight (made at
    // the provider, the answer lost, its job waiting to retry).
    await renewAt(system, clock, 'E-6', { count: 2, expiresAt: placed.term.expiresAt });
    clock.set(addOn.term.expiresAt + DAY);
    const params = { parent: addOn.order, id: `${addOn.order}.r2` };
    await leftByDeadJob(system, addOn.order, 'retrying-renewal-job', () => ({
      intent: {
        kind: 'renewal',
        method: 'createRenewalOrder',
        orderId: params.id,
        params,
        jobId: null,
      },
    }));
    await system.started.provisioning.createRenewalOrder(params);
    const retry = renewalJobId(chainIdOf(addOn.order), 2);
    await (await system.queue('renewals').getJob(retry))?.changeDelay(60 * 60_000);

    // The cancel leaves the ended add-on's first order alone; the renewal's job cancels it.
    await system.ops('POST', '/ops/chains/E-6/cancel');
    const chain = await system.waitForChain(
      'E-6',
      (c) => c.addOns[0]?.history.at(-1)?.event === 'renewal.dropped',
    );
    expect(chain.addOns[0]?.history.at(-1)?.detail).toContain(`${addOn.order} cancelled`);
    expect((await system.providerOrder(params.id))?.status).toBe('cancelled');
  });

  it('keeps an earlier event’s waiting add-on when a newer purchase is refused', async () => {
    await system.send('order.placed', orderPlaced({ order: 'E-32', licenses: 5 }));
    await system.waitForChain('E-32', () => true);
    const neededAt = clock.now() + 3 * DAY;
    await seats(system, 'E-32', 8, { effectiveAt: neededAt });
    await system.waitForChain('E-32', (c) => lastEvent(c) === 'seats.addon_scheduled');

    // 9 needed now: an add-on at once, which the provider refuses.
    const refusing = Object.create(system.started.provisioning) as ProvisioningClient;
    refusing.createFirstOrder = async () => {
      throw new RefusalError('provisioning_refused', 'licenses over the contract limit');
    };
    clock.advance(60);
    const seatJob = {
      id: 'seats-E-32-9',
      name: 'seats.changed E-32',
      data: {
        webhookId: 'wh-seats-e-32-9',
        type: 'seats.changed',
        data: { order: 'E-32', licenses: 9 },
        occurredAt: clock.now(),
        receivedAt: clock.now(),
      },
    } as unknown as Job;
    await expect(
      makeSeatProcessor(workerDepsOf(system, { provisioning: refusing }))(seatJob),
    ).rejects.toThrow('licenses over the contract limit');
    const refused = await system.chain('E-32');
    expect(lastEvent(refused)).toBe('seats.refused');
    expect(refused.nextLicenses).toBe(5);
    const stored = await new ChainStore(system.started.runtime.redis).get(chainIdOf('E-32'));
    expect(stored?.pendingAddOn).toMatchObject({ licenses: 3, startsAt: neededAt });

    // Its worker died before the failure was recorded: run again (the provider would now take
    // it), the job fails with the same refusal instead of deciding afresh.
    await expect(makeSeatProcessor(workerDepsOf(system))(seatJob)).rejects.toThrow(
      'licenses over the contract limit',
    );
    // So does BullMQ's own retry of it after a Redis failure (its attempts counted up, its last
    // failure kept): only a person's retry, which clears the failure, decides afresh.
    const retried = { ...seatJob, attemptsMade: 1, failedReason: 'Connection is closed.' } as Job;
    await expect(makeSeatProcessor(workerDepsOf(system))(retried)).rejects.toThrow(
      'licenses over the contract limit',
    );
    expect(await system.providerOrder('E-32.a2')).toBeNull();

    // The earlier event's 3 are still bought on their day.
    const bought = await buyWaitingAddOn(system, clock, 'E-32', { at: neededAt, nth: 1 });
    expect(bought.addOns[0]).toMatchObject({ order: 'E-32.a2', licenses: 3 });
  });

  it('fails a refused seat job even when Redis drops the unlock right after the refusal', async () => {
    await system.send('order.placed', orderPlaced({ order: 'E-43', licenses: 5 }));
    await system.waitForChain('E-43', () => true);
    const provisioning = system.started.provisioning;
    const create = provisioning.createFirstOrder;
    // Refused once: a second try, under another order id, would be taken.
    let refused = false;
    provisioning.createFirstOrder = async (params) => {
      if (refused) return create.call(provisioning, params);
      refused = true;
      throw new RefusalError('provisioning_refused', 'licenses over the contract limit');
    };
    // The unlock after the refusal is saved runs, but its reply is lost (a Redis blip).
    const unlock = ChainStore.prototype.unlock;
    let dropped = false;
    vi.spyOn(ChainStore.prototype, 'unlock').mockImplementation(async function (
      this: ChainStore,
      chainId: string,
      token: string,
    ) {
      await unlock.call(this, chainId, token);
      if (!dropped && chainId === chainIdOf('E-43')) {
        dropped = true;
        throw new Error('Connection is closed.');
      }
    });
    try {
      await seats(system, 'E-43', 8, {}, 'wh-seats-e-43-8');
      const job = () => system.queue('seat-changes').getJob(webhookJobId('wh-seats-e-43-8'));
      await expect.poll(async () => (await job())?.getState(), { timeout: 10_000 }).toBe('failed');
      expect(dropped).toBe(true);
      expect((await job())?.failedReason).toContain('licenses over the contract limit');
    } finally {
      vi.restoreAllMocks();
      provisioning.createFirstOrder = create;
    }
    expect(await system.providerOrder('E-43.a2')).toBeNull();
  });

  it('names the seat event that asked for a waiting add-on in every entry of its purchase', async () => {
    await system.send('order.placed', orderPlaced({ order: 'E-WC', licenses: 5 }));
    const placed = await system.waitForChain('E-WC', () => true);
    const neededAt = clock.now() + 5 * DAY;
    await seats(system, 'E-WC', 8, { effectiveAt: neededAt }, 'wc-seats');
    await system.waitForChain('E-WC', (c) => lastEvent(c) === 'seats.addon_scheduled');
    clock.set(neededAt);
    await system.promote('seat-changes', addOnJobId(chainIdOf('E-WC')));
    const bought = await system.waitForChain('E-WC', (c) => c.addOns.length === 1);
    expect(placed.term.expiresAt).toBeGreaterThan(neededAt);
    const purchase = bought.history.filter((h) =>
      ['seats.buying', 'seats.addon_ordered'].includes(h.event),
    );
    expect(purchase.map((h) => [h.event, h.cause.webhookId])).toEqual([
      ['seats.buying', 'wc-seats'],
      ['seats.addon_ordered', 'wc-seats'],
    ]);
  });

  describe('a waiting add-on whose job comes only after its term ended', () => {
    /** A chain of 5 with 3 more waiting for an hour before its term ends; the clock then past it. */
    async function waitingPastItsTerm(order: string, autoRenew: boolean, { overdue = false } = {}) {
      const startsAt = clock.now() - 10 * DAY;
      await system.send('order.placed', orderPlaced({ order, licenses: 5, startsAt, autoRenew }));
      const placed = await system.waitForChain(order, () => true);
      await seats(
        system,
        order,
        8,
        { effectiveAt: placed.term.expiresAt - 3600 },
        `seats-${order}`,
      );
      await system.waitForChain(order, (c) => lastEvent(c) === 'seats.addon_scheduled');
      if (overdue) {
        await system.send('payment.overdue', { order });
        await system.waitForChain(order, (c) => c.payment === 'overdue');
      }
      clock.set(placed.term.expiresAt + DAY);
      return placed;
    }

    it('buys nothing for a chain that expired first', async () => {
      await waitingPastItsTerm('E-30', false);
      await reconcileRound(system, 'r-e30');
      await system.waitForChain('E-30', (c) => c.status === 'expired');
      await system.promote('seat-changes', addOnJobId(chainIdOf('E-30')));
      const chain = await system.waitForChain('E-30', (c) => lastEvent(c) === 'seats.ignored');
      expect(chain.history.at(-1)).toMatchObject({
        detail: 'the waiting 3 licenses are not bought: the chain expired first',
        cause: { webhookId: 'seats-E-30', jobId: addOnJobId(chainIdOf('E-30')) },
      });
      expect(chain.addOns).toEqual([]);
      expect(await system.providerOrder('E-30.a1')).toBeNull();
    });

    it('buys nothing for a chain that will not renew, though not marked expired yet', async () => {
      await waitingPastItsTerm('E-33', false);
      await system.promote('seat-changes', addOnJobId(chainIdOf('E-33')));
      const chain = await system.waitForChain('E-33', (c) => lastEvent(c) === 'seats.ignored');
      expect(chain.history.at(-1)?.detail).toMatch(
        /^the waiting 3 licenses are not bought: term 1 ended .* first, and the chain does not renew$/,
      );
      expect(chain.nextLicenses).toBe(5);
      expect(await system.providerOrder('E-33.a1')).toBeNull();
    });

    it('carries the total into the renewal of a chain expired while its payment is overdue', async () => {
      await waitingPastItsTerm('E-34', true, { overdue: true });
      // Its renewal job, due since, waits for the payment past the term's end: expired.
      await system.promote('renewals', renewalJobId(chainIdOf('E-34'), 2));
      await system.waitForChain('E-34', (c) => c.status === 'expired');
      await system.promote('seat-changes', addOnJobId(chainIdOf('E-34')));
      const chain = await system.waitForChain('E-34', (c) => lastEvent(c) === 'seats.changed');
      expect(chain).toMatchObject({ status: 'expired', nextLicenses: 8, addOns: [] });
      expect(await system.providerOrder('E-34.a1')).toBeNull();
    });

    it('has reconcile restore the waiting add-on job of a chain expired while overdue', async () => {
      await waitingPastItsTerm('E-35', true, { overdue: true });
      await system.promote('renewals', renewalJobId(chainIdOf('E-35'), 2));
      await system.waitForChain('E-35', (c) => c.status === 'expired');
      // Lost (a Redis restored without it): the licenses still go into the renewal when paid.
      const waiting = () => system.queue('seat-changes').getJob(addOnJobId(chainIdOf('E-35')));
      await (await waiting())?.remove();
      await reconcileRound(system, 'r-e35');
      expect(await waiting()).toBeDefined();
    });

    it('carries the total into the renewal of a chain about to renew, buying no add-on', async () => {
      await waitingPastItsTerm('E-31', true);
      await system.promote('seat-changes', addOnJobId(chainIdOf('E-31')));
      const chain = await system.waitForChain(
        'E-31',
        (c) => lastEvent(c) === 'seats.changed' && c.nextLicenses === 8,
      );
      expect(chain.history.at(-1)?.detail).toMatch(
        /^8 licenses: the waiting 3 licenses are not bought, term 1 ended .* first; the next renewal carries 8$/,
      );
      expect(chain.addOns).toEqual([]);
      expect(await system.providerOrder('E-31.a1')).toBeNull();
    });
  });

  it('orders an add-on on the date it is needed, with createFirstOrder', async () => {
    await system.send('order.placed', orderPlaced({ order: 'E-1', licenses: 5 }));
    await system.waitForChain('E-1', () => true);
    const neededAt = clock.now() + 3 * DAY;
    await seats(system, 'E-1', 7, { effectiveAt: neededAt });
    const waiting = await system.waitForChain(
      'E-1',
      (c) => lastEvent(c) === 'seats.addon_scheduled',
    );
    expect(waiting.addOns).toEqual([]);

    // A newer event replaces the waiting add-on.
    clock.advance(60);
    await seats(system, 'E-1', 9, { effectiveAt: neededAt });
    await system.waitForChain(
      'E-1',
      (c) => c.history.filter((h) => h.event === 'seats.addon_scheduled').length === 2,
    );

    const bought = await buyWaitingAddOn(system, clock, 'E-1', { at: neededAt, nth: 1 });
    expect(bought.addOns[0]).toMatchObject({
      order: 'E-1.a1',
      licenses: 4,
      term: { startsAt: neededAt },
    });
    const order = await system.providerOrder('E-1.a1');
    const first = await system.providerOrder('E-1');
    expect(order?.instance).toBe(first?.instance);
  });

  it("gets a waiting add-on's job back from reconcile when it was lost", async () => {
    await system.send('order.placed', orderPlaced({ order: 'E-11', licenses: 5 }));
    await system.waitForChain('E-11', () => true);
    const neededAt = clock.now() + 3 * DAY;
    await seats(system, 'E-11', 7, { effectiveAt: neededAt });
    await system.waitForChain('E-11', (c) =>
      c.history.some((h) => h.event === 'seats.addon_scheduled'),
    );
    const queue = system.queue('seat-changes');
    const jobId = addOnJobId(chainIdOf('E-11'));
    // Redis restored from a backup taken before the job was added: the chain waits for it.
    await (await queue.getJob(jobId))?.remove();

    const reconcile = await system.queue('maintenance').add('reconcile now', {});
    await expect.poll(async () => reconcile.getState(), { timeout: 10_000 }).toBe('completed');
    const restored = await queue.getJob(jobId);
    expect(restored && (await restored.getState())).toBe('delayed');
    expect(restored?.data).toMatchObject({ startsAt: neededAt });

    clock.set(neededAt);
    await system.promote('seat-changes', jobId);
    const bought = await system.waitForChain('E-11', (c) => c.addOns.length === 1);
    expect(bought.addOns[0]).toMatchObject({ licenses: 2, term: { startsAt: neededAt } });
  });

  it('buys a waiting add-on on its day and a newer, later need on its own, then drops one already paid', async () => {
    await system.send('order.placed', orderPlaced({ order: 'E-4', licenses: 5 }));
    await system.waitForChain('E-4', () => true);
    const jobId = addOnJobId(chainIdOf('E-4'));
    const scheduled = (c: ChainView) =>
      c.history.filter((h) => h.event === 'seats.addon_scheduled').length;
    const firstDate = clock.now() + 3 * DAY;
    await seats(system, 'E-4', 7, { effectiveAt: firstDate });
    await system.waitForChain('E-4', (c) => scheduled(c) === 1);

    // Later and larger: the 7 are still needed from the first date, and 10 from the later one.
    // The waiting job keeps its day; what the newer event adds is bought after it, from its own.
    clock.advance(60);
    const laterDate = clock.now() + 5 * DAY;
    await seats(system, 'E-4', 10, { effectiveAt: laterDate });
    const kept = await system.waitForChain('E-4', (c) => lastEvent(c) === 'seats.changed');
    expect(kept.history.at(-1)?.detail).toContain(
      `the waiting 2 licenses are still bought ${formatInstant(firstDate)}, as an earlier event asked from then, and what is missing from ${formatInstant(laterDate)} is bought after them`,
    );
    // The main chain keeps its 5: the add-ons to come carry the rest.
    expect(kept.nextLicenses).toBe(5);
    const waiting = await system.queue('seat-changes').getJob(jobId);
    expect(waiting?.data).toMatchObject({ startsAt: firstDate });
    expect(waiting && (await waiting.getState())).toBe('delayed');

    // On the first date: the 2, from then; the job then waits for the later date's 3.
    clock.set(firstDate);
    await system.promote('seat-changes', jobId);
    const first = await system.waitForChain('E-4', (c) => scheduled(c) === 2);
    expect(first.addOns).toHaveLength(1);
    expect(first.addOns[0]).toMatchObject({
      order: 'E-4.a1',
      licenses: 2,
      term: { startsAt: firstDate },
    });
    expect(first.history.at(-1)?.detail).toContain(
      `3 more licenses needed from ${formatInstant(laterDate)}`,
    );
    await expect.poll(() => waitingAddOnJob(system, jobId)).toEqual([laterDate, 'delayed']);

    clock.set(laterDate);
    await system.promote('seat-changes', jobId);
    const bought = await system.waitForChain('E-4', (c) => c.addOns.length === 2);
    expect(bought.addOns[1]).toMatchObject({
      order: 'E-4.a2',
      licenses: 3,
      term: { startsAt: laterDate },
    });
    expect(await system.providerOrder('E-4.a1')).toMatchObject({ licenses: 2 });
    expect(await system.providerOrder('E-4.a2')).toMatchObject({ licenses: 3 });

    // A total already paid drops a waiting add-on: its job goes, and nothing more is bought.
    clock.advance(60);
    await seats(system, 'E-4', 20, { effectiveAt: clock.now() + 2 * DAY });
    await system.waitForChain('E-4', (c) => scheduled(c) === 3);
    clock.advance(60);
    await seats(system, 'E-4', 10);
    await system.waitForChain('E-4', (c) => lastEvent(c) === 'seats.changed');
    expect(await system.queue('seat-changes').getJob(jobId)).toBeUndefined();
    expect(await system.providerOrder('E-4.a3')).toBeNull();
  });

  it.each([
    // Each newer total needed from a later day than the one before: each bought on its own day.
    [
      'E-50',
      [
        [7, 3],
        [10, 5],
        [12, 7],
      ],
      [
        [2, 3],
        [3, 5],
        [2, 7],
      ],
      12,
    ],
    // The last one less: the 10 are still needed from the 5th, and nothing more is bought.
    [
      'E-51',
      [
        [7, 3],
        [10, 5],
        [6, 7],
      ],
      [
        [2, 3],
        [3, 5],
      ],
      6,
    ],
    // A newer total from the 7th replaces the one from the 8th, and keeps the one from the 5th.
    [
      'E-52',
      [
        [7, 3],
        [10, 5],
        [12, 8],
        [11, 7],
      ],
      [
        [2, 3],
        [3, 5],
        [1, 7],
      ],
      11,
    ],
  ] as const)(
    'buys every newer total needed from a later day on its own day, after the waiting add-on (%s)',
    async (order, events, addOns, total) => {
      await system.send('order.placed', orderPlaced({ order, licenses: 5 }));
      let chain = await system.waitForChain(order, () => true);
      const jobId = addOnJobId(chainIdOf(order));
      const start = clock.now();
      const day = (n: number) => start + n * DAY;
      chain = await sendDatedTotals(system, clock, order, events, day);
      if (order === 'E-50') {
        expect(chain.history.at(-1)?.detail).toContain(
          `the waiting 2 licenses are still bought ${formatInstant(day(3))}, as an earlier event asked from then, then what a newer event needs from ${formatInstant(day(5))}, and what is missing from ${formatInstant(day(7))} is bought after them`,
        );
      }

      for (const [n, [licenses, from]] of addOns.entries()) {
        await expect.poll(() => waitingAddOnJob(system, jobId)).toEqual([day(from), 'delayed']);
        chain = await buyWaitingAddOn(system, clock, order, { at: day(from), nth: n + 1 });
        expect(chain.addOns[n]).toMatchObject({
          order: `${order}.a${n + 1}`,
          licenses,
          term: { startsAt: day(from) },
        });
      }
      // Nothing more waits, and the family's next renewals carry the newest total.
      await expect.poll(async () => (await waitingAddOnJob(system, jobId))?.[1]).toBe('completed');
      expect(await system.providerOrder(`${order}.a${addOns.length + 1}`)).toBeNull();
      chain = await system.waitForChain(order, () => true);
      const carried = chain.nextLicenses + chain.addOns.reduce((n, a) => n + a.nextLicenses, 0);
      expect(carried).toBe(total);
    },
  );

  it.each([
    // After the 3rd's add-on, 15 from the 9th: the 12 from the 7th is still bought on the 7th.
    [
      'E-54',
      15,
      [
        [3, 5],
        [2, 7],
        [3, 9],
      ],
      15,
    ],
    // Or 10 from the 9th: the 12 are still needed from the 7th until then.
    [
      'E-55',
      10,
      [
        [3, 5],
        [2, 7],
      ],
      10,
    ],
  ] as const)(
    'keeps a queued total dated before a newer event once the first add-on is bought (%s)',
    async (order, last, addOns, total) => {
      await system.send('order.placed', orderPlaced({ order, licenses: 5 }));
      let chain = await system.waitForChain(order, () => true);
      const jobId = addOnJobId(chainIdOf(order));
      const start = clock.now();
      const day = (n: number) => start + n * DAY;
      await sendDatedTotals(system, clock, order, QUEUED, day);
      chain = await buyWaitingAddOn(system, clock, order, { at: day(3), nth: 1 });
      // The add-on waiting now is the 10's rest, a purchase of its own: the 12 queue after it.
      await expect.poll(() => waitingAddOnJob(system, jobId)).toEqual([day(5), 'delayed']);
      chain = await sendDatedTotals(system, clock, order, [[last, 9]], day);
      expect(chain.history.at(-1)?.detail).toContain(
        `the waiting 3 licenses are still bought ${formatInstant(day(5))}, as an earlier event asked from then, ${last > 12 ? `then what a newer event needs from ${formatInstant(day(7))}, and what is missing from ${formatInstant(day(9))} is bought after them` : `and what newer events need from ${formatInstant(day(7))} on after them`}`,
      );

      for (const [n, [licenses, from]] of addOns.entries()) {
        await expect.poll(() => waitingAddOnJob(system, jobId)).toEqual([day(from), 'delayed']);
        chain = await buyWaitingAddOn(system, clock, order, { at: day(from), nth: n + 2 });
        expect(chain.addOns[n + 1]).toMatchObject({ licenses, term: { startsAt: day(from) } });
      }
      expect(await system.providerOrder(`${order}.a${addOns.length + 2}`)).toBeNull();
      chain = await system.waitForChain(order, () => true);
      const carried = chain.nextLicenses + chain.addOns.reduce((n, a) => n + a.nextLicenses, 0);
      expect(carried).toBe(total);
    },
  );

  it('buys nothing queued after a waiting add-on once the chain is cancelled', async () => {
    await system.send('order.placed', orderPlaced({ order: 'E-56', licenses: 5 }));
    let chain = await system.waitForChain('E-56', () => true);
    const day = (n: number) => chain.term.startsAt + n * DAY;
    chain = await sendDatedTotals(system, clock, 'E-56', QUEUED, day);
    await system.ops('POST', '/ops/chains/E-56/cancel');
    await system.waitForChain('E-56', (c) => c.status === 'cancelled');
    for (const at of [3, 5, 7]) {
      clock.set(day(at));
      await reconcileRound(system, `reconcile-cancelled-${at}`);
      const id = addOnJobId(chainIdOf('E-56'));
      if (await system.queue('seat-changes').getJob(id)) await system.promote('seat-changes', id);
    }
    await expect
      .poll(() => jobState(system.queue('seat-changes'), addOnJobId(chainIdOf('E-56'))))
      .not.toBe('delayed');
    expect(await system.providerOrder('E-56.a1')).toBeNull();
    expect((await system.chain('E-56')).addOns).toEqual([]);
  });

  it('buys a late waiting add-on at once when a newer event needs more from a later date', async () => {
    await system.send('order.placed', orderPlaced({ order: 'E-47', licenses: 5 }));
    await system.waitForChain('E-47', () => true);
    const jobId = addOnJobId(chainIdOf('E-47'));
    const firstDate = clock.now() + 3 * DAY;
    await seats(system, 'E-47', 7, { effectiveAt: firstDate });
    await system.waitForChain('E-47', (c) => lastEvent(c) === 'seats.addon_scheduled');

    // Its day has passed and its job has not run (workers held up) when 10 are asked from later:
    // the 7 are needed now all the same, and the job runs at once.
    clock.set(firstDate + 60);
    const laterDate = firstDate + 2 * DAY;
    await seats(system, 'E-47', 10, { effectiveAt: laterDate });
    const bought = await system.waitForChain('E-47', (c) => c.addOns.length === 1);
    expect(bought.addOns[0]).toMatchObject({ order: 'E-47.a1', licenses: 2 });
    await expect.poll(() => waitingAddOnJob(system, jobId)).toEqual([laterDate, 'delayed']);
    const rest = await buyWaitingAddOn(system, clock, 'E-47', { at: laterDate, nth: 2 });
    expect(rest.addOns[1]).toMatchObject({
      order: 'E-47.a2',
      licenses: 3,
      term: { startsAt: laterDate },
    });
  });

  it.each([
    ['bought', 'E-48', false],
    ['refused', 'E-49', true],
  ] as const)(
    'keeps the count of an add-on renewing before a later decrease once a waiting add-on is %s',
    async (_label, order, refused) => {
      // Term 1 from now; 20 days on, an add-on of 3; term 2 ordered ahead, in which it renews.
      await system.send('order.placed', orderPlaced({ order, licenses: 5 }));
      const placed = await system.waitForChain(order, () => true);
      clock.advance(20 * DAY);
      await seats(system, order, 8);
      const a1End =
        (await system.waitForChain(order, (c) => c.addOns.length === 1)).addOns[0]?.term
          .expiresAt ?? 0;
      const renewed = await renewAt(system, clock, order, {
        count: 2,
        expiresAt: placed.term.expiresAt,
      });
      expect(a1End).toBeLessThan(renewed.term.expiresAt - 3 * DAY);
      const waitingDate = clock.now() + 5 * DAY;
      await seats(system, order, 10, { effectiveAt: waitingDate });
      await system.waitForChain(order, (c) => lastEvent(c) === 'seats.addon_scheduled');

      // 6 from 3 days after the add-on renews: its renewal keeps its 3; the main chain and the
      // waiting add-on, which renew after that date, share the other 3.
      clock.advance(60);
      const from = a1End + 3 * DAY;
      await seats(system, order, 6, { effectiveAt: from });
      const decreased = await system.waitForChain(order, (c) => lastEvent(c) === 'seats.changed');
      expect(decreased).toMatchObject({ nextLicenses: 3 });
      expect(decreased.addOns[0]).toMatchObject({ nextLicenses: 3, laterLicenses: [] });

      // Bought on its day, or refused by the provider, the waiting add-on leaves the split as is.
      if (refused) {
        await leftByDeadJob(system, order, 'product-withdrawn', () => ({
          product: 'no-such-product',
        }));
        clock.set(waitingDate);
        await system.promote('seat-changes', addOnJobId(chainIdOf(order)));
        await system.waitForChain(order, (c) => lastEvent(c) === 'seats.refused');
      } else {
        await buyWaitingAddOn(system, clock, order, { at: waitingDate, nth: 2 });
      }
      const after = await system.chain(order);
      expect(after.addOns[0]).toMatchObject({ nextLicenses: 3, laterLicenses: [] });
      expect(after.nextLicenses).toBe(3);
      await renewAt(system, clock, order, { count: 2, expiresAt: a1End, firstAddOn: true });
      expect((await system.providerOrder(`${order}.a1.r2`))?.licenses).toBe(3);
    },
  );

  it('keeps a waiting add-on when a newer event sets only a later total: it is needed until then', async () => {
    await system.send('order.placed', orderPlaced({ order: 'E-44', licenses: 5 }));
    const placed = await system.waitForChain('E-44', () => true);
    const jobId = addOnJobId(chainIdOf('E-44'));
    const needed = clock.now() + DAY;
    await seats(system, 'E-44', 7, { effectiveAt: needed });
    await system.waitForChain('E-44', (c) => lastEvent(c) === 'seats.addon_scheduled');

    // Back to 5 from the next term: nothing to buy now, and the 2 are still needed from tomorrow
    // until the term ends (the marketplace variants buy them at once, with that start).
    clock.advance(60);
    await seats(system, 'E-44', 5, { effectiveAt: placed.term.expiresAt });
    const changed = await system.waitForChain('E-44', (c) => lastEvent(c) === 'seats.changed');
    expect(changed.history.at(-1)?.detail).toContain(
      `the waiting 2 licenses are still bought ${formatInstant(needed)}`,
    );
    expect(changed.nextLicenses).toBe(5);
    const waiting = await system.queue('seat-changes').getJob(jobId);
    expect(waiting && (await waiting.getState())).toBe('delayed');

    clock.set(needed);
    await system.promote('seat-changes', jobId);
    const bought = await system.waitForChain('E-44', (c) => c.addOns.length === 1);
    expect(bought.addOns[0]).toMatchObject({
      order: 'E-44.a1',
      licenses: 2,
      term: { startsAt: needed },
      // The newer total carries the next renewals: the add-on ends with its term.
      nextLicenses: 0,
    });
    expect(bought.nextLicenses).toBe(5);
  });

  it.each([
    // The same total from a day later: the waiting 2 cover it, and the add-on keeps its day.
    ['E-45', 7, 2],
    // Less from a day later: still nothing to buy, and the add-on renews with what it is left.
    ['E-46', 6, 1],
  ])(
    'keeps a waiting add-on (%s) that covers a newer total of %i from a later day: nothing is bought twice',
    async (order, total, share) => {
      await system.send('order.placed', orderPlaced({ order, licenses: 5 }));
      await system.waitForChain(order, () => true);
      const jobId = addOnJobId(chainIdOf(order));
      const needed = clock.now() + DAY;
      await seats(system, order, 7, { effectiveAt: needed });
      await system.waitForChain(order, (c) => lastEvent(c) === 'seats.addon_scheduled');

      clock.advance(60);
      await seats(system, order, total, { effectiveAt: needed + DAY });
      const changed = await system.waitForChain(order, (c) => lastEvent(c) === 'seats.changed');
      expect(changed.history.at(-1)?.detail).toContain(
        `nothing to buy now (${total === 7 ? 'already paid' : 'a decrease refunds nothing'}); the waiting 2 licenses are still bought ${formatInstant(needed)}`,
      );
      expect(changed.nextLicenses).toBe(5);
      const waiting = await system.queue('seat-changes').getJob(jobId);
      expect(waiting && (await waiting.getState())).toBe('delayed');
      expect(waiting?.delay).toBeGreaterThan(0);

      clock.set(needed);
      await system.promote('seat-changes', jobId);
      const bought = await system.waitForChain(order, (c) => c.addOns.length === 1);
      expect(bought.addOns[0]).toMatchObject({
        order: `${order}.a1`,
        licenses: 2,
        term: { startsAt: needed },
        nextLicenses: share,
      });
      expect(bought.nextLicenses).toBe(5);
      // One add-on, bought on the first event's day, and no second.
      expect(await system.providerOrder(`${order}.a1`)).toMatchObject({ licenses: 2 });
      expect(await system.providerOrder(`${order}.a2`)).toBeNull();
    },
  );

  it.each([
    ['E-41', 'lets go after the seat job looked'],
    ['E-42', 'lets go between the refused removal and anything the seat job reads next'],
  ])(
    'moves a waiting add-on (%s) whose job is running just then and %s, without failing the seat job',
    async (order, when) => {
      await system.send('order.placed', orderPlaced({ order, licenses: 5 }));
      await system.waitForChain(order, () => true);
      const jobId = addOnJobId(chainIdOf(order));
      const scheduled = (c: ChainView) =>
        c.history.filter((h) => h.event === 'seats.addon_scheduled').length;
      await seats(system, order, 7, { effectiveAt: clock.now() + 3 * DAY });
      await system.waitForChain(order, (c) => scheduled(c) === 1);

      // The waiting add-on's job is running (a worker fetched it) when a newer event moves it.
      const seatWorker = system.started.workers?.workers.find((w) => w.name === 'seat-changes');
      if (!seatWorker) throw new Error('no seat-changes worker');
      await seatWorker.pause(true);
      // A paused worker still takes the job its fetch in flight brings: give it one to finish.
      const flush = await system.queue('seat-changes').add(`${ADD_ON_DUE} none`, {
        chainId: 'none',
        order: 'none',
        customer: 'none',
        startsAt: 0,
      });
      await expect.poll(() => flush.getState()).toBe('completed');
      const connection = await connectRedis(system.redisUrl, 'worker');
      const holder = new Worker('seat-changes', null, { connection, prefix: QUEUE_PREFIX });
      let running: Job | undefined;
      // The running job puts itself off (as when it finds the chain locked), +1 min.
      const letGo = async () => {
        const job = running;
        running = undefined;
        await job?.moveToDelayed(Date.now() + 60_000, 'holder-token');
      };
      const remove = Job.prototype.remove;
      if (when.startsWith('lets go between')) {
        vi.spyOn(Job.prototype, 'remove').mockImplementation(async function (this: Job, ...args) {
          try {
            return await remove.apply(this, args);
          } catch (error) {
            if (this.id === jobId) await letGo();
            throw error;
          }
        });
      }
      try {
        await system.promote('seat-changes', jobId);
        await expect
          .poll(async () => (running ??= await holder.getNextJob('holder-token', { block: false })))
          .toBeDefined();
        expect(running?.id).toBe(jobId);
        seatWorker.resume();

        // Needed sooner: the newer event's add-on replaces the waiting one, its job moved.
        clock.advance(60);
        const soonerDate = clock.now() + DAY;
        const webhookId = `wh-seats-${order.toLowerCase()}-10`;
        await seats(system, order, 10, { effectiveAt: soonerDate }, webhookId);
        const seatJob = () => system.queue('seat-changes').getJob(webhookJobId(webhookId));
        if (running) {
          await expect.poll(async () => (await seatJob())?.getState()).toBe('delayed');
          await letGo();
        }
        await system.waitForChain(order, (c) => scheduled(c) === 2);
        await expect.poll(async () => (await seatJob())?.getState()).toBe('completed');
        // It waited for the running job instead of failing an attempt on it.
        expect((await seatJob())?.failedReason).toBeUndefined();
        const moved = await system.queue('seat-changes').getJob(jobId);
        expect(moved?.data).toMatchObject({ startsAt: soonerDate });
      } finally {
        vi.restoreAllMocks();
        await holder.close();
        await connection.quit();
      }
    },
  );

  it('never buys a license twice or loses one under concurrent events on one chain', async () => {
    await system.send('order.placed', orderPlaced({ order: 'E-5', licenses: 5 }));
    await system.waitForChain('E-5', () => true);
    const totals = [7, 12, 6, 15, 9, 11, 8, 14, 10, 13];
    await Promise.all(totals.map((licenses) => seats(system, 'E-5', licenses)));
    const chain = await system.waitForChain(
      'E-5',
      (c) =>
        c.history.filter((h) => h.event.startsWith('seats.') && h.event !== 'seats.buying')
          .length === totals.length,
      45_000,
    );
    // Every event is needed now: each applied increase that finds licenses missing buys an add-on.
    const outcome = await concurrentSeatOutcome(system, 'E-5', chain);
    expect(outcome.events).toBe(totals.length);
    const bought = chain.addOns.reduce((sum, a) => sum + a.licenses, 0);
    expect(bought).toBe(outcome.largestApplied - 5);
    const atProvider = await Promise.all(chain.addOns.map((a) => system.providerOrder(a.order)));
    expect(atProvider.reduce((sum, o) => sum + (o?.licenses ?? 0), 0)).toBe(bought);
    expect(await system.providerOrder(`E-5.a${chain.addOns.length + 1}`)).toBeNull();
  }, 60_000);

  it('orders an add-on at once when the licenses are needed now', async () => {
    await system.send('order.placed', orderPlaced({ order: 'E-2', licenses: 2 }));
    await system.waitForChain('E-2', () => true);
    await seats(system, 'E-2', 3);
    const chain = await system.waitForChain('E-2', (c) => c.addOns.length === 1);
    expect(chain.addOns[0]).toMatchObject({ order: 'E-2.a1', licenses: 1 });
  });

  it('buys nothing for a decrease (the newest add-on shrinks at renewal) and ignores a stale event', async () => {
    await system.send('order.placed', orderPlaced({ order: 'E-3', licenses: 2 }));
    await system.waitForChain('E-3', () => true);
    const t = clock.now();
    await system.send('seats.changed', { order: 'E-3', licenses: 5, occurredAt: t });
    await system.waitForChain('E-3', (c) => c.addOns.length === 1);

    clock.advance(60);
    await system.send('seats.changed', { order: 'E-3', licenses: 3, occurredAt: t + 60 });
    const decreased = await system.waitForChain('E-3', (c) => c.addOns[0]?.nextLicenses === 1);
    expect(lastEvent(decreased)).toBe('seats.changed');
    expect(decreased.nextLicenses).toBe(2);
    expect(decreased.addOns).toHaveLength(1);
    expect(decreased.addOns[0]?.licenses).toBe(3);

    await system.send('seats.changed', { order: 'E-3', licenses: 9, occurredAt: t + 30 });
    const stale = await system.waitForChain('E-3', (c) => lastEvent(c) === 'seats.stale');
    expect(stale.addOns).toHaveLength(1);
    expect(stale.addOns[0]?.nextLicenses).toBe(1);
    expect(await system.providerOrder('E-3.a2')).toBeNull();
  });

  it('leaves room for a waiting add-on in the counts of renewals that come before it', async () => {
    // 5; renewed (term 2); an add-on of 3 bought 5 days before term 2 starts, so it ends a few
    // days before term 2 does (month ends may shorten either), after the main chain's next
    // renewal is due.
    await system.send('order.placed', orderPlaced({ order: 'E-8', licenses: 5 }));
    const placed = await system.waitForChain('E-8', () => true);
    const renewed = await renewAt(system, clock, 'E-8', {
      count: 2,
      expiresAt: placed.term.expiresAt,
    });
    clock.set(placed.term.expiresAt - 5 * DAY);
    await seats(system, 'E-8', 8);
    const bought = await system.waitForChain('E-8', (c) => c.addOns.length === 1);
    const addOnEnd = bought.addOns[0]?.term.expiresAt ?? 0;
    expect(addOnEnd).toBeGreaterThan(renewed.term.expiresAt - 7 * DAY);
    expect(addOnEnd).toBeLessThan(renewed.term.expiresAt);
    // Down to 4: the add-on stops at its renewal, and the main chain would renew with 4.
    clock.advance(60);
    await seats(system, 'E-8', 4);
    await system.waitForChain('E-8', (c) => c.nextLicenses === 4);
    await stopFirstAddOn(system, clock, 'E-8', addOnEnd);

    // 8 again: the add-on covers 3 until it ends, so a new one waits for then. The main chain
    // renews before that: with its own 5, leaving the waiting add-on's 3.
    clock.advance(60);
    await seats(system, 'E-8', 8);
    const waiting = await system.waitForChain(
      'E-8',
      (c) => lastEvent(c) === 'seats.addon_scheduled',
    );
    expect(waiting.nextLicenses).toBe(5);
    const term3 = await renewAt(system, clock, 'E-8', {
      count: 3,
      expiresAt: renewed.term.expiresAt,
    });
    expect(term3.licenses).toBe(5);
    const chain = await buyWaitingAddOn(system, clock, 'E-8', { at: addOnEnd, nth: 2 });
    expect(chain.addOns[1]).toMatchObject({ licenses: 3, term: { startsAt: addOnEnd } });
    expect(chain.nextLicenses + (chain.addOns[1]?.nextLicenses ?? 0)).toBe(8);
  });

  it('orders the replacement of a stopped add-on on the day it ends', async () => {
    await system.send('order.placed', orderPlaced({ order: 'E-7', licenses: 5 }));
    const placed = await system.waitForChain('E-7', () => true);
    // An add-on of 3 bought 5 days in, so it ends 5 days into the main chain's next term.
    clock.advance(5 * DAY);
    const addOnEnd = await firstAddOnGivenUp(system, clock, 'E-7', { up: 8, down: 5 });
    await renewAt(system, clock, 'E-7', { count: 2, expiresAt: placed.term.expiresAt });
    await stopFirstAddOn(system, clock, 'E-7', addOnEnd);

    // 8 again, the day before the term in force ends: it has them, and the next term has them
    // until the add-on ends. createFirstOrder starts at once, so the new add-on waits for then.
    clock.advance(DAY);
    await seats(system, 'E-7', 8);
    const waiting = await system.waitForChain(
      'E-7',
      (c) => lastEvent(c) === 'seats.addon_scheduled',
    );
    expect(waiting.history.at(-1)?.detail).toContain(formatInstant(addOnEnd));
    const chain = await buyWaitingAddOn(system, clock, 'E-7', { at: addOnEnd, nth: 2 });
    expect(chain.addOns[1]).toMatchObject({
      order: 'E-7.a2',
      licenses: 3,
      term: { startsAt: addOnEnd },
    });
  });

  it('keeps the total in the next renewal when the provider refuses a waiting add-on', async () => {
    await system.send('order.placed', orderPlaced({ order: 'E-10', licenses: 5 }));
    await system.waitForChain('E-10', () => true);
    const neededAt = clock.now() + 3 * DAY;
    await seats(system, 'E-10', 8, { effectiveAt: neededAt });
    const waiting = await system.waitForChain(
      'E-10',
      (c) => lastEvent(c) === 'seats.addon_scheduled',
    );
    // Until the add-on is bought, the main chain's next renewal leaves room for its 3.
    expect(waiting.nextLicenses).toBe(5);
    await leftByDeadJob(system, 'E-10', 'product-withdrawn', () => ({
      product: 'no-such-product',
    }));

    clock.set(neededAt);
    await system.promote('seat-changes', addOnJobId(chainIdOf('E-10')));
    const chain = await system.waitForChain('E-10', (c) => lastEvent(c) === 'seats.refused');
    // The event was applied when the add-on was scheduled: its 8 now renew with the main chain.
    expect(chain.addOns).toEqual([]);
    expect(chain.nextLicenses).toBe(8);
  });

  it('stops the totals queued after a waiting add-on the provider refuses, keeping the newest in the next renewal', async () => {
    await system.send('order.placed', orderPlaced({ order: 'E-53', licenses: 5 }));
    let chain = await system.waitForChain('E-53', () => true);
    const day = (n: number) => chain.term.startsAt + n * DAY;
    chain = await sendDatedTotals(system, clock, 'E-53', QUEUED, day);
    await leftByDeadJob(system, 'E-53', 'product-withdrawn', () => ({
      product: 'no-such-product',
    }));

    clock.set(day(3));
    await system.promote('seat-changes', addOnJobId(chainIdOf('E-53')));
    chain = await system.waitForChain('E-53', (c) => lastEvent(c) === 'seats.refused');
    expect(chain.addOns).toEqual([]);
    expect(chain.nextLicenses).toBe(12);
    // Nothing queued behind the refused add-on is bought later, by reconcile either.
    clock.set(day(7));
    await reconcileRound(system, 'reconcile-after-refusal');
    expect(lastEvent(await system.chain('E-53'))).toBe('seats.refused');
    expect(await system.providerOrder('E-53.a2')).toBeNull();
  });

  it('orders the replacements of stopped add-ons ending on different days, each on its day', async () => {
    const ends = await twoAddOnsStopped(system, clock, 'E-9');
    await seats(system, 'E-9', 10);
    const waiting = await system.waitForChain(
      'E-9',
      (c) => lastEvent(c) === 'seats.addon_scheduled',
    );
    expect(waiting.history.at(-1)?.detail).toContain(
      `3 more licenses needed from ${formatInstant(ends.first)}`,
    );

    // On the first end its job buys the 3, then waits, itself, for the second end.
    const first = await buyWaitingAddOn(system, clock, 'E-9', { at: ends.first, nth: 3 });
    expect(first.addOns[2]).toMatchObject({ licenses: 3, term: { startsAt: ends.first } });
    const job = addOnJobId(chainIdOf('E-9'));
    await expect.poll(() => jobState(system.queue('seat-changes'), job)).toBe('delayed');
    expect((await system.queue('seat-changes').getJob(job))?.data).toMatchObject({
      startsAt: ends.second,
    });
    const next = await system.chain('E-9');
    expect(lastEvent(next)).toBe('seats.addon_scheduled');
    expect(next.history.at(-1)?.detail).toContain(
      `2 more licenses needed from ${formatInstant(ends.second)}`,
    );

    const chain = await buyWaitingAddOn(system, clock, 'E-9', { at: ends.second, nth: 4 });
    expect(chain.addOns[3]).toMatchObject({ licenses: 2, term: { startsAt: ends.second } });
    expect(chain.nextLicenses).toBe(5);
    expect(chain.addOns.map((a) => a.nextLicenses)).toEqual([0, 0, 3, 2]);
  });
});

describe('external, a late waiting add-on on a chain awaiting its reactivation', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({
    clock,
    env: { PARTNER_VARIANT: 'external', PAYMENT_GRACE_DAYS: '0' },
  });

  it('carries the total into the renewal that the confirmed reactivation brings', async () => {
    await system.send('order.placed', orderPlaced({ order: 'E-57', licenses: 5 }));
    const placed = await system.waitForChain('E-57', () => true);
    // 8 needed from an hour before the term ends: 3 wait for their day (createFirstOrder).
    await seats(system, 'E-57', 8, { effectiveAt: placed.term.expiresAt - 3600 });
    await system.waitForChain('E-57', (c) => lastEvent(c) === 'seats.addon_scheduled');
    // Suspended for non-payment, then paid: it waits for an operator, with no renewal time.
    await paidAwaitingReactivation(system, 'E-57');

    // The add-on's job comes only after the term ended (workers down).
    clock.set(placed.term.expiresAt + DAY);
    await system.promote('seat-changes', addOnJobId(chainIdOf('E-57')));
    const late = await system.waitForChain('E-57', (c) => lastEvent(c) === 'seats.changed');
    expect(late).toMatchObject({ nextLicenses: 8, addOns: [] });
    expect(late.history.at(-1)?.detail).toMatch(
      /^8 licenses: the waiting 3 licenses are not bought, term 1 ended .* first; the next renewal carries 8$/,
    );

    // The operator confirms: the chain renews at once, with the 8 asked for.
    expect((await system.ops('POST', '/ops/chains/E-57/reactivated')).status).toBe(200);
    await system.waitForChain('E-57', (c) => c.term.count === 2);
    expect((await system.providerOrder('E-57.r2'))?.licenses).toBe(8);
    expect(await system.providerOrder('E-57.a1')).toBeNull();
  });
});

describe('the external variant: an increase needed from a later date, with an add-on', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({ clock, env: { PARTNER_VARIANT: 'external' } });

  /** A chain of 5 with an add-on of 3 bought 10 days into its term (so it ends 10 days later). */
  async function withAddOn(order: string) {
    await system.send('order.placed', orderPlaced({ order, licenses: 5 }));
    const placed = await system.waitForChain(order, () => true);
    clock.advance(10 * DAY);
    await seats(system, order, 8);
    const bought = await system.waitForChain(order, (c) => c.addOns.length === 1);
    clock.advance(60);
    return { placed, addOn: bought.addOns[0] as ChainView };
  }

  it('has an increase needed from the term end in force then: the main renewal carries it', async () => {
    const { placed, addOn } = await withAddOn('E-20');
    await seats(system, 'E-20', 10, { effectiveAt: placed.term.expiresAt });
    const set = await system.waitForChain(
      'E-20',
      (c) => c.history.at(-1)?.event === 'seats.changed',
    );
    expect(set.nextLicenses).toBe(7);
    expect(set.addOns[0]?.nextLicenses).toBe(3);

    const renewed = await renewAt(system, clock, 'E-20', {
      count: 2,
      expiresAt: placed.term.expiresAt,
    });
    expect(renewed.licenses).toBe(7);
    // The add-on's 3 run on past the main term's end: 10 from the day they are needed.
    expect(addOn.term.expiresAt).toBeGreaterThan(placed.term.expiresAt);
  });
});
