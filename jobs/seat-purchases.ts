// Seat purchases: what is paid, how a total splits over the next renewals, and the partial or
// add-on order that buys the rest, written as an intent and finished exactly once.
import { type Job, UnrecoverableError } from 'bullmq';
import { markOf, remembersEvent, sameEvent } from '../src/chains/event-marks.js';
import { finishedChainName, renewsNoMore } from '../src/chains/expiry.js';
import {
  addOnsRenew,
  createChain,
  governedNextRenewalAt,
  newAddOnRecord,
} from '../src/chains/family.js';
import { chainIdOf } from '../src/chains/keys.js';
import type { Cause, Chain, Intent } from '../src/chains/records.js';
import { renewalCountCanChange } from '../src/client/provisioning-client.js';
import type { Clock } from '../src/clock.js';
import { addOnOrderId, partialOrderId } from '../src/domain/ids.js';
import { addTerms } from '../src/domain/periods.js';
import {
  allocateNextLicenses,
  type KeptLicenses,
  keepLicensesUntil,
  type PartTimeOrder,
  planSeatChange,
  renewalLicenses,
  type SeatDecision,
} from '../src/domain/seats.js';
import {
  suspendedForNonPayment,
  suspendedOnArrival,
  suspensionRefusedOnArrival,
  withSuspendedOrders,
} from '../src/domain/suspension.js';
import { RefusalError } from '../src/errors.js';
import { formatInstant } from '../src/format.js';
import type { WorkerDeps } from './deps.js';
import { describeTerm, sendIntent } from './intents.js';
import { ensureRenewalJob } from './renewals.js';
import { suspendOnArrival } from './suspend-on-arrival.js';
import { removeAddOnJob, scheduleAddOnJob } from './waiting-add-ons.js';

/** How many applied seat webhook ids a chain remembers, so a retried job never applies one twice. */
const REMEMBERED_EVENTS = 50;
export function applied(
  chain: Chain,
  event: {
    webhookId: string;
    mark?: string | undefined;
    occurredAt: number;
    sequence?: number | undefined;
  },
) {
  // An event bought in steps is applied when its first waiting add-on is scheduled and again
  // with its last purchase: it is remembered once.
  const mark = markOf(event);
  const remembered = remembersEvent(chain.appliedSeatEvents, mark)
    ? chain.appliedSeatEvents
    : [...chain.appliedSeatEvents, mark].slice(-REMEMBERED_EVENTS);
  return { ...lastSeen(chain, event), appliedSeatEvents: remembered };
}

/**
 * The next of the chain's later seat totals made its unfinished event, to be planned from its
 * day now that what came before it is bought (or settled); none left: no unfinished event.
 */
export function nextLaterTotal(
  later: Chain['laterSeatTotals'],
): Pick<Chain, 'unfinishedSeatEvent' | 'laterSeatTotals'> {
  const [next, ...after] = later;
  if (!next) return { unfinishedSeatEvent: null, laterSeatTotals: [] };
  const { from, ...event } = next;
  return {
    unfinishedSeatEvent: { ...event, neededAt: from, style: 'addon' },
    laterSeatTotals: after,
  };
}

/**
 * A waiting add-on (external) as `allocation` counts it: its licenses, and whether more is bought
 * after it (a rest of its own, or totals queued behind it).
 */
export function waitingToCount(
  pending: { licenses: number; rest: boolean },
  later: Chain['laterSeatTotals'],
): { licenses: number; rest: boolean } {
  return { licenses: pending.licenses, rest: pending.rest || later.length > 0 };
}

/** The total the next renewals carry: the newest event's, the last later total if any wait. */
export function newestTotal(later: Chain['laterSeatTotals'], total: number): number {
  return later.at(-1)?.total ?? total;
}

type RefusalNote = Chain['refusedSeatEvents'][number];

/** The chain's refused seat events with `note` for its event (the latest few are remembered). */
function refusedWith(chain: Chain, note: RefusalNote) {
  return [
    ...chain.refusedSeatEvents.filter((r) => !sameEvent(r.webhookId, note.webhookId)),
    note,
  ].slice(-REMEMBERED_EVENTS);
}

/**
 * The chain once the refusal noted for the event of `job` (if any) is settled for this run: the
 * attempt that met it, run again because its worker died before the failure was recorded, or
 * the first run since another job met it, fails with the refusal (noting its attempt), rather
 * than deciding the purchase afresh under another order id; a run after that failure was
 * recorded and a person retried the job (having fixed the cause) drops the note and decides
 * afresh.
 */
export async function withRefusalSettled(
  deps: WorkerDeps,
  job: Job,
  { chain, token }: { chain: Chain; token: string },
  /** The event's mark. */
  mark: string,
  now: number,
): Promise<Chain> {
  const note = chain.refusedSeatEvents.find((r) => sameEvent(r.webhookId, mark));
  if (!note) return chain;
  const attempt = job.attemptsMade ?? 0;
  const save = (refusedSeatEvents: RefusalNote[]) =>
    deps.chains.save({
      chainId: chain.id,
      token,
      previous: chain,
      next: { ...chain, refusedSeatEvents, updatedAt: now },
      release: false,
    });
  // A person's retry clears the job's failure (BullMQ's own retries keep the last one): only
  // then is the refusal taken as dealt with. A retry for any other reason fails with it again.
  if (note.attempt !== null && attempt > note.attempt && !job.failedReason) {
    return save(chain.refusedSeatEvents.filter((r) => r !== note));
  }
  if (note.attempt === null) await save(refusedWith(chain, { ...note, attempt }));
  throw new UnrecoverableError(note.reason);
}

