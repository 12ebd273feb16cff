// The `payment-signals` queue: an overdue payment suspends the chain after a grace period; a
// received payment cancels that, unsuspends (marketplace) or asks for a manual reactivation.

import { type Job, type Queue, UnrecoverableError } from 'bullmq';
import { z } from 'zod';
import {
  eventMark,
  markedWebhookId,
  remembersEvent,
  withEventMark,
} from '../src/chains/event-marks.js';
import {
  familyHasOrdersInForce,
  familyOrdersInForce,
  orderToChange,
} from '../src/chains/orders-in-force.js';
import type { Chain, HistoryEntry } from '../src/chains/records.js';
import { type Clock, delayUntil } from '../src/clock.js';
import {
  eventOrderOf,
  isStaleEvent,
  lastAppliedEvent,
  staleEventReason,
} from '../src/domain/event-order.js';
import {
  planPaymentReceived,
  recordedSuspendedOrders,
  suspensionDueAt,
  withSuspendedOrders,
} from '../src/domain/suspension.js';
import { RefusalError } from '../src/errors.js';
import { formatInstant } from '../src/format.js';
import { type EventJobData, eventJobData, eventSchemas } from '../src/intake/events.js';
import {
  defaultJobOptions,
  neverRunsAgain,
  pipelineReplies,
  removedUnlessRunning,
} from '../src/queues.js';
import { chainOfEvent, delayJobUntil, waitForIntent, withChainLock } from './chain-lock.js';
import type { WorkerDeps } from './deps.js';
import { ensureFamilyRenewalJobs } from './renewals.js';
import { finishPendingSeatPurchase } from './seat-purchases.js';

export const schema = eventJobData;

export const SUSPEND = 'suspend';
export const suspendData = z.object({
  chainId: z.string(),
  order: z.string(),
  customer: z.string(),
  /** The overdue episode this suspension belongs to: a later episode has its own job. */
  episode: z.int().min(1),
  dueAt: z.int(),
});

export function suspensionJobId(chainId: string, episode: number): string {
  return `suspend-${chainId}-${episode}`;
}

type Held = { chain: Chain; token: string };

/** The ids of the orders in force now of the chain and its add-ons, as the provider names them. */
async function familyOrderIds(deps: WorkerDeps, chain: Chain, now: number): Promise<string[]> {
  const addOns = await deps.chains.getMany(chain.addOns);
  return familyOrdersInForce(chain, addOns, deps.provisioning.variant, now);
}

/**
 * The orders the record says are suspended (recordedSuspendedOrders), less those of add-ons
 * cancelled since: cancelled at the provider, they are not to be reactivated. Null when the
 * record cannot say.
 */
async function recordedToReactivate(deps: WorkerDeps, chain: Chain): Promise<string[] | null> {
  const recorded = recordedSuspendedOrders(chain);
  if (recorded === null) return null;
  const addOns = await deps.chains.getMany(chain.addOns);
  const cancelled = new Set(
    addOns
      .filter((a) => a.status === 'cancelled')
      .map((a) => orderToChange(a, a.order, deps.provisioning.variant)),
  );
  return recorded.filter((id) => !cancelled.has(id));
}

/**
 * Removes the current episode's suspension job, and tells whether it may have suspended some
 * orders already: a job that failed halfway leaves the chain `active` while some of its orders
 * are suspended at the provider. The chain's own `suspending` mark says so in every case (a job
 * waiting to retry, or one that died, too); this covers suspensions begun before the mark
 * existed. An active job is left alone and not taken for a partial suspension: while this job
 * holds the chain's lock it has done nothing yet (it waits for the lock), and a job that died
 * halfway left the mark.
 */
async function removeSuspensionJob(queue: Queue, chain: Chain): Promise<{ partly: boolean }> {
  if (chain.overdueEpisode === 0) return { partly: false };
  const job = await queue.getJob(suspensionJobId(chain.id, chain.overdueEpisode));
  if (!job) return { partly: false };
  const state = await job.getState();
  // One taken by a worker since its state was read is active: it waits for this job's lock.
  if (state !== 'active') await removedUnlessRunning(job);
  return { partly: state === 'failed' };
}

