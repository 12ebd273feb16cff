// Reconcile end to end: what it repairs after a restart with other settings or a Redis that lost keys.
import { setTimeout as delay } from 'node:timers/promises';
import { type Job, type Queue, Worker } from 'bullmq';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { workerSettingsFrom } from '../../../jobs/deps.js';
import {
  makeProcessor as makeMaintenanceProcessor,
  RECONCILE_AT_START_JOB_ID,
  RECONCILE_ROUND_KEY,
  RECONCILE_SCHEDULER_ID,
} from '../../../jobs/maintenance.js';
import { suspensionJobId } from '../../../jobs/payment-signals.js';
import { renewalJobId } from '../../../jobs/renewals.js';
import { addOnJobId } from '../../../jobs/waiting-add-ons.js';
import { chainIdOf, chainKeys } from '../../../src/chains/keys.js';
import { ChainStore } from '../../../src/chains/store.js';
import type { ProvisioningClient } from '../../../src/client/provisioning-client.js';
import { manualClock, queueTimeMs, systemClock } from '../../../src/clock.js';
import { MalformedAnswerError, RefusalError, TransientError } from '../../../src/errors.js';
import { delayedFireTime, QUEUE_PREFIX, type QueueName } from '../../../src/queues.js';
import { connectRedis } from '../../../src/redis/connection.js';
import { startTestRedis, type TestRedis } from '../../helpers/redis-server.js';
import {
  DAY,
  jobState,
  lastEvent,
  leftByDeadJob,
  orderPlaced,
  reconcileRound,
  renewalJobOffMs,
  type System,
  slowToUnsuspend,
  startSystem,
  useSystem,
  workerDepsOf,
} from '../../helpers/system.js';

/** An order placed two days ago, once its chain is stored. */
async function placedTwoDaysAgo(system: System, order: string) {
  await system.send('order.placed', orderPlaced({ order, startsAt: systemClock.now() - 2 * DAY }));
  await system.waitForChain(order, () => true);
}

/** A chain whose payment job gave up halfway through its unsuspension. */
async function unsuspensionLeftHalfway(system: System, order: string) {
  await placedTwoDaysAgo(system, order);
  await leftByDeadJob(system, order, 'dead-payment-job', () => ({ unsuspending: true }));
}

describe('a restart with another RENEWAL_LEAD_DAYS', () => {
  const T0 = Date.UTC(2026, 2, 1, 9) / 1000;
  const clock = manualClock(T0);
  // The maintenance scheduler stays out of the way: the test runs reconcile itself.
  const env = { RECONCILE_INTERVAL_SECONDS: '86400' };
  let redis: TestRedis;

  beforeAll(async () => {
    redis = await startTestRedis();
  });
  afterAll(async () => {
    await redis.stop();
  });

  async function restartWithLead(leadDays: number, run: (system: System) => Promise<void>) {
    const system = await startSystem({
      clock,
      redisUrl: redis.url,
      env: { ...env, RENEWAL_LEAD_DAYS: String(leadDays) },
    });
    try {
      await run(system);
    } finally {
      await system.close();
    }
  }

  it('moves the renewal to the new lead, both ways, and the job with it', async () => {
    let expiresAt = 0;
    await restartWithLead(7, async (system) => {
      await system.send('order.placed', orderPlaced({ order: 'LEAD-1', startsAt: T0 - 10 * DAY }));
      const placed = await system.waitForChain('LEAD-1', () => true);
      expiresAt = placed.term.expiresAt;
      expect(placed.nextRenewalAt).toBe(expiresAt - 7 * DAY);
    });

    for (const lead of [3, 10]) {
      await restartWithLead(lead, async (system) => {
        // The start runs a round of reconcile at once, not a whole interval later.
        const chain = await system.waitForChain(
          'LEAD-1',
          (c) => c.nextRenewalAt === expiresAt - lead * DAY,
        );
        expect(chain.history.at(-1)).toMatchObject({
          event: 'renewal.rescheduled',
          detail: expect.stringMatching(`RENEWAL_LEAD_DAYS is ${lead}$`),
        });
        const wantedMs = systemClock.now() * 1000 + (expiresAt - lead * DAY - T0) * 1000;
        await expect
          .poll(async () => {
            const id = renewalJobId(chainIdOf('LEAD-1'), 2);
            const fires = await delayedFireTime(system.queue('renewals'), id);
            return Math.abs((fires ?? 0) - wantedMs);
          })
          .toBeLessThan(60_000);
        // A second round finds nothing to move.
        await reconcileRound(system, `reconcile-lead-${lead}-again`);
        expect((await system.chain('LEAD-1')).history).toHaveLength(chain.history.length);
      });
    }
  });
});

describe('a restart after Redis lost a renewal job', () => {
  let redis: TestRedis;

  beforeAll(async () => {
    redis = await startTestRedis();
  });
  afterAll(async () => {
    await redis.stop();
  });

  it('gets the job back from the round of reconcile the start runs', async () => {
    // A day between rounds: only the start's own round can give the job back within the test.
    const env = { RECONCILE_INTERVAL_SECONDS: '86400' };
    const first = await startSystem({ redisUrl: redis.url, env });
    const id = renewalJobId(chainIdOf('RESTART-1'), 2);
    try {
      await placedTwoDaysAgo(first, 'RESTART-1');
      await (await first.queue('renewals').getJob(id))?.remove();
    } finally {
      await first.close();
    }

    const second = await startSystem({ redisUrl: redis.url, env });
    try {
      await expect
        .poll(() => jobState(second.queue('renewals'), id), {
          timeout: 10_000,
        })
        .toBe('delayed');
    } finally {
      await second.close();
    }
  });
});

