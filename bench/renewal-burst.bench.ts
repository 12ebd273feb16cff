// Benchmark: the real renewal worker draining N chains that fall due at once, against BullMQ
// no-op jobs at the same concurrency on the same Redis (STYLE.md "Benchmarks", DESIGN §4).
import { mkdir, writeFile } from 'node:fs/promises';
import { Session } from 'node:inspector/promises';
import { availableParallelism } from 'node:os';
import { dirname } from 'node:path';
import { parseArgs } from 'node:util';
import { type Job, type Processor, Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { loadSettings, type Settings } from '../config/settings.js';
import { type WorkerDeps, workerSettingsFrom } from '../jobs/deps.js';
import { makeProcessor as makeOrdersProcessor } from '../jobs/orders.js';
import { makeRenewalProcessor, type RenewalJobData } from '../jobs/renewals.js';
import { chainIdOf } from '../src/chains/keys.js';
import { ChainStore } from '../src/chains/store.js';
import { inProcessClient } from '../src/client/in-process.js';
import { instrumentClient } from '../src/client/instrumented.js';
import { systemClock } from '../src/clock.js';
import { SECONDS_PER_DAY } from '../src/domain/periods.js';
import type { EventJobData } from '../src/intake/events.js';
import { createLogger } from '../src/logger.js';
import { createMetrics } from '../src/metrics.js';
import { productCatalogue } from '../src/provisioning/catalogue.js';
import { partnerKeys } from '../src/provisioning/keys.js';
import { makeProvisioningCore, type ProvisioningCore } from '../src/provisioning/operations.js';
import { makePartnerDirectory, type PartnerDirectory } from '../src/provisioning/partners.js';
import type { Partner } from '../src/provisioning/records.js';
import { ProvisioningStore } from '../src/provisioning/store.js';
import {
  defaultJobOptions,
  MAX_STALLED_COUNT,
  QUEUE_PREFIX,
  QUEUES,
  STALLED_INTERVAL_MS,
} from '../src/queues.js';
import { connectRedis } from '../src/redis/connection.js';
import { describeRedisTarget, parseRedisTarget } from '../src/redis/target.js';
import { retryBackoff } from '../src/retry-policy.js';
import { classifyFailures, closeQueues, openQueues } from '../src/workers.js';
import { startTestRedis } from '../test/helpers/redis-server.js';

const WARMUP_CHAINS = 500;
const TARGET_RATIO = 0.4;
const NOOP_QUEUE = 'bench-noop';
const CEILING_QUEUE = 'bench-ceiling';
const CEILING_NEXT_QUEUE = 'bench-ceiling-next';
/** A first term that started this long ago (monthly) has 3..6 days left: past the 7-day lead. */
const FIRST_TERM_AGE_DAYS = 25;
/** A phase with no completed job for this long is stuck, not slow (ms). */
const STALL_MS = 60_000;
const ADD_CHUNK = 1000;

interface Options {
  chains: number;
  concurrency: number;
  rounds: number;
  json: boolean;
  redisUrl: string | undefined;
  /** Where to write a V8 CPU profile of each round's renewal phase, when given. */
  cpuProfile: string | undefined;
}

/** A whole number from 1 to `max` (beyond it a run would not fit in memory or in time). */
function positiveInt(flag: string, value: string, max: number): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1 || n > max) {
    throw new Error(`${flag} must be an integer from 1 to ${max}, got '${value}'`);
  }
  return n;
}

/** A Redis URL the product takes, of one server (DBSIZE, FLUSHDB and INFO answer for one node). */
function redisUrl(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  let kind: string;
  try {
    kind = parseRedisTarget(value).kind;
  } catch (error) {
    throw new Error(`--redis-url: ${(error as Error).message}`);
  }
  if (kind === 'cluster') {
    throw new Error('--redis-url: the benchmark runs on one Redis server, not a cluster');
  }
  return value;
}

