// Scheduling renewal jobs ("ensure", not "add") on a real BullMQ queue backed by redis-server.
import { randomUUID } from 'node:crypto';
import { DelayedError, type Job, Queue, UnrecoverableError, Worker } from 'bullmq';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  addNextRenewalJob,
  ensureRenewalJob,
  renewalJobData,
  renewalJobId,
} from '../../../jobs/renewals.js';
import { chainIdOf } from '../../../src/chains/keys.js';
import { type Chain, chainRecord } from '../../../src/chains/records.js';
import { manualClock, systemClock } from '../../../src/clock.js';
import { delayedFireTime, QUEUES, removedUnlessRunning } from '../../../src/queues.js';
import { chainFor as chainAt } from '../../helpers/chains.js';
import { useTestRedisConnection } from '../../helpers/redis-server.js';

/** The fixed clock of every test: delays are relative to it, never to the system time. */
const NOW = Date.UTC(2025, 2, 1) / 1000;
const AT_NOW = manualClock(NOW);
const DAY = 86_400;
const HOUR = 3_600;

const db = useTestRedisConnection();
let prefix: string;
let queue: Queue;
const workers: Worker[] = [];

beforeEach(async () => {
  await db.redis.flushdb();
  prefix = `test-${randomUUID()}`;
  queue = new Queue(QUEUES.renewals, { connection: db.redis, prefix });
});

afterEach(async () => {
  vi.useRealTimers();
  await Promise.all(workers.splice(0).map((worker) => worker.close()));
  await queue.close();
});

/** A chain whose latest term is `count`, renewing at `nextRenewalAt`. */
function chainFor(order: string, overrides: Partial<Chain> = {}): Chain {
  return chainRecord.parse({ ...chainAt(order, NOW, overrides), version: 0, ...overrides });
}

async function jobOf(chain: Chain): Promise<Job> {
  const job = await queue.getJob(renewalJobId(chain.id, chain.term.count + 1));
  if (!job) throw new Error(`no renewal job for chain ${chain.order}`);
  return job as Job;
}

/** When BullMQ will really fire the delayed job (ms), from its score in the delayed set. */
function firesAt(jobId: string): Promise<number | null> {
  return delayedFireTime(queue, jobId);
}

/** Runs the queue's due jobs with `processor` until the job `jobId` has finished. */
async function runJob(
  jobId: string,
  processor: () => Promise<string>,
  event: 'completed' | 'failed',
): Promise<void> {
  const worker = new Worker(QUEUES.renewals, processor, { connection: db.redis, prefix });
  workers.push(worker);
  await new Promise<void>((resolve) => {
    const settle = (job: Job | undefined): void => {
      if (job?.id === jobId) resolve();
    };
    if (event === 'completed') worker.on('completed', settle);
    else worker.on('failed', settle);
  });
  await worker.close();
}