/**
 * Takes the job `id` (delayed) out of every list of its queue, as a Redis that lost the queue's
 * delayed list does (its record survives, in no list: it would never run), and expects one
 * reconcile round to put it back among the delayed.
 */
async function expectBackAfterLostDelayedList(
  system: System,
  name: QueueName,
  id: string,
  roundId: string,
) {
  const queue = system.queue(name);
  expect(await jobState(queue, id)).toBe('delayed');
  const client = await queue.backend.client;
  await client.del(queue.keys.delayed as string);
  expect(await jobState(queue, id)).toBe('unknown');

  await reconcileRound(system, roundId);
  expect(await jobState(queue, id)).toBe('delayed');
}

describe('a Redis that lost the delayed list of renewals', () => {
  const system = useSystem();

  it('gets the renewal job back from reconcile, though its record survived', async () => {
    await placedTwoDaysAgo(system, 'ORPHAN-1');
    await expectBackAfterLostDelayedList(
      system,
      'renewals',
      renewalJobId(chainIdOf('ORPHAN-1'), 2),
      'reconcile-orphan',
    );
  });
});

describe('a chain record reconcile cannot read', () => {
  const system = useSystem();

  it('is counted failed and logged, and the round goes on to the chains after it', async () => {
    await placedTwoDaysAgo(system, 'UNREADABLE-1');
    await placedTwoDaysAgo(system, 'UNREADABLE-2');
    // The first written by a version that stores a status this one does not know.
    const client = await system.queue('renewals').backend.client;
    const key = chainKeys(chainIdOf('UNREADABLE-1')).chain;
    const stored = (await client.get(key)) as string;
    await client.set(key, stored.replace('"status":"active"', '"status":"paused"'));
    // The second lost its renewal job.
    const id = renewalJobId(chainIdOf('UNREADABLE-2'), 2);
    await (await system.queue('renewals').getJob(id))?.remove();

    const result = await reconcileRound(system, 'reconcile-unreadable');
    expect(result.failed).toBe(1);
    expect(await jobState(system.queue('renewals'), id)).toBe('delayed');
  });
});

describe('a Redis that lost the delayed list of payment-signals, an overdue chain in its grace', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({ clock, env: { PAYMENT_GRACE_DAYS: '3' } });

  it('gets its suspension job back from reconcile, as a renewal job in no list is', async () => {
    const order = 'LOSTLIST-S1';
    await system.send('order.placed', orderPlaced({ order, startsAt: clock.now() - 2 * DAY }));
    await system.waitForChain(order, () => true);
    await system.send('payment.overdue', { order });
    await system.waitForChain(order, (c) => c.payment === 'overdue');
    await expectBackAfterLostDelayedList(
      system,
      'payment-signals',
      suspensionJobId(chainIdOf(order), 1),
      'reconcile-lostlist-s1',
    );
  });
});

describe('external: a Redis that lost the delayed list of seat-changes, an add-on waiting for its day', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({ clock, env: { PARTNER_VARIANT: 'external' } });

  it('gets the waiting add-on job back from reconcile, as a renewal job in no list is', async () => {
    const order = 'LOSTLIST-A1';
    await system.send('order.placed', orderPlaced({ order, licenses: 5, startsAt: clock.now() }));
    await system.waitForChain(order, () => true);
    const seats = { order, licenses: 8, effectiveAt: clock.now() + 5 * DAY };
    expect((await system.send('seats.changed', seats)).status).toBe(202);
    await system.waitForChain(order, (c) => c.history.at(-1)?.event === 'seats.addon_scheduled');
    await expectBackAfterLostDelayedList(
      system,
      'seat-changes',
      addOnJobId(chainIdOf(order)),
      'reconcile-lostlist-a1',
    );
  });
});

/** A chain whose seat job wrote its partial's intent and was then lost (or ran out of attempts). */
async function seatPurchaseLeftHalfway(system: System, order: string) {
  const placed = await system.send(
    'order.placed',
    orderPlaced({ order, startsAt: systemClock.now() - 2 * DAY }),
  );
  expect(placed.status).toBe(202);
  const chain = await system.waitForChain(order, () => true);
  const now = systemClock.now();
  const orderId = `${order}.p1`;
  await leftByDeadJob(system, order, 'dead-seat-job', () => ({
    partialCount: 1,
    intent: {
      kind: 'partial',
      method: 'createOrder',
      orderId,
      params: {
        customer: chain.customer,
        id: orderId,
        product: chain.product,
        licenses: 2,
        startsAt: now,
        expiresAt: chain.term.expiresAt,
      },
      jobId: 'lost-seat-job',
      event: { webhookId: `lost-seat-${order}`, occurredAt: now, total: chain.licenses + 2 },
    },
  }));
  return chain;
}