function parseOptions(argv: string[]): Options {
  const { values } = parseArgs({
    args: argv,
    strict: true,
    options: {
      chains: { type: 'string', default: '20000' },
      concurrency: { type: 'string', default: '50' },
      rounds: { type: 'string', default: '3' },
      json: { type: 'boolean', default: false },
      'redis-url': { type: 'string' },
      'cpu-profile': { type: 'string' },
    },
  });
  return {
    chains: positiveInt('--chains', values.chains, 1_000_000),
    concurrency: positiveInt('--concurrency', values.concurrency, 10_000),
    rounds: positiveInt('--rounds', values.rounds, 100),
    json: values.json,
    redisUrl: redisUrl(values['redis-url']),
    cpuProfile: values['cpu-profile'],
  };
}

// --- counting round trips ------------------------------------------------------------------------

/**
 * Client-side round trips of every ioredis connection in this process (BullMQ's included): a
 * command sent alone is one, a pipeline or MULTI is one however many commands it carries. Redis'
 * own counters cannot tell these apart, and they count each command a Lua script runs.
 */
const roundTrips = { count: 0 };

function countRoundTrips(): void {
  type Send = (command: unknown, stream?: { isPipeline?: boolean }) => unknown;
  const proto = Redis.prototype as unknown as { sendCommand: Send };
  const send = proto.sendCommand;
  const pipelines = new WeakSet<object>();
  proto.sendCommand = function (this: Redis, command, stream) {
    if (!stream?.isPipeline) roundTrips.count += 1;
    else if (!pipelines.has(stream)) {
      pipelines.add(stream);
      roundTrips.count += 1;
    }
    return send.call(this, command, stream);
  };
}

// --- the service, assembled as main.ts assembles it ----------------------------------------------

interface Bench {
  /** The core's request-path connection (as openRuntime makes it); also INFO and FLUSHDB. */
  admin: Redis;
  core: ProvisioningCore;
  partners: PartnerDirectory;
  settings: Settings;
  /** Everything but the provisioning client, which belongs to each round's partner. */
  deps: Omit<WorkerDeps, 'provisioning'>;
  /** BullMQ workers' connection. */
  workerRedis: Redis;
  /** The chain store's and producer queues' connection (auto-pipelined, as in main.ts). */
  storeRedis: Redis;
  close(): Promise<void>;
}

async function openBench(url: string): Promise<Bench> {
  // The product's defaults, not this shell's environment, so runs compare across machines.
  const settings = loadSettings({});
  const admin = (await connectRedis(url, 'request')) as Redis;
  const workerRedis = (await connectRedis(url, 'worker')) as Redis;
  const storeRedis = (await connectRedis(url, 'store')) as Redis;
  const store = new ProvisioningStore(admin);
  // Production logs at info; /dev/null keeps the serialising cost without flooding the output.
  const log = createLogger(settings.LOG_LEVEL, pino.destination({ dest: '/dev/null', sync: true }));
  const core = makeProvisioningCore({
    store,
    clock: systemClock,
    brand: settings.PRODUCT_BRAND,
    publicUrl: () => settings.PUBLIC_URL,
    log,
  });
  const queues = openQueues(storeRedis, log);
  return {
    admin,
    core,
    partners: makePartnerDirectory(store, async () => 'bench-key-hash-secret-bench-key-hash'),
    settings,
    workerRedis,
    storeRedis,
    deps: {
      chains: new ChainStore(storeRedis),
      clock: systemClock,
      log,
      metrics: createMetrics(),
      queues,
      settings: workerSettingsFrom(settings),
    },
    async close() {
      await closeQueues(queues);
      await Promise.all([workerRedis.quit(), storeRedis.quit(), admin.quit()]);
    },
  };
}

/** After a FLUSHDB: a fresh marketplace partner and the worker deps that act for it. */
async function freshDeps(bench: Bench): Promise<{ deps: WorkerDeps; partner: Partner }> {
  const partner = await bench.partners.ensure({
    name: bench.settings.PARTNER_NAME,
    variant: 'marketplace',
    renewalWindowDays: bench.settings.PARTNER_RENEWAL_WINDOW_DAYS,
    now: systemClock.now(),
  });
  // Counted per call, as main.ts wraps the workers' client.
  const provisioning = instrumentClient(
    inProcessClient({ core: bench.core, partner }),
    bench.deps.metrics,
  );
  return { deps: { ...bench.deps, provisioning }, partner };
}

