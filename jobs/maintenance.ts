// The `maintenance` queue: a job scheduler that reconciles chains with their delayed jobs.
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Job, Queue } from 'bullmq';
import { z } from 'zod';
import { markAddOnCancelled } from '../src/chains/cancel.js';
import { expiryOf, saveExpired } from '../src/chains/expiry.js';
import { governedNextRenewalAt, mainChainsOf } from '../src/chains/family.js';
import { whileHeld, whileHeldAlone } from '../src/chains/lease.js';
import type { Chain } from '../src/chains/records.js';
import { renewalDueAt } from '../src/domain/renewal.js';
import { ConfigError, MalformedAnswerError, RefusalError, TransientError } from '../src/errors.js';
import { formatInstant } from '../src/format.js';
import { inLanes } from '../src/in-lanes.js';
import { defaultJobOptions } from '../src/queues.js';
import { isRedisUnavailable } from '../src/redis/connection.js';
import { WORKER_KEY_ROOT } from '../src/redis/key-space.js';
import type { WorkerDeps } from './deps.js';
import {
  ensureEpisodeSuspension,
  finishUnsuspension,
  pendingSuspensionAt,
  suspensionJobId,
  suspensionJobsInPlace,
} from './payment-signals.js';
import {
  ensureRenewalJob,
  queuedJobIds,
  renewalJobsInPlace,
  schedulesRenewals,
} from './renewals.js';
import { finishPendingSeatPurchase } from './seat-purchases.js';
import { ensureAddOnJob } from './waiting-add-ons.js';

export const schema = z.object({}).loose();

const PAGE = 500;
/**
 * How many chains of a page that need more than a look reconcile checks at once: after a Redis
 * restored from a backup, or one that lost a queue, every chain does, and each takes several
 * round trips (and perhaps a provider call), one after another.
 */
const RECONCILE_LANES = 8;
export const RECONCILE_SCHEDULER_ID = 'reconcile';

/** The one-off round a start asks for (see scheduleMaintenance). */
export const RECONCILE_AT_START_JOB_ID = 'reconcile-at-start';

/**
 * Idempotent: safe on every boot (upsert, not add). A scheduler runs its first job only when it
 * is created, so a later start also asks for one round now: a restart after Redis was restored
 * from a backup must not wait a whole interval (up to a day) for the jobs reconcile gives back.
 * Processes that start together ask for the same job id, so one round runs for them all; it is
 * removed once done, for the next start to ask again.
 */
