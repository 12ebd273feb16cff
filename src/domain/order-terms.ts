// Pure rules for the terms of an order chain: the first term, and where a renewal's term lies.
import { addTerms, type Duration } from './periods.js';
import { checkRenewalWindow, renewalStart } from './renewal-window.js';

/** Where a chain stands: its anchor and its latest ordered term (all epoch seconds, UTC). */
export interface ChainTerms {
  readonly duration: Duration;
  /** Start of the term numbered `anchorTerm`; later terms end at anchor + k terms (clamped). */
  readonly anchor: number;
  readonly anchorTerm: number;
  /** 1-based number of the latest ordered term. */
  readonly count: number;
  readonly startsAt: number;
  readonly expiresAt: number;
}

export interface PlannedTerm {
  readonly count: number;
  readonly startsAt: number;
  readonly expiresAt: number;
  readonly anchor: number;
  readonly anchorTerm: number;
}

export type RenewalTermPlan =
  | ({ readonly kind: 'term' } & PlannedTerm)
  | {
      readonly kind: 'refused';
      readonly reason: 'window';
      readonly remainingDays: number;
      readonly windowDays: number;
    }
  | {
      readonly kind: 'refused';
      readonly reason: 'overlap';
      readonly startsAt: number;
      readonly currentExpiresAt: number;
    };

/** The first term of a chain: it starts at `startsAt` and anchors every later term. */
export function firstTerm(input: { startsAt: number; duration: Duration }): PlannedTerm {
  return {
    count: 1,
    startsAt: input.startsAt,
    expiresAt: addTerms(input.startsAt, input.duration, 1),
    anchor: input.startsAt,
    anchorTerm: 1,
  };
}

/**
 * The next term of a chain, or why it is refused. The renewal window applies to every renewal
 * (it is what stops accidental repeats). A renewal continues at the end of the latest term, or
 * starts now when that term has expired; an explicit `requestedStartsAt` (marketplace
 * controlled start) may leave a gap but never overlap, and never starts an expired chain's term
 * before now. A term that does not continue the chain without a gap starts a new anchor.
 */
export function planRenewalTerm(input: {
  chain: ChainTerms;
  now: number;
  windowDays: number;
  requestedStartsAt?: number | undefined;
}): RenewalTermPlan {
  const { chain, now, windowDays } = input;
  const window = checkRenewalWindow({ now, expiresAt: chain.expiresAt, windowDays });
  if (window.kind === 'refused') {
    return { ...window, reason: 'window' };
  }
  const start = renewalStart({ now, expiresAt: chain.expiresAt });
  const requested = input.requestedStartsAt ?? start.startsAt;
  if (requested < chain.expiresAt) {
    return {
      kind: 'refused',
      reason: 'overlap',
      startsAt: requested,
      currentExpiresAt: chain.expiresAt,
    };
  }
  // An expired chain's term starts now (DESIGN §3), also when the requested start has passed (a
  // renewal decided before the term ended, sent after it): the days it lay expired are not sold.
  const startsAt = start.expired ? Math.max(requested, now) : requested;
  const count = chain.count + 1;
  if (startsAt === chain.expiresAt) {
    return {
      kind: 'term',
      count,
      startsAt,
      expiresAt: addTerms(chain.anchor, chain.duration, count - chain.anchorTerm + 1),
      anchor: chain.anchor,
      anchorTerm: chain.anchorTerm,
    };
  }
  return {
    kind: 'term',
    count,
    startsAt,
    expiresAt: addTerms(startsAt, chain.duration, 1),
    anchor: startsAt,
    anchorTerm: count,
  };
}
