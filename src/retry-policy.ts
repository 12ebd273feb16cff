// How a failed job is retried: for as long as the failure is the world's (a provider or Redis
// away, a key being fixed), a bounded number of times when it is unexpected.
import type { BackoffStrategy } from 'bullmq';
import { ConfigError, TransientError } from './errors.js';
import { isRedisUnavailable } from './redis/connection.js';

/** The backoff type every job carries: BullMQ asks the workers' strategy (retryBackoff). */
export const RETRY_BACKOFF_TYPE = 'billing-retry';

/**
 * The attempts a job gets when it keeps failing for the world's reasons: at most one attempt per
 * MAX_RETRY_DELAY_MS once the waits reach it, so about 104 days of outage before it fails.
 */
export const JOB_ATTEMPTS = 10_000;

/** Attempts of a job that fails for any other reason (a bug, an answer that is not the interface's). */
export const UNEXPECTED_FAILURE_ATTEMPTS = 12;

const FIRST_RETRY_DELAY_MS = 2_000;
export const MAX_RETRY_DELAY_MS = 15 * 60_000;
/** Each wait is shortened by up to this share, so jobs failed together do not retry together. */
const JITTER = 0.5;

/** Whether retrying can only wait for something outside the job: it must never give up early. */
export function waitsForTheWorld(error: unknown): boolean {
  return (
    error instanceof TransientError || error instanceof ConfigError || isRedisUnavailable(error)
  );
}

/**
 * The wait before the retry that follows attempt `attemptsMade` (1-based), in ms, or -1: fail the
 * job now. Doubling from 2 s, capped at 15 minutes, with jitter.
 */
export function retryDelayMs(attemptsMade: number, error: unknown, random = Math.random): number {
  if (!waitsForTheWorld(error) && attemptsMade >= UNEXPECTED_FAILURE_ATTEMPTS) return -1;
  const ceiling = Math.min(MAX_RETRY_DELAY_MS, FIRST_RETRY_DELAY_MS * 2 ** (attemptsMade - 1));
  return Math.floor(ceiling * (1 - JITTER * random()));
}

/** retryDelayMs as BullMQ's worker setting `backoffStrategy`. */
export const retryBackoff: BackoffStrategy = (attemptsMade, _type, error) =>
  retryDelayMs(attemptsMade, error);