/**
 * Licenses paid through the end of the latest ordered term: its main order, the partials that
 * co-terminate with it, and live add-ons. After an early renewal the new term's order already
 * carries the combined count, so partials of the term still in force (ending before it) are not
 * counted twice.
 */
export function paidInForce(chain: Chain, addOns: readonly Chain[], now: number): number {
  return paidInLatestTerm(chain, addOns, now).paid;
}

/** paidInForce, and the orders in force for part of what is left of the latest term only. */
function paidInLatestTerm(chain: Chain, addOns: readonly Chain[], now: number): PaidDuring {
  // The latest term's stretch starts when the term in force (if any) ends, or when a first term
  // ordered to start later starts.
  const stretch = {
    from: Math.max(now, chain.previousTerm?.expiresAt ?? chain.term.startsAt),
    until: chain.term.expiresAt,
  };
  const partials = chain.partials.filter((p) => p.expiresAt > now && p.expiresAt >= stretch.until);
  return paidDuring(chain, chain.licenses, partials, addOns, stretch, now);
}

/**
 * After a renewal ordered ahead of time: the term still in force (it ends where the latest
 * ordered term starts) and the licenses paid for the rest of it: its main order, its partials
 * (and those that run on into the next term), and the add-ons in force before it ends. Undefined
 * when no such term is in force, or its record predates keeping its count.
 */
export function paidInTermInForce(
  chain: Chain,
  addOns: readonly Chain[],
  now: number,
): (PaidDuring & { endsAt: number }) | undefined {
  const term = chain.previousTerm;
  if (term === null || term.licenses === undefined || term.expiresAt <= now) return undefined;
  const stretch = { from: now, until: term.expiresAt };
  const partials = chain.partials.filter(
    (p) => p.expiresAt > now && p.startsAt < stretch.until && p.expiresAt >= stretch.until,
  );
  return {
    endsAt: stretch.until,
    ...paidDuring(chain, term.licenses, partials, addOns, stretch, now),
  };
}

/**
 * What a seat plan (planSeatChange) reads from the chain: the licenses paid for the latest
 * ordered term and for a term still in force, the orders in force for part of either only,
 * where the latest term ends, and whether what `style` buys from a given instant runs on to
 * that end (partials do; an add-on, which ends a whole term after its start, as
 * addOnInForceDuring will count it once bought).
 */
export function paidAhead(chain: Chain, addOns: readonly Chain[], now: number, style: SeatStyle) {
  const latest = paidInLatestTerm(chain, addOns, now);
  return {
    ...latest,
    termInForce: paidInTermInForce(chain, addOns, now),
    termEnd: chain.term.expiresAt,
    now,
    // With no term before it, the chain's licenses start with its latest term.
    servedFrom: chain.previousTerm === null ? chain.term.startsAt : now,
    style,
    runsOn: (startsAt: number) =>
      style === 'coterm' ||
      addOnRunsThrough(
        addTerms(startsAt, chain.duration, 1),
        chain.term.expiresAt,
        addOnsRenew(chain),
      ),
  };
}

/** Licenses paid for a stretch (planSeatChange's `paid`), and the orders in force for part of it. */
interface PaidDuring {
  paid: number;
  partTime: PartTimeOrder[];
}

/**
 * What the main order's `licenses`, the `partials` that run to the stretch's end and the live
 * add-ons pay for [from, until). A partial or add-on that starts inside the stretch counts for
 * all of it (no gap orders) and is listed as part-time, so the plan knows when it really starts.
 */
function paidDuring(
  main: Chain,
  licenses: number,
  partials: readonly { startsAt: number; licenses: number }[],
  addOns: readonly Chain[],
  stretch: { from: number; until: number },
  now: number,
): PaidDuring {
  const paid: PaidDuring = { paid: licenses, partTime: [] };
  const add = (order: { startsAt: number; endsAt?: number; licenses: number }) => {
    const endsAt = order.endsAt ?? stretch.until;
    if (endsAt >= stretch.until) paid.paid += order.licenses;
    if (order.startsAt > stretch.from || endsAt < stretch.until) {
      paid.partTime.push({ startsAt: order.startsAt, endsAt, licenses: order.licenses });
    }
  };
  for (const partial of partials) add(partial);
  for (const addOn of liveAddOns(addOns, now)) {
    const inForce = addOnInForceDuring(main, addOn, stretch);
    if (inForce) add(inForce);
  }
  return paid;
}

/** Add-ons that count at all: not cancelled, and their latest ordered term not ended. */
function liveAddOns(addOns: readonly Chain[], now: number): Chain[] {
  return addOns.filter((a) => isLiveAddOn(a, now));
}

/** An add-on whose licenses a seat plan counts as paid now: not cancelled, its term running. */
function isLiveAddOn(addOn: Chain, now: number): boolean {
  return addOn.status !== 'cancelled' && addOn.term.expiresAt > now;
}

/**
 * What an add-on pays for in [from, until): from when, how many, and until when if it ends
 * inside the stretch (none: it runs through it, renewing). While its own early renewal changes
 * its count in the stretch, the lower of the two counts, throughout. One that will not renew as
 * things stand (it stopped, or its main chain does not renew) runs only to its term's end.
 */