export async function scheduleMaintenance(queue: Queue, everySeconds: number): Promise<void> {
  const restarted = (await queue.getJobScheduler(RECONCILE_SCHEDULER_ID)) !== undefined;
  if (restarted) {
    await queue.add(
      'reconcile renewals (at start)',
      {},
      { jobId: RECONCILE_AT_START_JOB_ID, removeOnComplete: true, removeOnFail: true },
    );
  }
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

/**
 * An add-on's schedule and payment as its main chain governs them (no renewals while the main one
 * stops; its renewals wait for the main chain's payment).
 */
function governedBy(main: Chain, addOn: Chain): Chain {
  return { ...addOn, nextRenewalAt: governedNextRenewalAt(main, addOn), payment: main.payment };
}

/**
 * A cancelled chain with nothing left in flight: no renewal to replay, no unsuspension to finish
 * (a waiting add-on of a cancelled chain is never bought). Nothing can change it again, so
 * reconcile skips it without taking its lock (its share of every round grows with the years
 * otherwise). A stale job of it would find it cancelled and do nothing.
 */
function isAtRest(chain: Chain): boolean {
  return chain.status === 'cancelled' && chain.intent === null && !chain.unsuspending;
}

/** An add-on whose main chain is cancelled, not yet recorded as cancelled itself. */
function goesWithCancelledMain(chain: Chain, main: Chain | null): boolean {
  return main?.status === 'cancelled' && chain.status !== 'cancelled' && chain.intent === null;
}

/**
 * A seat purchase left half done: its intent written, or the rest of its event not yet bought.
 * Its own job finishes it when it runs again, but a job that ran out of attempts (a provider away
 * longer than the retries last) or was lost never does; reconcile finishes it then.
 */
function hasSeatPurchaseToFinish(chain: Chain): boolean {
  const kind = chain.intent?.kind;
  return kind === 'partial' || kind === 'addon' || chain.unfinishedSeatEvent !== null;
}

/** Whether reconcile has jobs to ensure for the chain (or an unsuspension or purchase to finish). */
function hasJobsToEnsure(chain: Chain): boolean {
  return (
    schedulesRenewals(chain) ||
    chain.pendingAddOn !== null ||
    pendingSuspensionAt(chain) !== null ||
    chain.unsuspending ||
    hasSeatPurchaseToFinish(chain)
  );
}

/** What reconcile has to do with a chain, as `chain` and its main chain `main` stand. */
function reconcileStep(
  chain: Chain,
  main: Chain | null,
  now: number,
): 'nothing' | 'cancel with main' | 'expire' | 'ensure jobs' {
  if (isAtRest(chain)) return 'nothing';
  if (goesWithCancelledMain(chain, main)) return 'cancel with main';
  if (expiryOf(main ? governedBy(main, chain) : chain, now) !== null) return 'expire';
  return hasJobsToEnsure(chain) ? 'ensure jobs' : 'nothing';
}

/** What reconcile does with one chain: whether it marked it expired. */
async function reconcileChain(deps: WorkerDeps, chain: Chain, job: Job): Promise<boolean> {
  if (isAtRest(chain)) return false;
  const jobId = job.id ?? '';
  const now = deps.clock.now();
  // Read once for both: whether the add-on goes with a cancelled main chain, and its schedule as
  // that main chain governs it (both decided again under the locks before anything is written).
  const main = chain.mainChain === null ? null : await deps.chains.get(chain.mainChain);
  switch (reconcileStep(chain, main, now)) {
    case 'cancel with main':
      await markCancelledWithMainChain(deps, chain, now, jobId);
      return false;
    case 'expire': {
      const marked = await markExpired(deps, chain, now, jobId);
      // One expired while its payment is overdue still renews when paid: its jobs this round.
      if (marked && hasJobsToEnsure(chain)) await ensureJobs(deps, chain, job);
      return marked;
    }
    case 'ensure jobs':
      await ensureJobs(deps, chain, job);
      return false;
    case 'nothing':
      return false;
  }
}

/**
 * The chains of a page that reconcile would leave as they are, told from the page's copies and
 * their renewal jobs without taking any lock: most chains, every round (two round trips for the
 * page, where each chain's own check takes several). The others go through reconcileChain. A
 * chain changed since the page was read was changed under its lock by a job that ensures its
 * jobs itself, or left an intent that the next round sees.
 */
async function settledChains(
  deps: WorkerDeps,
  page: readonly Chain[],
  now: number,
  queued: () => Promise<ReadonlySet<string>>,
): Promise<Set<string>> {
  const mains = await mainChainsOf(deps.chains, page);
  const settled = new Set<string>();
  const schedules: Chain[] = [];
  const suspensions: { chainId: string; jobId: string }[] = [];
  for (const chain of page) {
    const main = chain.mainChain === null ? null : (mains.get(chain.mainChain) ?? null);
    const verdict = seenWithoutLock(chain, main, now, deps.settings.leadDays);
    if (verdict === 'settled') settled.add(chain.id);
    else if (verdict !== 'look closer') {
      schedules.push(verdict.schedule);
      if (verdict.suspensionJobId !== null) {
        suspensions.push({ chainId: chain.id, jobId: verdict.suspensionJobId });
      }
    }
  }
  const [inPlace, suspensionsInPlace] = await Promise.all([
    renewalJobsInPlace(deps.queues.renewals, schedules, deps.clock, queued),
    suspensionJobsInPlace(
      deps.queues['payment-signals'],
      suspensions.map((s) => s.jobId),
    ),
  ]);
  schedules.forEach((schedule, i) => {
    if (inPlace[i]) settled.add(schedule.id);
  });
  // A chain in its grace period needs its suspension job as well.
  suspensions.forEach(({ chainId }, i) => {
    if (!suspensionsInPlace[i]) settled.delete(chainId);
  });
  return settled;
}

/**
 * reconcileChain's decisions on the page's copy: nothing to do ('settled'), only jobs to check
 * (the renewal job against the schedule returned, and the suspension job of a chain in its grace
 * period), or more ('look closer': a half-done step, a waiting add-on, an expiry, a lead to move).
 */
function seenWithoutLock(
  chain: Chain,
  main: Chain | null,
  now: number,
  leadDays: number,
): 'settled' | 'look closer' | { schedule: Chain; suspensionJobId: string | null } {
  const step = reconcileStep(chain, main, now);
  if (step === 'nothing') return 'settled';
  if (
    step !== 'ensure jobs' ||
    chain.intent !== null ||
    chain.pendingAddOn !== null ||
    chain.unsuspending ||
    chain.unfinishedSeatEvent !== null ||
    renewalTimeUnderLead(chain, now, leadDays) !== null
  ) {
    return 'look closer';
  }
  return {
    schedule: main ? governedBy(main, chain) : chain,
    suspensionJobId:
      pendingSuspensionAt(chain) === null ? null : suspensionJobId(chain.id, chain.overdueEpisode),
  };
}

/** Held by the round running now, whichever process runs it (STRING its job's token). */
export const RECONCILE_ROUND_KEY = `${WORKER_KEY_ROOT}:reconcile:round`;

/** How long a round's hold outlives a process that died during it (ms). */
const ROUND_LEASE_MS = 60_000;

/** How often the round a start asks for looks whether the round before it is over (ms). */
const ROUND_WAIT_POLL_MS = 1_000;

export type RoundResult =
  | { checked: number; expired: number; failed: number }
  | { skipped: 'another round is running' };

/**
 * One round at a time in the whole deployment. BullMQ queues a scheduler's next job when the
 * current one starts, so a round that outlasts the interval (hundreds of thousands of chains, a
 * short RECONCILE_INTERVAL_SECONDS) would run beside the next one in another process, and each
 * further process would add one more: the same reads, several times over. A round that finds
 * another running leaves the chains to it.
 */
export function makeProcessor(deps: WorkerDeps) {
  return async function reconcile(job: Job): Promise<RoundResult> {
    schema.parse(job.data);
    const token = `${job.id ?? 'reconcile'}/${randomUUID()}`;
    const run = () =>
      whileHeldAlone(deps.chains, RECONCILE_ROUND_KEY, token, ROUND_LEASE_MS, () =>
        reconcileAll(deps, job),
      );
    let round = await run();
    // The round a start asks for waits instead: a restart after a restore counts on it, and the
    // hold it meets may be that of a process that died mid-round (until its lease lapses).
    while (!round.ran && job.id === RECONCILE_AT_START_JOB_ID) {
      await sleep(ROUND_WAIT_POLL_MS);
      round = await run();
    }
    if (round.ran) return round.value;
    deps.log.info({ jobId: job.id }, 'reconcile round skipped: another round is running');
    return { skipped: 'another round is running' };
  };
}

/** A round: every chain, oldest first, a page at a time. */
async function reconcileAll(
  deps: WorkerDeps,
  job: Job,
): Promise<{ checked: number; expired: number; failed: number }> {
  let checked = 0;
  let expired = 0;
  let failed = 0;
  // Read once per round, when a page first has a renewal job neither delayed nor gone.
  const queued = queuedJobIds(deps.queues.renewals);
  for (let offset = 0; ; offset += PAGE) {
    const ids = await deps.chains.pageOfChainIds(offset, PAGE);
    if (ids.length === 0) break;
    const { chains: page, unreadable } = await deps.chains.getManyReadable(ids);
    for (const { chainId, error } of unreadable) {
      checked += 1;
      failed += 1;
      deps.log.error({ chainId, err: error }, 'chain record unreadable: not reconciled');
    }
    const settled = await settledChains(deps, page, deps.clock.now(), queued).catch((error) => {
      // Redis failing that read fails no chain: each is then checked under its lock.
      deps.log.warn({ err: error }, 'reconcile checks a page under the locks');
      return new Set<string>();
    });
    checked += page.length;
    const unsettled = page.filter((chain) => !settled.has(chain.id));
    // A family's chains one after another (an add-on reads its main chain), families side by side.
    await inLanes(
      unsettled,
      (chain) => chain.mainChain ?? chain.id,
      RECONCILE_LANES,
      async (chain) => {
        try {
          if (await reconcileChain(deps, chain, job)) expired += 1;
        } catch (error) {
          // One chain that cannot be reconciled now (its provider away for an unsuspension)
          // must not keep every chain after it, the same ones each round, from theirs.
          failed += 1;
          // Waiting fixes a provider or Redis away (the next round tries again); anything else is
          // a fault a person must see, at the level an alert watches.
          const level =
            error instanceof TransientError || isRedisUnavailable(error) ? 'warn' : 'error';
          deps.log[level]({ chainId: chain.id, err: error }, 'chain not reconciled this round');
        }
      },
    );
  }
  deps.log.info({ checked, expired, failed }, 'reconciled chains');
  return { checked, expired, failed };
}

/**
 * An add-on whose main chain is cancelled, not yet recorded as cancelled itself: the cancel marks
 * its add-ons at best effort and leaves one that another job held at that moment. Recorded here
 * (again at best effort, for the next round). One with a renewal in flight is its job's: that job
 * cancels what it ordered.
 */
async function markCancelledWithMainChain(
  deps: WorkerDeps,
  chain: Chain,
  now: number,
  jobId: string,
): Promise<void> {
  await markAddOnCancelled(
    deps.chains,
    chain,
    now,
    { jobId },
    {
      detail: 'cancelled with its main chain (recorded by reconcile)',
    },
  );
}

/**
 * Runs `work` on the chain as it is now, under its lock: the page was read a while ago, and a
 * change since (an operator's, a payment's, saved under the lock) must not be undone by that
 * older copy. Best effort: a chain some job is changing right now is left for the next round
 * (`busy` is the answer then).
 */
async function underLock<T>(
  deps: WorkerDeps,
  chainId: string,
  jobId: string,
  busy: T,
  work: (chain: Chain | null, token: string) => Promise<T>,
): Promise<T> {
  const token = `reconcile/${jobId}/${chainId}`;
  const lock = await deps.chains.lock(chainId, token);
  if (lock.kind === 'locked') return busy;
  return whileHeld(deps.chains, chainId, token, () => work(lock.chain, token));
}

/**
 * `work` with the chain's schedule as its main chain governs it, read under the main chain's lock
 * (the add-on's is held already): an operator's switch of the main chain, which ensures the
 * add-ons' jobs under that lock, is then wholly before or after. A main chain busy right now
 * leaves the add-on for the next round.
 */
function withGovernedSchedule<T>(
  deps: WorkerDeps,
  chain: Chain,
  jobId: string,
  busy: T,
  work: (schedule: Chain) => Promise<T>,
): Promise<T> {
  if (chain.mainChain === null) return work(chain);
  return underLock(deps, chain.mainChain, jobId, busy, (main) =>
    work(main ? governedBy(main, chain) : chain),
  );
}

/**
 * The chain with its renewal time under the lead in force now. RENEWAL_LEAD_DAYS may have
 * changed since the time was stored (a restart with another setting): the job, the due index and
 * the ops view all follow the stored time, so a lower lead had the job fire early and put itself
 * off again every round, and a higher one renewed later than the setting says.
 */
async function withCurrentLead(
  deps: WorkerDeps,
  held: { chain: Chain; token: string },
  now: number,
  jobId: string,
): Promise<Chain> {
  const { chain, token } = held;
  const stored = chain.nextRenewalAt;
  const { leadDays } = deps.settings;
  const wanted = renewalTimeUnderLead(chain, now, leadDays);
  if (stored === null || wanted === null) return chain;
  return deps.chains.save({
    chainId: chain.id,
    token,
    previous: chain,
    next: { ...chain, nextRenewalAt: wanted, updatedAt: now },
    history: [
      {
        at: now,
        event: 'renewal.rescheduled',
        detail: `renewal of term ${chain.term.count + 1} moved from ${formatInstant(stored)} to ${formatInstant(wanted)}: RENEWAL_LEAD_DAYS is ${leadDays}`,
        cause: { jobId },
      },
    ],
    release: false,
  });
}

/**
 * The chain's renewal time under `leadDays` when it differs from the stored one (a restart with
 * another RENEWAL_LEAD_DAYS), else null. A renewal in flight is replayed at once, whatever the
 * lead says now.
 */
export function renewalTimeUnderLead(chain: Chain, now: number, leadDays: number): number | null {
  const stored = chain.nextRenewalAt;
  if (stored === null || chain.intent !== null) return null;
  const wanted = Math.max(now, renewalDueAt(chain.term, leadDays));
  // Due by either time: the job runs now all the same.
  if (wanted === stored || (stored <= now && wanted <= now)) return null;
  return wanted;
}

/**
 * A failure of the provider's (away, misconfigured, refusing, answering nonsense), not of Redis
 * or the chain's lock.
 */
function isProviderFailure(error: unknown): boolean {
  return (
    (error instanceof TransientError ||
      error instanceof ConfigError ||
      error instanceof RefusalError ||
      error instanceof MalformedAnswerError) &&
    error.code.startsWith('provisioning_')
  );
}

/**
 * The chain's renewal job, its waiting add-on's job and its suspension job, as the chain is
 * now; first, a seat
 * purchase or the unsuspension of a payment whose job gave up halfway. A provider away for them
 * does not keep the jobs, which need only Redis, from being ensured: the round still counts the
 * chain as failed, and the next one tries again. The chain's lock is free, so no job is sending
 * that purchase now; one waiting to retry it finds it done (as when another job of the chain
 * finishes it first), and a refusal is recorded on the chain, not failed.
 */
function ensureJobs(deps: WorkerDeps, seen: Chain, job: Job): Promise<void> {
  const jobId = job.id ?? '';
  return underLock(deps, seen.id, jobId, undefined, async (locked, token) => {
    if (!locked) return;
    let chain = locked;
    let unfinished: { error: unknown } | null = null;
    try {
      chain = await finishPendingSeatPurchase(deps, job, { chain, token });
      // A payment whose job gave up halfway through its unsuspension (marketplace) is finished.
      ({ chain } = await finishUnsuspension(deps, jobId, { chain, token }, deps.clock.now()));
    } catch (error) {
      if (!isProviderFailure(error)) throw error;
      // The call may have outlasted the lease: acting on this copy after another holder changed
      // the chain would undo its change (a job removed that an operator's switch had added).
      if (!(await deps.chains.renewLease(locked.id, token))) {
        throw new TransientError('chain_lock_lost', `lost the lock of chain ${locked.id}`, {
          chainId: locked.id,
        });
      }
      // A purchase bought in steps may have recorded its first before the provider went away.
      chain = (await deps.chains.get(locked.id)) ?? chain;
      unfinished = { error };
    }
    // Read after the provider calls above, which may take seconds: what is due is due by now.
    const now = deps.clock.now();
    if (schedulesRenewals(chain)) {
      chain = await withCurrentLead(deps, { chain, token }, now, jobId);
      // A job still active is left as it is: it schedules the next term itself, and the next
      // round finds it finished.
      await withGovernedSchedule(deps, chain, jobId, undefined, (schedule) =>
        ensureRenewalJob(deps.queues.renewals, schedule, deps.clock, { waitForActive: false }),
      );
    }
    if (await ensureAddOnJob(deps, chain)) {
      deps.log.warn({ chainId: chain.id }, 'reconcile restored a waiting add-on job');
    }
    if (await ensureEpisodeSuspension(deps, chain, { replaceFailed: false })) {
      deps.log.warn({ chainId: chain.id }, 'reconcile restored a suspension job');
    }
    if (unfinished !== null) throw unfinished.error;
  });
}

/** Marks the chain `expired` if, as it is now, its term ended with nothing after it (expiryOf). */
function markExpired(deps: WorkerDeps, seen: Chain, now: number, jobId: string): Promise<boolean> {
  return underLock(deps, seen.id, jobId, false, async (chain, token) => {
    if (!chain) return false;
    // Checked again under the locks, with the add-on's schedule as its main chain governs it.
    return withGovernedSchedule(deps, chain, jobId, false, async (schedule) => {
      const reason = expiryOf(schedule, now);
      if (reason === null) return false;
      await saveExpired(deps.chains, { chain, token }, reason, now, { jobId });
      return true;
    });
  });
}