// --- running workers -----------------------------------------------------------------------------

/**
 * A worker with the options startWorkers gives the orders and renewals queues (src/workers.ts);
 * the product's processors come wrapped in classifyFailures as startWorkers wraps them (its
 * shutdown bookkeeping, a Set add and delete per job, is left out).
 */
function openWorker(bench: Bench, queue: string, processor: Processor, concurrency: number) {
  return new Worker(queue, processor, {
    connection: bench.workerRedis,
    prefix: QUEUE_PREFIX,
    concurrency,
    stalledInterval: STALLED_INTERVAL_MS,
    maxStalledCount: MAX_STALLED_COUNT,
    settings: { backoffStrategy: retryBackoff },
    // Started by hand once ready, so connecting is not timed.
    autorun: false,
  });
}

/**
 * Runs the worker and resolves once `n` jobs completed. Nothing else touches these chains, so any
 * failed job (even one BullMQ would retry) is a bug in the path under test, and stops the run.
 */
function untilCompleted(worker: Worker, n: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let completed = 0;
    const timer = setTimeout(() => {
      reject(new Error(`${worker.name}: no job completed for ${STALL_MS} ms (${completed}/${n})`));
    }, STALL_MS);
    const fail = (error: unknown) => {
      clearTimeout(timer);
      reject(error);
    };
    worker.on('completed', () => {
      completed += 1;
      timer.refresh();
      if (completed === n) {
        clearTimeout(timer);
        resolve();
      }
    });
    worker.on('failed', (job: Job | undefined, error: Error) =>
      fail(new Error(`${worker.name} job ${job?.id} failed: ${error.message}`, { cause: error })),
    );
    worker.on('error', fail);
    // run() settles when the worker closes: before `n` completions that is a failure.
    worker
      .run()
      .then(() => fail(new Error(`${worker.name} stopped at ${completed}/${n} jobs`)), fail);
  });
}

/**
 * Readies the worker, lets `around` run it to completion (so it can time just that), and closes
 * it, also when a job failed.
 */
async function runWorker<T>(
  worker: Worker,
  n: number,
  around: (run: () => Promise<void>) => Promise<T>,
): Promise<T> {
  try {
    await worker.waitUntilReady();
    return await around(() => untilCompleted(worker, n));
  } finally {
    await worker.close(true);
  }
}

// --- measuring -----------------------------------------------------------------------------------

interface Phase {
  jobs: number;
  seconds: number;
  roundTrips: number;
  /** Every command Redis ran, those inside Lua scripts included. */
  commands: number;
  byCommand: Map<string, number>;
  redisCpuSeconds: number;
  nodeCpuSeconds: number;
  /** Bytes sent to Redis and received from it, over every connection. */
  bytesIn: number;
  bytesOut: number;
}

interface RedisCounters {
  commands: number;
  byCommand: Map<string, number>;
  cpuSeconds: number;
  /** Bytes Redis read from and wrote to its clients. */
  netBytes: { in: number; out: number };
}

function infoNumber(info: string, field: string): number {
  const match = new RegExp(`^${field}:([\\d.]+)`, 'm').exec(info);
  if (!match) throw new Error(`INFO has no field ${field}`);
  return Number(match[1]);
}

async function redisCounters(admin: Redis): Promise<RedisCounters> {
  // One section per call: Redis before 7 takes a single section name.
  const stats = await admin.info('stats');
  const commandStats = await admin.info('commandstats');
  const cpu = await admin.info('cpu');
  const byCommand = new Map<string, number>();
  for (const [, name, calls] of commandStats.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    byCommand.set(name as string, Number(calls));
  }
  return {
    commands: infoNumber(stats, 'total_commands_processed'),
    byCommand,
    cpuSeconds: infoNumber(cpu, 'used_cpu_user') + infoNumber(cpu, 'used_cpu_sys'),
    netBytes: {
      in: infoNumber(stats, 'total_net_input_bytes'),
      out: infoNumber(stats, 'total_net_output_bytes'),
    },
  };
}

