// The queues, which event goes to which, and the job options every queue shares.
import type { Job, JobsOptions, Queue } from 'bullmq';
import type { EventType } from './intake/events.js';
import { QUEUE_KEY_PREFIX } from './redis/key-space.js';
import { JOB_ATTEMPTS, KEPT_FAILURES, RETRY_BACKOFF_TYPE } from './retry-policy.js';

export const QUEUES = {
  orders: 'orders',
  renewals: 'renewals',
  seatChanges: 'seat-changes',
  paymentSignals: 'payment-signals',
  maintenance: 'maintenance',
} as const;

export type QueueName = (typeof QUEUES)[keyof typeof QUEUES];
export const queueNames: readonly QueueName[] = Object.values(QUEUES);

/** The queue each webhook event type is enqueued to. */
export const queueForEvent: Record<EventType, QueueName> = {
  'order.placed': QUEUES.orders,
  'order.cancelled': QUEUES.orders,
  'seats.changed': QUEUES.seatChanges,
  'payment.overdue': QUEUES.paymentSignals,
  'payment.received': QUEUES.paymentSignals,
};

/** BullMQ key prefix of every queue, hash-tagged like every other key (src/redis/key-space.ts). */
export const QUEUE_PREFIX = QUEUE_KEY_PREFIX;

/** Every worker uses the same stalled-job check (the queue uses whichever worker set it first). */
export const STALLED_INTERVAL_MS = 30_000;

/**
 * How often a job may lose its worker (a crash, a kill, a deploy) and be picked up again before
 * BullMQ fails it for good. Every processor is safe to run again, so a few deaths in a row (a
 * rolling deploy, an unlucky crash loop) must not lose an event; a job that kills every worker
 * it runs on still ends in Failed, for a person to look at.
 */
export const MAX_STALLED_COUNT = 10;

const DAY_SECONDS = 86_400;

/**
 * Completed jobs stay a week (enough to see what happened, bounded so Redis does not grow);
 * failed jobs stay 90 days for inspection and retry from Bull Board. Failed attempts retry by the
 * workers' policy (src/retry-policy.ts): waits doubling from 2 s up to 15 minutes, with jitter;
 * for as long as a provider or Redis is away (an accepted event must not be lost to an outage),
 * 12 failures in a row for anything unexpected. The last 12 failures' stack traces are kept.
 */
export const defaultJobOptions: JobsOptions = {
  attempts: JOB_ATTEMPTS,
  backoff: { type: RETRY_BACKOFF_TYPE },
  stackTraceLimit: KEPT_FAILURES,
  removeOnComplete: { age: 7 * DAY_SECONDS, count: 100_000 },
  removeOnFail: { age: 90 * DAY_SECONDS },
};

/**
 * When a delayed job really fires (ms), from its score in the delayed set: BullMQ scores it
 * `fireTime * 0x1000 + counter`, and `changeDelay` moves the score but not `job.timestamp`.
 */
export async function delayedFireTime(queue: Queue, jobId: string): Promise<number | null> {
  const client = await queue.backend.client;
  return fireTimeOfScore(await client.zscore(queue.keys.delayed as string, jobId));
}

/**
 * Whether a job in `state` never runs again of itself while it blocks its id: completed, or in no
 * list at all ('unknown': Redis lost the list, or an entry of it). Whether a failed one is to be
 * replaced too is each caller's rule (some wait for a person).
 */
export function neverRunsAgain(state: string): boolean {
  return state === 'completed' || state === 'unknown';
}

/** The replies of a pipeline on a queue's client, in order: the first one that failed throws. */
export async function pipelineReplies(pipeline: {
  exec(): Promise<[Error | null, unknown][] | null>;
}): Promise<unknown[]> {
  return ((await pipeline.exec()) ?? []).map(([error, value]) => {
    if (error) throw error;
    return value;
  });
}

/** A delayed job's fire time (queue time, ms) from its score in BullMQ's delayed set. */
export function fireTimeOfScore(score: string | null): number | null {
  return score === null ? null : Math.floor(Number(score) / 0x1000);
}

/** BullMQ's refusal to remove a job a worker holds (Job.remove), the one refusal taken here. */
const LOCKED_JOB = /could not be removed because it is locked by another worker/;

/**
 * Removes `job`, unless a worker holds it: BullMQ refuses to remove a locked job (its state read
 * before may have moved on since: a delayed job promoted and taken). Anything else, a Redis
 * away, fails the caller.
 */
export async function removedUnlessRunning(job: Job): Promise<boolean> {
  try {
    await job.remove();
    return true;
  } catch (error) {
    if (error instanceof Error && LOCKED_JOB.test(error.message)) return false;
    throw error;
  }
}
