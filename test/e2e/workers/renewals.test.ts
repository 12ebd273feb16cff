// Auto-renewal end to end: signed webhooks in, real workers, the embedded core, the ops API out.
import { createHash } from 'node:crypto';
import { Job, Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import type { WorkerDeps } from '../../../jobs/deps.js';
import { makeProcessor as makeOrdersProcessor } from '../../../jobs/orders.js';
import {
  ensureRenewalJob,
  makeRenewalProcessor,
  type PreparedRenewal,
  prepareRenewal,
  type RenewalJobData,
} from '../../../jobs/renewals.js';
import { chainIdOf } from '../../../src/chains/keys.js';
import type { Chain } from '../../../src/chains/records.js';
import { ChainStore } from '../../../src/chains/store.js';
import { systemClock } from '../../../src/clock.js';
import { addTerms } from '../../../src/domain/periods.js';
import { RefusalError, TransientError } from '../../../src/errors.js';
import { MAX_EPOCH_SECONDS } from '../../../src/provisioning/schemas.js';
import { QUEUE_PREFIX } from '../../../src/queues.js';
import { readScripts } from '../../../src/redis/lua-scripts.js';
import { capturingLogger } from '../../helpers/logger.js';
import {
  DAY,
  leftByDeadJob,
  metricValue,
  orderPlaced,
  reconcileRound,
  renewalIntentOf,
  type System,
  startSystem,
  workerDepsOf,
} from '../../helpers/system.js';

let system: System;
let redis: Redis;
let renewals: Queue;

beforeAll(async () => {
  system = await startSystem();
  redis = new Redis(system.redisUrl, { maxRetriesPerRequest: null });
  renewals = new Queue('renewals', { connection: redis, prefix: QUEUE_PREFIX });
});

afterAll(async () => {
  await renewals.close();
  await redis.quit();
  await system.close();
});

const now = () => systemClock.now();

/**
 * Places `order`, its first term started `daysAgo` days ago, with auto-renew off (so nothing
 * renews on its own), and answers its chain.
 */
async function placedWithAutoRenewOff(order: string, daysAgo: number) {
  await system.send(
    'order.placed',
    orderPlaced({ order, startsAt: now() - daysAgo * DAY, autoRenew: false }),
  );
  return system.waitForChain(order, () => true);
}

async function renewalJob(order: string, count: number) {
  return renewals.getJob(`renew-${chainIdOf(order)}-${count}`);
}

describe('a monthly marketplace chain whose first term started 25 days ago', () => {
  it('renews within seconds, starting at the old expiry, and schedules the next renewal', async () => {
    const startsAt = now() - 25 * DAY;
    const placed = await system.send('order.placed', orderPlaced({ order: 'M-25', startsAt }));
    expect(placed.status).toBe(202);

    const chain = await system.waitForChain('M-25', (c) => c.term.count === 2);
    const firstExpiry = addTerms(startsAt, 'monthly', 1);
    expect(chain.term).toEqual({
      orderId: 'M-25.r2',
      count: 2,
      startsAt: firstExpiry,
      expiresAt: addTerms(startsAt, 'monthly', 2),
    });
    expect(chain).toMatchObject({ status: 'active', autoRenew: true, payment: 'ok', licenses: 5 });
    expect(chain.nextRenewalAt).toBe(chain.term.expiresAt - 7 * DAY);
    expect(chain.history.map((h) => h.event)).toEqual([
      'customer.created',
      'order.placed',
      'renewal.ordered',
    ]);
    expect(chain.history[2]?.cause).toMatchObject({ orderId: 'M-25.r2' });

    const next = await renewalJob('M-25', 3);
    expect(await next?.getState()).toBe('delayed');
    expect(next?.data).toMatchObject({ order: 'M-25', customer: 'cust-M-25', count: 3 });
    const firesAt = (next?.timestamp ?? 0) + (next?.delay ?? 0);
    expect(Math.abs(firesAt - (chain.nextRenewalAt as number) * 1000)).toBeLessThan(5_000);

    const upcoming = await system.ops('GET', '/ops/renewals?within=60');
    expect((upcoming.body as { renewals: { order: string }[] }).renewals).toContainEqual({
      order: 'M-25',
      customer: 'cust-M-25',
      dueAt: chain.nextRenewalAt,
      expiresAt: chain.term.expiresAt,
    });
  });
});

describe('a renewal job retried after its order was recorded but before the next term was scheduled', () => {
  it('adds the missing next-term job and orders nothing again', async () => {
    await system.send('order.placed', orderPlaced({ order: 'NEXT-1', startsAt: now() - 25 * DAY }));
    const renewed = await system.waitForChain('NEXT-1', (c) => c.term.count === 2);
    const job = await renewalJob('NEXT-1', 2);
    await vi.waitFor(async () => expect(await job?.getState()).toBe('completed'));
    // The attempt that died between its commit and the add of the next term's job.
    await (await renewalJob('NEXT-1', 3))?.remove();
    expect(await renewalJob('NEXT-1', 3)).toBeUndefined();

    await job?.retry('completed');
    await vi.waitFor(async () => expect(await renewalJob('NEXT-1', 3)).toBeDefined(), {
      timeout: 10_000,
    });
    const next = await renewalJob('NEXT-1', 3);
    expect(await next?.getState()).toBe('delayed');
    expect(next?.data).toMatchObject({ count: 3, dueAt: renewed.nextRenewalAt });
    await vi.waitFor(async () => {
      const retried = await renewalJob('NEXT-1', 2);
      expect(retried?.returnvalue).toBe('skipped: already_renewed');
    });
    const chain = await system.chain('NEXT-1');
    expect(chain.history.filter((h) => h.event === 'renewal.ordered')).toHaveLength(1);
    expect(chain.term).toEqual(renewed.term);
    expect(await system.providerOrder('NEXT-1.r3')).toBeNull();
  });
});

/** The SHA1 of a script in `dir` (relative to this file), as Redis names it. */
function scriptSha(dir: string, name: string): string {
  const script = readScripts(new URL(dir, import.meta.url)).find((s) => s.name === name);
  if (!script) throw new Error(`no script ${name} in ${dir}`);
  return createHash('sha1').update(script.lua).digest('hex');
}

describe('an embedded renewal', () => {
  it('writes the order and its record in one script, from the chain its job carries', async () => {
    const fused = scriptSha('../../../src/provisioning/scripts/', 'createOrderAndSaveChain');
    const claim = scriptSha('../../../src/chains/scripts/', 'claimRenewal');
    const lock = scriptSha('../../../src/chains/scripts/', 'lockChain');
    // Every client reloads a flushed script on its next call (NOSCRIPT, then EVAL).
    await redis.script('FLUSH');
    expect(await redis.script('EXISTS', fused, claim)).toEqual([0, 0]);
    await system.send('order.placed', orderPlaced({ order: 'ONE-1', startsAt: now() - 25 * DAY }));
    await system.waitForChain('ONE-1', (c) => c.term.count === 2);
    // The order placement took the chain's lock (lockChain); the renewal job claimed nothing.
    expect(await redis.script('EXISTS', fused, lock, claim)).toEqual([1, 1, 0]);
    // It was scheduled with the chain its intent was decided from (the one-step path).
    const job = await renewalJob('ONE-1', 2);
    expect(job?.data.prepared?.chain).toMatchObject({ order: 'ONE-1', term: { count: 1 } });
  });
});

describe('a yearly chain near its end', () => {
  it('renews for a calendar year from the anchor', async () => {
    const startsAt = now() - 360 * DAY;
    await system.send(
      'order.placed',
      orderPlaced({ order: 'Y-1', startsAt, duration: 'yearly', licenses: 40 }),
    );
    const chain = await system.waitForChain('Y-1', (c) => c.term.count === 2);
    expect(chain.term.startsAt).toBe(addTerms(startsAt, 'yearly', 1));
    expect(chain.term.expiresAt).toBe(addTerms(startsAt, 'yearly', 2));
    expect(chain.licenses).toBe(40);
  });
});

describe('a chain far from its end', () => {
  it('does not renew yet, and its renewal job waits for expiresAt - lead', async () => {
    await system.send('order.placed', orderPlaced({ order: 'F-1' }));
    const chain = await system.waitForChain('F-1', () => true);
    expect(chain.term.count).toBe(1);
    expect(chain.nextRenewalAt).toBe(chain.term.expiresAt - 7 * DAY);
    const job = await renewalJob('F-1', 2);
    expect(await job?.getState()).toBe('delayed');
  });
});

describe('auto-renewal switched off', () => {
  it('means no renewal; switching it on renews a due chain', async () => {
    const placed = await placedWithAutoRenewOff('OFF-1', 26);
    expect(placed).toMatchObject({ autoRenew: false, nextRenewalAt: null });
    expect(placed.term.count).toBe(1);
    expect(await renewalJob('OFF-1', 2)).toBeUndefined();

    const enabled = await system.ops('PUT', '/ops/chains/OFF-1/auto-renew', { enabled: true });
    expect(enabled.status).toBe(200);
    expect(enabled.body).toMatchObject({ autoRenew: true });
    const renewed = await system.waitForChain('OFF-1', (c) => c.term.count === 2);
    const switched = renewed.history.find((h) => h.event === 'auto_renew.enabled');
    expect(switched?.cause).toEqual({ operator: 'ops-api' });
  });

  it('removes a scheduled renewal when switched off', async () => {
    await system.send('order.placed', orderPlaced({ order: 'OFF-2' }));
    await system.waitForChain('OFF-2', () => true);
    expect(await (await renewalJob('OFF-2', 2))?.getState()).toBe('delayed');
    const off = await system.ops('PUT', '/ops/chains/OFF-2/auto-renew', { enabled: false });
    expect(off.body).toMatchObject({ autoRenew: false, nextRenewalAt: null });
    expect(await renewalJob('OFF-2', 2)).toBeUndefined();
  });
});

describe('a first term that already ended', () => {
  it('renews with the new term starting now', async () => {
    const startsAt = now() - 40 * DAY;
    await system.send('order.placed', orderPlaced({ order: 'EXP-1', startsAt }));
    const chain = await system.waitForChain('EXP-1', (c) => c.term.count === 2);
    expect(chain.term.startsAt).toBeGreaterThanOrEqual(startsAt + 40 * DAY - 5);
    expect(chain.term.expiresAt).toBe(addTerms(chain.term.startsAt, 'monthly', 1));
    expect(chain.status).toBe('active');
  });
});

describe('a first order the provider refuses', () => {
  it('is refused at intake when the embedded core does not sell its product', async () => {
    const sent = await system.send(
      'order.placed',
      orderPlaced({ order: 'BAD-0', product: 'suite-stdd', customer: 'cust-bad-0' }),
    );
    expect(sent.status).toBe(400);
    expect(sent.body).toEqual({
      error: 'invalid_event',
      message:
        'data.order.product: must be one of suite-lite, suite-std, suite-ent, erp-std, erp-admin, erp-lim (the provider\'s catalogue), got "suite-stdd"',
    });
    // Nothing enqueued, so no customer and no onboarding email for an order never made.
    const orders = system.queue('orders');
    const jobs = await orders.getJobs(['wait', 'active', 'completed', 'failed', 'delayed']);
    expect(jobs.filter((job) => job.data.data?.order?.id === 'BAD-0')).toEqual([]);
  });

  it('fails its job at once with the provider message, and records no chain', async () => {
    // A yearly term from late 9999 would end past the calendar the interface can send back.
    const startsAt = MAX_EPOCH_SECONDS - 100 * DAY;
    const sent = await system.send(
      'order.placed',
      orderPlaced({ order: 'BAD-1', duration: 'yearly', startsAt }),
    );
    expect(sent.status).toBe(202);
    const orders = system.queue('orders');
    let failed: Job | undefined;
    await vi.waitFor(async () => {
      failed = (await orders.getFailed()).find((job) => job.data.data?.order?.id === 'BAD-1');
      expect(failed).toBeDefined();
    });
    expect(failed?.attemptsMade).toBe(1);
    expect(failed?.failedReason).toMatch(
      /^the provider refused first order BAD-1: .*would end after 253402300799/,
    );
    expect((await system.ops('GET', '/ops/chains/BAD-1')).status).toBe(404);
    expect(await system.providerOrder('BAD-1')).toBeNull();
  });
});

describe('order.cancelled', () => {
  it('cancels the chain at the provider and stops its renewals', async () => {
    await system.send('order.placed', orderPlaced({ order: 'CAN-1' }));
    await system.waitForChain('CAN-1', () => true);
    const sent = await system.send('order.cancelled', { order: 'CAN-1' }, { id: 'evt-can-1' });
    expect(sent.status).toBe(202);
    const chain = await system.waitForChain('CAN-1', (c) => c.status === 'cancelled');
    expect(chain.nextRenewalAt).toBeNull();
    // The job goes right after the cancel is saved, which the chain shows first.
    await expect.poll(() => renewalJob('CAN-1', 2), { timeout: 10_000 }).toBeUndefined();
    const at = chain.history.at(-1);
    expect(at).toMatchObject({
      event: 'chain.cancelled',
      cause: { webhookId: 'evt-can-1', orderId: 'CAN-1' },
    });
    // The provider refuses any further change to the cancelled order.
    const refused = await system.started.provisioning
      .suspendOrder({ id: 'CAN-1' })
      .catch((e: Error) => e);
    expect((refused as Error).message).toBe('order CAN-1 is cancelled');
  });

  it('removes, when sent again, a renewal job an earlier attempt left behind', async () => {
    await system.send('order.placed', orderPlaced({ order: 'CAN-2' }));
    await system.waitForChain('CAN-2', () => true);
    await system.send('order.cancelled', { order: 'CAN-2' });
    await system.waitForChain('CAN-2', (c) => c.status === 'cancelled');
    // What an attempt that saved the cancel and then failed before removing the job left.
    const chain = (await new ChainStore(system.started.runtime.redis).get(
      chainIdOf('CAN-2'),
    )) as Chain;
    await ensureRenewalJob(
      renewals,
      { ...chain, nextRenewalAt: now() + 10 * DAY },
      {
        now,
      },
    );
    expect(await (await renewalJob('CAN-2', 2))?.getState()).toBe('delayed');

    await system.send('order.cancelled', { order: 'CAN-2' });
    await expect.poll(() => renewalJob('CAN-2', 2), { timeout: 10_000 }).toBeUndefined();
  });
});

describe('a renewal whose job ran out of attempts after sending its order', () => {
  it('is restored by reconcile, which replays the stored intent: one order, recorded once', async () => {
    const placed = await placedWithAutoRenewOff('LOST-1', 25);

    // What the failed job left: auto-renew on, its intent written, the order made at the provider.
    const params = {
      customer: placed.customer,
      id: 'LOST-1.r2',
      product: placed.product,
      licenses: 5,
      duration: placed.duration,
      startsAt: placed.term.expiresAt,
      parent: 'LOST-1',
    };
    await leftByDeadJob(system, 'LOST-1', 'failed-renewal-job', () => ({
      autoRenew: true,
      nextRenewalAt: now(),
      intent: {
        kind: 'renewal',
        method: 'createOrder',
        orderId: 'LOST-1.r2',
        params,
        jobId: 'failed',
      },
    }));
    await system.started.provisioning.createOrder(params);

    const reconcile = await system.queue('maintenance').add('reconcile now', {});
    await expect.poll(async () => reconcile.getState(), { timeout: 10_000 }).toBe('completed');
    const chain = await system.waitForChain('LOST-1', (c) => c.term.count === 2);
    expect(chain.term.orderId).toBe('LOST-1.r2');
    expect(chain.history.filter((h) => h.event === 'renewal.ordered')).toHaveLength(1);
    expect(chain.history.at(-1)?.cause).toMatchObject({ jobId: 'failed', orderId: 'LOST-1.r2' });
  });
});

describe('a renewal intent decided before its term ended and sent after', () => {
  it('starts the term when it is sent, not at the old end: the days it lay expired are not sold', async () => {
    const placed = await placedWithAutoRenewOff('LATE-1', 40);
    expect(placed.term.expiresAt).toBeLessThan(now() - 5 * DAY);
    // Its job wrote the intent in the renewal lead and died; the provider stayed away past the end.
    const params = {
      customer: placed.customer,
      id: 'LATE-1.r2',
      product: placed.product,
      licenses: 5,
      duration: placed.duration,
      startsAt: placed.term.expiresAt,
      parent: 'LATE-1',
    };
    await leftByDeadJob(system, 'LATE-1', 'dead-renewal-job', () => ({
      autoRenew: true,
      nextRenewalAt: placed.term.expiresAt - 7 * DAY,
      intent: {
        kind: 'renewal',
        method: 'createOrder',
        orderId: 'LATE-1.r2',
        params,
        jobId: 'dead',
      },
    }));
    const sentAfter = now();

    const reconcile = await system.queue('maintenance').add('reconcile now', {});
    await expect.poll(async () => reconcile.getState(), { timeout: 10_000 }).toBe('completed');
    const chain = await system.waitForChain('LATE-1', (c) => c.term.count === 2);
    expect(chain.term.startsAt).toBeGreaterThanOrEqual(sentAfter);
    expect((await system.providerOrder('LATE-1.r2'))?.startsAt).toBe(chain.term.startsAt);
  });
});

describe('a renewal in flight when auto-renew is switched off', () => {
  /**
   * A chain whose renewal job sent its order (made at the provider), lost the answer (a
   * timeout) and waits to retry, its intent on the chain; `chain` changes the record besides.
   */
  async function renewalInFlight(order: string, chain: Partial<Chain>) {
    const placed = await placedWithAutoRenewOff(order, 25);
    const params = {
      customer: placed.customer,
      id: `${order}.r2`,
      product: placed.product,
      licenses: 5,
      duration: placed.duration,
      startsAt: placed.term.expiresAt,
      parent: order,
    };
    await leftByDeadJob(system, order, 'retrying-renewal-job', () => ({
      intent: { kind: 'renewal', method: 'createOrder', orderId: params.id, params, jobId: null },
      ...chain,
    }));
    await system.started.provisioning.createOrder(params);
    return placed;
  }

  it('keeps its job, which records the order the provider made', async () => {
    const placed = await renewalInFlight('INFL-1', { autoRenew: true, nextRenewalAt: now() });
    const data: RenewalJobData = {
      chainId: chainIdOf('INFL-1'),
      order: 'INFL-1',
      customer: placed.customer,
      count: 2,
      dueAt: now(),
    };
    await renewals.add('renew INFL-1 term 2', data, {
      jobId: `renew-${chainIdOf('INFL-1')}-2`,
      delay: 60 * 60_000,
    });

    const off = await system.ops('PUT', '/ops/chains/INFL-1/auto-renew', { enabled: false });
    expect(off.status).toBe(200);
    expect(await renewalJob('INFL-1', 2)).toBeDefined();
    const chain = await system.waitForChain('INFL-1', (c) => c.term.count === 2);
    expect(chain).toMatchObject({ autoRenew: false, nextRenewalAt: null });
    expect(chain.term.orderId).toBe('INFL-1.r2');
    expect(chain.history.filter((h) => h.event === 'renewal.ordered')).toHaveLength(1);
    expect(await renewalJob('INFL-1', 3)).toBeUndefined();
  });

  it('is not marked expired by reconcile when its term ended, and gets its job back', async () => {
    await renewalInFlight('INFL-3', { autoRenew: false, nextRenewalAt: null });
    // Its term ended meanwhile: reconcile finishes the renewal instead of expiring the chain.
    await leftByDeadJob(system, 'INFL-3', 'term-ended', (chain) => ({
      term: { ...chain.term, expiresAt: now() - 60 },
    }));
    const reconcile = await system.queue('maintenance').add('reconcile now', {});
    await expect.poll(async () => reconcile.getState(), { timeout: 10_000 }).toBe('completed');
    const chain = await system.waitForChain('INFL-3', (c) => c.term.count === 2);
    expect(chain.history.map((h) => h.event)).not.toContain('chain.expired');
  });

  it('gets its job back from reconcile when it was lost', async () => {
    await renewalInFlight('INFL-2', { autoRenew: false, nextRenewalAt: null });
    expect(await renewalJob('INFL-2', 2)).toBeUndefined();
    expect((await system.chain('INFL-2')).inFlight).toEqual({
      kind: 'renewal',
      orderId: 'INFL-2.r2',
    });
    const reconcile = await system.queue('maintenance').add('reconcile now', {});
    await expect.poll(async () => reconcile.getState(), { timeout: 10_000 }).toBe('completed');
    const chain = await system.waitForChain('INFL-2', (c) => c.term.count === 2);
    expect(chain.term.orderId).toBe('INFL-2.r2');
    expect(chain.inFlight).toBeNull();
    expect(chain.history.filter((h) => h.event === 'renewal.ordered')).toHaveLength(1);
  });
});

describe('an order.placed job retried after its first order failed', () => {
  it('records the customer it created, once', async () => {
    // The first order is made, but its answer is lost: the job fails and runs again.
    const { provisioning } = system.started;
    let lost = false;
    const losing = Object.create(provisioning) as typeof provisioning;
    losing.createOrder = async (params) => {
      const order = await provisioning.createOrder(params);
      if (lost) return order;
      lost = true;
      throw new TransientError('provisioning_unavailable', 'the answer was lost');
    };
    const placeOrders = makeOrdersProcessor(workerDepsOf(system, { provisioning: losing }));
    const job = {
      id: 'place-CUST-R',
      name: 'order.placed CUST-R',
      data: {
        webhookId: 'wh-cust-r',
        type: 'order.placed',
        data: orderPlaced({ order: 'CUST-R', startsAt: now() - 2 * DAY }),
        occurredAt: now(),
        receivedAt: now(),
      },
    } as Job;
    await expect(placeOrders(job)).rejects.toThrow('the answer was lost');
    expect(await placeOrders(job)).toBe('placed: CUST-R');

    const chain = await system.chain('CUST-R');
    expect(chain.history.map((h) => h.event)).toEqual(['customer.created', 'order.placed']);
  });
});

describe('an order.placed delivered again for a flagged chain', () => {
  it('leaves the chain to its operator: no renewal job comes back', async () => {
    await placedWithAutoRenewOff('FLAG-R', 2);
    await leftByDeadJob(system, 'FLAG-R', 'flagging-job', () => ({
      autoRenew: true,
      nextRenewalAt: now() + 20 * DAY,
      flagged: 'the provider refused FLAG-R.r2: for the test',
    }));
    const again = await system.send(
      'order.placed',
      orderPlaced({ order: 'FLAG-R', startsAt: now() - 2 * DAY, autoRenew: false }),
    );
    expect(again.status).toBe(202);
    const orders = system.queue('orders');
    await expect
      .poll(async () =>
        (await orders.getCompleted()).some((j) => j.returnvalue === 'already placed: FLAG-R'),
      )
      .toBe(true);
    expect(await renewalJob('FLAG-R', 2)).toBeUndefined();
  });
});

describe('reconcile while an operator switches auto-renew on', () => {
  it("keeps the job the operator's switch scheduled, though its page showed auto-renew off", async () => {
    await placedWithAutoRenewOff('REC-1', 2);
    const deps = workerDepsOf(system);
    const { chains } = deps;
    // The operator's switch lands right after reconcile read the page holding the chain.
    const readPage = chains.getManyReadable.bind(chains);
    chains.getManyReadable = async (ids) => {
      const page = await readPage(ids);
      if (page.chains.some((c) => c.order === 'REC-1' && !c.autoRenew)) {
        const on = await system.ops('PUT', '/ops/chains/REC-1/auto-renew', { enabled: true });
        expect(on.status).toBe(200);
      }
      return page;
    };
    await reconcileRound(system, 'reconcile-test', deps);

    const chain = await system.chain('REC-1');
    expect(chain.autoRenew).toBe(true);
    expect(await (await renewalJob('REC-1', 2))?.getState()).toBe('delayed');
  });
});

describe('reconcile when one chain cannot be reconciled now', () => {
  it('goes on with the chains after it: a missing renewal job is restored', async () => {
    await system.send('order.placed', orderPlaced({ order: 'REC-U', startsAt: now() - 2 * DAY }));
    await system.waitForChain('REC-U', () => true);
    await system.send('order.placed', orderPlaced({ order: 'REC-M', startsAt: now() - 2 * DAY }));
    await system.waitForChain('REC-M', () => true);
    // REC-U: a payment job gave up halfway through its unsuspension (reconcile finishes it),
    // while the provider is unreachable.
    await leftByDeadJob(system, 'REC-U', 'dead-payment-job', () => ({ unsuspending: true }));
    // REC-M, placed after it: its renewal job was lost (a Redis restored from a backup).
    const lost = await renewalJob('REC-M', 2);
    await lost?.remove();
    const { provisioning } = system.started;
    const down = Object.create(provisioning) as typeof provisioning;
    down.unsuspendOrder = async () => {
      throw new TransientError('provisioning_unavailable', 'the provider is unreachable');
    };

    const { log, captured } = capturingLogger();
    const result = await reconcileRound(system, 'reconcile-one-down', { provisioning: down, log });
    expect(result.failed).toBe(1);
    expect(await (await renewalJob('REC-M', 2))?.getState()).toBe('delayed');
    const notReconciled = () =>
      captured
        .join('')
        .split('\n')
        .filter(Boolean)
        .map((line) => JSON.parse(line) as { level: number; msg: string })
        .filter((line) => line.msg === 'chain not reconciled this round');
    // The provider away: the next round tries again, a warning.
    expect(notReconciled().map((line) => line.level)).toEqual([40]);

    // A fault waiting does not fix (here a bug's plain Error): at error, for a person.
    const broken = Object.create(provisioning) as typeof provisioning;
    broken.unsuspendOrder = async () => {
      throw new Error('undefined is not a function');
    };
    captured.length = 0;
    await reconcileRound(system, 'reconcile-one-broken', { provisioning: broken, log });
    expect(notReconciled().map((line) => line.level)).toEqual([50]);
  });
});

describe('a renewal intent replayed after its chain was suspended', () => {
  it('makes the order once and suspends it with the rest of the chain', async () => {
    await placedWithAutoRenewOff('SUSP-R', 25);
    // A renewal job sent nothing yet when it died; the payment went overdue and the chain was
    // suspended meanwhile (the suspension skips a pending intent's order).
    await system.started.provisioning.suspendOrder({ id: 'SUSP-R' });
    await leftByDeadJob(system, 'SUSP-R', 'dead-renewal-job', (chain) => ({
      autoRenew: true,
      payment: 'overdue',
      status: 'suspended',
      nextRenewalAt: now(),
      intent: renewalIntentOf(chain),
    }));

    const reconcile = await system.queue('maintenance').add('reconcile now', {});
    await expect.poll(async () => reconcile.getState(), { timeout: 10_000 }).toBe('completed');
    const chain = await system.waitForChain('SUSP-R', (c) => c.term.count === 2);
    expect(chain.status).toBe('suspended');
    expect(chain.history.filter((h) => h.event === 'renewal.ordered')).toEqual([
      expect.objectContaining({
        detail: expect.stringMatching(
          /^renewal SUSP-R\.r2: .*; suspended on arrival: the payment is overdue$/,
        ),
      }),
    ]);
    expect((await system.providerOrder('SUSP-R.r2'))?.status).toBe('suspended');
    expect((await system.providerOrder('SUSP-R'))?.status).toBe('suspended');
  });
});

describe('a renewal intent replayed after its chain was suspended, the provider refusing to suspend it', () => {
  it('records the renewal with its order active, says so, and schedules the next term', async () => {
    await placedWithAutoRenewOff('SUSP-X', 25);
    await system.started.provisioning.suspendOrder({ id: 'SUSP-X' });
    const left = await leftByDeadJob(system, 'SUSP-X', 'dead-renewal-job', (chain) => ({
      autoRenew: true,
      payment: 'overdue',
      status: 'suspended',
      nextRenewalAt: now() + DAY,
      intent: renewalIntentOf(chain),
    }));
    await ensureRenewalJob(
      renewals,
      { ...left, autoRenew: true, nextRenewalAt: now() + DAY },
      systemClock,
    );
    const job = await renewalJob('SUSP-X', 2);
    if (!job) throw new Error('no renewal job');
    const { provisioning } = system.started;
    const refusing = Object.create(provisioning) as typeof provisioning;
    refusing.suspendOrder = async (params) => {
      if (params.id === 'SUSP-X.r2') throw new RefusalError('provisioning_refused', 'not now');
      return provisioning.suspendOrder(params);
    };

    const renew = makeRenewalProcessor(workerDepsOf(system, { provisioning: refusing }));
    expect(await renew(job)).toBe('renewed: SUSP-X.r2');
    const chain = await system.chain('SUSP-X');
    expect(chain.term.count).toBe(2);
    expect(chain.history.at(-1)?.detail).toMatch(
      /^renewal SUSP-X\.r2: .*; the provider refused to suspend it \("not now"\): it stays active while the payment is overdue$/,
    );
    expect((await system.providerOrder('SUSP-X.r2'))?.status).toBe('active');
    expect(await (await renewalJob('SUSP-X', 3))?.getState()).toBe('delayed');
  });
});

describe('a renewal intent replayed after the suspension found nothing in force', () => {
  it('suspends the order on arrival and marks the chain suspended, for the payment to restore', async () => {
    // The term ended while the renewal's call was away (a provider outage of days); the
    // payment went overdue meanwhile and its suspension, past the grace period, found nothing
    // in force to suspend, so the chain was not recorded suspended.
    await placedWithAutoRenewOff('SUSP-E', 40);
    const suspends = () => metricValue(system, 'billing_suspensions_total{action="suspend"}');
    const before = await suspends();
    await leftByDeadJob(system, 'SUSP-E', 'dead-renewal-job', (chain) => ({
      autoRenew: true,
      payment: 'overdue',
      overdueEpisode: 1,
      suspendAt: null,
      nextRenewalAt: now(),
      intent: renewalIntentOf(chain),
    }));

    const reconcile = await system.queue('maintenance').add('reconcile now', {});
    await expect.poll(async () => reconcile.getState(), { timeout: 10_000 }).toBe('completed');
    const chain = await system.waitForChain('SUSP-E', (c) => c.term.count === 2);
    // The order is in force (an ended chain's term starts now) while the payment is overdue.
    expect(chain.term.expiresAt).toBeGreaterThan(now());
    expect(chain.status).toBe('suspended');
    expect(chain.history.at(-1)?.detail).toMatch(/suspended on arrival: the payment is overdue$/);
    expect((await system.providerOrder('SUSP-E.r2'))?.status).toBe('suspended');
    // Counted as a suspension, which its payment's unsuspension undoes.
    expect(await suspends()).toBe(before + 1);

    await system.send('payment.received', { order: 'SUSP-E' });
    const paid = await system.waitForChain(
      'SUSP-E',
      (c) => c.history.at(-1)?.event === 'chain.unsuspended',
    );
    expect(paid).toMatchObject({ status: 'active', payment: 'ok' });
    expect(paid.history.at(-1)?.detail).toBe('payment received: unsuspended SUSP-E.r2');
    expect((await system.providerOrder('SUSP-E.r2'))?.status).toBe('active');
  });
});

describe('a renewal job carrying the intent prepared when it was scheduled', () => {
  const chains = () => new ChainStore(system.started.runtime.redis);
  const deps = () =>
    ({ provisioning: system.started.provisioning, settings: { leadDays: 7 } }) as WorkerDeps;

  /** A due chain with no renewal job yet, at the version `change` leaves it. */
  async function dueChain(order: string, change: (chain: Chain) => Partial<Chain> = () => ({})) {
    await placedWithAutoRenewOff(order, 25);
    const token = `test-${order}`;
    const lock = await chains().lock(chainIdOf(order), token);
    if (lock.kind !== 'held' || !lock.chain) throw new Error(`no chain ${order}`);
    const on = { ...lock.chain, autoRenew: true, nextRenewalAt: now() };
    return chains().save({
      chainId: on.id,
      token,
      previous: lock.chain,
      next: { ...on, ...change(on) },
      release: true,
    });
  }

  /** Counts every lock and claim the workers take on `chainId` from now on. */
  function watchLocks(chainId: string) {
    const lock = vi.spyOn(ChainStore.prototype, 'lock');
    const claim = vi.spyOn(ChainStore.prototype, 'claimRenewal');
    const on = (spy: typeof lock | typeof claim) =>
      spy.mock.calls.filter(([id]) => id === chainId).length;
    return { locks: () => on(lock), claims: () => on(claim) };
  }

  afterEach(() => {
    vi.restoreAllMocks();
  });

  /** Adds the chain's term-2 renewal job with `prepared`, as a scheduler would have. */
  async function addJob(chain: Chain, prepared: PreparedRenewal | undefined) {
    if (!prepared) throw new Error(`nothing prepared for ${chain.order}`);
    const data: RenewalJobData = {
      chainId: chain.id,
      order: chain.order,
      customer: chain.customer,
      count: 2,
      dueAt: now(),
      prepared,
    };
    await renewals.add('renew', data, { jobId: `renew-${chain.id}-2` });
  }

  async function renewedOrder(order: string) {
    const chain = await system.waitForChain(order, (c) => c.term.count === 2);
    expect(chain.history.filter((h) => h.event === 'renewal.ordered')).toHaveLength(1);
    return system.providerOrder(`${order}.r2`);
  }

  it('renews with the prepared intent when the chain did not change', async () => {
    const chain = await dueChain('PREP-1');
    const prepared = prepareRenewal(deps(), chain, { stored: true });
    expect(prepared).toMatchObject({
      version: chain.version,
      validFrom: chain.term.expiresAt - 7 * DAY,
      validUntil: chain.term.expiresAt,
      intent: { orderId: 'PREP-1.r2', params: { licenses: 5, startsAt: chain.term.expiresAt } },
    });
    await addJob(chain, prepared);
    expect(await renewedOrder('PREP-1')).toMatchObject({
      licenses: 5,
      startsAt: chain.term.expiresAt,
    });
  });

  it('ignores it when the chain changed after the job was scheduled', async () => {
    const before = await dueChain('PREP-2');
    const prepared = prepareRenewal(deps(), before, { stored: true });
    const token = 'seat-decrease';
    const lock = await chains().lock(before.id, token);
    if (lock.kind !== 'held' || !lock.chain) throw new Error('no chain');
    await chains().save({
      chainId: before.id,
      token,
      previous: lock.chain,
      next: { ...lock.chain, nextLicenses: 3 },
      release: true,
    });
    await addJob(before, prepared);
    expect((await renewedOrder('PREP-2'))?.licenses).toBe(3);
  });

  it('clears it, and renews as decided now, when it disagrees with the decision', async () => {
    const chain = await dueChain('PREP-3', () => ({ nextLicenses: 4 }));
    const prepared = prepareRenewal(deps(), chain, { stored: true });
    if (!prepared) throw new Error('nothing prepared');
    const wrong = {
      ...prepared,
      intent: { ...prepared.intent, params: { ...prepared.intent.params, licenses: 99 } },
    };
    await addJob(chain, wrong);
    expect((await renewedOrder('PREP-3'))?.licenses).toBe(4);
  });

  it('waits while another job holds the chain, then renews in one step', async () => {
    const chain = await dueChain('PREP-5');
    const prepared = prepareRenewal(deps(), chain, { stored: true });
    expect(prepared?.chain).toEqual(chain);
    const other = 'seat-change-job';
    expect((await chains().lock(chain.id, other)).kind).toBe('held');
    const watched = watchLocks(chain.id);
    const putBack = vi.spyOn(Job.prototype, 'moveToDelayed');
    const timesPutBack = () =>
      (putBack.mock.contexts as Job[]).filter((job) => job.id === `renew-${chain.id}-2`);
    await addJob(chain, prepared);
    // The job tries, finds the lock held and puts itself back (250..1000 ms), more than once.
    await vi.waitFor(() => expect(timesPutBack().length).toBeGreaterThanOrEqual(2), {
      timeout: 10_000,
    });
    expect((await system.chain('PREP-5'))?.term.count).toBe(1);
    expect(await system.providerOrder('PREP-5.r2')).toBeNull();
    await chains().unlock(chain.id, other);
    expect((await renewedOrder('PREP-5'))?.licenses).toBe(5);
    // Neither waiting nor renewing took the lock: the commit script checked it each time.
    expect({ locks: watched.locks(), claims: watched.claims() }).toEqual({ locks: 0, claims: 0 });
  });

  it('records an order the provider made before, taking the lock (a replay)', async () => {
    const chain = await dueChain('PREP-7');
    const prepared = prepareRenewal(deps(), chain, { stored: true });
    if (!prepared?.chain) throw new Error('nothing prepared');
    // Made, but not recorded: as after a crash between a remote call and its record.
    const made = await system.started.provisioning.createOrder(prepared.intent.params as never);
    const watched = watchLocks(chain.id);
    await addJob(chain, prepared);
    expect(await renewedOrder('PREP-7')).toMatchObject({ id: made.id, licenses: 5 });
    expect(watched.claims()).toBe(1);
  });

  it('leaves a provider refusal to the locked path, which flags the chain', async () => {
    const chain = await dueChain('PREP-8');
    const prepared = prepareRenewal(deps(), chain, { stored: true });
    if (!prepared?.chain) throw new Error('nothing prepared');
    // Cancelled at the provider behind the workers' back: the core refuses its renewal.
    await system.started.provisioning.cancelOrder({ id: 'PREP-8' });
    await addJob(chain, prepared);
    const flagged = await system.waitForChain('PREP-8', (c) => c.flagged !== null);
    expect(flagged.flagged).toMatch(/refused PREP-8\.r2: order PREP-8 is cancelled/);
    expect(flagged.term.count).toBe(1);
    expect(await system.providerOrder('PREP-8.r2')).toBeNull();
  });

  it('takes the lock and claims it when the job carries no chain (remote mode, older jobs)', async () => {
    const chain = await dueChain('PREP-6', () => ({ nextLicenses: 6 }));
    const prepared = prepareRenewal(deps(), chain, { stored: true });
    if (!prepared) throw new Error('nothing prepared');
    const { chain: _snapshot, ...withoutChain } = prepared;
    const watched = watchLocks(chain.id);
    await addJob(chain, withoutChain);
    expect((await renewedOrder('PREP-6'))?.licenses).toBe(6);
    expect(watched.claims()).toBe(1);
  });

  it('ignores it when the workers run with other settings than it was prepared with', async () => {
    const chain = await dueChain('PREP-4');
    const prepared = prepareRenewal({ ...deps(), settings: { leadDays: 3 } } as WorkerDeps, chain, {
      stored: true,
    });
    if (!prepared) throw new Error('nothing prepared');
    // Prepared for a 3-day lead with the wrong licenses: were it used, the order would carry 99.
    await addJob(chain, {
      ...prepared,
      intent: { ...prepared.intent, params: { ...prepared.intent.params, licenses: 99 } },
    });
    expect((await renewedOrder('PREP-4'))?.licenses).toBe(5);
  });
});