function addOnInForceDuring(
  main: Chain,
  addOn: Chain,
  { from, until }: { from: number; until: number },
): { startsAt: number; endsAt?: number; licenses: number } | null {
  const earlier = addOn.previousTerm;
  if (earlier !== null && earlier.expiresAt > from) {
    const before = earlier.licenses ?? addOn.licenses;
    const licenses = earlier.expiresAt >= until ? before : Math.min(before, addOn.licenses);
    return { startsAt: from, licenses };
  }
  const { term } = addOn;
  if (term.startsAt >= until) return null;
  const startsAt = Math.max(from, term.startsAt);
  if (!addOnRunsThrough(term.expiresAt, until, governedNextRenewalAt(main, addOn) !== null)) {
    return term.expiresAt > from
      ? { startsAt, endsAt: term.expiresAt, licenses: addOn.licenses }
      : null;
  }
  return { startsAt, licenses: addOn.licenses };
}

/**
 * Whether an add-on whose term ends at `expiresAt` is in force until `until`: it reaches it, or
 * it renews (its main chain lets it). One that does not only covers the days until it ends.
 */
function addOnRunsThrough(expiresAt: number, until: number, renews: boolean): boolean {
  return expiresAt >= until || renews;
}

/**
 * The last seat event's instant and number once `event` is seen: events older than it are
 * stale. An event seen again without its number (bought later, from a waiting add-on) keeps the
 * number of its second.
 */
function lastSeen(
  chain: Chain,
  event: { occurredAt: number; sequence?: number | undefined },
): Pick<Chain, 'lastSeatEventAt' | 'lastSeatEventSequence'> {
  const last = chain.lastSeatEventAt;
  const sequence = event.sequence ?? null;
  if (last === null || event.occurredAt > last) {
    return { lastSeatEventAt: event.occurredAt, lastSeatEventSequence: sequence };
  }
  const kept = chain.lastSeatEventSequence;
  if (event.occurredAt < last || sequence === null) {
    return { lastSeatEventAt: last, lastSeatEventSequence: kept };
  }
  return { lastSeatEventAt: last, lastSeatEventSequence: Math.max(kept ?? sequence, sequence) };
}

/**
 * The chain's next-renewal counts for a total, over itself and its add-ons. `waiting`: the
 * licenses of an add-on to be bought later (the external variant buys it on the day it is
 * needed), which will renew as the newest add-on: the others' counts leave room for it now, so
 * a renewal in between does not carry a count that the add-on's purchase then corrects.
 *
 * `from`: when the total is needed, if later than now (kept as `sharesFrom`, so that `keep`, the
 * recording of a purchase for an event applied before, splits the same total the same way).
 * The first renewal from then carries any excess (allocateNextLicenses, `dated`). Inside the
 * main chain's latest ordered term, an add-on that renews before then still needs its count
 * then, and renews a whole term: it keeps it (datedShares), and the new total's change falls
 * on the chains that renew from the date. At or after the term's end, the date only sets the
 * next renewals' counts (DESIGN §4).
 */
export function allocation(
  deps: {
    clock: Clock;
    settings: Pick<WorkerDeps['settings'], 'seatIncrease'>;
    provisioning: Pick<WorkerDeps['provisioning'], 'variant' | 'extensions'>;
  },
  chain: Chain,
  addOns: readonly Chain[],
  total: number,
  {
    waiting,
    from,
    keep = false,
  }: { waiting?: { licenses: number; rest: boolean }; from?: number; keep?: boolean } = {},
) {
  // Only add-ons that will renew share the next counts; a stopped or cancelled one gets 0, and so
  // does one expired with no renewal to come. One expired while the payment is overdue renews
  // when paid (as does one expired while its main chain did not renew, once it does again), but
  // only while the main chain's term has ended too: under a term that still runs, a seat plan
  // counts no add-on whose term ended (liveAddOns), and buys its licenses again; kept in the
  // split, it would renew them as well, and the same licenses would be paid twice.
  const now = deps.clock.now();
  const mainTermEnded = chain.term.expiresAt <= now;
  const renewing = addOns.filter(
    (a) =>
      a.nextRenewalAt !== null && (mainTermEnded ? a.status !== 'cancelled' : isLiveAddOn(a, now)),
  );
  const neededFrom = from ?? (keep ? (chain.sharesFrom ?? undefined) : undefined);
  const later = neededFrom !== undefined && neededFrom > now ? neededFrom : undefined;
  // Who carries an excess (allocateNextLicenses, `dated`) depends on when each chain renews, for
  // a total needed from a later date, or from now once the main chain's term has ended: it then
  // renews at once (when paid, or switched on again), before any add-on still in force, whose
  // own renewal would leave the excess missing until then. A term ended renews now. Where a
  // renewal cannot change its count, the one that must is flagged for an operator: the newest
  // add-on's, never the main chain's, whose flag would stop every renewal of the family.
  const excessGoesTo = (sharingAddOns: readonly Chain[]) => {
    const needed = later ?? (mainTermEnded ? now : undefined);
    if (needed === undefined || !renewalCountCanChange(deps.provisioning)) return undefined;
    const renewsAt = [chain, ...sharingAddOns].map((c) => Math.max(c.term.expiresAt, now));
    return { from: needed, renewsAt };
  };
  const split = (sharedTotal: number, sharingAddOns: readonly Chain[]) => {
    const sharing = [
      ...sharingAddOns.map((a) => a.licenses),
      ...(waiting === undefined ? [] : [waiting.licenses]),
    ];
    const dated = waiting === undefined ? excessGoesTo(sharingAddOns) : undefined;
    const shares = allocateNextLicenses({
      total: sharedTotal,
      main: chain.licenses,
      addOns: sharing,
      style: sharing.length > 0 ? 'addon' : deps.settings.seatIncrease,
      ...(dated ? { dated } : {}),
    });
    // The main chain, then the add-ons already bought, oldest first.
    const bought = [
      sharing.length > 0 ? shares.main : sharedTotal,
      ...sharingAddOns.map((_, i) => shares.addOns[i] ?? 0),
    ];
    // The waiting add-on's own share is set when it is bought (its purchase shares again), so
    // an excess over it is carried by the newest chain already bought: a renewal before the
    // purchase then carries the whole total. Unless more is bought after it (its rest, later
    // totals), which buys that excess: carried now as well, it would be paid twice.
    if (waiting && !waiting.rest) {
      const newest = bought.length - 1;
      bought[newest] =
        (bought[newest] ?? 0) + Math.max(0, (shares.addOns.at(-1) ?? 0) - waiting.licenses);
    }
    const [main = 0, ...addOnShares] = bought;
    return { main, addOns: new Map(sharingAddOns.map((a, i) => [a.id, addOnShares[i] ?? 0])) };
  };
  // The main chain renews at its term's end: from a date up to then, it renews after the date.
  const inTerm = later !== undefined && later <= chain.term.expiresAt;
  // The add-ons whose next renewal starts before the date.
  const early = inTerm ? renewing.filter((a) => a.term.expiresAt < later) : [];
  const ordinary = split(total, renewing);
  const dated = inTerm ? datedShares(chain, renewing, early, total, ordinary, split) : undefined;
  const shares = dated ?? ordinary;
  const counts = {
    nextLicenses: shares.main,
    addOnNextLicenses: Object.fromEntries(addOns.map((a) => [a.id, shares.addOns.get(a.id) ?? 0])),
  };
  return {
    ...counts,
    addOnLicensesUntil:
      inTerm && !dated ? keptUntil(chain, early, counts.addOnNextLicenses, later, now) : {},
    sharesFrom: later ?? null,
  };
}

