// Worker hygiene on a real BullMQ queue: a provider's refusal fails its job at once with the
// provider's message; a transient failure is retried; the product's retry policy in BullMQ.
import { randomUUID } from 'node:crypto';
import { type Job, Queue, Worker } from 'bullmq';
import { describe, expect, it } from 'vitest';
import { MalformedAnswerError, RefusalError, TransientError } from '../../../src/errors.js';
import { defaultJobOptions, delayedFireTime } from '../../../src/queues.js';
import { retryBackoff, UNEXPECTED_FAILURES_IN_A_ROW } from '../../../src/retry-policy.js';
import { classifyFailures } from '../../../src/workers.js';
import { useTestRedisConnection } from '../../helpers/redis-server.js';

const db = useTestRedisConnection();

/**
 * Runs one job with the product's options, wrapper and policy, retries promoted at once, until
 * it fails for good or has made `n` attempts. `fail` gets the attempt's number (1-based).
 */
async function attempts(
  fail: (attempt: number) => Error,
  n: number,
): Promise<{ state: string; job: Job }> {
  const name = `policy-${randomUUID()}`;
  const queue = new Queue(name, { connection: db.redis });
  const worker = new Worker(
    name,
    classifyFailures(async (job) => {
      throw fail(job.attemptsMade + 1);
    }),
    { connection: db.redis, settings: { backoffStrategy: retryBackoff } },
  );
  try {
    const added = await queue.add('work', {}, defaultJobOptions);
    for (;;) {
      // The state first: a job read after it is at least as new (read before, it could still
      // show the attempt in flight of a job that failed since).
      const state = await queue.getJobState(added.id ?? '');
      const job = (await queue.getJob(added.id ?? '')) as Job;
      // An attempt may end between the two reads: its job is read waiting to retry next time.
      if (state === 'failed' || (job.attemptsMade >= n && state === 'delayed')) {
        return { state, job };
      }
      if (state === 'delayed') await job.promote().catch(() => {});
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  } finally {
    await worker.close();
    await queue.close();
  }
}

describe('a processor whose provider refuses', () => {
  it('fails the job on its first attempt, with the provider message as the failed reason', async () => {
    const refused = () =>
      new RefusalError('customer_refused', 'customer name is not allowed: ACME');
    const { state, job } = await attempts(refused, 100);
    expect(state).toBe('failed');
    expect(job.attemptsMade).toBe(1);
    expect(job.failedReason).toBe('customer name is not allowed: ACME');
  });
});

describe('the retry policy, as BullMQ applies it', () => {
  it('fails an unexpected error after 12 attempts', async () => {
    const { state, job } = await attempts(() => new Error('not the interface'), 100);
    expect(state).toBe('failed');
    expect(job.attemptsMade).toBe(UNEXPECTED_FAILURES_IN_A_ROW);
  });

  it('keeps retrying a transient failure past that, and keeps only the last 12 failures', async () => {
    const { state, job } = await attempts(() => new TransientError('unavailable', 'away'), 30);
    expect(state).toBe('delayed');
    expect(job.attemptsMade).toBe(30);
    expect(job.stacktrace).toHaveLength(12);
  });

  it('takes a Redis failure for a transient one', async () => {
    const redisAway = () =>
      Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6390'), { code: 'ECONNREFUSED' });
    const { state, job } = await attempts(redisAway, 20);
    expect(state).toBe('delayed');
    expect(job.stacktrace?.at(-1)).toMatch(/^TransientError: connect ECONNREFUSED/);
  });

  it('gives an unexpected failure after an outage its own 12 attempts in a row', async () => {
    const outageThenBadAnswers = (attempt: number) =>
      attempt <= 20
        ? new TransientError('provisioning_unavailable', 'answered 503')
        : new MalformedAnswerError(
            'provisioning createOrder answered 200 with a body that is not JSON',
          );
    const { state, job } = await attempts(outageThenBadAnswers, 100);
    expect(state).toBe('failed');
    expect(job.attemptsMade).toBe(20 + UNEXPECTED_FAILURES_IN_A_ROW);
  });

  it('waits at least as long as the provider asked in its Retry-After', async () => {
    const name = `policy-${randomUUID()}`;
    const queue = new Queue(name, { connection: db.redis });
    const tenMinutes = 600_000;
    const worker = new Worker(
      name,
      classifyFailures(async () => {
        throw new TransientError('provisioning_unavailable', 'answered 429', {
          retryAfterMs: tenMinutes,
        });
      }),
      { connection: db.redis, settings: { backoffStrategy: retryBackoff } },
    );
    try {
      const before = Date.now();
      const added = await queue.add('work', {}, defaultJobOptions);
      await expect.poll(() => queue.getJobState(added.id ?? '')).toBe('delayed');
      const fires = (await delayedFireTime(queue, added.id ?? '')) as number;
      // Not the 1-2 s of a first retry: the ten minutes asked for, and up to half again.
      expect(fires - before).toBeGreaterThanOrEqual(tenMinutes);
      expect(fires - Date.now()).toBeLessThanOrEqual(tenMinutes * 1.5);
    } finally {
      await worker.close();
      await queue.close();
    }
  });
});