describe('a chain left in the middle of a seat purchase, its jobs lost', () => {
  const system = useSystem();

  it('gets the purchase finished by reconcile, and its renewal job back', async () => {
    const chain = await seatPurchaseLeftHalfway(system, 'MIDSEAT-1');
    const queue = system.queue('renewals');
    const id = renewalJobId(chainIdOf('MIDSEAT-1'), 2);
    await (await queue.getJob(id))?.remove();

    expect(await reconcileRound(system, 'reconcile-midseat')).toMatchObject({ failed: 0 });

    const store = new ChainStore(system.started.runtime.redis);
    expect((await store.get(chainIdOf('MIDSEAT-1')))?.intent).toBeNull();
    const bought = await system.chain('MIDSEAT-1');
    expect(bought.partials.map((p) => [p.orderId, p.licenses])).toEqual([['MIDSEAT-1.p1', 2]]);
    expect(bought.nextLicenses).toBe(chain.licenses + 2);
    expect(bought.history.at(-1)).toMatchObject({
      event: 'seats.partial_ordered',
      cause: { jobId: 'lost-seat-job', webhookId: 'lost-seat-MIDSEAT-1' },
    });
    expect((await system.providerOrder('MIDSEAT-1.p1'))?.licenses).toBe(2);
    expect(await jobState(queue, id)).toBe('delayed');
    // Run early, the renewal job finds nothing left to buy and its term not due yet.
    await system.promote('renewals', id);
    await expect.poll(() => jobState(queue, id)).toBe('delayed');
    expect((await system.chain('MIDSEAT-1')).partials).toHaveLength(1);
    expect(await system.providerOrder('MIDSEAT-1.r2')).toBeNull();
  });

  it('has a renewal job that finished a slow purchase put itself off to its due second', async () => {
    await seatPurchaseLeftHalfway(system, 'MIDSEAT-5');
    const queue = system.queue('renewals');
    const id = renewalJobId(chainIdOf('MIDSEAT-5'), 2);
    // The provider takes 3 s to make the purchase's order (the timeout allows 10).
    const provisioning = system.started.provisioning as unknown as Record<string, unknown>;
    const saved = { createOrder: provisioning.createOrder };
    const fast = provisioning.createOrder as ProvisioningClient['createOrder'];
    try {
      provisioning.createOrder = async (params: Parameters<typeof fast>[0]) => {
        await delay(3_000);
        return fast(params);
      };
      // Run early, the job finishes the purchase, then finds its term not due yet.
      await system.promote('renewals', id);
      await expect
        .poll(async () => (await system.chain('MIDSEAT-5')).partials.length, { timeout: 10_000 })
        .toBe(1);
      await expect.poll(() => jobState(queue, id)).toBe('delayed');
    } finally {
      Object.assign(provisioning, saved);
    }
    // Not moved by the call's 3 s.
    expect(await renewalJobOffMs(system, 'MIDSEAT-5')).toBeLessThan(1_000);
  });

  it('finishes the purchase of a flagged chain too, leaving its renewal to a person', async () => {
    await seatPurchaseLeftHalfway(system, 'MIDSEAT-3');
    await leftByDeadJob(system, 'MIDSEAT-3', 'flagging-job', () => ({ flagged: 'refused' }));
    const queue = system.queue('renewals');
    const id = renewalJobId(chainIdOf('MIDSEAT-3'), 2);
    await (await queue.getJob(id))?.remove();

    expect(await reconcileRound(system, 'reconcile-midseat-flagged')).toMatchObject({ failed: 0 });

    expect((await system.chain('MIDSEAT-3')).partials.map((p) => p.orderId)).toEqual([
      'MIDSEAT-3.p1',
    ]);
    expect(await queue.getJob(id)).toBeUndefined();
  });

  it.each([
    ['away', 'MIDSEAT-2', new TransientError('provisioning_unavailable', 'answered 503')],
    ['answering nonsense', 'MIDSEAT-4', new MalformedAnswerError('answered 200: not JSON')],
  ])(
    'with the provider %s, keeps the purchase for the next round and still ensures the jobs',
    async (_, order, failure) => {
      await seatPurchaseLeftHalfway(system, order);
      const queue = system.queue('renewals');
      const id = renewalJobId(chainIdOf(order), 2);
      await (await queue.getJob(id))?.remove();
      const away: ProvisioningClient = Object.create(system.started.provisioning);
      away.createOrder = async () => {
        throw failure;
      };

      const result = await reconcileRound(system, `reconcile-${order}-away`, {
        provisioning: away,
      });

      expect(result).toMatchObject({ failed: 1 });
      expect(await jobState(queue, id)).toBe('delayed');
      const stored = await new ChainStore(system.started.runtime.redis).get(chainIdOf(order));
      expect(stored?.intent?.orderId).toBe(`${order}.p1`);
      expect(await system.providerOrder(`${order}.p1`)).toBeNull();

      // The provider back, the next round buys it.
      expect(await reconcileRound(system, `reconcile-${order}-back`)).toMatchObject({ failed: 0 });
      expect((await system.chain(order)).partials.map((p) => p.orderId)).toEqual([`${order}.p1`]);
    },
  );
});

describe("reconcile's lock during a slow provider call", () => {
  const system = useSystem();

  it('keeps the chain from every other holder while its unsuspendOrder call is in flight', async () => {
    // A payment job gave up halfway through its unsuspension: reconcile finishes it.
    await unsuspensionLeftHalfway(system, 'SLOW-1');
    const { provisioning } = system.started;
    let inCall = false;
    const slow: ProvisioningClient = Object.create(provisioning);
    slow.unsuspendOrder = async (params) => {
      inCall = true;
      // Three leases long, as a remote call may take up to PROVISIONING_TIMEOUT_MS.
      await delay(1_500);
      inCall = false;
      return provisioning.unsuspendOrder(params);
    };
    const chains = new ChainStore(system.started.runtime.redis, { leaseMs: 500 });
    const run = reconcileRound(system, 'reconcile-slow', { provisioning: slow, chains });
    await expect.poll(() => inCall, { timeout: 5_000 }).toBe(true);
    await delay(1_000);
    expect(inCall).toBe(true);
    expect((await chains.lock(chainIdOf('SLOW-1'), 'another-holder')).kind).toBe('locked');
    await run;
    expect((await system.chain('SLOW-1')).history.at(-1)?.event).toBe('chain.unsuspended');
  });
});