type Shares = { main: number; addOns: Map<string, number> };

/**
 * A total needed from a date up to the end of the main chain's latest ordered term: the add-ons
 * that renew before then (`early`) carry no less than their renewals carry now (the licenses are needed
 * until then, and a renewal runs a whole term), nor than their `ordinary` shares of the total
 * (needed from then, when nothing else buys them), and the chains that renew from then share the
 * rest, as any total is shared. The family then carries the total exactly, once each has renewed.
 * Undefined when the rest leaves the main chain nothing: the add-ons renewing first already
 * carry the whole total (keptUntil covers that).
 */
function datedShares(
  chain: Chain,
  renewing: readonly Chain[],
  early: readonly Chain[],
  total: number,
  ordinary: Shares,
  split: (total: number, sharing: readonly Chain[]) => Shares,
): Shares | undefined {
  const carried = new Map(
    early.map((a) => [
      a.id,
      Math.max(carriedByNextRenewal(chain, a), ordinary.addOns.get(a.id) ?? 0),
    ]),
  );
  const rest = total - [...carried.values()].reduce((sum, n) => sum + n, 0);
  if (rest < 1) return undefined;
  const late = split(
    rest,
    renewing.filter((a) => !carried.has(a.id)),
  );
  return { main: late.main, addOns: new Map([...late.addOns, ...carried]) };
}

/** What an add-on's next renewal carries as things stand (its share, or a count it keeps). */
function carriedByNextRenewal(main: Chain, addOn: Chain): number {
  return renewalLicenses(
    main.addOnNextLicenses[addOn.id] ?? addOn.licenses,
    main.addOnLicensesUntil[addOn.id] ?? [],
    addOn.term.expiresAt,
  );
}

/**
 * When the add-ons that renew before `from` (`early`) carry the whole total on their own: shared
 * as any total, each of them keeps what its renewals carry now for those that start before `from`
 * (keepLicensesUntil). The family then carries more than the total until they renew again.
 */
function keptUntil(
  chain: Chain,
  early: readonly Chain[],
  shares: Record<string, number>,
  from: number,
  now: number,
): Record<string, KeptLicenses[]> {
  const kept: Record<string, KeptLicenses[]> = {};
  for (const { id } of early) {
    const share = shares[id] ?? 0;
    const list = keepLicensesUntil({
      kept: chain.addOnLicensesUntil[id] ?? [],
      before: chain.addOnNextLicenses[id] ?? share,
      share,
      from,
      now,
    });
    if (list.length > 0) kept[id] = list;
  }
  return kept;
}

/**
 * The next counts, for a history entry: the shares of the latest total and, before them, what
 * renewals that start before a later-dated total keep (one clause per date).
 */
export function describeAllocation(
  next: Pick<Chain, 'nextLicenses' | 'addOnNextLicenses'> &
    Partial<Pick<Chain, 'addOnLicensesUntil'>>,
) {
  const ids = Object.keys(next.addOnNextLicenses);
  // The main chain renews at its term's end, never before a kept date: its share alone.
  const carried = (verb: string, startsAt: number) => {
    const main = next.nextLicenses;
    const addOns = ids.map((id) =>
      renewalLicenses(
        next.addOnNextLicenses[id] ?? 0,
        next.addOnLicensesUntil?.[id] ?? [],
        startsAt,
      ),
    );
    return addOns.length === 0
      ? `${verb} ${main}`
      : `${verb} ${main} (main) + ${addOns.join(' + ')} (add-ons)`;
  };
  const dates = [
    ...new Set(
      Object.values(next.addOnLicensesUntil ?? {})
        .flat()
        .map((k) => k.until),
    ),
  ].sort((a, b) => a - b);
  const shares = carried(
    ids.length === 0 ? 'the next renewal carries' : 'the next renewals carry',
    Number.POSITIVE_INFINITY,
  );
  if (dates.length === 0) return shares;
  const kept = dates.map((until) =>
    carried(`renewals that start before ${formatInstant(until)} carry`, until - 1),
  );
  return `${kept.join('; ')}; from then on, ${shares}`;
}