/**
 * Makes sure the suspension job of `episode` will run at `suspendAt` ("ensure", not "add": DESIGN
 * §4). A finished job of that id blocks a plain add, yet the chain still needs one: a job that
 * skipped because the chain did not say overdue yet (the overdue job died between scheduling it
 * and saving the chain), or because the chain was suspended already (an earlier episode awaiting
 * its manual reactivation, since confirmed). A record in no list at all ('unknown': Redis lost
 * the list) never runs and goes too. One that failed is replaced as well, unless `replaceFailed`
 * is false (it then waits for a person). Answers whether it added one.
 */
export async function ensureSuspensionJob(
  queue: Queue,
  chain: Pick<Chain, 'id' | 'order' | 'customer'>,
  episode: number,
  suspendAt: number,
  clock: Clock,
  { replaceFailed = true }: { replaceFailed?: boolean } = {},
): Promise<boolean> {
  const id = suspensionJobId(chain.id, episode);
  const existing = await queue.getJob(id);
  if (existing) {
    const state = await existing.getState();
    if (!neverRunsAgain(state) && !(replaceFailed && state === 'failed')) return false;
    await existing.remove();
  }
  await queue.add(
    `${SUSPEND} ${chain.order} episode ${episode}`,
    { chainId: chain.id, order: chain.order, customer: chain.customer, episode, dueAt: suspendAt },
    { ...defaultJobOptions, jobId: id, delay: delayUntil(clock, suspendAt) },
  );
  return true;
}

/**
 * For each suspension job id, whether it stands as reconcile's ensureEpisodeSuspension (which
 * leaves a failed one to a person) would leave it: kept, and waiting for its time or failed.
 * Read in one round trip without the chains' locks, for reconcile to pass over a chain in its
 * grace period. A job in neither set (running now or queued, or in no list at all: Redis lost
 * the list) is looked at under the lock.
 */
export async function suspensionJobsInPlace(
  queue: Queue,
  jobIds: readonly string[],
): Promise<boolean[]> {
  if (jobIds.length === 0) return [];
  const { delayed, failed } = queue.keys as Record<string, string>;
  const pipeline = (await queue.backend.client).pipeline();
  for (const id of jobIds) {
    pipeline
      .runCommand('exists', [queue.toKey(id)])
      .runCommand('zscore', [delayed, id])
      .runCommand('zscore', [failed, id]);
  }
  const values = await pipelineReplies(pipeline);
  return jobIds.map(
    (_, i) => values[3 * i] === 1 && (values[3 * i + 1] !== null || values[3 * i + 2] !== null),
  );
}

/** How many handled payment webhook ids a chain remembers (a job re-run long after is rare). */
const REMEMBERED_PAYMENT_EVENTS = 50;

/** The chain's record of the last applied payment event: this one. */
function appliedInOrder(data: EventJobData) {
  return { lastPaymentEventAt: data.occurredAt, lastPaymentEventSequence: data.sequence ?? null };
}

/** The chain's record of a payment event handled (applied or ignored) now. */
function handled(chain: Chain, data: EventJobData) {
  return {
    handledPaymentEvents: withEventMark(
      chain.handledPaymentEvents,
      eventMark(data),
      REMEMBERED_PAYMENT_EVENTS,
    ),
  };
}

/**
 * Whether a chain is suspended for its current episode already: suspended, and not awaiting a
 * manual reactivation (external) or, if it is, this episode's suspension saved since (its due
 * time cleared). One awaiting its reactivation in a newer episode's grace is suspended again.
 */
function suspendedForEpisode(
  chain: Pick<Chain, 'suspendAt' | 'status' | 'needsReactivation'>,
): boolean {
  return chain.status === 'suspended' && (!chain.needsReactivation || chain.suspendAt === null);
}

/**
 * When the current overdue episode's suspension is due, while it is still to come: the chain is
 * overdue and not suspended for it yet (suspendedForEpisode). Null otherwise: paid, suspended,
 * cancelled, or the suspension found nothing in force.
 */
export function pendingSuspensionAt(
  chain: Pick<Chain, 'payment' | 'suspendAt' | 'status' | 'needsReactivation'>,
): number | null {
  if (chain.payment !== 'overdue' || suspendedForEpisode(chain) || chain.status === 'cancelled')
    return null;
  return chain.suspendAt;
}