/** Times `run` and counts what it cost: round trips, Redis commands, CPU on both sides. */
async function measure(admin: Redis, jobs: number, run: () => Promise<void>): Promise<Phase> {
  const before = await redisCounters(admin);
  const trips = roundTrips.count;
  const cpu = process.cpuUsage();
  const started = performance.now();
  await run();
  const seconds = (performance.now() - started) / 1000;
  const nodeCpu = process.cpuUsage(cpu);
  const tripsTaken = roundTrips.count - trips;
  const after = await redisCounters(admin);
  const byCommand = new Map<string, number>();
  for (const [name, calls] of after.byCommand) {
    const delta = calls - (before.byCommand.get(name) ?? 0);
    if (delta > 0) byCommand.set(name, delta);
  }
  return {
    jobs,
    seconds,
    roundTrips: tripsTaken,
    commands: after.commands - before.commands,
    byCommand,
    redisCpuSeconds: after.cpuSeconds - before.cpuSeconds,
    nodeCpuSeconds: (nodeCpu.user + nodeCpu.system) / 1e6,
    bytesIn: after.netBytes.in - before.netBytes.in,
    bytesOut: after.netBytes.out - before.netBytes.out,
  };
}

// --- one round -----------------------------------------------------------------------------------

async function addInChunks(
  queue: Queue,
  jobs: { name: string; data: unknown; opts: typeof defaultJobOptions }[],
): Promise<void> {
  for (let i = 0; i < jobs.length; i += ADD_CHUNK) {
    await queue.addBulk(jobs.slice(i, i + ADD_CHUNK));
  }
}

function orderPlaced(orderId: string, product: string, startsAt: number, now: number) {
  const data: EventJobData = {
    webhookId: `bench-${orderId}`,
    type: 'order.placed',
    data: {
      customer: {
        id: `cust-${orderId}`,
        name: `Bench ${orderId}`,
        admin: { email: `${orderId}@bench.test` },
      },
      order: { id: orderId, product, licenses: 5, duration: 'monthly', startsAt },
      autoRenew: true,
    },
    occurredAt: now,
    receivedAt: now,
  };
  return { name: 'order.placed', data, opts: { ...defaultJobOptions, jobId: `place-${orderId}` } };
}

/**
 * Untimed setup: N first orders placed by the real orders processor, each term started 25 days
 * ago, so each chain's renewal job is due at once and waits, since no renewal worker runs yet.
 */
async function placeChains(bench: Bench, deps: WorkerDeps, n: number, concurrency: number) {
  const now = systemClock.now();
  const startsAt = now - FIRST_TERM_AGE_DAYS * SECONDS_PER_DAY;
  const [product] = productCatalogue(bench.settings.PRODUCT_BRAND);
  const orderIds = Array.from({ length: n }, (_, i) => `bench-${i}`);
  await addInChunks(
    deps.queues.orders,
    orderIds.map((id) => orderPlaced(id, product, startsAt, now)),
  );
  const orders = classifyFailures(makeOrdersProcessor(deps));
  const worker = openWorker(bench, QUEUES.orders, orders, concurrency);
  await runWorker(worker, n, (run) => run());
  const waiting = await deps.queues.renewals.getWaitingCount();
  if (waiting !== n) {
    throw new Error(`setup: expected ${n} renewal jobs waiting, found ${waiting}`);
  }
  return orderIds;
}

/** Adds `jobs` to their own queue (untimed), then times a worker draining them with `processor`. */
async function timeJobs(
  bench: Bench,
  queueName: string,
  jobs: { name: string; data: RenewalJobData; opts: typeof defaultJobOptions }[],
  processor: Processor,
  concurrency: number,
): Promise<Phase> {
  const queue = new Queue(queueName, { connection: bench.workerRedis, prefix: QUEUE_PREFIX });
  try {
    await addInChunks(queue, jobs);
    const worker = openWorker(bench, queueName, processor, concurrency);
    return await runWorker(worker, jobs.length, (run) => measure(bench.admin, jobs.length, run));
  } finally {
    await queue.close();
  }
}

