// Worker hygiene on a real BullMQ queue: a provider's refusal fails its job at once with the
// provider's message; a transient failure is retried.
import { randomUUID } from 'node:crypto';
import { type Job, Queue, Worker } from 'bullmq';
import { describe, expect, it } from 'vitest';
import { RefusalError, TransientError } from '../../../src/errors.js';
import { defaultJobOptions } from '../../../src/queues.js';
import { refusalsFailJobs } from '../../../src/workers.js';
import { useTestRedisConnection } from '../../helpers/redis-server.js';

const db = useTestRedisConnection();

/** Runs one job (the product's job options, short backoff) until it fails for good. */
async function runUntilFailed(fail: (attempt: number) => Error): Promise<Job> {
  const name = `refusals-${randomUUID()}`;
  const queue = new Queue(name, { connection: db.redis });
  const worker = new Worker(
    name,
    refusalsFailJobs(async (job) => {
      throw fail(job.attemptsMade + 1);
    }),
    { connection: db.redis },
  );
  try {
    const failed = new Promise<Job>((resolve) => {
      worker.on('failed', (job) => {
        if (job && (job.finishedOn ?? 0) > 0) resolve(job);
      });
    });
    await queue.add('work', {}, { ...defaultJobOptions, attempts: 3, backoff: 10 });
    return await failed;
  } finally {
    await worker.close();
    await queue.close();
  }
}

describe('a processor whose provider refuses', () => {
  it('fails the job on its first attempt, with the provider message as the failed reason', async () => {
    const job = await runUntilFailed(
      () => new RefusalError('customer_refused', 'customer name is not allowed: ACME'),
    );
    expect(job.attemptsMade).toBe(1);
    expect(job.failedReason).toBe('customer name is not allowed: ACME');
  });

  it('still retries a transient failure with backoff until attempts run out', async () => {
    const job = await runUntilFailed(
      (attempt) => new TransientError('unavailable', `provider unreachable (${attempt})`),
    );
    expect(job.attemptsMade).toBe(3);
    expect(job.failedReason).toBe('provider unreachable (3)');
  });
});