/**
 * Restores the current episode's suspension job of an overdue chain not suspended for it yet,
 * which a job that died after its save (or a lost job: reconcile) may have left without one.
 * Reconcile leaves one that failed to a person (`replaceFailed: false`), as a renewal's (Bull
 * Board shows why). Answers whether it added one.
 */
export async function ensureEpisodeSuspension(
  deps: WorkerDeps,
  chain: Chain,
  options: { replaceFailed?: boolean } = {},
): Promise<boolean> {
  const dueAt = pendingSuspensionAt(chain);
  if (dueAt === null) return false;
  const queue = deps.queues['payment-signals'];
  return ensureSuspensionJob(queue, chain, chain.overdueEpisode, dueAt, deps.clock, options);
}

/**
 * A payment event being applied at `now`; `aboutInvoice` starts each history entry it writes
 * (`invoice INV-7: `, or nothing when the event names none).
 */
interface AppliedPayment {
  data: EventJobData;
  now: number;
  aboutInvoice: string;
}

async function markOverdue(deps: WorkerDeps, job: Job, held: Held, payment: AppliedPayment) {
  const { data, now, aboutInvoice } = payment;
  const { chain, token } = held;
  const queue = deps.queues['payment-signals'];
  const cause = { webhookId: data.webhookId, jobId: job.id ?? '' };
  if (chain.payment === 'overdue') {
    // A repeated event restores a suspension job that was lost.
    await ensureEpisodeSuspension(deps, chain);
    await deps.chains.save({
      chainId: chain.id,
      token,
      previous: chain,
      next: {
        ...chain,
        ...appliedInOrder(data),
        ...handled(chain, data),
        updatedAt: now,
      },
      history: [
        {
          at: now,
          event: 'payment.overdue',
          detail: `${aboutInvoice}already overdue: nothing changes`,
          cause,
        },
      ],
      release: false,
    });
    return 'already overdue';
  }
  const episode = chain.overdueEpisode + 1;
  const suspendAt = suspensionDueAt({ overdueAt: now, graceDays: deps.settings.paymentGraceDays });
  // Scheduled before the chain says overdue: a crash in between leaves a job that finds the
  // chain paid (and skips), never an overdue chain without its suspension; the retry then
  // schedules it again.
  await ensureSuspensionJob(queue, chain, episode, suspendAt, deps.clock);
  await deps.chains.save({
    chainId: chain.id,
    token,
    previous: chain,
    next: {
      ...chain,
      payment: 'overdue',
      overdueEpisode: episode,
      suspendAt,
      ...appliedInOrder(data),
      ...handled(chain, data),
      updatedAt: now,
    },
    history: [
      {
        at: now,
        event: 'payment.overdue',
        detail:
          chain.status === 'suspended'
            ? `${aboutInvoice}payment overdue (episode ${episode}) while the chain is suspended, awaiting its manual reactivation: renewals wait; unless paid, the family is suspended again at ${formatInstant(suspendAt)} (what was reactivated or bought since too), and a reactivation waits for the payment`
            : chain.status === 'expired'
              ? `${aboutInvoice}payment overdue (episode ${episode}): renewals wait; its term has ended, and what of the family is still in force at ${formatInstant(suspendAt)} is suspended then unless paid`
              : `${aboutInvoice}payment overdue (episode ${episode}): renewals wait; the chain is suspended at ${formatInstant(suspendAt)} unless paid`,
        cause,
      },
    ],
    release: false,
  });
  return `overdue: suspension at ${formatInstant(suspendAt)}`;
}

