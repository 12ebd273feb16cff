// The `seat-changes` queue: a new license total becomes a co-terminated partial order, an add-on
// order with its own renewals, or only the next renewal's count (DESIGN §4, seat change).

import { type Job, UnrecoverableError } from 'bullmq';
import { eventMark, markedWebhookId, markOf, remembersEvent } from '../src/chains/event-marks.js';
import { finishedChainName, hasRenewalToCome, renewsNoMore } from '../src/chains/expiry.js';
import type { Chain, HistoryEntry, Intent } from '../src/chains/records.js';
import { eventOrderOf, staleEventReason } from '../src/domain/event-order.js';
import { planSeatChange } from '../src/domain/seats.js';
import { formatInstant } from '../src/format.js';
import { type EventJobData, eventJobData, eventSchemas } from '../src/intake/events.js';
import { chainOfEvent, delayJobUntil, waitForIntent, withChainLock } from './chain-lock.js';
import type { WorkerDeps } from './deps.js';
import { ensureFamilyRenewalJobs } from './renewals.js';
import {
  addOnIntent,
  allocation,
  applied,
  buyPlanned,
  describeAllocation,
  finishPendingSeatPurchase,
  finishSeatIntent,
  newestTotal,
  paidAhead,
  paidInForce,
  waitingToCount,
  withRefusalSettled,
} from './seat-purchases.js';
import {
  ADD_ON_DUE,
  addOnDueData,
  removeAddOnJob,
  scheduleAddOnJob,
  waitingAsAddOn,
} from './waiting-add-ons.js';

export const schema = eventJobData;