describe('ensureRenewalJob', () => {
  describe('when the chain has no job yet', () => {
    it('adds a delayed job for the next term, named and described for people', async () => {
      const chain = chainFor('ord-1');
      const before = Date.now();
      await ensureRenewalJob(queue, chain, AT_NOW);
      const after = Date.now();

      const job = await jobOf(chain);
      expect(job.id).toBe(`renew-${chain.id}-2`);
      expect(job.name).toBe('renew ord-1 term 2');
      expect(renewalJobData.parse(job.data)).toEqual({
        chainId: chain.id,
        order: 'ord-1',
        customer: 'cust-1',
        count: 2,
        dueAt: NOW + 24 * DAY,
      });
      expect(await job.getState()).toBe('delayed');
      expect(job.delay).toBe(24 * DAY * 1000);
      expect(job.timestamp).toBeGreaterThanOrEqual(before);
      expect(job.timestamp).toBeLessThanOrEqual(after);
      expect(await firesAt(job.id ?? '')).toBe(job.timestamp + 24 * DAY * 1000);
    });

    it('adds a due chain as a waiting job with no delay', async () => {
      const chain = chainFor('ord-1', { nextRenewalAt: NOW });
      await ensureRenewalJob(queue, chain, AT_NOW);
      const job = await jobOf(chain);
      expect(await job.getState()).toBe('waiting');
      expect(job.delay).toBe(0);
    });

    it('clamps a renewal time in the past to no delay', async () => {
      const chain = chainFor('ord-1', { nextRenewalAt: NOW - 2 * DAY });
      await ensureRenewalJob(queue, chain, AT_NOW);
      const job = await jobOf(chain);
      expect(await job.getState()).toBe('waiting');
      expect(job.delay).toBe(0);
    });

    it('adds nothing for a chain that will not renew', async () => {
      const chain = chainFor('ord-1', { autoRenew: false, nextRenewalAt: null });
      await ensureRenewalJob(queue, chain, AT_NOW);
      expect(await queue.getJob(renewalJobId(chain.id, 2))).toBeUndefined();
    });
  });

  describe('when the job already exists', () => {
    it('keeps one job, untouched, when called twice with the same chain', async () => {
      const chain = chainFor('ord-1');
      await ensureRenewalJob(queue, chain, AT_NOW);
      const first = await jobOf(chain);
      await ensureRenewalJob(queue, chain, AT_NOW);
      const second = await jobOf(chain);
      expect(await queue.getJobCounts('delayed', 'waiting')).toEqual({ delayed: 1, waiting: 0 });
      expect([second.timestamp, second.delay]).toEqual([first.timestamp, first.delay]);
      expect(await firesAt(second.id ?? '')).toBe(await firesAt(first.id ?? ''));
    });

    it("moves a delayed job to the chain's new renewal time", async () => {
      const chain = chainFor('ord-1');
      await ensureRenewalJob(queue, chain, AT_NOW);
      const moved = { ...chain, nextRenewalAt: NOW + 10 * DAY };
      const before = Date.now();
      await ensureRenewalJob(queue, moved, AT_NOW);
      const after = Date.now();

      const job = await jobOf(moved);
      expect(await job.getState()).toBe('delayed');
      expect(job.delay).toBe(10 * DAY * 1000);
      const at = await firesAt(job.id ?? '');
      expect(at).toBeGreaterThanOrEqual(before + 10 * DAY * 1000);
      expect(at).toBeLessThanOrEqual(after + 10 * DAY * 1000);
      expect(await queue.getJobCounts('delayed')).toEqual({ delayed: 1 });
    });

    it("shows the new due time in a moved job's data", async () => {
      const chain = chainFor('ord-1');
      await ensureRenewalJob(queue, chain, AT_NOW);
      await ensureRenewalJob(queue, { ...chain, nextRenewalAt: NOW + 10 * DAY }, AT_NOW);
      expect((await jobOf(chain)).data).toMatchObject({ dueAt: NOW + 10 * DAY });
    });

    it('fires a job moved twice at the second new time, however long after it was added', async () => {
      // BullMQ's job timestamps come from the client's clock: fake only Date to let an hour pass.
      vi.useFakeTimers({ toFake: ['Date'] });
      const added = Date.UTC(2025, 2, 1);
      vi.setSystemTime(added);
      const chain = chainFor('ord-1', { nextRenewalAt: NOW + 20 * DAY });
      await ensureRenewalJob(queue, chain, AT_NOW);

      // An hour later the chain moves to day 10: the job is moved (delay now 10 days - 1 hour).
      vi.setSystemTime(added + HOUR * 1000);
      const anHourLater = manualClock(NOW + HOUR);
      await ensureRenewalJob(queue, { ...chain, nextRenewalAt: NOW + 10 * DAY }, anHourLater);
      expect(await firesAt(renewalJobId(chain.id, 2))).toBe(added + 10 * DAY * 1000);

      // Then it moves one hour earlier: the job must follow.
      await ensureRenewalJob(
        queue,
        { ...chain, nextRenewalAt: NOW + 10 * DAY - HOUR },
        anHourLater,
      );
      expect(await firesAt(renewalJobId(chain.id, 2))).toBe(added + (10 * DAY - HOUR) * 1000);
    });

    it('leaves a waiting job alone', async () => {
      const chain = chainFor('ord-1', { nextRenewalAt: NOW });
      await ensureRenewalJob(queue, chain, AT_NOW);
      await ensureRenewalJob(queue, chain, AT_NOW);
      expect(await queue.getJobCounts('delayed', 'waiting')).toEqual({ delayed: 0, waiting: 1 });
    });
  });

  describe('when the chain will no longer renew', () => {
    it('removes its delayed job', async () => {
      const chain = chainFor('ord-1');
      await ensureRenewalJob(queue, chain, AT_NOW);
      await ensureRenewalJob(queue, { ...chain, autoRenew: false, nextRenewalAt: null }, AT_NOW);
      expect(await queue.getJob(renewalJobId(chain.id, 2))).toBeUndefined();
      expect(await queue.getJobCounts('delayed')).toEqual({ delayed: 0 });
    });

    it('removes its waiting job', async () => {
      const chain = chainFor('ord-1', { nextRenewalAt: NOW });
      await ensureRenewalJob(queue, chain, AT_NOW);
      await ensureRenewalJob(queue, { ...chain, status: 'cancelled', nextRenewalAt: null }, AT_NOW);
      expect(await queue.getJob(renewalJobId(chain.id, 2))).toBeUndefined();
    });
  });

  describe('when the job for the next term already finished', () => {
    it('replaces a completed job that the chain still needs with a new delayed one', async () => {
      const chain = chainFor('ord-1', { nextRenewalAt: NOW });
      await ensureRenewalJob(queue, chain, AT_NOW);
      const id = renewalJobId(chain.id, 2);
      await runJob(id, async () => 'skipped: auto_renew_off', 'completed');
      expect(await (await jobOf(chain)).getState()).toBe('completed');

      const needed = { ...chain, nextRenewalAt: NOW + 3 * DAY };
      await ensureRenewalJob(queue, needed, AT_NOW);
      const job = await jobOf(needed);
      expect(await job.getState()).toBe('delayed');
      expect(job.delay).toBe(3 * DAY * 1000);
      expect(job.finishedOn).toBeUndefined();
      expect(job.returnvalue).toBeFalsy();
      expect(await queue.getJobCounts('completed', 'delayed')).toEqual({
        completed: 0,
        delayed: 1,
      });
    });

    it('replaces a failed job that the chain still needs with a new delayed one', async () => {
      const chain = chainFor('ord-1', { nextRenewalAt: NOW });
      await ensureRenewalJob(queue, chain, AT_NOW);
      const id = renewalJobId(chain.id, 2);
      await runJob(
        id,
        async () => {
          throw new UnrecoverableError('flagged for an operator');
        },
        'failed',
      );
      expect(await (await jobOf(chain)).getState()).toBe('failed');

      await ensureRenewalJob(queue, { ...chain, nextRenewalAt: NOW + DAY }, AT_NOW);
      const job = await jobOf(chain);
      expect(await job.getState()).toBe('delayed');
      expect(job.failedReason).toBeFalsy();
      expect(await queue.getJobCounts('failed', 'delayed')).toEqual({ failed: 0, delayed: 1 });
    });
  });
});