async function markPaid(deps: WorkerDeps, job: Job, held: Held, payment: AppliedPayment) {
  const { data, now, aboutInvoice } = payment;
  const { chain, token } = held;
  const cause = { webhookId: data.webhookId, jobId: job.id ?? '' };
  const suspension = await removeSuspensionJob(deps.queues['payment-signals'], chain);
  // The orders a suspension half done may have suspended, as its job recorded them before their
  // calls (also when it gave up for good since): null when it may be any in force.
  const halfSuspended =
    chain.status !== 'suspended' && chain.suspending !== null ? chain.suspensionCalls : null;
  const plan = planPaymentReceived({
    // A job that gave up on a record from before the mark was kept may have reached any order.
    suspended: chain.status === 'suspended' || chain.suspending !== null || suspension.partly,
    variant: deps.provisioning.variant,
  });
  const paid = {
    ...chain,
    payment: 'ok' as const,
    suspendAt: null,
    suspending: null,
    suspensionCalls: null,
    ...appliedInOrder(data),
    ...handled(chain, data),
    updatedAt: now,
  };

  if (plan.kind === 'nothing_suspended') {
    const saved = await deps.chains.save({
      chainId: chain.id,
      token,
      previous: chain,
      next: paid,
      history: [
        {
          at: now,
          event: 'payment.received',
          detail: `${aboutInvoice}${paidWithNothingSuspended(chain)}`,
          cause,
        },
      ],
      release: false,
    });
    await ensureFamilyRenewalJobs(deps.queues.renewals, deps.chains, saved, deps.clock, {
      overrideDeferral: true,
    });
    return 'paid';
  }

  if (plan.kind === 'unsuspend') {
    // The payment is recorded before the first call: a newer payment event that finds it
    // half done is then newer than this one, and finishes it first (finishUnsuspension).
    const begun = await deps.chains.save({
      chainId: chain.id,
      token,
      previous: chain,
      next: { ...paid, unsuspending: true },
      history: [
        {
          at: now,
          event: 'payment.received',
          detail: `${aboutInvoice}payment received: unsuspending the orders in force`,
          cause,
        },
      ],
      release: false,
    });
    const done = await finishUnsuspension(deps, job.id ?? '', { chain: begun, token }, now);
    return `unsuspended: ${done.orders} orders`;
  }

  // Every order the suspension reached: the add-ons' first orders too, not only the main one,
  // also those whose term has ended since (an external chain stays suspended at the provider);
  // of a suspension half done, only those its job had begun to suspend.
  const suspended =
    halfSuspended ??
    (await recordedToReactivate(deps, chain)) ??
    (await familyOrderIds(deps, chain, now));
  const reason = `payment received, but the external variant has no unsuspendOrder: reactivate ${suspended.join(', ') || chain.order} by hand at the provider, then confirm with POST /ops/chains/${chain.order}/reactivated`;
  await deps.chains.save({
    chainId: chain.id,
    token,
    previous: chain,
    // Suspended, also when the suspension was only begun (some orders are, at the provider).
    next: {
      ...paid,
      status: 'suspended',
      needsReactivation: true,
      nextRenewalAt: null,
      // Still to reactivate, with whatever a newer episode suspends before the confirmation.
      suspendedOrders: suspended,
    },
    history: [{ at: now, event: 'reactivation.needed', detail: `${aboutInvoice}${reason}`, cause }],
    release: false,
  });
  throw new UnrecoverableError(reason);
}

/** What a payment that finds nothing suspended does, for its history entry. */
function paidWithNothingSuspended(chain: Chain): string {
  if (chain.payment !== 'overdue') return 'payment received';
  if (chain.status !== 'expired') return 'paid within the grace period: no suspension';
  return chain.nextRenewalAt === null || chain.flagged !== null
    ? 'payment received after the term ended'
    : 'payment received after the term ended: the renewal that waited for it is made now, its term starting now';
}

/**
 * Suspends or unsuspends one order, noting a refusal in `refused` with its reason instead of
 * throwing it. The embedded core refuses only a cancelled order (an add-on cancelled at the
 * provider and not yet recorded), with nothing to change; a remote service may have reasons of
 * its own. Either way a retry meets the same refusal, and the family's other orders must not
 * wait on it: the chain's history says which, for a person.
 */
async function callNotingRefusal(
  deps: WorkerDeps,
  action: 'suspend' | 'unsuspend',
  order: { id: string },
  refused: Map<string, string>,
): Promise<void> {
  try {
    if (action === 'suspend') await deps.provisioning.suspendOrder(order);
    else await deps.provisioning.unsuspendOrder(order);
  } catch (error) {
    if (!(error instanceof RefusalError)) throw error;
    refused.set(order.id, error.message);
    deps.log.error({ order: order.id, err: error }, `the provider refused to ${action} an order`);
  }
}

/** The orders the provider refused to suspend or unsuspend, with its reasons, for history. */
function describeRefusals(
  refused: ReadonlyMap<string, string>,
  action: 'suspend' | 'unsuspend',
): string {
  if (refused.size === 0) return '';
  const each = [...refused].map(([id, reason]) => `${id} (${JSON.stringify(reason)})`);
  return `; the provider refused to ${action} ${each.join(', ')}`;
}

