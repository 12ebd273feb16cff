// How a failed job is retried: for as long as the failure is the world's (a provider or Redis
// away, a key being fixed), a bounded number of times in a row when it is anything else.
import type { BackoffStrategy } from 'bullmq';
import { TransientError } from './errors.js';

/** The backoff type every job carries: BullMQ asks the workers' strategy (retryBackoff). */
export const RETRY_BACKOFF_TYPE = 'billing-retry';

/**
 * The attempts a job gets when it keeps failing for the world's reasons: one attempt per
 * MAX_RETRY_DELAY_MS at most once the waits reach it, less the jitter, so about 78 days of
 * outage before it fails (52 at the least, 104 at the most).
 */
export const JOB_ATTEMPTS = 10_000;

/**
 * Failures in a row that waiting did not fix (a bug, an answer that is not the interface's)
 * after which a job fails, whatever outage came before them.
 */
export const UNEXPECTED_FAILURES_IN_A_ROW = 12;

/**
 * The failures a job keeps (BullMQ's stack traces): enough to count the unexpected ones in a
 * row, and bounded, since a job may fail thousands of times in an outage.
 */
export const KEPT_FAILURES = UNEXPECTED_FAILURES_IN_A_ROW;

const FIRST_RETRY_DELAY_MS = 2_000;
export const MAX_RETRY_DELAY_MS = 15 * 60_000;
/** Each wait is shortened by up to this share, so jobs failed together do not retry together. */
const JITTER = 0.5;

/**
 * The error names of failures that only waiting can fix. The workers throw a Redis failure as a
 * TransientError (src/workers.ts), so a failure's name says it, in a kept stack trace too.
 */
const WORLD_FAILURES = /^(TransientError|ConfigError)\b/;

/** Whether retrying can only wait for something outside the job: it must never give up early. */
function waitsForTheWorld(error: unknown): boolean {
  return error instanceof Error && WORLD_FAILURES.test(error.name);
}

/** The unexpected failures in a row that end with `error`: 0 when it is the world's. */
function unexpectedInARow(error: unknown, earlierTraces: readonly string[]): number {
  if (waitsForTheWorld(error)) return 0;
  let count = 1;
  for (let i = earlierTraces.length - 1; i >= 0; i -= 1) {
    if (WORLD_FAILURES.test(earlierTraces[i] ?? '')) break;
    count += 1;
  }
  return count;
}

/**
 * The wait a failure asked for (a provider's Retry-After, src/client/http.ts), in ms, capped
 * like every wait; 0 when it asked for none.
 */
function askedWaitMs(error: unknown): number {
  if (!(error instanceof TransientError)) return 0;
  const asked = error.details.retryAfterMs;
  if (typeof asked !== 'number' || !Number.isFinite(asked) || asked <= 0) return 0;
  return Math.min(asked, MAX_RETRY_DELAY_MS);
}

/**
 * The wait before the retry that follows attempt `attemptsMade` (1-based), in ms, or -1: fail the
 * job now. Doubling from 2 s, capped at 15 minutes, with jitter; never shorter than the wait the
 * failure asked for (plus jitter, within the cap). `earlierTraces`: the stack traces of the job's earlier failures, oldest
 * first (BullMQ's `job.stacktrace`).
 */
export function retryDelayMs(
  attemptsMade: number,
  error: unknown,
  earlierTraces: readonly string[] = [],
  random = Math.random,
): number {
  if (unexpectedInARow(error, earlierTraces) >= UNEXPECTED_FAILURES_IN_A_ROW) return -1;
  const ceiling = Math.min(MAX_RETRY_DELAY_MS, FIRST_RETRY_DELAY_MS * 2 ** (attemptsMade - 1));
  const spread = random();
  const backoff = Math.floor(ceiling * (1 - JITTER * spread));
  // Spread after the asked time too: jobs turned away together must not all return at its instant.
  const asked = askedWaitMs(error);
  return Math.max(backoff, Math.min(MAX_RETRY_DELAY_MS, Math.floor(asked * (1 + JITTER * spread))));
}

/** retryDelayMs as BullMQ's worker setting `backoffStrategy`. */
export const retryBackoff: BackoffStrategy = (attemptsMade, _type, error, job) =>
  retryDelayMs(attemptsMade, error, job?.stacktrace ?? []);
