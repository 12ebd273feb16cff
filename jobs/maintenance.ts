// The `maintenance` queue: a job scheduler that reconciles chains with their renewal jobs.
import type { Job, Queue } from 'bullmq';
import { z } from 'zod';
import { markAddOnCancelled } from '../src/chains/cancel.js';
import { governedNextRenewalAt } from '../src/chains/family.js';
import type { Chain } from '../src/chains/records.js';
import { defaultJobOptions } from '../src/queues.js';
import type { WorkerDeps } from './deps.js';
import { finishUnsuspension } from './payment-signals.js';
import { ensureRenewalJob, schedulesRenewals } from './renewals.js';
import { ensureAddOnJob } from './waiting-add-ons.js';

export const schema = z.object({}).loose();

const PAGE = 500;
export const RECONCILE_SCHEDULER_ID = 'reconcile';

/** Idempotent: safe on every boot (upsert, not add). */
export async function scheduleMaintenance(queue: Queue, everySeconds: number): Promise<void> {
  await queue.upsertJobScheduler(
    RECONCILE_SCHEDULER_ID,
    { every: everySeconds * 1000 },
    {
      name: 'reconcile renewals',
      data: {},
      opts: { removeOnComplete: { count: 100 }, removeOnFail: defaultJobOptions.removeOnFail },
    },
  );
}

/** An add-on's schedule as its main chain governs it (no renewals while the main one stops). */
function governedBy(main: Chain, addOn: Chain): Chain {
  return { ...addOn, nextRenewalAt: governedNextRenewalAt(main, addOn) };
}

/** A term that ended with nothing ordered after it: the chain is expired (DESIGN §4 status). */
function hasExpired(chain: Chain, now: number): boolean {
  // A renewal in flight is finished by its job (reconcile restores it), not expired.
  return (
    chain.status === 'active' &&
    chain.nextRenewalAt === null &&
    chain.intent?.kind !== 'renewal' &&
    chain.term.expiresAt <= now
  );
}

export function makeProcessor(deps: WorkerDeps) {
  /** An add-on's schedule, read with its main chain. */
  async function governed(chain: Chain): Promise<Chain> {
    if (chain.mainChain === null) return chain;
    const main = await deps.chains.get(chain.mainChain);
    return main ? governedBy(main, chain) : chain;
  }

  return async function reconcile(job: Job): Promise<{ checked: number; expired: number }> {
    schema.parse(job.data);
    let checked = 0;
    let expired = 0;
    for (let offset = 0; ; offset += PAGE) {
      const ids = await deps.chains.pageOfChainIds(offset, PAGE);
      if (ids.length === 0) break;
      for (const chain of await deps.chains.getMany(ids)) {
        checked += 1;
        const now = deps.clock.now();
        // Read once for both: whether the add-on goes with a cancelled main chain, and its
        // schedule as that main chain governs it.
        const main = chain.mainChain === null ? null : await deps.chains.get(chain.mainChain);
        if (await cancelledWithMainChain(deps, chain, main, now, job.id ?? '')) continue;
        const schedule = main ? governedBy(main, chain) : chain;
        if (hasExpired(schedule, now)) {
          if (await markExpired(deps, chain, now, job.id ?? '', governed)) expired += 1;
          continue;
        }
        if (schedulesRenewals(chain) || chain.pendingAddOn || chain.unsuspending) {
          await ensureJobs(deps, chain, now, job.id ?? '', governed);
        }
      }
    }
    deps.log.info({ checked, expired }, 'reconciled chains');
    return { checked, expired };
  };
}

/**
 * An add-on whose main chain is cancelled, not yet recorded as cancelled itself: the cancel marks
 * its add-ons at best effort and leaves one that another job held at that moment. Recorded here
 * (again at best effort, for the next round). One with a renewal in flight is its job's: that job
 * cancels what it ordered.
 */
async function cancelledWithMainChain(
  deps: WorkerDeps,
  chain: Chain,
  main: Chain | null,
  now: number,
  jobId: string,
): Promise<boolean> {
  if (main?.status !== 'cancelled' || chain.status === 'cancelled' || chain.intent !== null) {
    return false;
  }
  await markAddOnCancelled(
    deps.chains,
    chain,
    now,
    { jobId },
    {
      detail: 'cancelled with its main chain (recorded by reconcile)',
    },
  );
  return true;
}

/**
 * Runs `work` on the chain as it is now, under its lock: the page was read a while ago, and a
 * change since (an operator's, a payment's, saved under the lock) must not be undone by that
 * older copy. Best effort: a chain some job is changing right now is left for the next round
 * (`busy` is the answer then).
 */
async function underLock<T>(
  deps: WorkerDeps,
  seen: Chain,
  jobId: string,
  busy: T,
  work: (chain: Chain | null, token: string) => Promise<T>,
): Promise<T> {
  const token = `reconcile/${jobId}/${seen.id}`;
  const lock = await deps.chains.lock(seen.id, token);
  if (lock.kind === 'locked') return busy;
  try {
    return await work(lock.chain, token);
  } finally {
    await deps.chains.unlock(seen.id, token);
  }
}

/**
 * The chain's renewal job, and its waiting add-on's job, as the chain is now; first, the
 * unsuspension of a payment whose job gave up halfway.
 */
function ensureJobs(
  deps: WorkerDeps,
  seen: Chain,
  now: number,
  jobId: string,
  governed: (chain: Chain) => Promise<Chain>,
): Promise<void> {
  return underLock(deps, seen, jobId, undefined, async (locked, token) => {
    if (!locked) return;
    // A payment whose job gave up halfway through its unsuspension (marketplace) is finished.
    const { chain } = await finishUnsuspension(deps, jobId, { chain: locked, token }, now);
    if (schedulesRenewals(chain)) {
      // A job still active is left as it is: it schedules the next term itself, and the next
      // round finds it finished.
      await ensureRenewalJob(deps.queues.renewals, await governed(chain), now, {
        waitForActive: false,
      });
    }
    if (await ensureAddOnJob(deps, chain, now)) {
      deps.log.warn({ chainId: chain.id }, 'reconcile restored a waiting add-on job');
    }
  });
}

/** Marks the chain `expired` if, as it is now, its term ended with nothing after it. */
function markExpired(
  deps: WorkerDeps,
  seen: Chain,
  now: number,
  jobId: string,
  governed: (chain: Chain) => Promise<Chain>,
): Promise<boolean> {
  return underLock(deps, seen, jobId, false, async (chain, token) => {
    // Checked again under the lock, with the add-on's schedule as its main chain governs it.
    if (!chain || !hasExpired(await governed(chain), now)) return false;
    await deps.chains.save({
      chainId: chain.id,
      token,
      previous: chain,
      next: { ...chain, status: 'expired', updatedAt: now },
      history: [
        {
          at: now,
          event: 'chain.expired',
          detail: `term ${chain.term.count} (${chain.term.orderId}) ended with no renewal`,
          cause: { jobId },
        },
      ],
      release: false,
    });
    return true;
  });
}