describe('ensureRenewalJob while the job is active', () => {
  /**
   * Runs the chain's job with a processor that holds until released, then ends with `finish`:
   * the moment a job has decided from the chain as it was and not yet left the active state.
   */
  async function heldActive(chain: Chain, finish: (job: Job, token?: string) => Promise<string>) {
    await ensureRenewalJob(queue, chain, AT_NOW);
    let release = () => {};
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    const started = new Promise<void>((resolve) => {
      const worker = new Worker(
        QUEUES.renewals,
        async (job, token) => {
          resolve();
          await released;
          return finish(job, token);
        },
        { connection: db.redis, prefix },
      );
      workers.push(worker);
    });
    await started;
    return release;
  }

  it('waits for one that decided not to renew, then replaces it', async () => {
    const chain = chainFor('ord-1', { nextRenewalAt: NOW });
    const release = await heldActive(chain, async () => 'skipped: auto_renew_off');
    const ensuring = ensureRenewalJob(queue, { ...chain, nextRenewalAt: NOW + 3 * DAY }, AT_NOW);
    await new Promise((resolve) => setTimeout(resolve, 100));
    release();
    await ensuring;
    const job = await jobOf(chain);
    expect(await job.getState()).toBe('delayed');
    expect(job.delay).toBe(3 * DAY * 1000);
  });

  it('waits for one that put itself off, then moves it to the new time', async () => {
    const chain = chainFor('ord-1', { nextRenewalAt: NOW });
    const release = await heldActive(chain, async (job, token) => {
      await job.moveToDelayed(Date.now() + 6 * HOUR * 1000, token);
      throw new DelayedError();
    });
    const ensuring = ensureRenewalJob(queue, { ...chain, nextRenewalAt: NOW + DAY }, AT_NOW);
    await new Promise((resolve) => setTimeout(resolve, 100));
    release();
    await ensuring;
    expect(await (await jobOf(chain)).getState()).toBe('delayed');
    expect(
      Math.abs(((await firesAt(renewalJobId(chain.id, 2))) ?? 0) - (Date.now() + DAY * 1000)),
    ).toBeLessThan(5_000);
  });
});