async function applySeatEvent(
  deps: WorkerDeps,
  job: Job,
  jobToken: string | undefined,
  data: EventJobData,
) {
  const ev = eventSchemas['seats.changed'].parse(data.data);
  const chainId = await chainOfEvent(deps.chains, data.type, ev.order);
  const event = {
    webhookId: data.webhookId,
    mark: eventMark(data),
    occurredAt: data.occurredAt,
    ...(data.sequence !== undefined ? { sequence: data.sequence } : {}),
    total: ev.licenses,
  };
  return withChainLock(deps.chains, job, jobToken, chainId, async (lock) => {
    if (!lock.chain)
      throw new UnrecoverableError(`seats.changed names an unknown order: ${ev.order}`);
    const { token } = lock;
    const finished = await finishPendingSeatPurchase(deps, job, { chain: lock.chain, token });
    if (finished.intent) return waitForIntent(deps.queues, job, jobToken, finished.intent);
    if (remembersEvent(finished.appliedSeatEvents, event.mark)) {
      // A retry after a crash right after the save: the waiting add-on's job may be missing,
      // or the renewal jobs of what it bought.
      if (finished.pendingAddOn) {
        await scheduleAddOnJob(deps, finished, finished.pendingAddOn.startsAt, job);
      }
      await ensureFamilyRenewalJobs(deps.queues.renewals, deps.chains, finished, deps.clock);
      return `already applied: ${data.webhookId}`;
    }
    const now = deps.clock.now();
    const held = { chain: finished, token };
    const chain = await withRefusalSettled(deps, job, held, event.mark, now);
    const cause = { webhookId: data.webhookId, jobId: job.id ?? '' };
    const save = (next: Chain, entry: Omit<HistoryEntry, 'cause' | 'at'>) =>
      deps.chains.save({
        chainId,
        token,
        previous: chain,
        next: { ...next, updatedAt: now },
        history: [{ at: now, ...entry, cause }],
        release: false,
      });

    if (renewsNoMore(chain)) {
      await save(
        { ...chain, ...applied(chain, event) },
        {
          event: 'seats.ignored',
          detail: `${ev.licenses} licenses asked for ${finishedChainName(chain.status)}: nothing to do`,
        },
      );
      return `ignored: chain ${chain.status}`;
    }
    const addOns = await deps.chains.getMany(chain.addOns);
    const renewing = addOnRenewal(addOns);
    if (renewing) return waitForIntent(deps.queues, job, jobToken, renewing);
    const plan = (counted: readonly Chain[]) =>
      planSeatChange({
        ...paidAhead(chain, counted, now, deps.settings.seatIncrease),
        total: ev.licenses,
        neededAt: ev.effectiveAt ?? now,
        occurredAt: data.occurredAt,
        lastAppliedAt: chain.lastSeatEventAt,
        sequence: data.sequence ?? null,
        lastAppliedSequence: chain.lastSeatEventSequence,
      });
    // A waiting add-on (external) that starts before this event's date is still needed from its
    // own: counted as paid from then, it may leave nothing to buy (kept below), or leave the rest
    // of this event to buy from its later date once the add-on is bought (kept as well).
    const neededAt = Math.max(ev.effectiveAt ?? now, now);
    const earlier = waitingBefore(chain.pendingAddOn, neededAt);
    const withWaiting = earlier
      ? plan([...addOns, waitingAsAddOn(chain, earlier, deps.settings.leadDays)])
      : undefined;
    // (An event needed now finds one that starts earlier late, its day passed: one purchase now
    // covers both.)
    if (earlier && neededAt > now && withWaiting?.kind === 'buy') {
      return keepWaitingWithRest(deps, job, { chain, token }, addOns, { ...event, neededAt });
    }
    const decision = withWaiting && withWaiting.kind !== 'buy' ? withWaiting : plan(addOns);

    if (decision.kind === 'stale') {
      await save(
        { ...chain, appliedSeatEvents: applied(chain, event).appliedSeatEvents },
        {
          event: 'seats.stale',
          detail: `${staleEventReason(eventOrderOf(data), decision.lastApplied, 'seat')}: ignored`,
        },
      );
      return 'stale';
    }
    if (decision.kind === 'next_renewal_only') {
      // A total needed later is carried by the first renewal from that date.
      const later = ev.effectiveAt !== undefined && ev.effectiveAt > now;
      // Bought on its day, the kept add-on's event carries the newer total; the older event's
      // later steps (`rest`) are dropped, as the newer event sets what follows, unless a newer
      // event's total needed before this one's day is its rest: that is still bought, and this
      // total is planned after it (it may buy nothing then).
      const queued = earlier ? laterTotalsAfter(chain, earlier, { ...event, neededAt }) : undefined;
      const pending =
        earlier && (queued ? earlier : { ...withoutRest(earlier), total: decision.total });
      const counts = allocation(deps, chain, addOns, decision.total, {
        ...(pending ? { waiting: waitingToCount(pending, queued?.totals ?? []) } : {}),
        ...(later ? { from: ev.effectiveAt } : {}),
      });
      if (chain.pendingAddOn && !pending) await removeAddOnJob(deps, chain, job);
      const reason = {
        decrease: 'a decrease refunds nothing',
        already_paid: 'already paid',
        after_term: 'needed from the next term',
        next_term_has_it:
          'short only until the next term, already ordered with enough, starts: an add-on would run a whole term',
      }[decision.reason];
      const kept = pending
        ? `; the waiting ${pending.licenses} licenses are still bought ${formatInstant(pending.startsAt)}, as an earlier event asked from then${queued ? `, and what newer events need from ${formatInstant(queued.from)} on after them` : ''}`
        : '';
      await save(
        {
          ...chain,
          ...applied(chain, event),
          ...counts,
          pendingAddOn: pending,
          laterSeatTotals: queued?.totals ?? [],
        },
        {
          event: 'seats.changed',
          detail: `${decision.total} licenses: nothing to buy now (${reason})${kept}; ${describeAllocation(counts)}`,
        },
      );
      return `next renewal: ${decision.total}`;
    }

    const done = await buyPlanned(
      deps,
      job,
      { chain, token },
      { refusal: 'fail' },
      { decision, event, style: deps.settings.seatIncrease, addOns },
    );
    return describeBought(deps, chain, done);
  });
}

/**
 * The chain's waiting add-on (external: bought on its day) when it starts before a newer event's
 * total applies (`from`): the older event still needs its licenses from its own date, so the
 * newer event counts them as paid and, buying nothing, leaves it in place. One starting at or
 * after `from` is the newer event's to replace (null).
 */
function waitingBefore(pending: Chain['pendingAddOn'], from: number): Chain['pendingAddOn'] {
  return pending !== null && pending.startsAt < from ? pending : null;
}

