// Seat changes: what a new license total buys now and what the next renewal carries.
//
// Licenses are non-refundable: a decrease buys nothing and frees nothing before the next renewal,
// so licenses already paid stay usable for the rest of the term and an increase reuses them
// before it buys more. Over one term the licenses bought therefore equal the largest total
// reached above what was paid at the start of the term.
//
// After a renewal ordered ahead of time, two terms lie ahead: the one still in force and the one
// ordered, each with its own count. Each is checked on its own, so the count of the term ordered
// never hides licenses missing today, nor the reverse.
//
// An order that ends inside a term and will not renew (a stopped add-on) is not counted in that
// term's count, but it still covers the days it runs: licenses missing after it are bought from
// the day it ends, not from now, so its last days are not paid twice. With several such orders
// ending on different days, the licenses are bought in steps, each from the day it is missing.

import { type EventOrder, eventOrderOf, isStaleEvent, lastAppliedEvent } from './event-order.js';

export type SeatDecision =
  | { readonly kind: 'stale'; readonly lastApplied: EventOrder }
  /** Nothing to buy: the total is already paid for, or it is needed only from the next term. */
  | { readonly kind: 'next_renewal_only'; readonly total: number; readonly reason: SeatNoBuyReason }
  | {
      readonly kind: 'buy';
      readonly total: number;
      /**
       * The licenses to buy: what the latest ordered term lacks, or, when only the term in force
       * is short, what that term lacks; only what is missing at `startsAt` when an order ending
       * later inside the term still covers part of it then (`rest`).
       */
      readonly licenses: number;
      /** When the bought licenses are needed (epoch seconds; never before now). */
      readonly startsAt: number;
      /**
       * Where a co-terminated order ends: the end of the latest ordered term, or the end of the
       * term in force when only that term is short (the term ordered ahead already has them).
       */
      readonly endsAt: number;
      /**
       * Licenses are still missing after this order: the term in force lacked more than the next
       * term, or more are missing later, when an order ending inside the term ends. Plan again
       * once this order is recorded: that buys the rest (a partial that ends with the term in
       * force, or an order from the day the other one ends).
       */
      readonly rest: boolean;
    };

export type SeatNoBuyReason = 'decrease' | 'already_paid' | 'after_term' | 'next_term_has_it';

export interface SeatChangeInput {
  /** The new total the chain needs. */
  readonly total: number;
  /** Licenses paid for the latest ordered term: its main order, partials, add-ons. */
  readonly paid: number;
  /** Orders in force for part of what is left of the latest ordered term only. */
  readonly partTime?: readonly PartTimeOrder[] | undefined;
  /** When the new total is needed (epoch seconds). */
  readonly neededAt: number;
  readonly now: number;
  /**
   * When the chain's licenses start: the start of a first term ordered to begin later. Nothing
   * is bought for the days before it (default: now).
   */
  readonly servedFrom?: number | undefined;
  /** End of the latest ordered term of the chain (epoch seconds). */
  readonly termEnd: number;
  /**
   * The term still in force when the latest one was ordered ahead of time (a renewal made
   * early): when it ends (the latest term's start) and the licenses paid for it.
   */
  readonly termInForce?:
    | {
        readonly endsAt: number;
        readonly paid: number;
        /** Orders in force for part of what is left of this term only. */
        readonly partTime?: readonly PartTimeOrder[] | undefined;
      }
    | undefined;
  /**
   * How missing licenses are bought (SEAT_INCREASE, as in allocateNextLicenses). A co-terminated
   * partial can end with the term in force; an add-on runs whole terms of its own, so it is sized
   * for the latest ordered term, and a shortfall of the term in force alone (its last days, once
   * the next term is ordered with enough) buys nothing.
   */
  readonly style: 'coterm' | 'addon';
  /**
   * Whether a purchase starting at the given instant runs on to the end of the latest ordered
   * term: a partial does; an add-on runs a whole term of its own from its start, so it does only
   * if it renews (its main chain lets it) or that term ends at or after the latest term's end.
   * Planning again once a purchase is recorded counts it only if it runs on, so only then is an
   * event bought in steps from there: otherwise the next step would buy the same licenses again.
   */
  readonly runsOn: (startsAt: number) => boolean;
  /** When the event happened, and the last applied seat event of this chain (null: none yet). */
  readonly occurredAt: number;
  readonly lastAppliedAt: number | null;
  /**
   * Intake's numbers of the event and of the last applied one (null or absent: not numbered):
   * two events of the same second go in the order intake accepted them.
   */
  readonly sequence?: number | null | undefined;
  readonly lastAppliedSequence?: number | null | undefined;
}

