// The `renewals` queue: one delayed job per term renews a chain on time, exactly once.
import { setTimeout as sleep } from 'node:timers/promises';
import { type Job, type Queue, UnrecoverableError } from 'bullmq';
import { z } from 'zod';
import {
  addOnCancelledEntry,
  cancelIfMade,
  cancelledWithMainChain,
  markAddOnCancelled,
} from '../src/chains/cancel.js';
import { expiryOf, saveExpired } from '../src/chains/expiry.js';
import { governedNextRenewalAt } from '../src/chains/family.js';
import { orderToChange } from '../src/chains/orders-in-force.js';
import {
  type Chain,
  chainRecord,
  type HistoryEntry,
  type Intent,
  intentRecord,
} from '../src/chains/records.js';
import type { ChainStore, SaveInput } from '../src/chains/store.js';
import { type OrderResponse, renewalCountCanChange } from '../src/client/provisioning-client.js';
import { type Clock, delayUntil, queueTimeMs } from '../src/clock.js';
import { renewalOrderId } from '../src/domain/ids.js';
import {
  decideRenewal,
  type RenewalDecision,
  type RenewalView,
  renewalDueAt,
  withNextRenewalAt,
} from '../src/domain/renewal.js';
import { isRenewalWindowRefusal } from '../src/domain/renewal-window.js';
import {
  suspendedForNonPayment,
  suspendedOnArrival,
  suspensionRefusedOnArrival,
  withSuspendedOrders,
} from '../src/domain/suspension.js';
import { RefusalError, TransientError } from '../src/errors.js';
import {
  defaultJobOptions,
  delayedFireTime,
  fireTimeOfScore,
  neverRunsAgain,
  pipelineReplies,
  removedUnlessRunning,
} from '../src/queues.js';
import { MAX_RETRY_DELAY_MS } from '../src/retry-policy.js';
import { delayJobUntil, waitForLock, withChainLock } from './chain-lock.js';
import type { WorkerDeps } from './deps.js';
import { describeTerm, sendIntent } from './intents.js';
import { settleLateOrderCheck } from './late-orders.js';
import { finishPendingSeatPurchase } from './seat-purchases.js';
import { suspendOnArrival } from './suspend-on-arrival.js';

/**
 * The renewal intent decided when the job was scheduled, from the chain at `version`: it holds for
 * any time in [validFrom, validUntil) while the chain stays at that version and the workers keep
 * the same `basis` (variant, extensions, lead). The job then claims it with the lock in one round
 * trip (ChainStore.claimRenewal) instead of reading, deciding and writing the intent in two.
 *
 * In embedded mode it also carries the chain itself at that version (`chain`), so the job needs
 * no claim at all: the order and its record are written in one script that checks the chain is
 * still at that version, unlocked and without a pending intent (renewFromSnapshot).
 */
export const preparedRenewal = z.object({
  version: z.int().min(0),
  basis: z.string(),
  validFrom: z.int(),
  validUntil: z.int(),
  intent: intentRecord,
  // A copy this code can no longer read (an older record shape) only loses the one-step path.
  chain: chainRecord.optional().catch(undefined),
});
export type PreparedRenewal = z.infer<typeof preparedRenewal>;

export const renewalJobData = z.object({
  chainId: z.string().min(1),
  /** The chain's first order, for people reading Bull Board. */
  order: z.string(),
  customer: z.string(),
  /** The term this job orders (1-based). */
  count: z.int().min(2),
  /** When it is due (epoch seconds), for people; the chain's own state decides. */
  dueAt: z.int(),
  /** Set when the job put itself off (payment overdue, provider window): reconcile keeps it. */
  deferredUntil: z.int().optional(),
  /**
   * What it waits for: a repeated confirmation of a reactivation reconsiders a wait for payment
   * only, never one the provider's window asked for. Unset on jobs put off before it was kept.
   */
  deferredFor: z.enum(['payment', 'provider_window']).optional(),
  prepared: preparedRenewal.optional(),
});
export type RenewalJobData = z.infer<typeof renewalJobData>;

/**
 * The data of a job that puts itself off until `until`, without its prepared intent: the job
 * decides afresh when it fires again, and an intent prepared before whatever made it wait (an
 * overdue payment, a provider's window) would only be tried and refused first.
 */
function deferredJobData(
  data: RenewalJobData,
  until: number,
  deferredFor: NonNullable<RenewalJobData['deferredFor']>,
): RenewalJobData {
  const { prepared: _stale, ...rest } = data;
  return { ...rest, deferredUntil: until, deferredFor };
}

/** Deterministic per chain and term, so scheduling twice collapses into one job. */
export function renewalJobId(chainId: string, count: number): string {
  return `renew-${chainId}-${count}`;
}

type Schedulable = Pick<Chain, 'id' | 'order' | 'customer' | 'term' | 'nextRenewalAt'>;

function renewalJob(chain: Schedulable, prepared?: PreparedRenewal) {
  const count = chain.term.count + 1;
  const data: RenewalJobData = {
    chainId: chain.id,
    order: chain.order,
    customer: chain.customer,
    count,
    dueAt: chain.nextRenewalAt ?? 0,
    ...(prepared ? { prepared } : {}),
  };
  return { id: renewalJobId(chain.id, count), name: `renew ${chain.order} term ${count}`, data };
}

/** What a prepared intent depends on besides the chain; a change of settings voids it. */
function renewalBasis(deps: WorkerDeps): string {
  const { variant, extensions } = deps.provisioning;
  return `${variant}/${extensions ? 'extensions' : 'plain'}/lead ${deps.settings.leadDays}`;
}

/**
 * The renewal intent of the chain's next term, decided now for when it falls due, or undefined
 * when the job must decide when it fires (add-ons, which their main chain governs; a chain that
 * will not renew as it stands; an intent already in flight).
 *
 * `stored` says that `chain` is the record a save that succeeded wrote at its version. Only then
 * may the job carry it for the one-step renewal, whose commit trusts "same version, same record":
 * a copy of a save that was refused could meet another write that reached the same version.
 */
export function prepareRenewal(
  deps: WorkerDeps,
  chain: Chain,
  { stored }: { stored: boolean },
): PreparedRenewal | undefined {
  if (
    chain.mainChain !== null ||
    chain.intent !== null ||
    chain.unfinishedSeatEvent !== null ||
    chain.nextRenewalAt === null
  ) {
    return undefined;
  }
  const validFrom = renewalDueAt(chain.term, deps.settings.leadDays);
  const validUntil = chain.term.expiresAt;
  if (validFrom >= validUntil) return undefined;
  const count = chain.term.count + 1;
  // Every `now` in [validFrom, validUntil) gives this same decision: due, and not expired.
  const decision = renewableDecision(
    deps,
    chain,
    decideRenewal({ chain, forCount: count, now: validFrom, leadDays: deps.settings.leadDays }),
  );
  if (!decision) return undefined;
  return {
    version: chain.version,
    basis: renewalBasis(deps),
    validFrom,
    validUntil,
    intent: renewalIntent(deps, chain, decision, renewalJobId(chain.id, count)),
    // Only a client that commits an order with its record can use it (embedded mode).
    ...(stored && deps.provisioning.createRecorded ? { chain } : {}),
  };
}