/** A co-terminated partial order: it ends with the latest ordered term, or the term in force. */
export function partialIntent(
  chain: Chain,
  licenses: number,
  { startsAt, endsAt }: { startsAt: number; endsAt: number },
  event: Intent['event'],
  jobId: string | null,
): Intent {
  const orderId = partialOrderId(chain.order, chain.partialCount + 1);
  return {
    kind: 'partial',
    method: 'createOrder',
    orderId,
    params: {
      customer: chain.customer,
      id: orderId,
      product: chain.product,
      licenses,
      startsAt,
      expiresAt: endsAt,
    },
    jobId,
    event,
  };
}

export function addOnIntent(
  deps: WorkerDeps,
  chain: Chain,
  licenses: number,
  startsAt: number,
  event: Intent['event'],
  jobId: string | null,
): Intent {
  const orderId = addOnOrderId(chain.order, chain.addOnCount + 1);
  const base = {
    customer: chain.customer,
    id: orderId,
    product: chain.product,
    licenses,
    duration: chain.duration,
  };
  return deps.provisioning.variant === 'external'
    ? { kind: 'addon', method: 'createFirstOrder', orderId, params: base, jobId, event }
    : {
        kind: 'addon',
        method: 'createOrder',
        orderId,
        params: { ...base, startsAt },
        jobId,
        event,
      };
}

/**
 * Whether a purchase's event was applied before the purchase is recorded: a later step of one
 * bought in several (its rest is unfinished), or an add-on waiting for its day (external, or a
 * later date) whose event the chain remembers. An intent without an event (older records)
 * names none.
 */
function appliedBeforePurchase(
  chain: Pick<Chain, 'unfinishedSeatEvent' | 'appliedSeatEvents'>,
  event: { webhookId: string; mark?: string | undefined },
): boolean {
  return (
    chain.unfinishedSeatEvent !== null ||
    (event.webhookId !== '' && remembersEvent(chain.appliedSeatEvents, markOf(event)))
  );
}

/**
 * Saves the main chain after a seat purchase was made: its event applied, its intent cleared,
 * `change` made, the next license counts shared again over `addOns`, and one history entry whose
 * detail ends with that sharing. The lock stays held.
 */
function recordPurchase(
  deps: WorkerDeps,
  { chain, token }: { chain: Chain; token: string },
  purchase: {
    event: Pick<
      NonNullable<Intent['event']>,
      'webhookId' | 'mark' | 'occurredAt' | 'total' | 'rest' | 'restFrom'
    >;
    /**
     * When the bought licenses start: where the rest of an unfinished event is planned from,
     * unless the event says a later day (`restFrom`: a newer event kept an older one's add-on).
     */
    startsAt: number;
    /** How the rest of an unfinished event is bought: as this purchase was. */
    style: SeatStyle;
    now: number;
    change: Pick<Partial<Chain>, 'partials' | 'addOns' | 'status'>;
    addOns: readonly Chain[];
    entry: { event: string; detail: string; cause: Cause };
    orderIds?: readonly string[];
  },
): Promise<Chain> {
  const { event, now, entry } = purchase;
  // A newer event bought instead of a waiting add-on replaces the totals that were to follow it
  // as well (they were needed later than its own day).
  const later = chain.pendingAddOn === null ? chain.laterSeatTotals : [];
  const next = {
    ...chain,
    // An event with a purchase still to make is applied by the last one and kept on the chain
    // until then; events older than it are stale already, so none buys for an outdated total.
    // Its last purchase made, the next later total (if any) is planned in turn.
    ...(event.rest
      ? {
          ...lastSeen(chain, event),
          unfinishedSeatEvent: {
            webhookId: event.webhookId,
            ...(event.mark !== undefined ? { mark: event.mark } : {}),
            occurredAt: event.occurredAt,
            total: event.total,
            neededAt: event.restFrom ?? purchase.startsAt,
            style: purchase.style,
          },
          laterSeatTotals: later,
        }
      : { ...applied(chain, event), ...nextLaterTotal(later) }),
    intent: null,
    // The purchase's event replaces an earlier one's waiting add-on (its own was taken off when
    // its day came).
    pendingAddOn: null,
    ...purchase.change,
    updatedAt: now,
  };
  // The purchase of an event applied before (a waiting add-on, a later step) keeps what a newer
  // event with a later date left the renewals before that date.
  const withCounts = {
    ...next,
    ...allocation(deps, next, purchase.addOns, newestTotal(later, event.total), {
      keep: appliedBeforePurchase(chain, event),
    }),
  };
  return deps.chains.save({
    chainId: chain.id,
    token,
    previous: chain,
    next: withCounts,
    history: [
      {
        at: now,
        event: entry.event,
        detail: `${entry.detail}; ${describeAllocation(withCounts)}`,
        cause: entry.cause,
      },
    ],
    ...(purchase.orderIds ? { orderIds: purchase.orderIds } : {}),
    release: false,
  });
}