/**
 * An order in force for part of a term ahead only, over [startsAt, endsAt). One that starts late
 * and runs on to the term's end is counted in the term's `paid`, as if in force from the start
 * (no gap orders: a later event needing its licenses sooner buys nothing more). One that ends
 * inside the term with nothing to renew it (an add-on that stopped, or whose main chain will not
 * renew) is not counted, but covers the days until it ends.
 */
export interface PartTimeOrder {
  readonly startsAt: number;
  readonly endsAt: number;
  readonly licenses: number;
}

/** A stretch of time ahead: a term, or what is left of it, with what is paid for it. */
interface PaidStretch {
  readonly from: number;
  readonly to: number;
  readonly paid: number;
  readonly partTime: readonly PartTimeOrder[];
}

/** The terms the licenses are needed in, from `startsAt` to the end of the latest ordered term. */
function stretchesAhead(input: SeatChangeInput, startsAt: number): PaidStretch[] {
  const inForce = input.termInForce;
  const latest = { to: input.termEnd, paid: input.paid, partTime: input.partTime ?? [] };
  if (inForce === undefined || startsAt >= inForce.endsAt) return [{ from: startsAt, ...latest }];
  return [
    { from: startsAt, to: inForce.endsAt, paid: inForce.paid, partTime: inForce.partTime ?? [] },
    { from: inForce.endsAt, ...latest },
  ];
}

/**
 * The licenses in force at `t` in a stretch: `paid`, less the orders counted in it that have not
 * started yet, plus those not counted in it (they end inside it) that are running.
 */
function inForceAt(stretch: PaidStretch, t: number): number {
  return partTimeInside(stretch).reduce((count, o) => {
    const runsOn = o.endsAt >= stretch.to;
    if (runsOn) return o.startsAt > t ? count - o.licenses : count;
    return o.startsAt <= t && t < o.endsAt ? count + o.licenses : count;
  }, stretch.paid);
}

function partTimeInside({ partTime, from, to }: PaidStretch): PartTimeOrder[] {
  return partTime.filter((o) => o.startsAt < to && o.endsAt > from);
}

/**
 * The first instant of a short stretch at which `total` is not in force (its start, or a day an
 * order ends or starts inside it), and how many licenses are missing then. By the stretch's last
 * such day every order that ends inside it has ended and every one that runs on has started,
 * which leaves `paid`: short, by definition.
 */
function firstShortfall(stretch: PaidStretch, total: number): { at: number; missing: number } {
  const { from, to } = stretch;
  const changes = [from, ...partTimeInside(stretch).flatMap((o) => [o.startsAt, o.endsAt])]
    .filter((t) => t >= from && t < to)
    .sort((a, b) => a - b);
  const at = changes.find((t) => inForceAt(stretch, t) < total) ?? from;
  return { at, missing: shortfallAt(stretch, at, total) };
}

/** The licenses missing at `t` for `total` to be in force (0: none). */
function shortfallAt(stretch: PaidStretch, t: number, total: number): number {
  return Math.max(0, total - inForceAt(stretch, t));
}

/**
 * Decides one seat event: stale, nothing to buy now, or a purchase of the missing licenses, from
 * the moment the first term short falls short to the end of the last. When both terms ahead are
 * short, the order buys what the latest term lacks; a partial buys at least what the term in
 * force lacks too, unless that is more, which leaves the rest to a second partial that ends with
 * the term in force (`rest`). An order ending inside the first term short caps the purchase at
 * what is missing when it starts, leaving the rest to a later step (`rest`). The latest term is
 * never over-bought; the term in force at most for the days it has left.
 */