/** A decision to renew that the job can send as it is (not a stop, not one for an operator). */
function renewableDecision(deps: WorkerDeps, chain: Chain, decision: RenewalDecision) {
  if (decision.kind !== 'renew' || decision.licenses === 0) return null;
  if (!renewalCountCanChange(deps.provisioning) && decision.licenses !== chain.licenses) {
    return null;
  }
  return decision;
}

/** How long a provider's window refusal waits before the renewal is tried again (seconds). */
const WINDOW_RETRY_SECONDS = 60 * 60;

/**
 * Makes sure the chain's next renewal job exists and fires at `nextRenewalAt` ("ensure", not
 * "add": DESIGN §4). A delayed job at the wrong time is moved; a finished one whose work the
 * chain still needs is replaced; a chain that will not renew has its job removed.
 */
export async function ensureRenewalJob(
  queue: Queue,
  chain: Chain,
  clock: Clock,
  options: {
    /** Whether a job put off is reconsidered now: any, or only one waiting for a payment. */
    overrideDeferral?: boolean | 'payment';
    prepared?: PreparedRenewal | undefined;
    /**
     * Whether a job that is active right now is waited for (a moment) first; default true. One
     * that has just decided from the chain before this change (skipped it, or put itself off
     * for a payment) would otherwise finish after this call and leave the change without its
     * job until reconcile.
     */
    waitForActive?: boolean;
  } = {},
): Promise<void> {
  // A renewal in flight (its order may be made already) keeps its job whatever the schedule
  // says now (auto-renew off, a cancelled main chain), due at once: only that job replays the
  // intent and records what the provider made, which a cancelled family then cancels.
  let now = clock.now();
  const inFlight = chain.intent?.kind === 'renewal' && chain.nextRenewalAt === null;
  const schedule = inFlight ? { ...chain, nextRenewalAt: now } : chain;
  const { id, name, data } = renewalJob(schedule, options.prepared);
  const existing = await queue.getJob(id);
  if (schedule.nextRenewalAt === null) {
    // One taken by a worker meanwhile finds the chain's schedule when it commits.
    if (existing && ['delayed', 'waiting', 'prioritized'].includes(await existing.getState())) {
      await removedUnlessRunning(existing);
    }
    return;
  }
  const { nextRenewalAt } = schedule;
  if (existing) {
    let state = await existing.getState();
    if (state === 'active' && options.waitForActive !== false) {
      state = await stateOnceInactive(existing);
      now = clock.now();
    }
    if (state === 'delayed') {
      // A job that put itself off (overdue payment, provider window) keeps its time unless the
      // reason went away (a payment, an operator): reconcile must not re-send it every round.
      const { deferredUntil, deferredFor } = deferralOf(existing.data);
      const overridden =
        options.overrideDeferral === true ||
        (options.overrideDeferral === 'payment' && deferredFor !== 'provider_window');
      if (stillPutOff(deferredUntil, now) && !overridden) return;
      const firesAt = await delayedFireTime(queue, id);
      const keepsBackoff =
        options.overrideDeferral !== true &&
        backingOff(existing.attemptsMade, firesAt, nextRenewalAt, now);
      if (!keepsBackoff && !firesAsScheduled(firesAt, nextRenewalAt, clock)) {
        await existing.changeDelay(delayUntil(clock, nextRenewalAt));
      }
      const preparedChanged =
        options.prepared !== undefined &&
        existing.data.prepared?.version !== options.prepared.version;
      if (existing.data.dueAt !== data.dueAt || deferredUntil !== undefined || preparedChanged) {
        await existing.updateData(data);
      }
      return;
    }
    // A finished record, or one in no list at all (neverRunsAgain), goes, and the job is added
    // again.
    if (neverRunsAgain(state) || state === 'failed') {
      await existing.remove();
    } else {
      return;
    }
  }
  await queue.add(name, data, {
    ...defaultJobOptions,
    jobId: id,
    delay: delayUntil(clock, nextRenewalAt),
  });
}

/**
 * Whether the chain's renewal job is restored by whoever finds it missing (reconcile, a repeated
 * order.placed): any chain but a flagged one, whose failed job waits for a person (Bull Board
 * retry, or ops). A renewal intent whose job ran out of attempts gets its job back, which
 * replays the intent; a seat purchase left half done keeps its renewal too, whose job finishes
 * the purchase first when the seat job did not (it was lost with the renewal's, say).
 */
export function schedulesRenewals(chain: Chain): boolean {
  return chain.flagged === null;
}

/** How long scheduling waits for an active renewal job to finish or put itself off (ms). */
const ACTIVE_WAIT_MS = 2_000;
const ACTIVE_POLL_MS = 50;

/**
 * The job's state once it is no longer active, or 'active' after ACTIVE_WAIT_MS. A job that
 * decided not to renew (or to wait) leaves that state within moments of releasing its chain;
 * one still active after that is renewing, and schedules the next term itself.
 */
async function stateOnceInactive(job: Job): Promise<Awaited<ReturnType<Job['getState']>>> {
  for (let waited = 0; waited < ACTIVE_WAIT_MS; waited += ACTIVE_POLL_MS) {
    await sleep(ACTIVE_POLL_MS);
    const state = await job.getState();
    if (state !== 'active') return state;
  }
  return 'active';
}

/**
 * The ids of the queue's jobs waiting for a worker or running, read once, when first asked: a
 * reconcile round reads the wait list once, where asking each job's state (BullMQ's getState)
 * scans that list once per job, a round quadratic in a backlog of due renewals. A job that
 * moves on after the read (it failed for good, say) is seen by the next round.
 */
export function queuedJobIds(queue: Queue): () => Promise<ReadonlySet<string>> {
  let read: Promise<ReadonlySet<string>> | undefined;
  return () => {
    read ??= (async () => {
      const { wait, paused, active, prioritized } = queue.keys as Record<string, string>;
      const lists = await pipelineReplies(
        (await queue.backend.client)
          .pipeline()
          .runCommand('lrange', [wait, 0, -1])
          .runCommand('lrange', [paused, 0, -1])
          .runCommand('lrange', [active, 0, -1])
          .runCommand('zrange', [prioritized, 0, -1]),
      );
      return new Set((lists as string[][]).flat());
    })();
    return read;
  };
}

/**
 * For each schedule, whether its renewal job stands as ensureRenewalJob would leave it: delayed
 * to its time (or, due, waiting out its backoff), waiting for a worker or running (`queued`, when
 * given), or (a chain that does not renew) none waiting to run. Read in one round trip (and one
 * more for `queued`, once) and without the chains' locks, for reconcile to pass over the chains
 * that need nothing. False means "look closer" (ensureRenewalJob, under the lock), not "wrong":
 * one that put itself off for a payment is fine as it is too.
 */