/**
 * The day of what is bought next after the waiting add-on: its rest (a newer event's total from
 * `restFrom`), or, with no rest, the first queued total. Undefined when nothing is, or when its
 * rest is a next step of its own event, whose day is known only once the add-on is bought.
 */
function nextAfterWaiting(
  chain: Chain,
  earlier: NonNullable<Chain['pendingAddOn']>,
): number | undefined {
  return earlier.rest ? earlier.restFrom : chain.laterSeatTotals[0]?.from;
}

/**
 * The later totals (`laterSeatTotals`) with a newer event's, needed from `event.neededAt`, when
 * what is bought next after the waiting add-on is needed before that day (`from`): it stays, as
 * do the totals needed before the day, and those from the day on give way to the newer event.
 * Undefined otherwise: the newer event takes the place of all that follows the add-on.
 */
function laterTotalsAfter(
  chain: Chain,
  earlier: NonNullable<Chain['pendingAddOn']>,
  event: { webhookId: string; mark: string; occurredAt: number; total: number; neededAt: number },
): { totals: Chain['laterSeatTotals']; from: number } | undefined {
  const from = nextAfterWaiting(chain, earlier);
  if (from === undefined || from >= event.neededAt) return undefined;
  const totals = [
    ...chain.laterSeatTotals.filter((later) => later.from < event.neededAt),
    {
      webhookId: event.webhookId,
      mark: event.mark,
      occurredAt: event.occurredAt,
      total: event.total,
      from: event.neededAt,
    },
  ];
  return { totals, from };
}

/** A waiting add-on with no rest after it: a newer event sets what follows. */
function withoutRest(pending: NonNullable<Chain['pendingAddOn']>) {
  const { restFrom: _superseded, ...kept } = pending;
  return { ...kept, rest: false };
}

/**
 * A newer event that needs more than a waiting add-on (external) brings, from a later date than
 * the add-on's: the add-on is still bought on its own day, as the older event asked, and the
 * newer event is planned again from its own date once it is (its `rest`), with the add-on then
 * counted as bought. Replacing the add-on by one purchase from the later date would leave the
 * older event's licenses missing between the two dates. The event is applied now: the add-on's
 * job carries the rest, and a newer event still replaces it.
 */
async function keepWaitingWithRest(
  deps: WorkerDeps,
  job: Job,
  { chain, token }: { chain: Chain; token: string },
  addOns: readonly Chain[],
  event: {
    webhookId: string;
    mark: string;
    occurredAt: number;
    sequence?: number;
    total: number;
    neededAt: number;
  },
): Promise<string> {
  const earlier = chain.pendingAddOn as NonNullable<Chain['pendingAddOn']>;
  const now = deps.clock.now();
  // A late one (its job held up, or failed and waiting for a person) is bought now, so the rest
  // is not parked behind it.
  if (earlier.startsAt <= now) await scheduleAddOnJob(deps, chain, now, job);
  // What is bought after the add-on (its rest, the queued totals), when needed before this
  // one's day, is still bought first, and this one waits after it (laterTotalsAfter); otherwise
  // this event becomes the add-on's rest.
  const queued = laterTotalsAfter(chain, earlier, event);
  const pending = queued
    ? earlier
    : {
        ...earlier,
        occurredAt: event.occurredAt,
        total: event.total,
        rest: true,
        restFrom: event.neededAt,
        webhookId: event.webhookId,
        mark: event.mark,
      };
  const later = queued?.totals ?? [];
  const counts = allocation(deps, chain, addOns, event.total, {
    waiting: waitingToCount(pending, later),
  });
  const before = queued ? `, then what a newer event needs from ${formatInstant(queued.from)}` : '';
  await deps.chains.save({
    chainId: chain.id,
    token,
    previous: chain,
    next: {
      ...chain,
      ...applied(chain, event),
      ...counts,
      pendingAddOn: pending,
      laterSeatTotals: later,
      updatedAt: now,
    },
    history: [
      {
        at: now,
        event: 'seats.changed',
        detail: `${event.total} licenses from ${formatInstant(event.neededAt)}: the waiting ${pending.licenses} licenses are still bought ${formatInstant(pending.startsAt)}, as an earlier event asked from then${before}, and what is missing from ${formatInstant(event.neededAt)} is bought after them; ${describeAllocation(counts)}`,
        cause: { webhookId: event.webhookId, jobId: job.id ?? '' },
      },
    ],
    release: false,
  });
  return `add-on scheduled: ${formatInstant(pending.startsAt)}; the rest from ${formatInstant(event.neededAt)}`;
}

