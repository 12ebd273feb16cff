// Runs a job's work under its chain's lock: one chain is changed by one job at a time.
import { randomUUID } from 'node:crypto';
import { DelayedError, type Job, type Queue } from 'bullmq';
import { mainChainIdOf } from '../src/chains/family.js';
import { whileHeld } from '../src/chains/lease.js';
import type { Chain, Intent } from '../src/chains/records.js';
import type { ChainStore, ClaimResult } from '../src/chains/store.js';
import { type Clock, delayUntil, queueTimeMs } from '../src/clock.js';
import { TransientError } from '../src/errors.js';
import { delayedFireTime, QUEUES, type QueueName } from '../src/queues.js';

export interface HeldChain {
  chainId: string;
  token: string;
  chain: Chain | null;
  /** Whether `take` also wrote the job's prepared intent (the renewal fast path). */
  claimed: boolean;
}

/** How soon a job that found its chain locked looks again (ms), spread to avoid a herd. */
function lockedRetryDelayMs(): number {
  return 250 + Math.floor(Math.random() * 750);
}

/**
 * Takes the chain's lock (with `take`, which may also claim a prepared intent), runs `work`, and
 * releases the lock. When another job holds it, the job moves itself back to the delayed set
 * (without spending an attempt) and tries again shortly.
 */
export async function withChainLock<T>(
  chains: ChainStore,
  job: Job,
  jobToken: string | undefined,
  chainId: string,
  work: (held: HeldChain) => Promise<T>,
  take: (token: string) => Promise<ClaimResult> = (token) => chains.lock(chainId, token),
): Promise<T> {
  const token = `${job.id}/${randomUUID()}`;
  const lock = await take(token);
  if (lock.kind === 'locked') return waitForLock(job, jobToken);
  return whileHeld(chains, chainId, token, () =>
    work({ chainId, token, chain: lock.chain, claimed: lock.kind === 'claimed' }),
  );
}

/**
 * Puts the job back for a moment because another job holds its chain's lock: moved to the
 * delayed set, it tries again shortly without spending an attempt.
 */
export function waitForLock(job: Job, jobToken: string | undefined): Promise<never> {
  return putBack(job, jobToken, queueTimeMs() + lockedRetryDelayMs());
}

/**
 * Moves the job back to the delayed set until `firesAtMs` (queue time), without spending an
 * attempt: BullMQ takes the DelayedError thrown for it as "moved", not as a failure.
 */
export async function putBack(
  job: Job,
  jobToken: string | undefined,
  firesAtMs: number,
): Promise<never> {
  await job.moveToDelayed(firesAtMs, jobToken);
  throw new DelayedError();
}

/** How soon a job looks again when another job's work is half done on its chain (seconds). */
const OTHER_JOB_RETRY_SECONDS = 2;

/** Puts the job back for a moment: another job (running now) is about to finish its work. */
export function waitForOtherJob(job: Job, jobToken: string | undefined): Promise<never> {
  return putBack(job, jobToken, queueTimeMs() + OTHER_JOB_RETRY_SECONDS * 1000);
}

/**
 * The longest a job waits for another's next attempt (ms): that job may run sooner than it was
 * due (a person retrying it in Bull Board, a payment moving a renewal to now).
 */
const OWNER_WAIT_MAX_MS = 60_000;

/**
 * Puts the job back until the job that owns `intent`, a renewal half done on the chain, has had
 * its next attempt (at most OWNER_WAIT_MAX_MS). Seat purchases are finished by whichever job
 * holds the chain, and a first order is never on a chain before it is recorded. A renewal waiting
 * out a provider's outage retries on its backoff, up to 15 minutes apart, and looking every 2
 * seconds meanwhile only loads Redis and the log; one that failed for good (its chain flagged)
 * runs again only when a person retries it, so the job looks once a minute until then. Looks
 * again in 2 seconds when that job is neither (running now, about to, or gone: reconcile gives a
 * renewal intent's job back).
 */
export async function waitForIntent(
  queues: Record<QueueName, Queue>,
  job: Job,
  jobToken: string | undefined,
  intent: Intent,
): Promise<never> {
  const ownerAttempt =
    intent.kind === 'renewal' && intent.jobId !== null
      ? await nextAttemptOf(queues[QUEUES.renewals], intent.jobId)
      : null;
  const queueNow = queueTimeMs();
  const soon = queueNow + OTHER_JOB_RETRY_SECONDS * 1000;
  // A second after the owner's attempt, to find its work done.
  const afterOwner = Math.min((ownerAttempt ?? 0) + 1000, queueNow + OWNER_WAIT_MAX_MS);
  return putBack(job, jobToken, Math.max(soon, afterOwner));
}

/**
 * When a job's next attempt is due (queue time, ms): its fire time when delayed, never
 * (Infinity) when failed, null when it runs now, is about to, or is gone.
 */
async function nextAttemptOf(queue: Queue, jobId: string): Promise<number | null> {
  const firesAt = await delayedFireTime(queue, jobId);
  if (firesAt !== null) return firesAt;
  return (await queue.getJobState(jobId)) === 'failed' ? Number.POSITIVE_INFINITY : null;
}

/** Puts the job back in the delayed set until `until` (epoch seconds by `clock`). */
export function delayJobUntil(
  job: Job,
  jobToken: string | undefined,
  until: number,
  clock: Clock,
): Promise<never> {
  return putBack(job, jobToken, queueTimeMs() + delayUntil(clock, until));
}

/**
 * The chain an event names: the main chain of the order's family, or (`own`) the order's own
 * chain, so cancelling an add-on bought by mistake leaves its main chain alone. An unknown order
 * is retried with backoff, not failed: its `order.placed` may still be on its way.
 */
export async function chainOfEvent(
  chains: ChainStore,
  type: string,
  order: string,
  scope: 'family' | 'own' = 'family',
): Promise<string> {
  const chainId =
    scope === 'family' ? await mainChainIdOf(chains, order) : await chains.chainIdOfOrder(order);
  if (chainId) return chainId;
  throw new TransientError(
    'order_unknown',
    `${type} names an order not known (yet): ${order}; retrying, in case its order.placed is still being processed`,
    { order },
  );
}