export async function renewalJobsInPlace(
  queue: Queue,
  schedules: readonly Schedulable[],
  clock: Clock,
  queued?: () => Promise<ReadonlySet<string>>,
): Promise<boolean[]> {
  if (schedules.length === 0) return [];
  const { delayed, completed, failed } = queue.keys as Record<string, string>;
  const jobIds = schedules.map((schedule) => renewalJobId(schedule.id, schedule.term.count + 1));
  const pipeline = (await queue.backend.client).pipeline();
  for (const [i, schedule] of schedules.entries()) {
    const id = jobIds[i] as string;
    // Its record as well as its place: an entry whose record was lost would fire with no data.
    pipeline.runCommand('zscore', [delayed, id]).runCommand('exists', [queue.toKey(id)]);
    if (schedule.nextRenewalAt !== null) {
      // Its failed attempts (BullMQ's `atm`): a due job waiting out its backoff is in place.
      pipeline.runCommand('hget', [queue.toKey(id), 'atm']);
    } else {
      // Not renewing: a job left over is fine only when finished (or gone).
      pipeline.runCommand('zscore', [completed, id]).runCommand('zscore', [failed, id]);
    }
  }
  const values = (await pipelineReplies(pipeline)) as (string | number | null)[];
  const now = clock.now();
  let next = 0;
  const verdicts = schedules.map((schedule): boolean | 'if queued' | 'if put off' => {
    const firesAt = fireTimeOfScore(values[next] as string | null);
    const exists = values[next + 1] === 1;
    if (schedule.nextRenewalAt !== null) {
      const attemptsMade = Number(values[next + 2] ?? 0);
      next += 3;
      if (!exists) return false;
      // Not delayed: waiting or running is in place, finished or in no list is not.
      if (firesAt === null) return queued ? 'if queued' : false;
      if (backingOff(attemptsMade, firesAt, schedule.nextRenewalAt, now)) return true;
      return firesAsScheduled(firesAt, schedule.nextRenewalAt, clock) || 'if put off';
    }
    const [completedScore, failedScore] = values.slice(next + 2, next + 4);
    next += 4;
    return firesAt === null && (!exists || completedScore !== null || failedScore !== null);
  });
  const putOff = verdicts.includes('if put off')
    ? await putOffJobs(
        queue,
        jobIds.filter((_, i) => verdicts[i] === 'if put off'),
        now,
      )
    : new Set<string>();
  const ids = queued && verdicts.includes('if queued') ? await queued() : new Set<string>();
  return verdicts.map((verdict, i) => {
    if (verdict === 'if queued') return ids.has(jobIds[i] as string);
    if (verdict === 'if put off') return putOff.has(jobIds[i] as string);
    return verdict;
  });
}

/** Until when, and why, a renewal job's data says it put itself off (a payment, a window). */
function deferralOf(data: unknown): Pick<RenewalJobData, 'deferredUntil' | 'deferredFor'> {
  const parsed = renewalJobData.safeParse(data).data;
  return { deferredUntil: parsed?.deferredUntil, deferredFor: parsed?.deferredFor };
}

/** Whether a job that put itself off until `deferredUntil` still waits for its reason at `now`. */
function stillPutOff(deferredUntil: number | undefined, now: number): boolean {
  return deferredUntil !== undefined && deferredUntil > now;
}

/**
 * Which of these delayed jobs put themselves off until after `now` (an overdue payment, the
 * provider's window): ensureRenewalJob keeps them as they are, so reconcile needs no lock for
 * them. Their data is read only for jobs that fire off schedule, in one round trip.
 */
async function putOffJobs(queue: Queue, ids: readonly string[], now: number): Promise<Set<string>> {
  const pipeline = (await queue.backend.client).pipeline();
  for (const id of ids) pipeline.runCommand('hget', [queue.toKey(id), 'data']);
  const found = new Set<string>();
  (await pipelineReplies(pipeline)).forEach((data, i) => {
    if (typeof data !== 'string') return;
    let parsed: unknown;
    try {
      parsed = JSON.parse(data);
    } catch {
      return; // unreadable: ensureRenewalJob, under the lock, decides
    }
    if (stillPutOff(deferralOf(parsed).deferredUntil, now)) found.add(ids[i] as string);
  });
  return found;
}

/**
 * Whether a due chain's delayed job, firing at `firesAt` (queue time, ms), waits out its backoff
 * after a failed attempt (a provider away, the wait its Retry-After asked for): it keeps its
 * time. Moved to now by every reconcile round, it would call a provider that asked for a wait
 * and spend its attempts at that pace. A backoff is never longer than MAX_RETRY_DELAY_MS: a job
 * further away waits for a time the chain no longer has (a lead changed since) and is moved. A
 * job that puts itself off spends no attempt (its `deferredUntil` says why it waits).
 */
function backingOff(
  attemptsMade: number,
  firesAt: number | null,
  nextRenewalAt: number,
  now: number,
): boolean {
  if (attemptsMade === 0 || nextRenewalAt > now || firesAt === null) return false;
  return firesAt - queueTimeMs() <= MAX_RETRY_DELAY_MS + 1000;
}

/**
 * Whether a delayed job firing at `firesAt` (queue time, ms; null: not delayed) fires when a
 * chain renewing at `nextRenewalAt` wants it, within a second.
 */
export function firesAsScheduled(firesAt: number | null, nextRenewalAt: number, clock: Clock) {
  const wanted = queueTimeMs() + delayUntil(clock, nextRenewalAt);
  return firesAt !== null && Math.abs(firesAt - wanted) <= 1000;
}

/**
 * Ensures the renewal jobs of a main chain and of its add-ons, whose schedules it governs (an
 * add-on does not renew while its main chain is cancelled, off, awaiting reactivation or
 * flagged). A flagged main chain's failed job is left to a person unless `restoreFlagged` (an
 * operator's change): a payment does not renew what the provider refused.
 */
export async function ensureFamilyRenewalJobs(
  queue: Queue,
  chains: ChainStore,
  main: Chain,
  clock: Clock,
  options: { overrideDeferral?: boolean | 'payment'; restoreFlagged?: boolean } = {},
): Promise<void> {
  if (schedulesRenewals(main) || options.restoreFlagged || (await restoredByAPerson(queue, main))) {
    await ensureRenewalJob(queue, main, clock, options);
  }
  await ensureAddOnRenewalJobs(queue, chains, main, clock, options);
}

/**
 * Whether a person put a flagged chain's renewal back (a Bull Board retry, an operator's switch
 * waiting for the payment): its job is there and has not failed. A payment reconsiders it then,
 * as any other.
 */
async function restoredByAPerson(queue: Queue, chain: Chain): Promise<boolean> {
  const job = await queue.getJob(renewalJobId(chain.id, chain.term.count + 1));
  const state = await job?.getState();
  return state !== undefined && state !== 'failed' && !neverRunsAgain(state);
}

/**
 * The renewal jobs of the main chain's add-ons, as it governs them (ensureFamilyRenewalJobs). A
 * flagged add-on's failed job comes back with the main chain's (`restoreFlagged`): the switch
 * that restores the family names the main order, the only one it takes.
 */