/**
 * An add-on's renewal in flight, if any: its intent carries the share it decided under the
 * main chain's lock (renewals.ts, decideWithFamilyShare), so a seat job waits until the renewal
 * is recorded and then counts the term it ordered, instead of changing a share already sent.
 */
function addOnRenewal(addOns: readonly Chain[]): Intent | undefined {
  return addOns.find((addOn) => addOn.intent?.kind === 'renewal')?.intent ?? undefined;
}

/** What a seat job bought (or scheduled), for its return value in Bull Board. */
async function describeBought(deps: WorkerDeps, before: Chain, after: Chain): Promise<string> {
  const partialsBefore = new Set(before.partials.map((p) => p.orderId));
  const partials = after.partials.map((p) => p.orderId).filter((id) => !partialsBefore.has(id));
  const newAddOns = await deps.chains.getMany(
    after.addOns.filter((id) => !before.addOns.includes(id)),
  );
  const bought = [
    ...(partials.length > 0 ? [`partial: ${partials.join(', ')}`] : []),
    ...(newAddOns.length > 0 ? [`add-on: ${newAddOns.map((a) => a.order).join(', ')}`] : []),
    ...(after.pendingAddOn
      ? [`add-on scheduled: ${formatInstant(after.pendingAddOn.startsAt)}`]
      : []),
  ];
  return bought.join('; ') || 'nothing bought';
}

/**
 * The mark of the seat event that asked for the chain's waiting add-on. Older waiting add-ons
 * name no event: the last one applied asked for them.
 */
function askedForWaitingAddOn(chain: Chain): string {
  return chain.pendingAddOn?.webhookId ?? chain.appliedSeatEvents.at(-1) ?? '';
}

/** The cause of an entry a waiting add-on's job writes: the job, and the event that asked. */
function waitingAddOnCause(job: Job, webhookId: string): HistoryEntry['cause'] {
  return { jobId: job.id ?? '', ...(webhookId ? { webhookId } : {}) };
}

/**
 * A waiting add-on whose job comes only after the term it was for has ended (workers down, held
 * up): bought now it would start a whole term of its own on a chain whose term is over. An
 * expired chain buys nothing (as for a seat event sent now); one about to renew carries the
 * total in that renewal instead, as a change needed after the term would.
 */
async function settleLateAddOn(
  deps: WorkerDeps,
  job: Job,
  { chain, token }: { chain: Chain; token: string },
  addOns: readonly Chain[],
  now: number,
): Promise<string> {
  const pending = chain.pendingAddOn as NonNullable<Chain['pendingAddOn']>;
  const waiting = `the waiting ${pending.licenses} licenses`;
  const asked = markedWebhookId(askedForWaitingAddOn(chain));
  const record = (next: Chain, event: string, detail: string) =>
    deps.chains.save({
      chainId: chain.id,
      token,
      previous: chain,
      // The totals needed after the add-on's day are past the term as well: the renewal to come
      // carries the newest.
      next: { ...next, pendingAddOn: null, laterSeatTotals: [], updatedAt: now },
      history: [{ at: now, event, detail, cause: waitingAddOnCause(job, asked) }],
      release: false,
    });
  // Nothing will renew it, marked expired or not yet (reconcile does that). One expired while its
  // payment is overdue renews when paid, and one awaiting its reactivation (external; no renewal
  // time meanwhile) renews when an operator confirms it: the waiting licenses go into that
  // term, below, as a seat event sent now would.
  const renewsWhenReactivated = chain.needsReactivation && chain.autoRenew;
  if (!hasRenewalToCome(chain) && !renewsWhenReactivated) {
    const expired = chain.status === 'expired';
    await record(
      chain,
      'seats.ignored',
      expired
        ? `${waiting} are not bought: the chain expired first`
        : `${waiting} are not bought: term ${chain.term.count} ended ${formatInstant(chain.term.expiresAt)} first, and the chain does not renew`,
    );
    return expired ? 'skipped: chain expired' : 'skipped: term ended';
  }
  // The counts left room for the waiting licenses when it was scheduled: with them, the total.
  // (Paid in force is no measure once the term has ended.)
  const total = newestTotal(
    chain.laterSeatTotals,
    pending.total ??
      chain.nextLicenses +
        Object.values(chain.addOnNextLicenses).reduce((sum, n) => sum + n, 0) +
        pending.licenses,
  );
  const counts = allocation(deps, chain, addOns, total, { keep: true });
  await record(
    { ...chain, ...counts },
    'seats.changed',
    `${total} licenses: ${waiting} are not bought, term ${chain.term.count} ended ${formatInstant(chain.term.expiresAt)} first; ${describeAllocation(counts)}`,
  );
  return `next renewal: ${total}`;
}