/**
 * Unsuspends (marketplace) the family of a chain whose payment was recorded with its
 * unsuspension begun, and records it: the payment's job, or whoever holds the chain after it
 * died between its calls (its retry, a newer payment event). Idempotent at the provider.
 */
export async function finishUnsuspension(
  deps: WorkerDeps,
  jobId: string,
  held: Held,
  now: number,
): Promise<{ chain: Chain; orders: number }> {
  const { chain, token } = held;
  if (!chain.unsuspending) return { chain, orders: 0 };
  if (chain.status === 'cancelled') {
    // Cancelled meanwhile (the cancel clears the mark; this is a record from before it did).
    const saved = await deps.chains.save({
      chainId: chain.id,
      token,
      previous: chain,
      next: { ...chain, unsuspending: false, updatedAt: now },
      release: false,
    });
    return { chain: saved, orders: 0 };
  }
  const ids = await familyOrderIds(deps, chain, now);
  const refused = new Map<string, string>();
  await deps.chains.eachOrderUnderLock(chain.id, token, ids, (order) =>
    callNotingRefusal(deps, 'unsuspend', order, refused),
  );
  // After the calls, which may take seconds: the term may have ended meanwhile.
  const at = deps.clock.now();
  const unsuspended = ids.filter((id) => !refused.has(id));
  const saved = await deps.chains.save({
    chainId: chain.id,
    token,
    previous: chain,
    next: {
      ...chain,
      status: chain.term.expiresAt <= at ? 'expired' : 'active',
      unsuspending: false,
      suspendedOrders: null,
      updatedAt: at,
    },
    history: [
      {
        at,
        event: 'chain.unsuspended',
        detail: `payment received: unsuspended ${unsuspended.join(', ') || 'nothing in force'}${describeRefusals(refused, 'unsuspend')}`,
        // The payment that began it is the last one handled: nothing else is before it ends.
        cause: { webhookId: markedWebhookId(chain.handledPaymentEvents.at(-1) ?? ''), jobId },
      },
    ],
    release: false,
  });
  // The undo of a suspension counted: one left half done (a call failed, retried when the
  // payment came) never recorded the chain suspended, nor counted it.
  if (chain.status === 'suspended') deps.metrics.suspensions.inc({ action: 'unsuspend' });
  await ensureFamilyRenewalJobs(deps.queues.renewals, deps.chains, saved, deps.clock, {
    overrideDeferral: true,
  });
  return { chain: saved, orders: unsuspended.length };
}

/**
 * The job of a payment event handled before, run again (its worker died after its save): the
 * chain says what it did, so it only makes sure of the jobs that follow from the chain as it
 * is now, which it may not have reached, and writes no second history entry.
 */
async function replayed(deps: WorkerDeps, chain: Chain, data: EventJobData) {
  if (data.type === 'payment.overdue') {
    await ensureEpisodeSuspension(deps, chain);
  } else if (chain.payment === 'ok' && chain.needsReactivation) {
    // Its worker died after asking for the manual reactivation and before the job failed: it
    // fails now with the reason it saved, so Bull Board lists it under Failed all the same. Only
    // while its request is the one open: one confirmed since, or asked again by a later
    // payment, is not this job's to show.
    const latest = (await deps.chains.history(chain.id)).findLast(
      (h) => h.event === 'reactivation.needed' || h.event === 'chain.reactivated',
    );
    if (latest?.event === 'reactivation.needed' && latest.cause.webhookId === data.webhookId) {
      throw new UnrecoverableError(latest.detail);
    }
  } else if (chain.payment === 'ok') {
    await ensureFamilyRenewalJobs(deps.queues.renewals, deps.chains, chain, deps.clock, {
      overrideDeferral: true,
    });
  }
  return `already applied: ${data.webhookId}`;
}

/**
 * What a payment event does to the chain: nothing again when its own job ran before (replayed),
 * nothing when it is older than the last applied or the chain is cancelled (ignored, for the
 * reason given), else it applies. A seat purchase finished first changes none of this.
 */