/** The simplest honest version of the work: as many jobs, same data shape, nothing done. */
function timeNoopJobs(bench: Bench, n: number, concurrency: number): Promise<Phase> {
  const jobs = Array.from({ length: n }, (_, i) => {
    const data: RenewalJobData = {
      chainId: `c${i}`,
      order: `bench-${i}`,
      customer: `cust-${i}`,
      count: 2,
      dueAt: 0,
    };
    return { name: `noop ${i}`, data, opts: { ...defaultJobOptions, jobId: `noop-${i}` } };
  });
  return timeJobs(bench, NOOP_QUEUE, jobs, async () => 'done', concurrency);
}

/**
 * The ceiling of any renewal here: a no-op job that adds its next term's delayed job, with the
 * renewal jobs' own data (read from the waiting renewal jobs), and nothing else. Every renewal
 * must add that job (DESIGN §4), so no renewal path can beat this rate on this Redis.
 */
async function timeSchedulingJobs(
  bench: Bench,
  deps: WorkerDeps,
  n: number,
  concurrency: number,
): Promise<Phase> {
  const next = new Queue(CEILING_NEXT_QUEUE, {
    connection: bench.storeRedis,
    prefix: QUEUE_PREFIX,
  });
  try {
    const waiting = await deps.queues.renewals.getWaiting(0, n - 1);
    const jobs = waiting.map((job, i) => ({
      name: `schedule ${i}`,
      data: job.data as RenewalJobData,
      opts: { ...defaultJobOptions, jobId: `schedule-${i}` },
    }));
    const addNext = async (job: Job<RenewalJobData>) => {
      await next.add(`next ${job.id}`, job.data, {
        ...defaultJobOptions,
        jobId: `next-${job.id}`,
        delay: 30 * SECONDS_PER_DAY * 1000,
      });
      return 'scheduled';
    };
    return await timeJobs(bench, CEILING_QUEUE, jobs, addNext, concurrency);
  } finally {
    await next.close();
  }
}

async function timeRenewals(
  bench: Bench,
  deps: WorkerDeps,
  n: number,
  concurrency: number,
  profileTo: string | undefined,
) {
  const renewals = classifyFailures(makeRenewalProcessor(deps));
  const worker = openWorker(bench, QUEUES.renewals, renewals, concurrency);
  // startWorkers counts every completed job; keep that cost in the measured path.
  worker.on('completed', () =>
    deps.metrics.jobs.inc({ queue: QUEUES.renewals, outcome: 'completed' }),
  );
  return runWorker(worker, n, (run) =>
    measure(bench.admin, n, profileTo ? () => profiled(profileTo, run) : run),
  );
}

/** Runs `run` under V8's CPU profiler and writes the profile (for Chrome DevTools) to `file`. */
async function profiled(file: string, run: () => Promise<void>): Promise<void> {
  const session = new Session();
  session.connect();
  try {
    await session.post('Profiler.enable');
    // Every 100 µs (V8's default is 1 ms): a renewal takes a few hundred µs of CPU.
    await session.post('Profiler.setSamplingInterval', { interval: 100 });
    await session.post('Profiler.start');
    await run();
    const { profile } = await session.post('Profiler.stop');
    await mkdir(dirname(file), { recursive: true });
    await writeFile(file, JSON.stringify(profile));
  } finally {
    session.disconnect();
  }
}

/**
 * Every chain must be at term 2 with no intent left, the core must hold exactly 2N orders, and
 * the renewals queue one delayed job per chain (the next term's) and nothing else to run.
 */