/** The waiting add-on's date came: buy it (unless a newer event withdrew it). */
async function buyDueAddOn(deps: WorkerDeps, job: Job, jobToken: string | undefined) {
  const data = addOnDueData.parse(job.data);
  return withChainLock(deps.chains, job, jobToken, data.chainId, async (lock) => {
    if (!lock.chain) return 'skipped: unknown chain';
    const { token } = lock;
    const chain = await finishPendingSeatPurchase(deps, job, { chain: lock.chain, token });
    if (chain.intent) return waitForIntent(deps.queues, job, jobToken, chain.intent);
    const pending = chain.pendingAddOn;
    if (!pending) return 'skipped: no add-on waiting';
    const now = deps.clock.now();
    if (now < pending.startsAt) return delayJobUntil(job, jobToken, pending.startsAt, deps.clock);
    if (chain.status === 'cancelled') return 'skipped: chain cancelled';
    const addOns = await deps.chains.getMany(chain.addOns);
    const renewing = addOnRenewal(addOns);
    if (renewing) return waitForIntent(deps.queues, job, jobToken, renewing);
    if (chain.status === 'expired' || now >= chain.term.expiresAt) {
      return settleLateAddOn(deps, job, { chain, token }, addOns, now);
    }
    const total = pending.total ?? paidInForce(chain, addOns, now) + pending.licenses;
    const asked = askedForWaitingAddOn(chain);
    const event = {
      webhookId: markedWebhookId(asked),
      mark: markOf({ webhookId: asked, mark: pending.mark }),
      occurredAt: pending.occurredAt,
      total,
      ...(pending.rest ? { rest: true } : {}),
      ...(pending.restFrom !== undefined ? { restFrom: pending.restFrom } : {}),
    };
    const intent = addOnIntent(deps, chain, pending.licenses, now, event, job.id ?? null);
    const held = await deps.chains.save({
      chainId: chain.id,
      token,
      previous: chain,
      next: {
        ...chain,
        intent,
        addOnCount: chain.addOnCount + 1,
        pendingAddOn: null,
        updatedAt: now,
      },
      history: [
        {
          at: now,
          event: 'seats.buying',
          detail: `buying the waiting ${pending.licenses} licenses as add-on ${intent.orderId}`,
          cause: waitingAddOnCause(job, event.webhookId),
        },
      ],
      release: false,
    });
    const done = await finishSeatIntent(deps, job, { chain: held, token });
    // One step of an event bought in several: the next add-on waits for its own day, and this
    // job (the chain's one waiting add-on job) moves itself there.
    // (Also when that day has come meanwhile: the job fires again at once and buys it.)
    const next = done.pendingAddOn;
    if (next) {
      await job.updateData({ ...data, startsAt: next.startsAt });
      return delayJobUntil(job, jobToken, next.startsAt, deps.clock);
    }
    return `add-on: ${intent.orderId}`;
  });
}

export function makeProcessor(deps: WorkerDeps) {
  return async function processSeatChange(job: Job, jobToken?: string): Promise<string> {
    if (job.name.startsWith(ADD_ON_DUE)) return buyDueAddOn(deps, job, jobToken);
    const data = eventJobData.parse(job.data);
    if (data.type !== 'seats.changed') {
      throw new UnrecoverableError(`the seat-changes queue does not handle ${data.type} events`);
    }
    return applySeatEvent(deps, job, jobToken, data);
  };
}