function paymentVerdict(
  chain: Chain,
  data: EventJobData,
): { kind: 'replayed' } | { kind: 'ignored'; reason: string } | { kind: 'applies' } {
  if (remembersEvent(chain.handledPaymentEvents, eventMark(data))) return { kind: 'replayed' };
  const event = eventOrderOf(data);
  const lastApplied = lastAppliedEvent(chain.lastPaymentEventAt, chain.lastPaymentEventSequence);
  if (lastApplied !== null && isStaleEvent(event, lastApplied)) {
    return { kind: 'ignored', reason: staleEventReason(event, lastApplied, 'payment') };
  }
  if (chain.status === 'cancelled') return { kind: 'ignored', reason: 'the chain is cancelled' };
  return { kind: 'applies' };
}

async function applyPaymentEvent(
  deps: WorkerDeps,
  job: Job,
  jobToken: string | undefined,
  data: EventJobData,
) {
  const ev = eventSchemas[
    data.type === 'payment.overdue' ? 'payment.overdue' : 'payment.received'
  ].parse(data.data);
  const chainId = await chainOfEvent(deps.chains, data.type, ev.order);
  return withChainLock(deps.chains, job, jobToken, chainId, async (held) => {
    const { token } = held;
    if (!held.chain)
      throw new UnrecoverableError(`${data.type} names an unknown order: ${ev.order}`);
    const afterPurchase = await finishPendingSeatPurchase(
      deps,
      job,
      { chain: held.chain, token },
      {
        settlingPayment:
          data.type === 'payment.received' && paymentVerdict(held.chain, data).kind === 'applies',
      },
    );
    if (afterPurchase.intent) {
      return waitForIntent(deps.queues, job, jobToken, afterPurchase.intent);
    }
    const { chain } = await finishUnsuspension(
      deps,
      job.id ?? '',
      { chain: afterPurchase, token },
      deps.clock.now(),
    );
    // Read after the provider's calls above, which may take seconds: the event applies now.
    const now = deps.clock.now();
    const verdict = paymentVerdict(chain, data);
    if (verdict.kind === 'replayed') return replayed(deps, chain, data);
    const cause = { webhookId: data.webhookId, jobId: job.id ?? '' };
    // The producer's invoice, named in the history it writes (the event acts on the account).
    const aboutInvoice = ev.invoice === undefined ? '' : `invoice ${ev.invoice}: `;
    const ignore = async (detail: string): Promise<string> => {
      const entry: HistoryEntry = {
        at: now,
        event: `${data.type}.ignored`,
        detail: `${aboutInvoice}${detail}`,
        cause,
      };
      await deps.chains.save({
        chainId,
        token,
        previous: chain,
        next: { ...chain, ...handled(chain, data), updatedAt: now },
        history: [entry],
        release: false,
      });
      return `ignored: ${detail}`;
    };
    if (verdict.kind === 'ignored') return ignore(verdict.reason);
    return data.type === 'payment.overdue'
      ? markOverdue(deps, job, { chain, token }, { data, now, aboutInvoice })
      : markPaid(deps, job, { chain, token }, { data, now, aboutInvoice });
  });
}

/**
 * Suspends each of `ids` at the provider, writing each order into the chain's record of the
 * suspension in progress before its call (a save, which also renews the lock's lease): a job
 * that dies between calls leaves a record of exactly the orders it may have suspended. An order
 * recorded by an earlier attempt is suspended again (idempotent at the provider) without a save.
 * An order the provider refuses (one cancelled at the provider and not yet recorded: an add-on
 * whose own order.cancelled runs meanwhile) does not keep the others active: it is answered in
 * `refused`, with the reason, and the rest are suspended.
 */
async function suspendEachOrder(
  deps: WorkerDeps,
  held: { chain: Chain; token: string },
  episode: number,
  ids: readonly string[],
  now: number,
): Promise<{ chain: Chain; refused: Map<string, string> }> {
  const { token } = held;
  let chain = held.chain;
  const refused = new Map<string, string>();
  const suspend = (order: { id: string }) => callNotingRefusal(deps, 'suspend', order, refused);
  for (const id of ids) {
    // An older record's mark without its calls: any order may have been reached already.
    const begun = chain.suspending === episode ? (chain.suspensionCalls ?? [...ids]) : [];
    if (begun.includes(id)) {
      await deps.chains.eachOrderUnderLock(chain.id, token, [id], suspend);
      continue;
    }
    chain = await deps.chains.save({
      chainId: chain.id,
      token,
      previous: chain,
      next: { ...chain, suspending: episode, suspensionCalls: [...begun, id], updatedAt: now },
      release: false,
    });
    await suspend({ id });
  }
  return { chain, refused };
}

