// Starts the BullMQ workers of every queue that has a processor, with one shared hygiene.
import { type Processor, Queue, UnrecoverableError, Worker } from 'bullmq';
import { putBack } from '../jobs/chain-lock.js';
import type { WorkerDeps } from '../jobs/deps.js';
import {
  makeProcessor as makeMaintenanceProcessor,
  scheduleMaintenance,
} from '../jobs/maintenance.js';
import { makeProcessor as makeOrdersProcessor } from '../jobs/orders.js';
import { makeProcessor as makePaymentProcessor } from '../jobs/payment-signals.js';
import { makeRenewalProcessor } from '../jobs/renewals.js';
import { makeProcessor as makeSeatProcessor } from '../jobs/seat-changes.js';
import { queueTimeMs } from './clock.js';
import { RefusalError, TransientError } from './errors.js';
import type { Logger } from './logger.js';
import {
  MAX_STALLED_COUNT,
  QUEUE_PREFIX,
  QUEUES,
  type QueueName,
  queueNames,
  STALLED_INTERVAL_MS,
} from './queues.js';
import { isRedisUnavailable, type RedisClient } from './redis/connection.js';
import { retryBackoff } from './retry-policy.js';
import { settlesWithin } from './settles-within.js';

export interface Workers {
  workers: Worker[];
  /** Whether every worker takes jobs: false once one stopped, and while a shutdown drains. */
  isRunning(): boolean;
  /** Waits up to `timeoutMs` for active jobs, then closes anyway (they are retried later). */
  close(timeoutMs: number): Promise<void>;
}

/**
 * One producer Queue per name, on the given connection (not closed with the queues). Their
 * connection's errors go to `log` (without a listener,
 * BullMQ prints each one, with the failed command's arguments, on stderr); the calls that fail
 * report themselves to their callers.
 */
export function openQueues(connection: RedisClient, log: Logger): Record<QueueName, Queue> {
  return Object.fromEntries(
    queueNames.map((name) => {
      const queue = new Queue(name, { connection, prefix: QUEUE_PREFIX });
      queue.on('error', (error) => log.warn({ err: error, queue: name }, 'queue error'));
      return [name, queue];
    }),
  ) as Record<QueueName, Queue>;
}

export async function closeQueues(queues: Record<QueueName, Queue>): Promise<void> {
  await Promise.all(Object.values(queues).map((q) => q.close()));
}

/**
 * Whether every running job finished within `timeoutMs`. Looks again until then: a job the
 * worker fetched just before it paused starts after the first look.
 */
async function jobsFinishWithin(running: ReadonlySet<Promise<unknown>>, timeoutMs: number) {
  const deadline = performance.now() + timeoutMs;
  while (running.size > 0) {
    const left = deadline - performance.now();
    if (left <= 0 || !(await settlesWithin(Promise.allSettled([...running]), left))) return false;
  }
  return true;
}

/**
 * Gives a processor's failures the kind the retry policy reads. A provider's refusal that no
 * processor handled fails its job at once, with the provider's
 * message as the job's failed reason: the same request would be refused the same way on every
 * retry. A Redis failure is thrown as the TransientError it is, so the retry policy (and the
 * job's kept stack traces) know it for a failure that only waiting fixes.
 */
export function classifyFailures(processor: Processor): Processor {
  return async (job, token, signal) => {
    try {
      return await processor(job, token, signal);
    } catch (error) {
      if (error instanceof RefusalError) throw new UnrecoverableError(error.message);
      if (!(error instanceof TransientError) && isRedisUnavailable(error)) {
        throw new TransientError(
          'redis_unavailable',
          (error as Error).message,
          {},
          { cause: error },
        );
      }
      throw error;
    }
  };
}

/** How soon a job a draining process handed back is due again (ms): for another process to take. */
const HANDED_BACK_DELAY_MS = 1_000;