async function ensureAddOnRenewalJobs(
  queue: Queue,
  chains: ChainStore,
  main: Chain,
  clock: Clock,
  options: { overrideDeferral?: boolean | 'payment'; restoreFlagged?: boolean } = {},
): Promise<void> {
  for (const addOn of await chains.getMany(main.addOns)) {
    if (!schedulesRenewals(addOn) && !options.restoreFlagged) continue;
    // A payment or an operator that reconsiders the main chain's waiting renewal reconsiders
    // its add-ons' as well: they waited for the same reason.
    await ensureRenewalJob(
      queue,
      { ...addOn, nextRenewalAt: governedNextRenewalAt(main, addOn) },
      clock,
      options,
    );
  }
}

/** The fast path after a renewal: the next term's job id has never been used, so just add it. */
export async function addNextRenewalJob(
  queue: Queue,
  chain: Schedulable,
  clock: Clock,
  prepared?: PreparedRenewal,
): Promise<void> {
  if (chain.nextRenewalAt === null) return;
  const { id, name, data } = renewalJob(chain, prepared);
  await queue.add(name, data, {
    ...defaultJobOptions,
    jobId: id,
    delay: delayUntil(clock, chain.nextRenewalAt),
  });
}

/**
 * What decides an add-on's renewal: the main chain governs auto-renew, payment, cancellation
 * and reactivation, and holds the add-on's next license count.
 */
async function renewalView(deps: WorkerDeps, chain: Chain): Promise<RenewalView> {
  if (chain.mainChain === null) return chain;
  const main = await deps.chains.get(chain.mainChain);
  return main ? addOnView(chain, main) : chain;
}

/** An add-on as its main chain `main` governs it (renewalView). */
function addOnView(chain: Chain, main: Chain): RenewalView {
  return {
    ...chain,
    status: main.status === 'cancelled' ? 'cancelled' : chain.status,
    autoRenew: main.autoRenew,
    payment: main.payment,
    needsReactivation: main.needsReactivation,
    mainFlagged: main.flagged !== null,
    nextLicenses: main.addOnNextLicenses[chain.id] ?? chain.nextLicenses,
    licensesUntil: main.addOnLicensesUntil[chain.id] ?? [],
  };
}

/** An add-on whose licenses were all given up by decreases stops renewing at its term's end. */
async function stopAddOn(
  deps: WorkerDeps,
  job: Job,
  held: { chain: Chain; token: string },
  now: number,
) {
  const skipped = 'skipped: no licenses for the next term';
  // Stopped already: this job is run again after its save (its worker died before reporting).
  if (held.chain.nextLicenses === 0 && held.chain.nextRenewalAt === null) return skipped;
  await deps.chains.save({
    chainId: held.chain.id,
    token: held.token,
    previous: held.chain,
    next: { ...held.chain, nextLicenses: 0, nextRenewalAt: null, updatedAt: now },
    history: [
      {
        at: now,
        event: 'addon.stopped',
        detail: 'no licenses left for its next term after seat decreases: it ends with its term',
        cause: { jobId: job.id ?? '' },
      },
    ],
    release: false,
  });
  return skipped;
}

/** The params of the renewal order, per variant; extensions only when the service has them. */
function renewalIntent(
  deps: WorkerDeps,
  chain: Chain,
  decision: { count: number; startsAt: number; licenses: number },
  jobId: string | null,
): Intent {
  const orderId = renewalOrderId(chain.order, decision.count);
  const { provisioning } = deps;
  if (provisioning.variant === 'external') {
    return {
      kind: 'renewal',
      method: 'createRenewalOrder',
      orderId,
      params: {
        parent: chain.order,
        id: orderId,
        ...(provisioning.extensions ? { licenses: decision.licenses } : {}),
      },
      jobId,
    };
  }
  return {
    kind: 'renewal',
    method: 'createOrder',
    orderId,
    params: {
      customer: chain.customer,
      id: orderId,
      product: chain.product,
      licenses: decision.licenses,
      duration: chain.duration,
      startsAt: decision.startsAt,
      ...(provisioning.extensions ? { parent: chain.order } : {}),
    },
    jobId,
  };
}

/** What the workers read from a renewal order: the answer's, or the plan's in embedded mode. */
type RenewedOrder = Pick<OrderResponse, 'product' | 'licenses' | 'startsAt' | 'expiresAt'>;

/** A renewal's record: the chain after it, and the save that writes it (releasing the lock). */
interface Renewal {
  next: Chain;
  save: SaveInput;
}

/** A sent renewal and whether its record was written with the order (else the caller saves it). */
interface Sent {
  renewal: Renewal;
  recorded: boolean;
}

/**
 * Sends the renewal intent. The embedded core writes the order and its record in one script
 * (`recorded`: nothing is left to do but schedule the next term); otherwise, or when the order
 * was made before (a replay), the caller saves the record of the order it got back.
 */
async function sendRenewal(
  deps: WorkerDeps,
  intent: Intent,
  renewed: (order: RenewedOrder) => Renewal,
  { withRecord = true }: { withRecord?: boolean } = {},
): Promise<Sent> {
  const { provisioning, chains } = deps;
  const { method } = intent;
  if (
    !withRecord ||
    !provisioning.createRecorded ||
    (method !== 'createOrder' && method !== 'createRenewalOrder')
  )
    return { renewal: renewed(await sendIntent(provisioning, intent)), recorded: false };
  let renewal: Renewal | undefined;
  const outcome = await provisioning.createRecorded(method, intent.params, (order) => {
    // Called once per plan: the core re-plans when its chain moved, so the last one is written.
    renewal = renewed(order);
    return chains.saveWrite(renewal.save).write;
  });
  if (outcome.kind === 'unrecorded') return { renewal: renewed(outcome.order), recorded: false };
  if (!renewal) throw new Error(`the core wrote ${intent.orderId} without asking for its record`);
  if (outcome.kind === 'companion_refused') chains.refuseSave(renewal.save, outcome.code);
  chains.saved(renewal.save);
  return { renewal, recorded: true };
}

/**
 * The record of a renewal order: the chain after it and its history entry, saved over `held`
 * (with its lock token, or none for the one-step renewal), releasing the lock.
 */
function renewalRecord(
  deps: WorkerDeps,
  job: Job,
  held: { chain: Chain; token: string | null },
  intent: Intent,
  order: RenewedOrder,
  {
    joinsSuspension = false,
    suspensionRefused,
  }: { joinsSuspension?: boolean; suspensionRefused?: string } = {},
): Renewal {
  const at = deps.clock.now();
  const renewed = renewedChain(deps, held.chain, intent, order, at);
  // A main chain joining a suspension that found nothing in force (its term had ended) is
  // suspended from now: its payment unsuspends the order (suspendedForNonPayment).
  const next: Chain =
    joinsSuspension && renewed.mainChain === null
      ? {
          ...renewed,
          status: 'suspended',
          suspendedOrders: withSuspendedOrders(held.chain, [
            orderToChange(held.chain, intent.orderId, deps.provisioning.variant),
          ]),
        }
      : renewed;
  const suspended =
    suspensionRefused === undefined
      ? suspendedOnArrival(joinsSuspension)
      : suspensionRefusedOnArrival(suspensionRefused);
  return {
    next,
    save: {
      chainId: held.chain.id,
      token: held.token,
      previous: held.chain,
      next,
      history: [
        {
          at,
          event: 'renewal.ordered',
          detail: `renewal ${intent.orderId}: ${describeTerm(order)}${suspended}`,
          cause: { jobId: intent.jobId ?? job.id ?? '', orderId: intent.orderId },
        },
      ],
      orderIds: [intent.orderId],
      release: true,
    },
  };
}