export function planSeatChange(input: SeatChangeInput): SeatDecision {
  const lastApplied = lastAppliedEvent(input.lastAppliedAt, input.lastAppliedSequence);
  if (lastApplied !== null && isStaleEvent(eventOrderOf(input), lastApplied)) {
    return { kind: 'stale', lastApplied };
  }
  const startsAt = Math.max(input.neededAt, input.now, input.servedFrom ?? input.now);
  if (startsAt >= input.termEnd) {
    return { kind: 'next_renewal_only', total: input.total, reason: 'after_term' };
  }
  const ahead = stretchesAhead(input, startsAt);
  const latest = ahead.at(-1) as PaidStretch;
  let short = ahead.filter((s) => input.total > s.paid);
  if (short.length === 0) {
    return {
      kind: 'next_renewal_only',
      total: input.total,
      reason: input.total < input.paid ? 'decrease' : 'already_paid',
    };
  }
  if (input.style === 'addon' && short.at(-1) !== latest) {
    return { kind: 'next_renewal_only', total: input.total, reason: 'next_term_has_it' };
  }
  // Both terms short, but the next one still has the total when it starts (orders ending inside
  // it run into it): one order over both would pay its first days twice. The term in force is
  // bought alone (a partial that ends with it; an add-on is not bought for its last days alone),
  // and the next term from the day it falls short.
  const nextShortAtStart = shortfallAt(latest, latest.from, input.total);
  const deferred = short.length === 2 && nextShortAtStart === 0;
  if (deferred) short = input.style === 'coterm' ? short.slice(0, 1) : short.slice(1);
  const first = short[0] as PaidStretch;
  const last = short.at(-1) as PaidStretch;
  const spanning = first !== last;
  const missing = (s: PaidStretch) => input.total - s.paid;
  const whole = missing(last);
  const shortfall = firstShortfall(first, input.total);
  // In steps, each order buys only what is missing on its first day, so no day is paid twice
  // while an order ending inside the term still runs: the rest is planned again once this one
  // is recorded. An order over both terms may give the term in force on top what the next term
  // lacks beyond it, for its last days (at most the renewal lead), but never more than the next
  // term lacks when it starts.
  const onTop = spanning ? Math.max(0, whole - missing(first)) : 0;
  const caps = [shortfall.missing + onTop, ...(spanning ? [nextShortAtStart] : [])];
  const steps = input.runsOn(shortfall.at);
  const licenses = steps ? Math.min(whole, ...caps) : whole;
  // A partial also leaves to a second one the rest of a term in force that lacks more than the
  // next term, or the whole next term when that was deferred.
  const firstLacksMore = spanning && missing(first) > whole;
  return {
    kind: 'buy',
    total: input.total,
    licenses,
    startsAt: shortfall.at,
    endsAt: last.to,
    rest: licenses < whole || (input.style === 'coterm' && (firstLacksMore || deferred)),
  };
}

export interface Allocation {
  /** The main chain's own next-renewal count. */
  readonly main: number;
  /** Each add-on chain's next-renewal count, in the add-ons' order (0: it stops renewing). */
  readonly addOns: readonly number[];
}

/**
 * Splits a total over the next renewals: the main chain keeps its own licenses first, then each
 * add-on in the order it was bought, so a decrease shrinks the newest add-ons first (DESIGN §4).
 * Any excess (a total above what is paid) goes to the newest add-on, or, for a total needed from
 * a date (`dated`), to a chain renewing by then (excessTaker): the new total is then in force on
 * the date needed, never missing until a later renewal. With co-terminated partials there are
 * no add-ons and the main chain carries the whole total.
 */
