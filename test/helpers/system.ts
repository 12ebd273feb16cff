// The whole product as `billing start` runs it (real settings, server, workers, Redis), for
// end-to-end tests that talk to it only through its HTTP contracts.
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { type Job, Queue } from 'bullmq';
import { request } from 'undici';
import { afterAll, beforeAll, expect, vi } from 'vitest';
import { loadSettings, type Settings } from '../../config/settings.js';
import { type WorkerDeps, workerSettingsFrom } from '../../jobs/deps.js';
import { makeProcessor as makeMaintenanceProcessor } from '../../jobs/maintenance.js';
import { renewalJobId } from '../../jobs/renewals.js';
import { chainIdOf } from '../../src/chains/keys.js';
import type { Chain, Intent } from '../../src/chains/records.js';
import { ChainStore } from '../../src/chains/store.js';
import type { ChainView } from '../../src/chains/view.js';
import type { ProvisioningClient } from '../../src/client/provisioning-client.js';
import type { Clock } from '../../src/clock.js';
import { renewalOrderId } from '../../src/domain/ids.js';
import { signWebhook } from '../../src/intake/sign.js';
import { createLogger, type Logger } from '../../src/logger.js';
import { type Role, type Started, start } from '../../src/main.js';
import { createMetrics } from '../../src/metrics.js';
import { partnerKeys } from '../../src/provisioning/keys.js';
import type { OrderRecord, Partner } from '../../src/provisioning/records.js';
import { delayedFireTime, QUEUE_PREFIX, type QueueName, queueNames } from '../../src/queues.js';
import { connectRedis } from '../../src/redis/connection.js';
import { startTestRedis, type TestRedis } from './redis-server.js';

export const OPS_TOKEN = 'test-ops-token-0123456789';
const SHARED_KEY_HASH_SECRET = 'test-key-hash-secret-0123456789abcdef';
export const DAY = 86_400;

export interface System {
  baseUrl: string;
  settings: Settings;
  started: Started;
  /** REDIS_URL of the system: its own test Redis, or the one given to startSystem. */
  redisUrl: string;
  /** Posts a signed event; `id` defaults to a fresh webhook id. */
  send(
    type: string,
    data: Record<string, unknown>,
    options?: { id?: string; timestamp?: number },
  ): Promise<{ status: number; body: unknown }>;
  ops(
    method: 'GET' | 'PUT' | 'POST',
    path: string,
    body?: unknown,
  ): Promise<{ status: number; body: unknown }>;
  chain(order: string): Promise<ChainView>;
  /** Polls the ops API until the chain satisfies `ready` (bounded, no fixed sleeps). */
  waitForChain(
    order: string,
    ready: (chain: ChainView) => boolean,
    timeoutMs?: number,
  ): Promise<ChainView>;
  /** The partner account the workers act for (embedded mode). */
  partner(): Promise<Partner>;
  /** An order as the embedded provider stores it for that partner (with its status). */
  providerOrder(orderId: string): Promise<OrderRecord | null>;
  /** A producer Queue on the system's Redis (closed with the system). */
  queue(name: QueueName): Queue;
  /** Fires a delayed job now, as if its time had come (pair with advancing a test clock). */
  promote(name: QueueName, jobId: string): Promise<void>;
  close(): Promise<void>;
}

type SystemOptions = Parameters<typeof startSystem>[0];

/**
 * The system of one describe block: started in beforeAll, closed in afterAll. The returned
 * object stands for the system started then, so tests use it like the System itself.
 */
export function useSystem(options: SystemOptions = {}): System {
  let current: System | undefined;
  beforeAll(async () => {
    current = await startSystem(options);
  });
  afterAll(async () => {
    await current?.close();
  });
  return new Proxy({} as System, {
    get(_target, property) {
      if (!current)
        throw new Error('the system starts in beforeAll: use it inside tests and hooks');
      return Reflect.get(current, property);
    },
  });
}