/**
 * How a seat purchase is finished. `refusal`: a provider's refusal fails the job (its own
 * purchase) or is only recorded (another job finishing it). `settlingPayment`: the job is a
 * payment about to be applied, so a purchase it finishes first does not join a suspension that
 * found nothing in force (it would be suspended for the payment that settles it; external: left
 * for a manual reactivation).
 */
type SeatFinish = { refusal: 'fail' | 'record'; settlingPayment?: boolean };

/**
 * The chain, with a seat purchase a crashed job left half done finished first: whoever holds
 * the chain next does it. A renewal's intent is left to its own job, which replays it. A
 * refusal of that purchase is recorded on the chain and the current job carries on with its own
 * work: it is not that job's failure.
 */
export async function finishPendingSeatPurchase(
  deps: WorkerDeps,
  job: Job,
  held: { chain: Chain; token: string },
  { settlingPayment = false }: Pick<SeatFinish, 'settlingPayment'> = {},
): Promise<Chain> {
  const { chain, token } = held;
  const kind = chain.intent?.kind;
  // This job's own purchase (an earlier attempt of it crashed) still fails it when refused.
  const refusal = chain.intent?.jobId === job.id ? 'fail' : 'record';
  if (kind === 'partial' || kind === 'addon') {
    return finishSeatIntent(deps, job, held, { refusal, settlingPayment });
  }
  // A job that died between an event's purchases: the rest is bought before anything else.
  if (chain.intent === null && chain.unfinishedSeatEvent !== null) {
    const options = { refusal: 'record', settlingPayment } as const;
    return finishUnfinishedSeatEvent(deps, job, { chain, token }, options);
  }
  return chain;
}

/**
 * Buys the rest of a seat event whose first purchase is recorded: planned again from the chain
 * as it is now, from when that purchase started, and bought as it was (partials or add-ons,
 * whatever SEAT_INCREASE says now); or nothing when nothing is missing any more (the term in
 * force ended, or other purchases covered it). Either way the event is then applied, by the last
 * purchase when it takes more than one.
 */
async function finishUnfinishedSeatEvent(
  deps: WorkerDeps,
  job: Job,
  { chain, token }: { chain: Chain; token: string },
  options: SeatFinish,
): Promise<Chain> {
  const unfinished = chain.unfinishedSeatEvent as NonNullable<Chain['unfinishedSeatEvent']>;
  const now = deps.clock.now();
  // A chain cancelled (or expired, not to renew) meanwhile buys nothing more.
  const ended = renewsNoMore(chain);
  const addOns = await deps.chains.getMany(chain.addOns);
  const decision = ended
    ? null
    : planSeatChange({
        ...paidAhead(chain, addOns, now, unfinished.style),
        total: unfinished.total,
        neededAt: unfinished.neededAt,
        occurredAt: unfinished.occurredAt,
        // Its own event: it was the latest when its first purchase was recorded.
        lastAppliedAt: null,
      });
  const { neededAt: _planned, style: _bought, ...event } = unfinished;
  if (decision?.kind !== 'buy') {
    const cause = {
      jobId: job.id ?? '',
      ...(event.webhookId ? { webhookId: event.webhookId } : {}),
    };
    const saved = await deps.chains.save({
      chainId: chain.id,
      token,
      previous: chain,
      next: {
        ...chain,
        ...applied(chain, event),
        // Nor are later totals, for a chain that renews no more.
        ...nextLaterTotal(ended ? [] : chain.laterSeatTotals),
        updatedAt: now,
      },
      history: [
        {
          at: now,
          event: ended ? 'seats.ignored' : 'seats.changed',
          detail: ended
            ? `${event.total} licenses: the rest is not bought for ${finishedChainName(chain.status)}`
            : `${event.total} licenses${laterThanNow(unfinished.neededAt, now)}: none missing any more, nothing left to buy`,
          cause,
        },
      ],
      release: false,
    });
    if (saved.unfinishedSeatEvent === null) return saved;
    return finishUnfinishedSeatEvent(deps, job, { chain: saved, token }, options);
  }
  return buyPlanned(deps, job, { chain, token }, options, {
    decision,
    event,
    style: unfinished.style,
    addOns,
  });
}

/** ` from <day>` for a total needed later than now, to name it among an event's steps. */
function laterThanNow(neededAt: number, now: number): string {
  return neededAt > now ? ` from ${formatInstant(neededAt)}` : '';
}

export type SeatStyle = 'coterm' | 'addon';

/**
 * Starts what a seat plan decided to buy for `event`: written as the chain's intent and sent (a
 * partial, or an add-on from its start), or, when the external variant's add-on is needed later
 * (createFirstOrder starts at once), the event applied and the add-on's job scheduled for then.
 * With `rest`, recording the purchase keeps the event on the chain and plans it again, so an
 * event bought in steps is finished even if a job dies between them. The lock stays held.
 */