export function allocateNextLicenses(input: {
  total: number;
  /** The main chain's licenses now (its latest ordered term). */
  main: number;
  /** Each add-on's licenses now, oldest first. */
  addOns: readonly number[];
  style: 'coterm' | 'addon';
  dated?: {
    /** When the total is needed (epoch seconds), later than now. */
    from: number;
    /** When each next term starts: the main chain's first, then each add-on's. */
    renewsAt: readonly number[];
  };
}): Allocation {
  if (input.style === 'coterm' || input.addOns.length === 0) {
    return { main: input.total, addOns: input.addOns.map(() => 0) };
  }
  const licenses = [input.main, ...input.addOns];
  let left = input.total;
  const shares = licenses.map((held) => {
    const share = Math.min(left, held);
    left -= share;
    return share;
  });
  const taker = excessTaker(licenses.length, input.dated);
  shares[taker] = (shares[taker] ?? 0) + left;
  const [main = 0, ...addOns] = shares;
  return { main, addOns };
}

/**
 * Which chain carries an excess needed from a date. Up to the main chain's renewal (inside its
 * latest ordered term), the first to renew from the date: the chains renewing before it keep
 * their counts (the purchases of the term in force cover the rest). From the main chain's
 * renewal on, the date only sets the next counts (DESIGN §4), and the last chain whose renewal
 * starts by the date carries it: in force on the date, paid from that renewal, rather than
 * missing until a renewal after it, when nothing would buy it. The main chain wins a tie (one
 * whose term ended renews at once, as an ended add-on does). Undated: the newest add-on.
 */
function excessTaker(
  count: number,
  dated: { from: number; renewsAt: readonly number[] } | undefined,
) {
  const newest = count - 1;
  if (dated === undefined) return newest;
  const at = (i: number) => dated.renewsAt[i] ?? Number.NEGATIVE_INFINITY;
  const byDate = dated.from >= at(0);
  let taker = -1;
  for (let i = 0; i < count; i += 1) {
    const fits = byDate ? at(i) <= dated.from : at(i) >= dated.from;
    const better = taker === -1 || (byDate ? at(i) > at(taker) : at(i) < at(taker));
    if (fits && better) taker = i;
  }
  return taker === -1 ? newest : taker;
}

/**
 * A count kept by the renewals that start before a later-dated total applies: a renewal whose
 * term starts before `until` carries at least `licenses`.
 */
export interface KeptLicenses {
  readonly until: number;
  readonly licenses: number;
}

/**
 * What a renewal whose term starts at `startsAt` carries: its share of the latest total, or more
 * while an earlier total is still needed then (a decrease needed from a later date has not
 * applied yet). An increase is carried early, as DESIGN §4 carries a total needed from the next
 * term on: the licenses are never missing later in the term, when nothing would buy them.
 */
export function renewalLicenses(
  share: number,
  kept: readonly KeptLicenses[],
  startsAt: number,
): number {
  return kept.reduce((n, k) => (k.until > startsAt ? Math.max(n, k.licenses) : n), share);
}

/**
 * The counts kept once a new total, of which this chain's share is `share`, is needed from `from`
 * (later than `now`): renewals that start before then keep what they carried so far (`before`,
 * the previous share, and `kept`, the previous kept counts, up to `from`); from then on the new
 * share alone applies. A kept count no larger than the new share, or for a date passed (no
 * renewal starts before now), tells nothing and is dropped.
 */
export function keepLicensesUntil(input: {
  kept: readonly KeptLicenses[];
  before: number;
  share: number;
  from: number;
  now: number;
}): KeptLicenses[] {
  const { kept, share, from, now } = input;
  const untilFrom = kept.reduce(
    (n, k) => (k.until >= from ? Math.max(n, k.licenses) : n),
    input.before,
  );
  return stillKept([...kept.filter((k) => k.until < from), { until: from, licenses: untilFrom }], {
    share,
    now,
  });
}

/**
 * The kept counts that still tell something beside a chain's share: for a date to come, and
 * above the share.
 */
function stillKept(
  kept: readonly KeptLicenses[],
  { share, now }: { share: number; now: number },
): KeptLicenses[] {
  return kept.filter((k) => k.until > now && k.licenses > share);
}