describe('ensureRenewalJob counts the delay from when it is set', () => {
  it('after waiting for an active job, delays from the clock then, not from the call', async () => {
    // The system clock: the wait for the active job takes real seconds.
    const start = systemClock.now();
    const chain = chainFor('ord-1', { nextRenewalAt: start });
    await ensureRenewalJob(queue, chain, systemClock);
    const started = new Promise<void>((resolve) => {
      const worker = new Worker(
        QUEUES.renewals,
        async (job, token) => {
          resolve();
          // Decides, then puts itself off 1.5 s later (a payment wait, say).
          await new Promise((done) => setTimeout(done, 1_500));
          await job.moveToDelayed(Date.now() + 6 * HOUR * 1000, token);
          throw new DelayedError();
        },
        { connection: db.redis, prefix },
      );
      workers.push(worker);
    });
    await started;
    const nextRenewalAt = start + DAY;
    await ensureRenewalJob(queue, { ...chain, nextRenewalAt }, systemClock);
    // Whole seconds by the clock: at most a second past the time, never 1.5 s more.
    const late = ((await firesAt(renewalJobId(chain.id, 2))) ?? 0) - nextRenewalAt * 1000;
    expect(late).toBeGreaterThanOrEqual(0);
    expect(late).toBeLessThan(1_000);
  });
});

describe('removedUnlessRunning', () => {
  it('removes a job nobody runs, and leaves one a worker holds', async () => {
    const idle = await queue.add('idle', {}, { jobId: 'idle', delay: DAY * 1000 });
    expect(await removedUnlessRunning(idle)).toBe(true);
    expect(await queue.getJob('idle')).toBeUndefined();

    // Read as waiting, then taken by a worker before the removal: as after a state read that
    // a promotion overtook. BullMQ refuses to remove it, and the caller goes on.
    const taken = await queue.add('taken', {}, { jobId: 'taken' });
    let release = () => {};
    const started = new Promise<void>((resolve) => {
      const worker = new Worker(
        QUEUES.renewals,
        async () => {
          resolve();
          await new Promise<void>((done) => {
            release = done;
          });
          return 'done';
        },
        { connection: db.redis, prefix },
      );
      workers.push(worker);
    });
    await started;
    expect(await removedUnlessRunning(taken)).toBe(false);
    expect(await queue.getJobState('taken')).toBe('active');
    release();
  });
});

describe('addNextRenewalJob', () => {
  it('adds the delayed job for the term after the latest one', async () => {
    const chain = chainFor('ord-1', {
      term: { orderId: 'ord-1.r2', count: 2, startsAt: NOW, expiresAt: NOW + 31 * DAY },
      nextRenewalAt: NOW + 24 * DAY,
    });
    await addNextRenewalJob(queue, chain, AT_NOW);
    const job = await jobOf(chain);
    expect(job.id).toBe(`renew-${chain.id}-3`);
    expect(job.data).toMatchObject({ count: 3, dueAt: NOW + 24 * DAY });
    expect(await job.getState()).toBe('delayed');
    expect(job.delay).toBe(24 * DAY * 1000);
  });

  it('adds nothing for a chain that will not renew', async () => {
    const chain = chainFor('ord-1', { autoRenew: false, nextRenewalAt: null });
    await addNextRenewalJob(queue, chain, AT_NOW);
    expect(await queue.getJobCounts('delayed', 'waiting')).toEqual({ delayed: 0, waiting: 0 });
  });
});

describe('renewal job ids', () => {
  it('are accepted by BullMQ for order ids that are all digits or hold a colon', async () => {
    for (const order of ['12345', 'a:b', '::', '0']) {
      const chain = chainFor(order);
      await ensureRenewalJob(queue, chain, AT_NOW);
      expect((await jobOf(chain)).data).toMatchObject({ order });
    }
    expect(await queue.getJobCounts('delayed')).toEqual({ delayed: 4 });
  });

  it('never contain a colon and are never all digits', () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.string(), fc.stringMatching(/^[0-9:]+$/)),
        fc.integer({ min: 2, max: 10_000 }),
        (order, count) => {
          const id = renewalJobId(chainIdOf(order), count);
          expect(id).not.toContain(':');
          expect(id).not.toMatch(/^\d+$/);
          expect(id.endsWith(`-${count}`)).toBe(true);
        },
      ),
    );
  });

  it('differ between chains and between terms of one chain', () => {
    expect(renewalJobId(chainIdOf('a:b'), 2)).not.toBe(renewalJobId(chainIdOf('a_b'), 2));
    expect(renewalJobId(chainIdOf('a:b'), 2)).not.toBe(renewalJobId(chainIdOf('a:b'), 3));
  });
});