async function verifyRenewed(bench: Bench, deps: WorkerDeps, partner: Partner, orderIds: string[]) {
  const problems: string[] = [];
  for (let i = 0; i < orderIds.length; i += ADD_CHUNK) {
    const ids = orderIds.slice(i, i + ADD_CHUNK);
    const chains = await deps.chains.getMany(ids.map(chainIdOf));
    if (chains.length !== ids.length) problems.push(`${ids.length - chains.length} chains missing`);
    for (const chain of chains) {
      if (chain.term.count !== 2 || chain.intent !== null || chain.flagged !== null) {
        problems.push(
          `chain of ${chain.order}: term ${chain.term.count}, intent ${chain.intent?.orderId ?? 'none'}, flagged ${chain.flagged ?? 'no'}`,
        );
      }
    }
  }
  const orders = await bench.admin.hlen(partnerKeys(partner.id).orders);
  if (orders !== 2 * orderIds.length) {
    problems.push(`the core holds ${orders} orders, expected ${2 * orderIds.length}`);
  }
  const jobs = await deps.queues.renewals.getJobCounts('delayed', 'waiting', 'active', 'failed');
  const expected = { delayed: orderIds.length, waiting: 0, active: 0, failed: 0 };
  if (Object.entries(expected).some(([state, count]) => jobs[state] !== count)) {
    problems.push(
      `the renewals queue holds ${JSON.stringify(jobs)}, expected ${JSON.stringify(expected)}`,
    );
  }
  if (problems.length > 0) {
    throw new Error(
      `${problems.length} renewal problems, first: ${problems.slice(0, 5).join('; ')}`,
    );
  }
}

interface Round {
  baseline: Phase;
  candidate: Phase;
  /** A no-op job that adds its next term's job: the most a renewal could reach. */
  ceiling: Phase;
}

/** A clean database, N due chains (untimed), then the baseline and the renewals, each timed. */
async function runRound(
  bench: Bench,
  n: number,
  concurrency: number,
  profileTo?: string,
): Promise<Round> {
  await bench.admin.flushdb();
  const { deps, partner } = await freshDeps(bench);
  const orderIds = await placeChains(bench, deps, n, concurrency);
  const baseline = await timeNoopJobs(bench, n, concurrency);
  const ceiling = await timeSchedulingJobs(bench, deps, n, concurrency);
  const candidate = await timeRenewals(bench, deps, n, concurrency, profileTo);
  await verifyRenewed(bench, deps, partner, orderIds);
  return { baseline, candidate, ceiling };
}

// --- reporting -----------------------------------------------------------------------------------

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

const rate = (p: Phase) => p.jobs / p.seconds;
const perJob = (p: Phase, value: number) => value / p.jobs;
const scriptCalls = (p: Phase) =>
  (p.byCommand.get('evalsha') ?? 0) +
  (p.byCommand.get('eval') ?? 0) +
  (p.byCommand.get('fcall') ?? 0);

/** Median over rounds of one per-phase figure, for the candidate and the baseline. */
function pair(rounds: readonly Round[], figure: (p: Phase) => number) {
  const value = median(rounds.map((r) => figure(r.candidate)));
  const baseline = median(rounds.map((r) => figure(r.baseline)));
  return { value, baseline, ratio: value / baseline };
}

function summarize(rounds: readonly Round[]) {
  return {
    ratios: rounds.map((r) => rate(r.candidate) / rate(r.baseline)),
    ceilingRatios: rounds.map((r) => rate(r.ceiling) / rate(r.baseline)),
    ceiling: median(rounds.map((r) => rate(r.ceiling))),
    ceilingNodeCpuUs: median(rounds.map((r) => perJob(r.ceiling, r.ceiling.nodeCpuSeconds) * 1e6)),
    ceilingRedisCpuUs: median(
      rounds.map((r) => perJob(r.ceiling, r.ceiling.redisCpuSeconds) * 1e6),
    ),
    throughput: pair(rounds, rate),
    roundTrips: pair(rounds, (p) => perJob(p, p.roundTrips)),
    commands: pair(rounds, (p) => perJob(p, p.commands)),
    scripts: pair(rounds, (p) => perJob(p, scriptCalls(p))),
    redisCpuUs: pair(rounds, (p) => perJob(p, p.redisCpuSeconds) * 1e6),
    nodeCpuUs: pair(rounds, (p) => perJob(p, p.nodeCpuSeconds) * 1e6),
    bytesIn: pair(rounds, (p) => perJob(p, p.bytesIn)),
    bytesOut: pair(rounds, (p) => perJob(p, p.bytesOut)),
  };
}