describe('reconcile finishing a slow unsuspension', () => {
  const system = useSystem();

  it("leaves the renewal job firing at the chain's renewal time, to the second", async () => {
    await unsuspensionLeftHalfway(system, 'SLOW-2');
    // A remote that takes 3 s to answer (PROVISIONING_TIMEOUT_MS allows 10).
    const slow = slowToUnsuspend(system.started.provisioning, 3_000);
    const round = await reconcileRound(system, 'reconcile-slow-2', { provisioning: slow });
    expect(round).toMatchObject({ failed: 0 });

    expect(lastEvent(await system.chain('SLOW-2'))).toBe('chain.unsuspended');
    // Not moved by the call's 3 s.
    expect(await renewalJobOffMs(system, 'SLOW-2')).toBeLessThan(1_000);
  });
});

/**
 * A chain whose payment job gave up halfway through its unsuspension, and whose renewal job is
 * gone: what reconcile must repair.
 */
async function unsuspensionLeftWithoutJob(system: System, order: string) {
  await unsuspensionLeftHalfway(system, order);
  const queue = system.queue('renewals');
  const id = renewalJobId(chainIdOf(order), 2);
  await (await queue.getJob(id))?.remove();
  return { queue, id };
}

describe('reconcile with the provider away for an unsuspension left halfway', () => {
  const system = useSystem();

  it('still gets the chain its renewal job back, and counts the chain as failed', async () => {
    const { queue, id } = await unsuspensionLeftWithoutJob(system, 'AWAY-1');
    expect(await queue.getJob(id)).toBeUndefined();

    const away: ProvisioningClient = Object.create(system.started.provisioning);
    away.unsuspendOrder = async () => {
      throw new TransientError(
        'provisioning_unavailable',
        'provisioning unsuspendOrder answered 503',
      );
    };
    const result = await reconcileRound(system, 'reconcile-away', { provisioning: away });

    expect(result).toMatchObject({ failed: 1 });
    expect(await jobState(queue, id)).toBe('delayed');
    // The unsuspension is still to do, for the next round.
    const stored = await new ChainStore(system.started.runtime.redis).get(chainIdOf('AWAY-1'));
    expect(stored?.unsuspending).toBe(true);
  });
});

/** A reconcile round run here (by job id), and the chains whose lock it took. */
function roundCountingLocks(system: System) {
  const locked: string[] = [];
  const store = new ChainStore(system.started.runtime.redis);
  const chains: ChainStore = Object.create(store);
  chains.lock = (chainId, token) => {
    locked.push(chainId);
    return store.lock(chainId, token);
  };
  const round = (id: string) => reconcileRound(system, id, { chains });
  return { locked, round };
}

describe('reconcile and cancelled chains', () => {
  const system = useSystem();

  it('takes the lock only of chains that need something: not at rest, not in place', async () => {
    for (const order of ['REST-1', 'LIVE-1', 'OFF-1', 'LOST-1']) {
      await placedTwoDaysAgo(system, order);
    }
    await system.send('order.cancelled', { order: 'REST-1' });
    await system.waitForChain('REST-1', (chain) => chain.status === 'cancelled');
    await system.ops('PUT', '/ops/chains/OFF-1/auto-renew', { enabled: false });
    await system.waitForChain('OFF-1', (chain) => chain.nextRenewalAt === null);
    const lostJob = renewalJobId(chainIdOf('LOST-1'), 2);
    await (await system.queue('renewals').getJob(lostJob))?.remove();
    // LOST-2's job lost its record, while its entry in the delayed set stayed.
    await placedTwoDaysAgo(system, 'LOST-2');
    const recordless = renewalJobId(chainIdOf('LOST-2'), 2);
    const client = await system.queue('renewals').backend.client;
    await client.del(system.queue('renewals').toKey(recordless));

    const { locked, round } = roundCountingLocks(system);

    expect(await round('reconcile-locks-1')).toMatchObject({ checked: 5, failed: 0 });
    expect(locked.sort()).toEqual([chainIdOf('LOST-1'), chainIdOf('LOST-2')].sort());
    for (const id of [lostJob, recordless]) {
      expect(await jobState(system.queue('renewals'), id)).toBe('delayed');
    }

    // With every job in place, a round takes no lock at all.
    locked.length = 0;
    expect(await round('reconcile-locks-2')).toMatchObject({ checked: 5, failed: 0 });
    expect(locked).toEqual([]);
  });
});

describe('two reconcile rounds that both find an add-on of a cancelled main chain', () => {
  const system = useSystem({ env: { SEAT_INCREASE: 'addon' } });

  it('record the add-on cancelled once', async () => {
    await placedTwoDaysAgo(system, 'TWICE-1');
    expect((await system.send('seats.changed', { order: 'TWICE-1', licenses: 8 })).status).toBe(
      202,
    );
    const [addOn] = (await system.waitForChain('TWICE-1', (c) => c.addOns.length === 1)).addOns;
    const addOnId = chainIdOf(addOn?.order ?? '');
    // Cancelled while another job held the add-on: the cancel leaves it for reconcile.
    const store = new ChainStore(system.started.runtime.redis);
    expect((await store.lock(addOnId, 'another-job')).kind).toBe('held');
    expect((await system.ops('POST', '/ops/chains/TWICE-1/cancel')).status).toBe(200);
    await store.unlock(addOnId, 'another-job');
    expect((await store.get(addOnId))?.status).toBe('active');

    // Round B, another process's, has read its page and waits at the add-on's lock while round
    // A records the add-on cancelled.
    const chains: ChainStore = Object.create(store);
    let reached = () => {};
    const atLock = new Promise<void>((resolve) => {
      reached = resolve;
    });
    let release = () => {};
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    let gated = false;
    chains.lock = async (chainId, token, leaseMs) => {
      if (chainId === addOnId && !gated) {
        gated = true;
        reached();
        await gate;
      }
      return store.lock(chainId, token, leaseMs);
    };
    const roundB = reconcileRound(system, 'round-b', { chains });
    await atLock;
    // Two rounds at once: round B's hold lapsed (Redis away longer than its lease, say).
    await system.started.runtime.redis.del(RECONCILE_ROUND_KEY);
    await reconcileRound(system, 'round-a');
    release();
    await roundB;

    const stored = await store.get(addOnId);
    expect(stored?.status).toBe('cancelled');
    const shown = (await system.chain('TWICE-1')).addOns[0];
    const cancels = (shown?.history ?? []).filter((h) => h.event === 'chain.cancelled');
    expect(cancels.map((h) => h.cause.jobId)).toEqual(['round-a']);
    // Round B left the add-on's lock free.
    expect((await store.lock(addOnId, 'after-both')).kind).toBe('held');
  });
});