export async function startSystem(
  options: {
    env?: Record<string, string>;
    role?: Role;
    clock?: Clock;
    stalledIntervalMs?: number;
    lockLeaseMs?: number;
    /** A Redis of the test's own (any REDIS_URL form; left running on close), not a fresh one. */
    redisUrl?: string;
    /** Where the system logs (default: at TEST_LOG_LEVEL, silent unless set, to stdout). */
    log?: Logger;
  } = {},
): Promise<System> {
  const ownRedis = options.redisUrl === undefined ? await startTestRedis() : null;
  const redisUrl = options.redisUrl ?? (ownRedis as TestRedis).url;
  const dataDir = await mkdtemp(join(tmpdir(), 'billing-e2e-'));
  const settings = loadSettings({
    REDIS_URL: redisUrl,
    HOST: '127.0.0.1',
    PORT: '0',
    DATA_DIR: dataDir,
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    OPS_TOKEN,
    WEBHOOK_SECRET: `whsec_${randomBytes(24).toString('base64')}`,
    // Systems sharing a Redis act for one partner, as the service's processes do (a start with
    // another would be refused once chains exist).
    PARTNER_NAME: options.redisUrl === undefined ? `workers-${randomUUID()}` : 'workers-shared',
    RECONCILE_INTERVAL_SECONDS: '3600',
    // Systems on a Redis of the test's own share it one after another, each with a DATA_DIR of
    // its own: like hosts sharing one Redis, they need the same key-hash secret.
    ...(options.redisUrl === undefined ? {} : { KEY_HASH_SECRET: SHARED_KEY_HASH_SECRET }),
    ...options.env,
  });
  const log = options.log ?? createLogger(settings.LOG_LEVEL);
  const started = await start(settings, log, options.role ?? 'all', {
    ...(options.clock ? { clock: options.clock } : {}),
    ...(options.stalledIntervalMs ? { stalledIntervalMs: options.stalledIntervalMs } : {}),
    ...(options.lockLeaseMs ? { lockLeaseMs: options.lockLeaseMs } : {}),
  });
  const baseUrl = `http://127.0.0.1:${started.port}`;
  const queueConnection = await connectRedis(redisUrl, 'worker');
  const queues = new Map<QueueName, Queue>();
  const secret = settings.WEBHOOK_SECRET as string;

  async function call(
    method: string,
    path: string,
    headers: Record<string, string>,
    body?: string,
  ) {
    const res = await request(`${baseUrl}${path}`, { method: method as 'GET', headers, body });
    const text = await res.body.text();
    return { status: res.statusCode, body: text === '' ? undefined : JSON.parse(text) };
  }

  const system: System = {
    baseUrl,
    settings,
    started,
    redisUrl,
    send(type, data, opts = {}) {
      const body = JSON.stringify({ type, data });
      const id = opts.id ?? `evt-${randomUUID()}`;
      const timestamp = opts.timestamp ?? started.runtime.clock.now();
      return call(
        'POST',
        '/webhooks/events',
        {
          'content-type': 'application/json',
          ...signWebhook(secret, id, timestamp, body),
        },
        body,
      );
    },
    ops(method, path, body) {
      const headers: Record<string, string> = { authorization: `Bearer ${OPS_TOKEN}` };
      if (body !== undefined) headers['content-type'] = 'application/json';
      return call(method, path, headers, body === undefined ? undefined : JSON.stringify(body));
    },
    async chain(order) {
      const res = await system.ops('GET', `/ops/chains/${encodeURIComponent(order)}`);
      if (res.status !== 200)
        throw new Error(`chain ${order}: ${res.status} ${JSON.stringify(res.body)}`);
      return res.body as ChainView;
    },
    async waitForChain(order, ready, timeoutMs = 15_000) {
      let last: ChainView | undefined;
      await vi.waitFor(
        async () => {
          const res = await system.ops('GET', `/ops/chains/${encodeURIComponent(order)}`);
          if (res.status !== 200) throw new Error(`chain ${order} not there yet (${res.status})`);
          last = res.body as ChainView;
          if (!ready(last))
            throw new Error(`chain ${order} not ready: ${JSON.stringify(last.term)}`);
        },
        { timeout: timeoutMs, interval: 50 },
      );
      return last as ChainView;
    },
    async partner() {
      const found = (await started.runtime.partners.list()).find(
        (p) => p.name === settings.PARTNER_NAME,
      );
      if (!found) throw new Error(`no partner ${settings.PARTNER_NAME}`);
      return found;
    },
    async providerOrder(orderId) {
      return started.runtime.store.getOrder(await system.partner(), orderId);
    },
    queue(name) {
      let queue = queues.get(name);
      if (!queue) {
        queue = new Queue(name, { connection: queueConnection, prefix: QUEUE_PREFIX });
        queues.set(name, queue);
      }
      return queue;
    },
    async promote(name, jobId) {
      const job = await system.queue(name).getJob(jobId);
      if (!job) throw new Error(`no job ${jobId} in ${name}`);
      // A job that wrote why it waits may not have moved itself to the delayed set yet.
      const state = await stateOnceSettled(job);
      if (state !== 'delayed') return;
      // Something else (a reconcile round after the clock moved, a payment) may promote it
      // between the two calls: then it runs now already, which is all this asks.
      await job.promote().catch(async (error: unknown) => {
        if ((await job.getState()) === 'delayed') throw error;
      });
    },
    async close() {
      for (const queue of queues.values()) await queue.close();
      await queueConnection.quit();
      await started.stop();
      await ownRedis?.stop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
  return system;
}

/** How long `promote` waits for an active job to put itself off (ms). */
const SETTLE_WAIT_MS = 2_000;

/**
 * The job's state once it is not active, or 'active' after SETTLE_WAIT_MS: a job that decided to
 * wait records why (its data) a moment before it moves itself to the delayed set.
 */
async function stateOnceSettled(job: Job): Promise<string> {
  const deadline = Date.now() + SETTLE_WAIT_MS;
  let state = await job.getState();
  while (state === 'active' && Date.now() < deadline) {
    await delay(20);
    state = await job.getState();
  }
  return state;
}

/** The state of job `jobId` in `queue`, or undefined when the queue keeps no such job. */
export async function jobState(queue: Queue, jobId: string): Promise<string | undefined> {
  return (await queue.getJob(jobId))?.getState();
}

/** The value of one series of `system`'s /metrics (`name{labels}` as printed), 0 when absent. */
export async function metricValue(system: System, series: string): Promise<number> {
  const res = await request(`${system.baseUrl}/metrics`);
  const line = (await res.body.text()).split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? 0 : Number(line.slice(series.length + 1));
}

/**
 * Runs a finished job again with its id and data: what BullMQ's stalled check does with a job
 * whose worker died after its work and before it reported the job done.
 */
export async function runAgain(queue: Queue, jobId: string): Promise<void> {
  const finished = () => jobState(queue, jobId);
  await expect.poll(finished, { timeout: 10_000 }).toMatch(/^(completed|failed)$/);
  const job = await queue.getJob(jobId);
  if (!job) throw new Error(`no job ${jobId}`);
  const { name, data, opts } = job;
  await job.remove();
  // At once, as the stalled check gives it back: not after the delay it was first added with.
  await queue.add(name, data, { ...opts, jobId, delay: 0 });
  await expect.poll(finished, { timeout: 10_000 }).toMatch(/^(completed|failed)$/);
}

/** What the workers of `system` run with, to call a processor directly (overrides first). */
export function workerDepsOf(system: System, overrides: Partial<WorkerDeps> = {}): WorkerDeps {
  return {
    chains: new ChainStore(system.started.runtime.redis),
    provisioning: system.started.provisioning,
    clock: system.started.clock,
    log: createLogger('silent'),
    metrics: createMetrics(),
    queues: Object.fromEntries(queueNames.map((n) => [n, system.queue(n)])) as WorkerDeps['queues'],
    settings: workerSettingsFrom(system.settings),
    ...overrides,
  };
}

/** The event of a chain's latest history entry. */
/** The orders of `parent`'s family as the embedded provider keeps them, in no set order. */
export async function familyOrdersAtProvider(system: System, parent: string) {
  const partner = await system.partner();
  const all = await system.started.runtime.store.redis.hgetall(partnerKeys(partner.id).orders);
  return Object.entries(all)
    .filter(([id]) => id === parent || id.startsWith(`${parent}.`))
    .map(([, v]) => JSON.parse(v) as OrderRecord);
}

export const lastEvent = (chain: ChainView) => chain.history.at(-1)?.event;

/**
 * One round of reconcile run by the test itself, as job `id`, with `overrides` in its deps: once
 * a round the system runs by itself (its scheduler's, at start) is over, as only one runs at once.
 */
export async function reconcileRound(
  system: System,
  id: string,
  overrides: Partial<WorkerDeps> = {},
): Promise<{ checked: number; expired: number; failed: number }> {
  const round = makeMaintenanceProcessor(workerDepsOf(system, overrides));
  for (;;) {
    const result = await round({ id, data: {} } as Job);
    if (!('skipped' in result)) return result;
    await delay(20);
  }
}

/** An `order.placed` event body for one chain. */
export function orderPlaced(input: {
  order: string;
  customer?: string;
  licenses?: number;
  duration?: 'monthly' | 'yearly';
  startsAt?: number;
  autoRenew?: boolean;
  product?: string;
}) {
  const customer = input.customer ?? `cust-${input.order}`;
  return {
    customer: {
      id: customer,
      name: `Customer ${customer}`,
      admin: { email: `admin@${customer.replace(/[^a-z0-9]/gi, '')}.test` },
    },
    order: {
      id: input.order,
      product: input.product ?? 'suite-std',
      licenses: input.licenses ?? 5,
      duration: input.duration ?? 'monthly',
      ...(input.startsAt !== undefined ? { startsAt: input.startsAt } : {}),
    },
    ...(input.autoRenew !== undefined ? { autoRenew: input.autoRenew } : {}),
  };
}

/**
 * The marketplace renewal intent a job wrote for `chain`'s next term before it died, the call
 * not yet made (or its answer lost): the next term from the old end, for `leftByDeadJob`.
 */
export function renewalIntentOf(chain: Chain, licenses = chain.licenses): Intent {
  const orderId = renewalOrderId(chain.order, chain.term.count + 1);
  return {
    kind: 'renewal',
    method: 'createOrder',
    orderId,
    params: {
      customer: chain.customer,
      id: orderId,
      product: chain.product,
      licenses,
      duration: chain.duration,
      startsAt: chain.term.expiresAt,
      parent: chain.order,
    },
    jobId: 'dead',
  };
}

/**
 * `order`'s payment goes overdue and, once its chain is suspended (a system with no grace
 * period), is received: an external chain then awaits its manual reactivation, returned.
 */
export async function paidAwaitingReactivation(system: System, order: string): Promise<ChainView> {
  await system.send('payment.overdue', { order });
  await system.waitForChain(order, (c) => c.status === 'suspended');
  await system.send('payment.received', { order });
  return system.waitForChain(order, (c) => c.needsReactivation);
}

/**
 * The chain of `order` as a job that died left it: `change` written under that job's own lock
 * token (so the save checks as any job's would), then the lock released. A job that has just
 * written what the test waited for may still hold the chain for a moment: its lock is waited
 * for. Returns the chain read before the change.
 */
export async function leftByDeadJob(
  system: System,
  order: string,
  token: string,
  change: (chain: Chain) => Partial<Chain>,
): Promise<Chain> {
  const chains = new ChainStore(system.started.runtime.redis);
  const lock = await vi.waitFor(
    async () => {
      const attempt = await chains.lock(chainIdOf(order), token);
      if (attempt.kind !== 'held') throw new Error(`chain ${order} is held by a job`);
      return attempt;
    },
    { timeout: 5_000, interval: 20 },
  );
  if (!lock.chain) throw new Error(`no chain ${order} to leave`);
  await chains.save({
    chainId: lock.chain.id,
    token,
    previous: lock.chain,
    next: { ...lock.chain, ...change(lock.chain) },
    release: true,
  });
  return lock.chain;
}

/** A client like `provisioning` whose `unsuspendOrder` answers `ms` late: a slow remote. */
export function slowToUnsuspend(provisioning: ProvisioningClient, ms: number): ProvisioningClient {
  const slow: ProvisioningClient = Object.create(provisioning);
  slow.unsuspendOrder = async (params) => {
    await delay(ms);
    return provisioning.unsuspendOrder(params);
  };
  return slow;
}

/**
 * How far from the chain's renewal time (`nextRenewalAt`) its next renewal job fires, in ms:
 * under 1000 is on time (the clock counts whole seconds).
 */
export async function renewalJobOffMs(system: System, order: string): Promise<number> {
  const chain = await system.chain(order);
  const id = renewalJobId(chainIdOf(order), chain.term.count + 1);
  const firesAt = await delayedFireTime(system.queue('renewals'), id);
  return Math.abs((firesAt ?? 0) - (chain.nextRenewalAt as number) * 1000);
}