export async function startWorkers(input: {
  deps: WorkerDeps;
  /** A connection with `maxRetriesPerRequest: null`, as BullMQ workers require. */
  connection: RedisClient;
  concurrency: number;
  reconcileEverySeconds: number;
  /** Every worker the same (the queue uses whichever worker set it first); tests shorten it. */
  stalledIntervalMs?: number;
  /** How long a job's lock lasts without renewal (BullMQ default 30 s); tests shorten it. */
  jobLockMs?: number;
}): Promise<Workers> {
  const { deps } = input;
  const processors: Partial<Record<QueueName, Processor>> = {
    [QUEUES.orders]: makeOrdersProcessor(deps),
    [QUEUES.renewals]: makeRenewalProcessor(deps),
    [QUEUES.maintenance]: makeMaintenanceProcessor(deps),
    [QUEUES.seatChanges]: makeSeatProcessor(deps),
    [QUEUES.paymentSignals]: makePaymentProcessor(deps),
  };
  // Every job this process is running, so shutdown can wait for them (and for no longer).
  const running = new Set<Promise<unknown>>();
  // Set once a shutdown begins. A worker's fetch in flight when it paused still hands it a job:
  // that job goes back untouched, so the drain waits only for the jobs begun before it.
  let draining = false;
  const tracked =
    (processor: Processor): Processor =>
    (job, token, signal) => {
      if (draining) return putBack(job, token, queueTimeMs() + HANDED_BACK_DELAY_MS);
      const run = processor(job, token, signal);
      running.add(run);
      run.then(
        () => running.delete(run),
        () => running.delete(run),
      );
      return run;
    };
  const workers = Object.entries(processors).map(([name, processor]) => {
    const worker = new Worker(name, tracked(classifyFailures(processor)), {
      connection: input.connection,
      prefix: QUEUE_PREFIX,
      concurrency: name === QUEUES.maintenance ? 1 : input.concurrency,
      stalledInterval: input.stalledIntervalMs ?? STALLED_INTERVAL_MS,
      maxStalledCount: MAX_STALLED_COUNT,
      settings: { backoffStrategy: retryBackoff },
      ...(input.jobLockMs ? { lockDuration: input.jobLockMs } : {}),
    });
    worker.on('completed', () => deps.metrics.jobs.inc({ queue: name, outcome: 'completed' }));
    worker.on('failed', (job, error) => {
      // Moved to Failed (not to a retry): BullMQ has set when it finished.
      const final = !job || (job.finishedOn ?? 0) > 0;
      deps.metrics.jobs.inc({ queue: name, outcome: final ? 'failed' : 'retried' });
      const log = deps.log.child({ queue: name, jobId: job?.id });
      if (final) log.error({ err: error }, 'job failed');
      else log.warn({ err: error, attempt: job?.attemptsMade }, 'job failed, will retry');
    });
    // Redis away is what waiting fixes (the queues log it at warn too); anything else is not.
    worker.on('error', (error) => {
      const level = isRedisUnavailable(error) ? 'warn' : 'error';
      deps.log[level]({ err: error, queue: name }, 'worker error');
    });
    return worker;
  });
  try {
    await Promise.all(workers.map((w) => w.waitUntilReady()));
    await scheduleMaintenance(deps.queues.maintenance, input.reconcileEverySeconds);
  } catch (error) {
    // Started, but the caller never gets them to close: they would go on taking jobs.
    await Promise.allSettled(workers.map((w) => w.close(true)));
    throw error;
  }

  return {
    workers,
    // A shutdown pauses them first: a draining process says so to whoever routes work to it.
    isRunning: () => workers.every((w) => w.isRunning() && !w.isPaused()),
    async close(timeoutMs) {
      // No new jobs, then a bounded wait for the running ones. Not BullMQ's own waits: once
      // close() has begun, a later close(true) only returns the first call's promise, and
      // pause() reconnects Redis when its wait ends, even after the worker closed.
      draining = true;
      await Promise.all(workers.map((w) => w.pause(true)));
      if (!(await jobsFinishWithin(running, timeoutMs))) {
        deps.log.warn({ timeoutMs }, 'active jobs did not finish in time; closing workers anyway');
      }
      // The waiting was ours, bounded. BullMQ's close(false) would wait again, for its blocking
      // connection's 'end' as well, which never comes once Redis refused the connection's
      // password for a while (a rotation): close without it.
      await Promise.all(workers.map((w) => w.close(true)));
    },
  };
}
