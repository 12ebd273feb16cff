// When and how a chain renews: pure decisions from the chain's state and `now`.
import { SECONDS_PER_DAY } from './periods.js';
import { type KeptLicenses, renewalLicenses } from './seats.js';

export type ChainStatus = 'active' | 'suspended' | 'cancelled' | 'expired';

export interface RenewalView {
  readonly status: ChainStatus;
  readonly autoRenew: boolean;
  readonly payment: 'ok' | 'overdue';
  /** Whether an operator must confirm a manual reactivation before anything renews. */
  readonly needsReactivation?: boolean | undefined;
  /** An add-on's: whether its main chain is flagged, its renewal waiting for a person. */
  readonly mainFlagged?: boolean | undefined;
  readonly nextLicenses: number;
  /**
   * An add-on's: counts its renewals keep while they start before a later-dated total applies
   * (renewalLicenses), as its main chain holds them.
   */
  readonly licensesUntil?: readonly KeptLicenses[] | undefined;
  readonly term: { readonly count: number; readonly startsAt: number; readonly expiresAt: number };
}

/**
 * When the renewal after `term` (the latest ordered) should fire: `leadDays` before its end
 * (epoch seconds), but not before it starts. The lead may be as long as the partner's window,
 * longer than a term (30 days before the end of a 28-day February): a term ordered ahead must be
 * in force before the next is ordered, or the chain would hold three terms (one in force, two
 * ahead) where cancels, suspensions and seat counts follow two. The lead is at most the window,
 * so this is never before the window opens.
 */
export function renewalDueAt(
  term: { readonly startsAt: number; readonly expiresAt: number },
  leadDays: number,
): number {
  return Math.max(term.startsAt, term.expiresAt - leadDays * SECONDS_PER_DAY);
}

export type RenewalDecision =
  | {
      readonly kind: 'renew';
      readonly count: number;
      /** End of the term in force, or now when it expired (then the new term starts now). */
      readonly startsAt: number;
      readonly expired: boolean;
      readonly licenses: number;
    }
  | {
      readonly kind: 'wait';
      readonly until: number;
      readonly reason: 'not_due' | 'payment_overdue';
    }
  | {
      readonly kind: 'skip';
      readonly reason:
        | 'cancelled'
        | 'auto_renew_off'
        | 'already_renewed'
        | 'stale_job'
        | 'needs_reactivation'
        | 'main_flagged';
    };

/** How long a due renewal waits before re-checking an overdue payment (seconds). */
export const PAYMENT_RECHECK_SECONDS = 6 * 60 * 60;

/**
 * Whether the renewal job for term `forCount` should order it now. Skips are final for that job
 * (a later state change schedules a new one); waits come back at `until`.
 */
export function decideRenewal(input: {
  chain: RenewalView;
  forCount: number;
  now: number;
  leadDays: number;
}): RenewalDecision {
  const { chain, forCount, now } = input;
  if (chain.status === 'cancelled') return { kind: 'skip', reason: 'cancelled' };
  if (!chain.autoRenew) return { kind: 'skip', reason: 'auto_renew_off' };
  if (chain.term.count >= forCount) return { kind: 'skip', reason: 'already_renewed' };
  if (chain.term.count !== forCount - 1) return { kind: 'skip', reason: 'stale_job' };
  if (chain.needsReactivation) return { kind: 'skip', reason: 'needs_reactivation' };
  if (chain.mainFlagged) return { kind: 'skip', reason: 'main_flagged' };
  const dueAt = renewalDueAt(chain.term, input.leadDays);
  if (now < dueAt) return { kind: 'wait', until: dueAt, reason: 'not_due' };
  if (chain.payment === 'overdue') {
    return { kind: 'wait', until: now + PAYMENT_RECHECK_SECONDS, reason: 'payment_overdue' };
  }
  const expired = chain.term.expiresAt <= now;
  const startsAt = expired ? now : chain.term.expiresAt;
  return {
    kind: 'renew',
    count: forCount,
    startsAt,
    expired,
    licenses: renewalLicenses(chain.nextLicenses, chain.licensesUntil ?? [], startsAt),
  };
}

/**
 * When the chain's renewal job should fire (epoch seconds), or null when nothing will renew it:
 * auto-renew off, cancelled, or waiting for an operator (a reactivation, a flagged main chain).
 */
export function nextRenewalAt(input: {
  chain: RenewalView;
  now: number;
  leadDays: number;
}): number | null {
  const { chain } = input;
  if (!chain.autoRenew || chain.status === 'cancelled') return null;
  if (chain.needsReactivation || chain.mainFlagged) return null;
  return Math.max(input.now, renewalDueAt(chain.term, input.leadDays));
}

/** The chain with `nextRenewalAt` derived from its state (see nextRenewalAt). */
export function withNextRenewalAt<T extends RenewalView>(
  chain: T,
  now: number,
  leadDays: number,
): T & { nextRenewalAt: number | null } {
  return { ...chain, nextRenewalAt: nextRenewalAt({ chain, now, leadDays }) };
}