/** What a renewal logs its lines with: the worker's logger and the job's fields. */
interface JobLog {
  log: WorkerDeps['log'];
  about: { jobId: string | undefined; chainId: string };
}

/** After the order: its record (unless written with it), the next term's job, counters, log. */
async function finishRenewal(
  deps: WorkerDeps,
  { log, about }: JobLog,
  intent: Intent,
  { renewal, recorded }: Sent,
): Promise<string> {
  const { next, save } = renewal;
  const version = (save.previous?.version ?? -1) + 1;
  // A flagged chain's add-ons stopped renewing with it: its renewal gives them their jobs back
  // (its own next job is added just below).
  const addOnsResume = save.previous?.flagged != null && next.addOns.length > 0;
  // Recorded and scheduled in one go: if the record fails, the retry records it and its add of
  // the same job id is ignored; a next-term job that fires before the record skips. Only a
  // record already written goes with the job (prepareRenewal's `stored`).
  const prepared = prepareRenewal(deps, { ...next, version }, { stored: recorded });
  const [record, add] = await Promise.allSettled([
    recorded ? undefined : deps.chains.save(save),
    addNextRenewalJob(deps.queues.renewals, next, deps.clock, prepared),
  ]);
  if (record.status === 'rejected') throw record.reason;
  // Counted once recorded, even if the next job's add failed: its retry finds the term recorded
  // (already_renewed) and only makes sure of that job.
  deps.metrics.renewals.inc({ variant: deps.provisioning.variant });
  deps.metrics.orders.inc({ kind: 'renewal' });
  // A renewal joining a suspension that found nothing in force suspends its chain (renewalRecord).
  if (next.status === 'suspended' && save.previous?.status !== 'suspended') {
    deps.metrics.suspensions.inc({ action: 'suspend' });
  }
  if (add.status === 'rejected') throw add.reason;
  if (addOnsResume) {
    await ensureAddOnRenewalJobs(deps.queues.renewals, deps.chains, next, deps.clock);
  }
  log.info({ ...about, order: intent.orderId, expiresAt: next.term.expiresAt }, 'renewal ordered');
  return `renewed: ${intent.orderId}`;
}

/**
 * The renewal in one step (embedded mode): the job carries the chain as it was when the intent
 * was prepared, so nothing is read or locked first. The core writes the order and its record in
 * one script, which checks that the chain is still at that version, that no job holds its lock
 * and that no intent is pending; a chain at that version is the chain the intent was decided
 * from. Answers undefined when the job must take the locked path instead: the chain moved on,
 * the intent does not hold, the order was made before, or the provider refused it (the locked
 * path records, re-decides or handles each, as for any job).
 */
async function renewFromSnapshot(
  deps: WorkerDeps,
  job: Job,
  jobToken: string | undefined,
  jobLog: JobLog,
  input: { snapshot: Chain; intent: Intent; forCount: number; now: number },
): Promise<string | undefined> {
  const { snapshot, intent } = input;
  if (!(await confirmClaim(deps, { ...snapshot, intent }, input.forCount, input.now))) {
    return undefined;
  }
  let sent: Sent;
  try {
    sent = await sendRenewal(deps, intent, (order) =>
      renewalRecord(deps, job, { chain: snapshot, token: null }, intent, order),
    );
  } catch (error) {
    if (error instanceof TransientError && error.code === 'chain_lock_lost') {
      return waitForLock(job, jobToken);
    }
    if (error instanceof RefusalError) return undefined;
    if (error instanceof TransientError && error.code === 'chain_changed') return undefined;
    throw error;
  }
  if (!sent.recorded) return undefined;
  return finishRenewal(deps, jobLog, intent, sent);
}

/**
 * Whether a renewal ordered now must join a suspension: its family is suspended for a payment
 * still overdue (a paid external chain waiting for its manual reactivation is left alone). The
 * order a replayed intent makes (or made before the suspension, which skips pending intents)
 * would otherwise be the one active order of a customer who has not paid. A main chain is the
 * one the job holds; an add-on reads its main chain without that lock, so it settles the
 * outcome with alignWithFamily once its order is recorded.
 */
async function inSuspendedFamily(deps: WorkerDeps, chain: Chain): Promise<boolean> {
  const main = chain.mainChain === null ? chain : await deps.chains.get(chain.mainChain);
  return main !== null && suspendedForNonPayment(main);
}

/**
 * Brings an add-on's recorded renewal order in line with its family's suspension, under the
 * main chain's lock. The add-on decided from a read of its main chain without that lock, and
 * while its order was in flight a payment or a suspension could have listed the family without
 * it (or the job died between its calls). Under the lock no payment or suspension job is
 * between its read and its calls, and one that starts later lists this order itself. A busy
 * main chain puts the job back for a moment; the retry finds its term recorded and aligns again.
 * `maySuspended`: the order may be suspended (a replay or a retry); a fresh one never is.
 */
async function alignWithFamily(
  deps: WorkerDeps,
  job: Job,
  jobToken: string | undefined,
  addOn: Chain,
  orderId: string,
  { maySuspended }: { maySuspended: boolean },
): Promise<void> {
  if (addOn.mainChain === null) return;
  await withChainLock(
    deps.chains,
    job,
    jobToken,
    addOn.mainChain,
    async ({ chain: main, token }) => {
      if (!main) return;
      if (main.status === 'cancelled') {
        await cancelWithMainChain(deps, job, addOn, orderId);
        return;
      }
      // Suspended for this episode (also when its suspension found nothing in force), or its
      // suspension half done; in a grace period (also one of a chain awaiting its
      // reactivation), the suspension to come lists this order itself.
      const suspended = suspendedForNonPayment(main) || main.suspending !== null;
      try {
        if (suspended && main.payment === 'overdue') {
          await joinSuspension(deps, job, { chain: main, token }, addOn, orderId);
          await suspendRenewalOrder(deps, addOn, orderId);
        } else if (maySuspended && deps.provisioning.variant === 'marketplace') {
          // Active, paid, or in a grace period: a suspension to come lists this order itself.
          await deps.provisioning.unsuspendOrder({ id: orderId });
        }
      } catch (error) {
        // Only a cancelled order refuses these: cancelled meanwhile, there is nothing to align.
        if (!(error instanceof RefusalError)) throw error;
        deps.log.warn({ order: orderId, err: error }, 'renewal order not aligned with its family');
      }
    },
  );
}

/**
 * Records, before it is suspended, an add-on's order joining its main chain's suspension, so
 * that a payment unsuspends it (or asks to reactivate it) with the others. Into the record of a
 * suspension in progress (half done: its job died or waits to retry, suspendEachOrder); a
 * suspension that found nothing in force (the main term had ended) left the main chain
 * unsuspended, which is suspended now. Nothing to write for a suspension done, or one whose
 * record predates the list (a payment then lists every order in force).
 */