describe('reconcile when its lock is lost during a failed unsuspension', () => {
  const system = useSystem();

  it('touches none of the chain’s jobs from its older copy', async () => {
    const { queue, id } = await unsuspensionLeftWithoutJob(system, 'LOST-1');

    const { redis } = system.started.runtime;
    const store = new ChainStore(redis);
    const away: ProvisioningClient = Object.create(system.started.provisioning);
    // Asserted after the round: reconcile counts any error of a chain's as that chain's failure.
    let taken: string | null = null;
    away.unsuspendOrder = async () => {
      // The lease ran out during the call, and another holder has the chain now.
      await redis.del(chainKeys(chainIdOf('LOST-1')).lock);
      taken = (await store.lock(chainIdOf('LOST-1'), 'another-holder')).kind;
      throw new TransientError('provisioning_unavailable', 'provisioning unsuspendOrder timed out');
    };
    const result = await reconcileRound(system, 'reconcile-lost', { provisioning: away });

    expect(taken).toBe('held');
    expect(result).toMatchObject({ failed: 1 });
    expect(await queue.getJob(id)).toBeUndefined();
    await store.unlock(chainIdOf('LOST-1'), 'another-holder');
  });
});

describe('reconcile finishing an external seat event left between its steps', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({ clock, env: { PARTNER_VARIANT: 'external' } });

  it('never puts its own job back in the delayed set while the add-on job runs', async () => {
    await system.send('order.placed', orderPlaced({ order: 'RX-1', licenses: 5 }));
    const placed = await system.waitForChain('RX-1', () => true);
    const now = clock.now();
    // A seat job died between the purchases of one event: the rest is needed in 5 days.
    await leftByDeadJob(system, 'RX-1', 'crashed-seat-job', () => ({
      lastSeatEventAt: now,
      unfinishedSeatEvent: {
        webhookId: 'lost-seat-rx1',
        occurredAt: now,
        total: placed.licenses + 2,
        neededAt: now + 5 * DAY,
        style: 'addon',
      },
    }));

    const connection = await connectRedis(system.redisUrl, 'worker');
    // The chain's waiting add-on job, running on some worker right now (locked, not removable).
    const seatWorker = system.started.workers?.workers.find((w) => w.name === 'seat-changes');
    await seatWorker?.close(true);
    const seatQueue = system.queue('seat-changes');
    const addOnId = addOnJobId(chainIdOf('RX-1'));
    await seatQueue.add('add-on due RX-1', { chainId: chainIdOf('RX-1') }, { jobId: addOnId });
    const other = new Worker('seat-changes', null, { connection, prefix: QUEUE_PREFIX });
    const running = await other.getNextJob('other-worker-token');
    expect(running?.id).toBe(addOnId);

    // A reconcile round, as a worker runs it: its job active, locked by that worker.
    const maintenanceQueue = system.queue('maintenance');
    await system.started.workers?.workers.find((w) => w.name === maintenanceQueue.name)?.close();
    await maintenanceQueue.add('reconcile renewals', {}, { jobId: 'round-rx1' });
    const maintenance = new Worker(maintenanceQueue.name, null, {
      connection,
      prefix: QUEUE_PREFIX,
    });
    let round = await maintenance.getNextJob('maintenance-token');
    // The start's own round may come first: it is done with.
    while (round && round.id !== 'round-rx1') {
      await round.moveToCompleted('skipped', 'maintenance-token', false);
      round = await maintenance.getNextJob('maintenance-token');
    }
    if (!round) throw new Error('no reconcile job');
    try {
      const result = await makeMaintenanceProcessor(workerDepsOf(system))(round);
      // The round returned: its job must still be the worker's to complete.
      expect({ result, state: await round.getState() }).toMatchObject({
        result: { failed: 1 },
        state: 'active',
      });
    } finally {
      await maintenance.close(true);
      await other.close(true);
      await connection.quit();
    }
  });
});