export async function buyPlanned(
  deps: WorkerDeps,
  job: Job,
  held: { chain: Chain; token: string },
  options: SeatFinish,
  plan: {
    decision: Extract<SeatDecision, { kind: 'buy' }>;
    event: { webhookId: string; mark?: string | undefined; occurredAt: number; total: number };
    style: SeatStyle;
    /** The main chain's add-ons as they are now. */
    addOns: readonly Chain[];
  },
): Promise<Chain> {
  const { chain, token } = held;
  const { decision, event } = plan;
  const now = deps.clock.now();
  // The rest of an event a purchase began is still on the chain (a new event's is finished
  // before it is planned).
  const rest = chain.unfinishedSeatEvent !== null;
  // Its owner is the job whose event it is, which alone fails on a refusal; another job that
  // buys the rest (and dies) must not fail its own work on that refusal when it is retried.
  const owner = options.refusal === 'fail' ? (job.id ?? null) : null;
  const cause = { jobId: job.id ?? '', ...(event.webhookId ? { webhookId: event.webhookId } : {}) };
  const save = (next: Chain, entry: { event: string; detail: string }) =>
    deps.chains.save({
      chainId: chain.id,
      token,
      previous: chain,
      next: { ...next, updatedAt: now },
      history: [{ at: now, ...entry, cause }],
      release: false,
    });

  if (
    plan.style === 'addon' &&
    deps.provisioning.variant === 'external' &&
    decision.startsAt > now
  ) {
    // The job comes first: one that fires without a waiting add-on on the chain does nothing.
    await scheduleAddOnJob(deps, chain, decision.startsAt, job);
    // The rest of an event (or a later total) keeps the later totals after it; a new event
    // replaces them, as it replaces the waiting add-on they followed.
    const later = rest ? chain.laterSeatTotals : [];
    const counts = allocation(deps, chain, plan.addOns, newestTotal(later, decision.total), {
      waiting: waitingToCount(decision, later),
    });
    return save(
      {
        ...chain,
        ...applied(chain, event),
        ...counts,
        unfinishedSeatEvent: null,
        laterSeatTotals: later,
        pendingAddOn: {
          licenses: decision.licenses,
          startsAt: decision.startsAt,
          occurredAt: event.occurredAt,
          total: decision.total,
          rest: decision.rest,
          webhookId: event.webhookId,
          ...(event.mark !== undefined ? { mark: event.mark } : {}),
        },
      },
      {
        event: 'seats.addon_scheduled',
        detail: `${decision.licenses} more licenses needed from ${formatInstant(decision.startsAt)}: an add-on will be ordered then; until it is, ${describeAllocation(counts)}`,
      },
    );
  }

  const intentEvent = decision.rest ? { ...event, rest: true } : event;
  const coterm = plan.style === 'coterm';
  const intent = coterm
    ? partialIntent(chain, decision.licenses, decision, intentEvent, owner)
    : addOnIntent(deps, chain, decision.licenses, decision.startsAt, intentEvent, owner);
  const buying = await save(
    {
      ...chain,
      intent,
      ...(coterm ? { partialCount: chain.partialCount + 1 } : { addOnCount: chain.addOnCount + 1 }),
    },
    {
      event: 'seats.buying',
      detail: `buying ${rest ? 'the rest of the event: ' : ''}${decision.licenses} licenses from ${formatInstant(decision.startsAt)} as ${coterm ? '' : 'add-on '}${intent.orderId}`,
    },
  );
  // A waiting add-on of an earlier event stays, with its job, until this purchase is recorded:
  // refused, the newer event is not applied and the earlier one must still be bought.
  return finishSeatIntent(deps, job, { chain: buying, token }, options);
}

/** Whether the seat job `jobId` is in Failed: it ran out of attempts, or a refusal failed it. */
async function failedForGood(deps: WorkerDeps, jobId: string | null | undefined) {
  if (!jobId) return false;
  const job = await deps.queues['seat-changes'].getJob(jobId);
  return (await job?.getState()) === 'failed';
}

/**
 * Sends a seat purchase written on the chain and records its outcome. Whoever holds the chain
 * next (a seat, renewal or payment job) finishes a purchase a crashed job left half done, so it
 * is made and recorded exactly once and never blocks the chain. A provider's refusal is recorded
 * (`seats.refused`) and fails the job whose purchase it is (`refusal: 'fail'`), or is only
 * recorded when another job finishes the purchase (`'record'`).
 */