/** Commands per renewal by name, over every timed round, most frequent first. */
function commandsByName(rounds: readonly Round[]): string {
  const totals = new Map<string, number>();
  let jobs = 0;
  for (const { candidate } of rounds) {
    jobs += candidate.jobs;
    for (const [name, calls] of candidate.byCommand)
      totals.set(name, (totals.get(name) ?? 0) + calls);
  }
  return [...totals]
    .filter(([name]) => name !== 'info')
    .sort((a, b) => b[1] - a[1])
    .map(([name, calls]) => `${name} ${(calls / jobs).toFixed(2)}`)
    .join(', ');
}

const fixed = (value: number, digits: number) => Number(value.toFixed(digits));

/** The throughput ratio is the median of the rounds' ratios; the others are ratios of medians. */
function printJson(rounds: readonly Round[]): void {
  const s = summarize(rounds);
  const lines = [
    {
      name: 'renewal-burst.throughput',
      unit: 'jobs/s',
      value: fixed(s.throughput.value, 0),
      baseline: fixed(s.throughput.baseline, 0),
      ratio: fixed(median(s.ratios), 3),
    },
    {
      name: 'renewal-burst.ceiling',
      unit: 'jobs/s',
      value: fixed(s.ceiling, 0),
      baseline: fixed(s.throughput.baseline, 0),
      ratio: fixed(median(s.ceilingRatios), 3),
    },
    {
      name: 'renewal-burst.redis-round-trips',
      unit: 'round-trips/job',
      value: fixed(s.roundTrips.value, 2),
      baseline: fixed(s.roundTrips.baseline, 2),
      ratio: fixed(s.roundTrips.ratio, 2),
    },
    {
      name: 'renewal-burst.redis-commands',
      unit: 'commands/job',
      value: fixed(s.commands.value, 2),
      baseline: fixed(s.commands.baseline, 2),
      ratio: fixed(s.commands.ratio, 2),
    },
  ];
  for (const line of lines) process.stdout.write(`${JSON.stringify(line)}\n`);
}

function printHuman(rounds: readonly Round[]): void {
  const s = summarize(rounds);
  const ratio = median(s.ratios);
  const verdict = ratio >= TARGET_RATIO ? 'meets' : 'below';
  const out = [
    `ratio ${ratio.toFixed(2)} (target >= ${TARGET_RATIO.toFixed(2)}, ${verdict}; rounds ${s.ratios.map((r) => r.toFixed(2)).join(' ')})`,
    `renewals/s  ${s.throughput.value.toFixed(0)}  (no-op jobs/s ${s.throughput.baseline.toFixed(0)})`,
    `ceiling ${median(s.ceilingRatios).toFixed(2)}: a no-op job that adds its next term's job (what every renewal must do) runs at ${s.ceiling.toFixed(0)}/s, cpu node ${s.ceilingNodeCpuUs.toFixed(0)} µs, redis ${s.ceilingRedisCpuUs.toFixed(0)} µs (rounds ${s.ceilingRatios.map((r) => r.toFixed(2)).join(' ')})`,
    `redis round trips per renewal ${s.roundTrips.value.toFixed(1)} (no-op job ${s.roundTrips.baseline.toFixed(1)})  [a command sent alone, or a whole pipeline, is one]`,
    `redis commands per renewal ${s.commands.value.toFixed(1)} (no-op job ${s.commands.baseline.toFixed(1)})  [each command a Lua script runs counts; script calls ${s.scripts.value.toFixed(1)} (no-op ${s.scripts.baseline.toFixed(1)})]`,
    `cpu per renewal: node ${s.nodeCpuUs.value.toFixed(0)} µs, redis ${s.redisCpuUs.value.toFixed(0)} µs  (no-op job: node ${s.nodeCpuUs.baseline.toFixed(0)} µs, redis ${s.redisCpuUs.baseline.toFixed(0)} µs)`,
    `bytes per renewal: to redis ${s.bytesIn.value.toFixed(0)}, from redis ${s.bytesOut.value.toFixed(0)}  (no-op job: ${s.bytesIn.baseline.toFixed(0)}, ${s.bytesOut.baseline.toFixed(0)})`,
    `redis commands per renewal by name: ${commandsByName(rounds)}`,
  ];
  process.stdout.write(`${out.join('\n')}\n`);
}