describe('a seat job that ran out of attempts, its purchase refused in reconcile', () => {
  const system = useSystem();

  it("decides afresh on a person's retry once the cause is fixed", async () => {
    const now = systemClock.now();
    await system.send('order.placed', orderPlaced({ order: 'RS-1', startsAt: now - 10 * DAY }));
    await system.waitForChain('RS-1', () => true);
    const provisioning = system.started.provisioning;
    const createOrder = provisioning.createOrder;
    const queue = system.queue('seat-changes');
    try {
      // The provider away for longer than the seat job's attempts (one here).
      provisioning.createOrder = async () => {
        throw new TransientError('provisioning_unavailable', 'createOrder answered 503');
      };
      await queue.add(
        'seats.changed RS-1',
        {
          webhookId: 'wh-rs1',
          type: 'seats.changed',
          data: { order: 'RS-1', licenses: 7 },
          occurredAt: now,
          receivedAt: now,
        },
        { jobId: 'seat-rs1', attempts: 1 },
      );
      await expect.poll(() => jobState(queue, 'seat-rs1'), { timeout: 10_000 }).toBe('failed');
      expect((await system.chain('RS-1')).inFlight).toMatchObject({ kind: 'partial' });

      // Back, but refusing: reconcile finishes the purchase and records the refusal.
      provisioning.createOrder = async () => {
        throw new RefusalError('provisioning_refused', 'product suite-std is on hold');
      };
      expect(await reconcileRound(system, 'reconcile-rs1')).toMatchObject({ failed: 0 });
      expect((await system.chain('RS-1')).history.at(-1)?.event).toBe('seats.refused');

      // The cause fixed, a person retries the seat job in Bull Board.
      provisioning.createOrder = createOrder;
      await (await queue.getJob('seat-rs1'))?.retry('failed');
      await expect
        .poll(() => jobState(queue, 'seat-rs1'), { timeout: 10_000 })
        .toMatch(/^(completed|failed)$/);
      const job = await queue.getJob('seat-rs1');
      expect({
        state: await job?.getState(),
        reason: job?.failedReason,
        made: job?.attemptsMade,
      }).toEqual({ reason: undefined, made: 2, state: 'completed' });
    } finally {
      provisioning.createOrder = createOrder;
    }
  });
});

describe('a Redis that lost the suspension job of an overdue chain', () => {
  const utc = (y: number, m: number, d: number) => Date.UTC(y, m - 1, d, 9) / 1000;
  const clock = manualClock(utc(2026, 3, 1));
  const system = useSystem({ clock, env: { PAYMENT_GRACE_DAYS: '3' } });
  const queue = () => system.queue('payment-signals');

  it('gets the job back from reconcile, so the chain is suspended when its grace ends', async () => {
    await system.send(
      'order.placed',
      orderPlaced({ order: 'LOSTSUSP-1', startsAt: utc(2026, 3, 1) }),
    );
    await system.waitForChain('LOSTSUSP-1', () => true);
    clock.set(utc(2026, 3, 5));
    await system.send('payment.overdue', { order: 'LOSTSUSP-1' });
    await system.waitForChain('LOSTSUSP-1', (c) => c.payment === 'overdue');
    const id = suspensionJobId(chainIdOf('LOSTSUSP-1'), 1);
    await (await queue().getJob(id))?.remove();

    // Within the grace: back, for the end of the grace.
    clock.set(utc(2026, 3, 6));
    await reconcileRound(system, 'reconcile-lostsusp-1');
    const restored = await queue().getJob(id);
    expect(restored && (await restored.getState())).toBe('delayed');
    expect(restored?.data).toMatchObject({ episode: 1, dueAt: utc(2026, 3, 8) });
    // A round that finds it in place leaves it.
    await reconcileRound(system, 'reconcile-lostsusp-2');
    expect((await queue().getJob(id))?.timestamp).toBe(restored?.timestamp);

    clock.set(utc(2026, 3, 8));
    await system.promote('payment-signals', id);
    const suspended = await system.waitForChain('LOSTSUSP-1', (c) => c.status === 'suspended');
    expect(lastEvent(suspended)).toBe('chain.suspended');
    expect((await system.providerOrder('LOSTSUSP-1'))?.status).toBe('suspended');
    // Suspended: no round brings the finished job back.
    await reconcileRound(system, 'reconcile-lostsusp-3');
    expect(await jobState(queue(), id)).toBe('completed');
  });

  it('lost past the grace, runs it at once', async () => {
    await system.send(
      'order.placed',
      orderPlaced({ order: 'LOSTSUSP-2', startsAt: utc(2026, 3, 8) }),
    );
    await system.waitForChain('LOSTSUSP-2', () => true);
    await system.send('payment.overdue', { order: 'LOSTSUSP-2' });
    await system.waitForChain('LOSTSUSP-2', (c) => c.payment === 'overdue');
    await (await queue().getJob(suspensionJobId(chainIdOf('LOSTSUSP-2'), 1)))?.remove();

    clock.set(utc(2026, 3, 20));
    await reconcileRound(system, 'reconcile-lostsusp-4');
    await system.waitForChain('LOSTSUSP-2', (c) => c.status === 'suspended');
  });

  it('does not bring back the job of a suspension that found nothing in force', async () => {
    await system.send(
      'order.placed',
      orderPlaced({ order: 'LOSTSUSP-3', startsAt: utc(2026, 1, 1), autoRenew: false }),
    );
    await system.waitForChain('LOSTSUSP-3', () => true);
    await system.send('payment.overdue', { order: 'LOSTSUSP-3' });
    await system.waitForChain('LOSTSUSP-3', (c) => c.payment === 'overdue');
    const id = suspensionJobId(chainIdOf('LOSTSUSP-3'), 1);
    clock.advance(3 * DAY);
    await system.promote('payment-signals', id);
    await expect
      .poll(async () => (await queue().getJob(id))?.returnvalue)
      .toBe('skipped: nothing in force');
    // Its record kept a week, then removed: no round adds it again.
    await (await queue().getJob(id))?.remove();
    await reconcileRound(system, 'reconcile-lostsusp-5');
    expect(await queue().getJob(id)).toBeUndefined();
    expect((await system.chain('LOSTSUSP-3')).status).toBe('expired');
  });
});