async function joinSuspension(
  deps: WorkerDeps,
  job: Job,
  held: { chain: Chain; token: string },
  addOn: Chain,
  orderId: string,
) {
  const { chain: main, token } = held;
  const now = deps.clock.now();
  const id = orderToChange(addOn, orderId, deps.provisioning.variant);
  // The add-on's own entry (renewal.ordered) was written before its family was suspended: the
  // family's history says what became of the order.
  const joined = (when: string): HistoryEntry => ({
    at: now,
    event: 'renewal.suspended',
    detail: `add-on ${addOn.order}: its renewal ${orderId}, ordered ${when}, is suspended on arrival: the payment is overdue`,
    cause: { jobId: job.id ?? '', orderId },
  });
  if (main.status === 'suspended') {
    // Its list, if it keeps one, names the order: an add-on whose term had ended before the
    // suspension was not reached by it.
    if (main.suspendedOrders === null || main.suspendedOrders.includes(id)) return;
    await deps.chains.save({
      chainId: main.id,
      token,
      previous: main,
      next: { ...main, suspendedOrders: withSuspendedOrders(main, [id]), updatedAt: now },
      history: [joined('while its family was suspended')],
      release: false,
    });
    return;
  }
  if (main.suspending === null) {
    await deps.chains.save({
      chainId: main.id,
      token,
      previous: main,
      next: {
        ...main,
        status: 'suspended',
        suspendedOrders: withSuspendedOrders(main, [id]),
        updatedAt: now,
      },
      history: [
        {
          at: now,
          event: 'chain.suspended',
          detail: `add-on ${addOn.order}: its renewal ${orderId}, ordered after the suspension found nothing in force, is suspended on arrival: the payment is overdue`,
          cause: { jobId: job.id ?? '', orderId },
        },
      ],
      release: false,
    });
    // The chain is suspended now, as a suspension job would have: its payment counts the undo.
    deps.metrics.suspensions.inc({ action: 'suspend' });
    return;
  }
  const calls = main.suspensionCalls;
  if (calls === null || calls.includes(id)) return;
  await deps.chains.save({
    chainId: main.id,
    token,
    previous: main,
    next: { ...main, suspensionCalls: [...calls, id], updatedAt: now },
    history: [joined('while its family was being suspended')],
    release: false,
  });
}

/**
 * An add-on renewal recorded after its main chain was cancelled: the cancel listed the family
 * while this order was in flight, and could not mark the add-on, whose lock the renewal held.
 * The order is cancelled as well (external: the add-on's chain, by its first order) and the
 * add-on recorded as cancelled with its main chain; both are safe to repeat. `held`: the
 * add-on's lock, when the job holds it.
 */
async function cancelWithMainChain(
  deps: WorkerDeps,
  job: Job,
  addOn: Chain,
  orderId: string,
  held?: { chain: Chain; token: string },
): Promise<void> {
  await deps.provisioning.cancelOrder({
    id: orderToChange(addOn, orderId, deps.provisioning.variant),
  });
  const now = deps.clock.now();
  await markAddOnCancelled(
    deps.chains,
    held?.chain ?? addOn,
    now,
    { jobId: job.id ?? '' },
    {
      ...(held ? { held } : {}),
      detail: `cancelled with its main chain; its renewal ${orderId}, ordered while the cancel ran, cancelled at the provider`,
    },
  );
}

/**
 * A retry that finds its term ordered and recorded by an attempt that died before it was done:
 * what that attempt may have left undone with the order (the caller restores the next term's
 * job). A main chain joins its suspension; an add-on aligns with its family, or is cancelled
 * with its main chain when the cancel could not mark it (`cancelled`: the renewal view is).
 */
async function settleRecordedTerm(
  deps: WorkerDeps,
  job: Job,
  jobToken: string | undefined,
  held: { chain: Chain; token: string },
  cancelled: boolean,
): Promise<void> {
  const { chain } = held;
  const { orderId } = chain.term;
  if (chain.mainChain === null) {
    if (!cancelled && (await inSuspendedFamily(deps, chain)))
      await suspendRenewalOrder(deps, chain, orderId);
  } else if (!cancelled) {
    await alignWithFamily(deps, job, jobToken, chain, orderId, { maySuspended: true });
  } else {
    // Also when the add-on is marked cancelled already: a cancel that listed the family before
    // this order was recorded marks the add-on it reads later without cancelling that order.
    // Cancelling is safe to repeat.
    await cancelWithMainChain(deps, job, chain, orderId, held);
  }
}

/**
 * Suspends a renewal's order; idempotent, so a retry after a crash suspends it again. Answers
 * null, or the provider's refusal: the renewal goes on (its record, the next term's job).
 */
function suspendRenewalOrder(deps: WorkerDeps, chain: Chain, orderId: string) {
  return suspendOnArrival(
    deps,
    orderToChange(chain, orderId, deps.provisioning.variant),
    'renewal',
  );
}

/** The chain after its renewal order came back. */
function renewedChain(
  deps: WorkerDeps,
  chain: Chain,
  intent: Intent,
  order: RenewedOrder,
  now: number,
): Chain {
  const count = chain.term.count + 1;
  const inForce = chain.term.expiresAt > now;
  const next: Chain = {
    ...chain,
    status: chain.status === 'expired' ? 'active' : chain.status,
    licenses: order.licenses,
    term: { orderId: intent.orderId, count, startsAt: order.startsAt, expiresAt: order.expiresAt },
    previousTerm:
      inForce && order.startsAt > now ? { ...chain.term, licenses: chain.licenses } : null,
    partials: chain.partials.filter((p) => p.expiresAt > now),
    intent: null,
    flagged: null,
    updatedAt: now,
  };
  return withNextRenewalAt(next, now, deps.settings.leadDays);
}