/** The grace period ended: suspend every order of the chain in force, unless paid meanwhile. */
async function suspendChain(deps: WorkerDeps, job: Job, jobToken: string | undefined) {
  const data = suspendData.parse(job.data);
  return withChainLock(deps.chains, job, jobToken, data.chainId, async ({ chain, token }) => {
    if (!chain) return 'skipped: unknown chain';
    const now = deps.clock.now();
    if (chain.payment !== 'overdue' || chain.overdueEpisode !== data.episode)
      return 'skipped: paid meanwhile';
    // A chain awaiting its manual reactivation (paid before, external) is suspended again:
    // what was reactivated by hand, bought since, or left by a suspension that died halfway
    // is active at the provider while this payment is overdue. Once this episode's suspension
    // is saved, a run again after a crash has nothing left to do.
    if (chain.status === 'cancelled' || suspendedForEpisode(chain))
      return `skipped: ${chain.status}`;
    // The chain's own time rules: a job left by an attempt that died before its save may carry
    // an earlier one than the episode recorded since.
    const dueAt = chain.suspendAt ?? data.dueAt;
    if (now < dueAt) return delayJobUntil(job, jobToken, dueAt, deps.clock);
    const addOns = await deps.chains.getMany(chain.addOns);
    const ids = familyOrdersInForce(chain, addOns, deps.provisioning.variant, now);
    // A chain whose term ended, with nothing in force, has nothing to suspend: it is not
    // recorded suspended (external: a payment would then ask to reactivate nothing), and it
    // renews at once when paid. (External ids name whole chains, ended or not: the terms say.)
    // The episode's suspension is over all the same: reconcile does not bring its job back.
    if (!familyHasOrdersInForce(chain, addOns, now) && chain.term.expiresAt <= now) {
      await deps.chains.save({
        chainId: chain.id,
        token,
        previous: chain,
        // What a suspension that died halfway suspended stays marked: an external id names a
        // whole chain, which stays suspended at the provider after its term ends, so a payment
        // asks for its reactivation as after a suspension done in full.
        next: { ...chain, suspendAt: null, updatedAt: now },
        release: false,
      });
      return 'skipped: nothing in force';
    }
    const { chain: begun, refused } = await suspendEachOrder(
      deps,
      { chain, token },
      data.episode,
      ids,
      now,
    );
    const suspended = ids.filter((id) => !refused.has(id));
    // With the orders that joined while it ran (an add-on's renewal) and those an earlier
    // episode left suspended (a chain awaiting its reactivation): a payment names them all.
    const reached = [...suspended, ...(begun.suspensionCalls ?? [])].filter(
      (id) => !refused.has(id),
    );
    await deps.chains.save({
      chainId: chain.id,
      token,
      previous: begun,
      next: {
        ...begun,
        status: 'suspended',
        suspendAt: null,
        suspending: null,
        suspensionCalls: null,
        suspendedOrders: withSuspendedOrders(begun, reached),
        updatedAt: now,
      },
      history: [
        {
          at: now,
          event: 'chain.suspended',
          detail: `payment still overdue after the grace period (episode ${data.episode}): suspended ${suspended.join(', ') || 'nothing in force'}${describeRefusals(refused, 'suspend')}`,
          cause: { jobId: job.id ?? '' },
        },
      ],
      release: false,
    });
    deps.metrics.suspensions.inc({ action: 'suspend' });
    return `suspended: ${suspended.length} orders`;
  });
}

export function makeProcessor(deps: WorkerDeps) {
  return async function processPaymentSignal(job: Job, jobToken?: string): Promise<string> {
    if (job.name.startsWith(SUSPEND)) return suspendChain(deps, job, jobToken);
    const data = eventJobData.parse(job.data);
    if (data.type !== 'payment.overdue' && data.type !== 'payment.received') {
      throw new UnrecoverableError(`the payment-signals queue does not handle ${data.type} events`);
    }
    return applyPaymentEvent(deps, job, jobToken, data);
  };
}