describe('reconcile while a renewal waits out its backoff', () => {
  const system = useSystem();

  /** Waits until the job failed one attempt and BullMQ put it back for its backoff. */
  async function failedOnceAndBackingOff(queue: Queue, id: string) {
    await expect
      .poll(
        async () => {
          const job = await queue.getJob(id);
          return job !== undefined && (await job.getState()) === 'delayed' && job.attemptsMade;
        },
        { timeout: 10_000 },
      )
      .toBe(1);
  }

  it("keeps the job's time: the provider asked for a wait (Retry-After)", async () => {
    const now = systemClock.now();
    await system.send(
      'order.placed',
      orderPlaced({ order: 'BACKOFF-1', startsAt: now - 25 * DAY, autoRenew: false }),
    );
    await system.waitForChain('BACKOFF-1', () => true);
    const provisioning = system.started.provisioning;
    const { createOrder, createRecorded } = provisioning;
    let calls = 0;
    const away = async (): Promise<never> => {
      calls += 1;
      throw new TransientError('provisioning_unavailable', 'createOrder answered 503', {
        retryAfterMs: 10 * 60_000,
      });
    };
    try {
      provisioning.createOrder = away;
      if (createRecorded) provisioning.createRecorded = away;
      await system.ops('PUT', '/ops/chains/BACKOFF-1/auto-renew', { enabled: true });
      // The renewal tried once and BullMQ put it back for its backoff, at least 10 minutes.
      const queue = system.queue('renewals');
      const id = renewalJobId(chainIdOf('BACKOFF-1'), 2);
      await failedOnceAndBackingOff(queue, id);
      const firesAt = await delayedFireTime(queue, id);
      expect((firesAt ?? 0) - queueTimeMs()).toBeGreaterThan(9 * 60_000);

      await reconcileRound(system, 'reconcile-backoff');
      await delay(1_000);
      expect(await delayedFireTime(queue, id)).toBe(firesAt);
      expect(calls).toBe(1);

      // Setting the value it already has changes nothing: no attempt spent on the provider
      // that asked for the wait (a script asserting `on` every minute would spend them all).
      const same = await system.ops('PUT', '/ops/chains/BACKOFF-1/auto-renew', { enabled: true });
      expect(same.status).toBe(200);
      await delay(1_000);
      expect(await delayedFireTime(queue, id)).toBe(firesAt);
      expect(calls).toBe(1);

      // An operator's switch is a reason to try now, as a payment is.
      await system.ops('PUT', '/ops/chains/BACKOFF-1/auto-renew', { enabled: false });
      provisioning.createOrder = createOrder;
      if (createRecorded) provisioning.createRecorded = createRecorded;
      await system.ops('PUT', '/ops/chains/BACKOFF-1/auto-renew', { enabled: true });
      const renewed = await system.waitForChain('BACKOFF-1', (c) => c.term.count === 2);
      expect(renewed.history.filter((h) => h.event === 'renewal.ordered')).toHaveLength(1);
    } finally {
      provisioning.createOrder = createOrder;
      if (createRecorded) provisioning.createRecorded = createRecorded;
    }
  });

  it('moves it when a higher lead made the chain due again: no backoff is that long', async () => {
    const now = systemClock.now();
    // Term ends in 3..6 days: due under the default lead (7), not under a lead of 1.
    await system.send(
      'order.placed',
      orderPlaced({ order: 'BOLEAD-1', startsAt: now - 25 * DAY, autoRenew: false }),
    );
    const placed = await system.waitForChain('BOLEAD-1', () => true);
    const queue = system.queue('renewals');
    const id = renewalJobId(chainIdOf('BOLEAD-1'), 2);
    // The renewal job's attempts fail before it writes an intent (Redis in trouble for a
    // while: its backoff grown to minutes), so its chain keeps no renewal in flight.
    const lock = ChainStore.prototype.lock;
    const spy = vi.spyOn(ChainStore.prototype, 'lock').mockImplementation(async function (
      this: ChainStore,
      chainId,
      token,
      leaseMs,
    ) {
      if (token.startsWith(`${id}/`)) {
        throw new TransientError('redis_unavailable', 'Redis is away', {
          retryAfterMs: 10 * 60_000,
        });
      }
      return lock.call(this, chainId, token, leaseMs);
    });
    try {
      await system.ops('PUT', '/ops/chains/BOLEAD-1/auto-renew', { enabled: true });
      await failedOnceAndBackingOff(queue, id);
      expect((await system.chain('BOLEAD-1')).inFlight).toBeNull();

      // A restart with RENEWAL_LEAD_DAYS=1: the renewal (and its job) move to expiresAt - 1 day.
      const base = workerSettingsFrom(system.settings);
      await reconcileRound(system, 'review-lead-1', { settings: { ...base, leadDays: 1 } });
      expect((await system.chain('BOLEAD-1')).nextRenewalAt).toBe(placed.term.expiresAt - 1 * DAY);
      const movedOut = (await delayedFireTime(queue, id)) ?? 0;
      expect(movedOut - queueTimeMs()).toBeGreaterThan(DAY * 1000);

      // A restart with the lead back at 7: the chain is due now, and so must its job be.
      await reconcileRound(system, 'review-lead-7', { settings: { ...base, leadDays: 7 } });
      const chain = await system.chain('BOLEAD-1');
      expect(chain.nextRenewalAt).toBeLessThanOrEqual(systemClock.now());
      const firesAt = await delayedFireTime(queue, id);
      // Due: at most its backoff away (15 minutes), not a day or more.
      expect(
        firesAt === null ? 0 : firesAt - queueTimeMs(),
        'the job of a due chain still fires at the old lead, days away',
      ).toBeLessThan(16 * 60_000);
    } finally {
      spy.mockRestore();
    }
  });
});