export function makeRenewalProcessor(deps: WorkerDeps) {
  const { chains, clock, provisioning } = deps;
  // Bound once per worker: a child logger per job costs more than the renewal's own log line.
  const log = deps.log.child({ queue: 'renewals' });
  return async function processRenewal(job: Job, jobToken?: string): Promise<string> {
    const data = renewalJobData.parse(job.data);
    const jobLog: JobLog = { log, about: { jobId: job.id, chainId: data.chainId } };
    const { about } = jobLog;
    const prepared =
      data.prepared?.basis === renewalBasis(deps) && data.prepared.intent.jobId === job.id
        ? data.prepared
        : undefined;
    if (prepared?.chain && provisioning.createRecorded) {
      const now = clock.now();
      if (now >= prepared.validFrom && now < prepared.validUntil) {
        const renewed = await renewFromSnapshot(deps, job, jobToken, jobLog, {
          snapshot: prepared.chain,
          intent: prepared.intent,
          forCount: data.count,
          now,
        });
        if (renewed !== undefined) return renewed;
      }
    }
    const claim = prepared
      ? (token: string) =>
          chains.claimRenewal(data.chainId, token, { ...prepared, now: clock.now() })
      : undefined;
    return withChainLock(
      chains,
      job,
      jobToken,
      data.chainId,
      async ({ chain, token, claimed }) => {
        if (!chain) return 'skipped: unknown chain';
        let now = clock.now();
        let current = chain;
        let intent = current.intent;
        let replayed = false;
        if (claimed && !(await confirmClaim(deps, current, data.count, now))) {
          log.error(
            { ...about, intent: intent?.orderId },
            'a prepared renewal intent did not hold; cleared',
          );
          current = await chains.save({
            chainId: current.id,
            token,
            previous: current,
            next: { ...current, intent: null, updatedAt: now },
            release: false,
          });
          intent = null;
        } else if (!claimed) {
          current = await finishPendingSeatPurchase(deps, job, { chain: current, token });
          intent = current.intent;
          replayed = intent !== null;
          if (
            intent?.kind === 'renewal' &&
            (await renewalView(deps, current)).status === 'cancelled'
          ) {
            return dropCancelledRenewal(deps, job, { chain: current, token }, intent);
          }
        }
        if (!intent) {
          const decided = await decideWithFamilyShare(deps, job, jobToken, current, (view) => {
            // After the seat purchases finished first (this chain's or its main chain's), whose
            // provider calls may take seconds: a wait or the next job is timed from now.
            now = clock.now();
            const decision = decideRenewal({
              chain: view,
              forCount: data.count,
              now,
              leadDays: deps.settings.leadDays,
            });
            log.debug({ ...about, decision: decision.kind }, 'renewal decided');
            if (decision.kind !== 'renew') return Promise.resolve({ decision });
            return writeRenewalIntent(deps, job, { chain: current, token }, decision, now);
          });
          if ('done' in decided) return decided.done;
          if ('decision' in decided) {
            return notRenewing(
              deps,
              job,
              jobToken,
              { chain: current, token },
              data,
              decided.decision,
              now,
            );
          }
          ({ chain: current, intent } = decided);
        }

        const held = { chain: current, token };
        const sending = intent;
        // Only a replayed intent can meet a suspended family (one decided or claimed now found
        // the payment ok; an add-on's read may be overtaken, which alignWithFamily settles). It
        // joins the suspension between the order and its record, so a main chain's payment
        // (waiting on this lock) cannot unsuspend the chain in between.
        const joining = replayed && (await inSuspendedFamily(deps, current));
        let sent: Sent;
        let made: RenewedOrder | undefined;
        try {
          sent = await sendRenewal(
            deps,
            sending,
            (order) => {
              made = order;
              return renewalRecord(deps, job, held, sending, order, { joinsSuspension: joining });
            },
            { withRecord: !joining },
          );
        } catch (error) {
          if (!(error instanceof RefusalError)) throw error;
          return handleRefusal(deps, job, jobToken, held, sending, error);
        }
        // An add-on's order is suspended by alignWithFamily, under its main chain's lock: its
        // read here is not, and a payment applied since would leave it suspended while paid
        // (external: with no reactivation asked for it).
        if (joining && current.mainChain === null && made) {
          const refusal = await suspendRenewalOrder(deps, current, sending.orderId);
          // The order is made: recorded as the provider left it, active, and said so.
          if (refusal !== null) {
            sent = {
              ...sent,
              renewal: renewalRecord(deps, job, held, sending, made, {
                suspensionRefused: refusal,
              }),
            };
          }
        }
        const renewed = await finishRenewal(deps, jobLog, sending, sent);
        // An add-on always aligns: also a fresh decision read its main chain without the lock.
        await alignWithFamily(deps, job, jobToken, current, sending.orderId, {
          maySuspended: replayed,
        });
        return renewed;
      },
      claim,
    );
  };
}

/**
 * A job that does not renew now: it waits until the decision's time (keeping the reason, so
 * reconcile leaves it be), or skips. A skip of this job's own term means an attempt that died
 * before it was done recorded it: the suspension of its order, or the next term's job, may be
 * missing.
 */
async function notRenewing(
  deps: WorkerDeps,
  job: Job,
  jobToken: string | undefined,
  held: { chain: Chain; token: string },
  data: RenewalJobData,
  decision: Exclude<RenewalDecision, { kind: 'renew' }>,
  now: number,
): Promise<string> {
  if (decision.kind === 'wait') {
    if (decision.reason === 'payment_overdue') await expireWhileUnpaid(deps, job, held, now);
    if (decision.reason !== 'not_due') {
      await job.updateData(deferredJobData(data, decision.until, 'payment'));
    }
    return delayJobUntil(job, jobToken, decision.until, deps.clock);
  }
  const { chain } = held;
  if (chain.term.count === data.count) {
    await settleRecordedTerm(deps, job, jobToken, held, decision.reason === 'cancelled');
    if (decision.reason === 'already_renewed') {
      await ensureRenewalJob(deps.queues.renewals, chain, deps.clock, {
        prepared: prepareRenewal(deps, chain, { stored: true }),
      });
      // An attempt that died after the record may not have given them back (finishRenewal).
      await ensureAddOnRenewalJobs(deps.queues.renewals, deps.chains, chain, deps.clock);
    }
  }
  return `skipped: ${decision.reason}`;
}

/**
 * A due renewal that waits for its payment past the end of its term: the chain is expired
 * meanwhile (DESIGN §4), and the payment renews it at once, the new term starting then. The
 * decision read the payment as it governs the chain (an add-on's is its main chain's).
 */
async function expireWhileUnpaid(
  deps: WorkerDeps,
  job: Job,
  { chain, token }: { chain: Chain; token: string },
  now: number,
): Promise<void> {
  if (expiryOf({ ...chain, payment: 'overdue' }, now) !== 'payment_overdue') return;
  await saveExpired(deps.chains, { chain, token }, 'payment_overdue', now, { jobId: job.id ?? '' });
}

/** What deciding a renewal left to do: nothing (a skip or a wait), or send the intent written. */
type Decided =
  | { decision: Exclude<RenewalDecision, { kind: 'renew' }> }
  | { done: string }
  | { chain: Chain; intent: Intent };

/**
 * Decides the renewal from the chain's renewal view and runs `decide`, for an add-on under its
 * main chain's lock. An add-on's next count is its share on the main chain, which a seat job
 * writes under that lock while it reads the add-ons: so a seat event either comes first, and
 * the intent carries its share, or finds the intent written and waits for the renewal to be
 * recorded; a purchase left half done on the main chain is finished first. (An add-on's job
 * holds its own lock and takes its main chain's; a seat job holds the main chain's and takes
 * none: a busy main chain puts the renewal back for a moment.)
 */
async function decideWithFamilyShare(
  deps: WorkerDeps,
  job: Job,
  jobToken: string | undefined,
  chain: Chain,
  decide: (view: RenewalView) => Promise<Decided>,
): Promise<Decided> {
  if (chain.mainChain === null) return decide(chain);
  return withChainLock(deps.chains, job, jobToken, chain.mainChain, async (held) => {
    // A seat purchase half done on the main chain (one that died, or waits to retry) splits
    // the family's counts again when it is finished: finished first, as any job that takes
    // the main chain does (it writes the main chain and new add-ons, never this one).
    const main =
      held.chain && (await finishPendingSeatPurchase(deps, job, { ...held, chain: held.chain }));
    return decide(main ? addOnView(chain, main) : chain);
  });
}