export async function finishSeatIntent(
  deps: WorkerDeps,
  job: Job,
  held: { chain: Chain; token: string },
  options: SeatFinish = { refusal: 'fail' },
): Promise<Chain> {
  const { chain, token } = held;
  const intent = chain.intent as Intent;
  const event = intent.event ?? {
    webhookId: '',
    occurredAt: chain.lastSeatEventAt ?? 0,
    total: chain.nextLicenses,
  };
  const cause = {
    jobId: intent.jobId ?? job.id ?? '',
    orderId: intent.orderId,
    ...(event.webhookId ? { webhookId: event.webhookId } : {}),
  };
  let order: Awaited<ReturnType<typeof sendIntent>>;
  try {
    order = await sendIntent(deps.provisioning, intent);
  } catch (error) {
    if (!(error instanceof RefusalError)) throw error;
    const now = deps.clock.now();
    // An event applied already keeps its total in the next renewals: the counts that left
    // room for the refused purchase are shared again without it.
    const eventApplied = appliedBeforePurchase(chain, event);
    // The newest event's total stays in the next renewals, also when it was to be bought later.
    const counts = eventApplied
      ? allocation(
          deps,
          chain,
          await deps.chains.getMany(chain.addOns),
          newestTotal(chain.laterSeatTotals, event.total),
          { keep: true },
        )
      : {};
    const reason = `the provider refused ${intent.orderId}: ${error.message}`;
    // Noted for the event's own job, to fail with when it runs again; not when that job failed
    // for good already (reconcile finishing its purchase): only a person runs it again then, and
    // a person's retry decides afresh.
    const noted =
      !eventApplied &&
      event.webhookId !== '' &&
      (options.refusal === 'fail' || !(await failedForGood(deps, intent.jobId)));
    const saved = await deps.chains.save({
      chainId: chain.id,
      token,
      previous: chain,
      // A refused rest ends its event: it is applied (its first purchases stay bought), so
      // neither its own job retried nor any other tries it again.
      next: {
        ...chain,
        intent: null,
        ...(chain.unfinishedSeatEvent
          ? { ...applied(chain, chain.unfinishedSeatEvent), unfinishedSeatEvent: null }
          : {}),
        // So do the later totals queued behind it (all but a newer event's own purchase, which
        // leaves the waiting add-on and what follows it in place): one refusal stops the
        // purchases it held up, and a person looks (its job fails, or the seat job behind it).
        ...(chain.pendingAddOn === null ? { laterSeatTotals: [] } : {}),
        ...counts,
        // An event not applied ends with its refusal, also for its own job run again after its
        // worker died, or after another job met the refusal for it (withRefusalSettled).
        ...(noted
          ? {
              refusedSeatEvents: refusedWith(chain, {
                webhookId: markOf(event),
                reason,
                attempt: options.refusal === 'fail' ? (job.attemptsMade ?? 0) : null,
              }),
            }
          : {}),
        updatedAt: now,
      },
      history: [{ at: now, event: 'seats.refused', detail: reason, cause }],
      release: false,
    });
    if (options.refusal === 'record') return saved;
    throw new UnrecoverableError(reason);
  }
  // Orders of a chain suspended for non-payment are suspended: one bought meanwhile joins them.
  // A chain awaiting its manual reactivation (external) keeps a new one active, paid (nothing
  // would ever reactivate it) or overdue again within the grace (its suspension takes it along).
  const joins =
    suspendedForNonPayment(chain) && !(options.settlingPayment && chain.status !== 'suspended');
  const refusal = joins ? await suspendOnArrival(deps, intent.orderId, 'purchase') : null;
  const joinsSuspension = joins && refusal === null;
  const onArrival =
    refusal === null ? suspendedOnArrival(joinsSuspension) : suspensionRefusedOnArrival(refusal);
  // A suspension that found nothing in force left the chain unsuspended: the order joining it
  // suspends the chain, for the payment to unsuspend (or reactivate) it.
  const suspendsChain = joinsSuspension && chain.status !== 'suspended';
  const joined = joinsSuspension
    ? {
        status: 'suspended' as const,
        suspendedOrders: withSuspendedOrders(chain, [intent.orderId]),
      }
    : {};
  const now = deps.clock.now();
  const addOns = await deps.chains.getMany(chain.addOns);
  if (intent.kind === 'partial') {
    const recorded = await recordPurchase(deps, held, {
      event,
      startsAt: order.startsAt,
      style: 'coterm',
      now,
      change: {
        ...joined,
        partials: [
          ...chain.partials.filter((p) => p.expiresAt > now),
          {
            orderId: intent.orderId,
            licenses: order.licenses,
            startsAt: order.startsAt,
            expiresAt: order.expiresAt,
          },
        ],
      },
      addOns,
      entry: {
        event: 'seats.partial_ordered',
        detail: `partial ${intent.orderId}: ${describeTerm(order)}, co-terminated with the term${onArrival}${event.rest ? '; the rest of the event is bought next' : ''}`,
        cause,
      },
      orderIds: [intent.orderId],
    });
    // Counted once recorded: a retry after a failed record finds the intent again.
    deps.metrics.orders.inc({ kind: 'partial' });
    if (suspendsChain) deps.metrics.suspensions.inc({ action: 'suspend' });
    if (chain.pendingAddOn) await removeAddOnJob(deps, chain, job);
    // A step of an event bought in several: the rest is planned now, under the same lock.
    if (recorded.unfinishedSeatEvent === null) return recorded;
    return finishUnfinishedSeatEvent(deps, job, { chain: recorded, token }, options);
  }

  const addOn = await createChain(
    deps.chains,
    newAddOnRecord(
      chain,
      {
        id: chainIdOf(intent.orderId),
        licenses: order.licenses,
        term: {
          orderId: intent.orderId,
          count: 1,
          startsAt: order.startsAt,
          expiresAt: order.expiresAt,
        },
      },
      now,
      deps.settings.leadDays,
    ),
    [
      {
        at: now,
        event: 'addon.ordered',
        detail: `add-on ${intent.orderId} of ${chain.order}: ${describeTerm(order)}${onArrival}`,
        cause,
      },
    ],
    [intent.orderId],
  );
  // The add-on's schedule follows its main chain (none while auto-renew is off there). Made
  // before the purchase is recorded: a job that dies in between finishes the intent again,
  // and the add-on never stands recorded without its renewal job.
  await ensureRenewalJob(
    deps.queues.renewals,
    { ...addOn, nextRenewalAt: governedNextRenewalAt(chain, addOn) },
    deps.clock,
  );
  const saved = await recordPurchase(deps, held, {
    event,
    startsAt: order.startsAt,
    style: 'addon',
    now,
    change: { ...joined, addOns: [...chain.addOns, addOn.id] },
    addOns: [...addOns, addOn],
    entry: {
      event: 'seats.addon_ordered',
      detail: `add-on ${intent.orderId}: ${describeTerm(order)}, renewing on its own cycle${onArrival}${event.rest ? '; the rest of the event is bought next' : ''}`,
      cause,
    },
  });
  deps.metrics.orders.inc({ kind: 'addon' });
  if (suspendsChain) deps.metrics.suspensions.inc({ action: 'suspend' });
  if (chain.pendingAddOn) await removeAddOnJob(deps, chain, job);
  if (saved.unfinishedSeatEvent === null) return saved;
  return finishUnfinishedSeatEvent(deps, job, { chain: saved, token: held.token }, options);
}