describe('reconcile over due renewals waiting for a worker', () => {
  const system = useSystem();

  it('takes no lock for a job waiting in the queue, and replaces one in no list', async () => {
    const queue = system.queue('renewals');
    // No worker takes a job while the queue is paused: a backlog of due renewals.
    await queue.pause();
    try {
      const orders = ['BACKLOG-1', 'BACKLOG-2', 'BACKLOG-3'];
      for (const order of orders) {
        await system.send(
          'order.placed',
          orderPlaced({ order, startsAt: systemClock.now() - 25 * DAY }),
        );
        await system.waitForChain(order, () => true);
      }
      const ids = orders.map((order) => renewalJobId(chainIdOf(order), 2));
      await expect
        .poll(async () => Promise.all(ids.map(async (id) => jobState(queue, id))))
        .toEqual(['waiting', 'waiting', 'waiting']);
      // BACKLOG-3's job record survived, its entry in the wait list did not.
      const client = await queue.backend.client;
      const [lost] = ids.slice(2);
      await client.runCommand('lrem', [queue.keys.wait, 0, lost]);
      expect(await jobState(queue, lost as string)).toBe('unknown');

      const { locked, round } = roundCountingLocks(system);
      expect(await round('reconcile-backlog')).toMatchObject({ failed: 0 });
      expect(locked).toEqual([chainIdOf('BACKLOG-3')]);
      expect(await jobState(queue, lost as string)).toBe('waiting');
    } finally {
      await queue.resume();
    }
    for (const order of ['BACKLOG-1', 'BACKLOG-2', 'BACKLOG-3']) {
      const renewed = await system.waitForChain(order, (c) => c.term.count === 2);
      expect(renewed.history.filter((h) => h.event === 'renewal.ordered')).toHaveLength(1);
    }
  });
});

describe('one reconcile round at a time', () => {
  const system = useSystem();
  const renewalJobOf = (order: string) =>
    system.queue('renewals').getJob(renewalJobId(chainIdOf(order), 2));

  /** A chain whose renewal job was lost, while `holder` holds the round for `ms`. */
  async function lostJobWhileHeld(order: string, holder: string, ms: number) {
    await placedTwoDaysAgo(system, order);
    await (await renewalJobOf(order))?.remove();
    await system.started.runtime.redis.set(RECONCILE_ROUND_KEY, holder, 'PX', ms);
    return makeMaintenanceProcessor(workerDepsOf(system));
  }

  it('leaves the chains to a round running in another process, and runs once it is over', async () => {
    // A round another process runs now (the one its scheduler queued when the last one began).
    const round = await lostJobWhileHeld('ALONE-1', 'reconcile/other-process', 60_000);
    expect(await round({ id: 'beside-another', data: {} } as Job)).toEqual({
      skipped: 'another round is running',
    });
    expect(await renewalJobOf('ALONE-1')).toBe(undefined);
    const { redis } = system.started.runtime;
    await redis.del(RECONCILE_ROUND_KEY);
    expect(await reconcileRound(system, 'after-the-other')).toMatchObject({ failed: 0 });
    expect(await (await renewalJobOf('ALONE-1'))?.getState()).toBe('delayed');
    expect(await redis.exists(RECONCILE_ROUND_KEY)).toBe(0);
  });

  it('runs the round a start asks for once the hold of a round before it lapses, instead of skipping', async () => {
    // The hold of a process that died during its round, lapsing in a moment.
    const round = await lostJobWhileHeld('ALONE-2', 'reconcile/died', 1_500);
    expect(await round({ id: RECONCILE_AT_START_JOB_ID, data: {} } as Job)).toMatchObject({
      failed: 0,
    });
    expect(await (await renewalJobOf('ALONE-2'))?.getState()).toBe('delayed');
  });
});

describe('a start that cannot listen (its port is taken)', () => {
  // It fails before its workers run: a process that exits at once must not reset the interval
  // of the deployment it meant to join (the process that started last sets it).
  it("leaves the running deployment's reconcile interval and partner window as they were", async () => {
    const redis = await startTestRedis();
    const running = await startSystem({
      redisUrl: redis.url,
      env: { RECONCILE_INTERVAL_SECONDS: '3600' },
    });
    try {
      const maintenance = running.queue('maintenance');
      const every = async () => (await maintenance.getJobScheduler(RECONCILE_SCHEDULER_ID))?.every;
      expect(await every()).toBe(3_600_000);
      await expect(
        startSystem({
          redisUrl: redis.url,
          env: {
            PORT: String(running.started.port),
            RECONCILE_INTERVAL_SECONDS: '60',
            PARTNER_NAME: running.settings.PARTNER_NAME,
            PARTNER_RENEWAL_WINDOW_DAYS: '30',
          },
        }),
      ).rejects.toThrow(/cannot listen on HOST=127\.0\.0\.1 PORT=\d+: listen EADDRINUSE/);
      expect(await every()).toBe(3_600_000);
      expect((await running.partner()).renewalWindowDays).toBe(15);
      // A start that runs sets the window it was given.
      const joined = await startSystem({
        redisUrl: redis.url,
        env: { PARTNER_NAME: running.settings.PARTNER_NAME, PARTNER_RENEWAL_WINDOW_DAYS: '30' },
      });
      await joined.close();
      expect((await running.partner()).renewalWindowDays).toBe(30);
    } finally {
      await running.close();
      await redis.stop();
    }
  });
});