/** A renewal decided: its intent written on the chain, or the add-on stopped, or the chain flagged. */
async function writeRenewalIntent(
  deps: WorkerDeps,
  job: Job,
  held: { chain: Chain; token: string },
  decision: Extract<RenewalDecision, { kind: 'renew' }>,
  now: number,
): Promise<Decided> {
  const { chain, token } = held;
  if (decision.licenses === 0) return { done: await stopAddOn(deps, job, held, now) };
  if (!renewableDecision(deps, chain, decision)) {
    return flagChain(
      deps,
      job,
      held,
      `the next term needs ${decision.licenses} licenses, but the remote service cannot change the count of an external renewal (no extensions): an operator must renew it`,
    );
  }
  const intent = renewalIntent(deps, chain, decision, job.id ?? null);
  const saved = await deps.chains.save({
    chainId: chain.id,
    token,
    previous: chain,
    next: { ...chain, intent, updatedAt: now },
    release: false,
  });
  return { chain: saved, intent };
}

/**
 * A renewal intent found on a chain cancelled since it was written (an add-on whose main chain
 * was cancelled while its job waited to retry): it is not sent, so a cancelled family never
 * gets a new order. Its order, if the provider made it before, is cancelled; the intent is
 * cleared and an add-on recorded as cancelled with its main chain.
 */
async function dropCancelledRenewal(
  deps: WorkerDeps,
  job: Job,
  { chain, token }: { chain: Chain; token: string },
  intent: Intent,
): Promise<string> {
  // What the intent may have made is cancelled: external renewals through the add-on's first
  // order, which cancels its whole chain (the family's cancel leaves out an add-on whose term
  // had ended). Null: the provider never made it.
  const asked = orderToChange(chain, intent.orderId, deps.provisioning.variant);
  const cancelled = await cancelIfMade(deps.provisioning, asked);
  // Not known: a request of it that timed out may yet be made.
  await settleLateOrderCheck(deps.queues.orders, deps.clock, {
    chainId: chain.id,
    orderId: asked,
    made: cancelled !== null,
  });
  const now = deps.clock.now();
  const cause = { jobId: job.id ?? '', orderId: intent.orderId };
  // An add-on is recorded cancelled with its main chain in the same save: a job that died
  // between two saves would leave it active, and its late order check would take it for a
  // cancel that never happened and stop looking.
  const addOnToCancel = chain.mainChain !== null && chain.status !== 'cancelled';
  const dropped = { ...chain, intent: null, updatedAt: now };
  await deps.chains.save({
    chainId: chain.id,
    token,
    previous: chain,
    next: addOnToCancel ? cancelledWithMainChain(dropped, now) : dropped,
    history: [
      {
        at: now,
        event: 'renewal.dropped',
        detail:
          cancelled === null
            ? `renewal ${intent.orderId} not sent: its chain was cancelled`
            : cancelled === intent.orderId
              ? `renewal ${intent.orderId} was made while its chain was cancelled: cancelled at the provider`
              : `renewal ${intent.orderId} not sent: its chain was cancelled; ${cancelled} cancelled at the provider, with ${intent.orderId} if it was made`,
        cause,
      },
      ...(addOnToCancel ? [addOnCancelledEntry(now, cause)] : []),
    ],
    release: false,
  });
  return 'skipped: cancelled';
}

/**
 * Whether a claimed intent is the one the job would decide now: it always is, unless the code
 * that prepares intents and the code that decides them disagree, which this guards against.
 */
async function confirmClaim(deps: WorkerDeps, chain: Chain, forCount: number, now: number) {
  const decision = renewableDecision(
    deps,
    chain,
    decideRenewal({
      chain: await renewalView(deps, chain),
      forCount,
      now,
      leadDays: deps.settings.leadDays,
    }),
  );
  if (!decision || chain.intent === null) return false;
  return sameRenewalIntent(renewalIntent(deps, chain, decision, chain.intent.jobId), chain.intent);
}

/**
 * Whether two renewal intents are the same. Their params are flat (ids, counts, instants), so
 * comparing them key by key is exact; params holding objects would compare unequal, which only
 * costs a needless fresh decision (and, on the claimed path, clearing the claimed intent).
 */
function sameRenewalIntent(a: Intent, b: Intent): boolean {
  if (a.kind !== b.kind || a.method !== b.method || a.orderId !== b.orderId) return false;
  if (a.jobId !== b.jobId || a.event !== undefined || b.event !== undefined) return false;
  const keys = Object.keys(a.params);
  if (keys.length !== Object.keys(b.params).length) return false;
  return keys.every((key) => Object.hasOwn(b.params, key) && a.params[key] === b.params[key]);
}

/**
 * A renewal the provider refused. An add-on's family cancelled while its order was on its way
 * (the cancel holds the main chain's lock, not the add-on's) explains it: the renewal is
 * dropped as one found on a cancelled chain is, not flagged for a person. Its window (clock
 * skew, a remote partner with a shorter window) is waited out until the term ends; past that,
 * and for any other refusal, the chain is flagged and the job fails with the provider's message
 * for an operator to see.
 */
async function handleRefusal(
  deps: WorkerDeps,
  job: Job,
  jobToken: string | undefined,
  held: { chain: Chain; token: string },
  intent: Intent,
  error: RefusalError,
): Promise<string> {
  const { chain } = held;
  if ((await renewalView(deps, chain)).status === 'cancelled') {
    return dropCancelledRenewal(deps, job, held, intent);
  }
  const now = deps.clock.now();
  const windowRefusal = isRenewalWindowRefusal(error.message);
  if (windowRefusal && now < chain.term.expiresAt) {
    await deps.chains.save({
      chainId: chain.id,
      token: held.token,
      previous: chain,
      next: { ...chain, intent: null, updatedAt: now },
      history: [
        {
          at: now,
          event: 'renewal.deferred',
          detail: `the provider refused ${intent.orderId} (${error.message}); trying again later`,
          cause: { jobId: job.id ?? '', orderId: intent.orderId },
        },
      ],
      release: false,
    });
    const retryAt = Math.min(now + WINDOW_RETRY_SECONDS, chain.term.expiresAt);
    await job.updateData(
      deferredJobData(renewalJobData.parse(job.data), retryAt, 'provider_window'),
    );
    return delayJobUntil(job, jobToken, retryAt, deps.clock);
  }
  return flagChain(deps, job, held, `the provider refused ${intent.orderId}: ${error.message}`);
}

/** Records why the chain needs a person, clears any intent, and fails the job with that reason. */
async function flagChain(
  deps: WorkerDeps,
  job: Job,
  held: { chain: Chain; token: string },
  reason: string,
): Promise<never> {
  const now = deps.clock.now();
  await deps.chains.save({
    chainId: held.chain.id,
    token: held.token,
    previous: held.chain,
    next: { ...held.chain, intent: null, flagged: reason, updatedAt: now },
    history: [
      { at: now, event: 'renewal.flagged', detail: reason, cause: { jobId: job.id ?? '' } },
    ],
    release: false,
  });
  throw new UnrecoverableError(reason);
}