// --- main ----------------------------------------------------------------------------------------

async function openRedis(url: string | undefined): Promise<{ url: string; stop(): Promise<void> }> {
  if (url === undefined) return startTestRedis();
  return { url, stop: async () => {} };
}

/** The benchmark flushes the database between rounds, so it only ever takes an empty one. */
async function requireEmpty(bench: Bench, url: string): Promise<void> {
  const keys = await bench.admin.dbsize();
  if (keys > 0) {
    throw new Error(
      `--redis-url ${describeRedisTarget(url)}: the database holds ${keys} keys; the benchmark flushes it, so give it an empty one`,
    );
  }
}

async function benchmark(options: Options, url: string, log: (line: string) => void) {
  const bench = await openBench(url);
  try {
    await requireEmpty(bench, url);
    const info = await bench.admin.info('server');
    const redisVersion = /^redis_version:(\S+)/m.exec(info)?.[1] ?? 'unknown';
    log(
      `renewal-burst: node ${process.version}, redis ${redisVersion}, ${availableParallelism()} CPUs`,
    );
    log(
      `chains ${options.chains}, concurrency ${options.concurrency}, rounds ${options.rounds} after a warm-up of ${Math.min(WARMUP_CHAINS, options.chains)}`,
    );
    await runRound(bench, Math.min(WARMUP_CHAINS, options.chains), options.concurrency);
    const rounds: Round[] = [];
    for (let i = 1; i <= options.rounds; i += 1) {
      const profileTo =
        options.cpuProfile && `${options.cpuProfile}/renewals-round-${i}.cpuprofile`;
      const round = await runRound(bench, options.chains, options.concurrency, profileTo);
      log(
        `round ${i}: renewals/s ${rate(round.candidate).toFixed(0)}, no-op jobs/s ${rate(round.baseline).toFixed(0)}, scheduling no-op jobs/s ${rate(round.ceiling).toFixed(0)}`,
      );
      rounds.push(round);
    }
    await bench.admin.flushdb();
    return rounds;
  } finally {
    await bench.close();
  }
}

const USAGE =
  'usage: npm run bench -- [--chains N] [--concurrency C] [--rounds R] [--json] [--redis-url URL] [--cpu-profile DIR]';

const STOP_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

async function main(options: Options): Promise<void> {
  countRoundTrips();
  const redis = await openRedis(options.redisUrl);
  // A Ctrl-C, a kill or a closed terminal must not leave our redis-server running (it ignores
  // a hangup itself, so it would outlive us).
  const onSignal = () => void redis.stop().finally(() => process.exit(130));
  for (const signal of STOP_SIGNALS) process.once(signal, onSignal);
  try {
    // With --json, stdout carries the result lines and nothing else; progress goes to stderr.
    const out = options.json ? process.stderr : process.stdout;
    const log = (line: string) => out.write(`${line}\n`);
    const rounds = await benchmark(options, redis.url, log);
    if (options.json) printJson(rounds);
    else printHuman(rounds);
  } finally {
    await redis.stop();
    for (const signal of STOP_SIGNALS) process.off(signal, onSignal);
  }
}

let options: Options;
try {
  options = parseOptions(process.argv.slice(2));
} catch (error) {
  process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n${USAGE}\n`);
  process.exit(2);
}
main(options).catch((error: unknown) => {
  process.stderr.write(
    `renewal-burst failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  // Everything we opened is closed by now, but a connection whose first connect failed keeps
  // reconnecting (connectRedis does not close it) and would hold the process open.
  process.exit(1);
});
