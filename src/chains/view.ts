// The chain as the ops API and CLI show it (DESIGN §5).
import { type KeptLicenses, renewalLicenses } from '../domain/seats.js';
import type { Chain, ChainWithHistory, HistoryEntry, Intent, Term } from './records.js';

export interface AddOnView {
  order: string;
  customer: string;
  product: string;
  duration: Chain['duration'];
  status: Chain['status'];
  autoRenew: boolean;
  payment: Chain['payment'];
  licenses: number;
  /** What the next renewal not yet ordered carries (DESIGN §5). */
  nextLicenses: number;
  /**
   * What the renewals after it carry from a later date on, when a lower total is needed only
   * from then (a decrease with a later date): empty when they carry `nextLicenses` too.
   */
  laterLicenses: { from: number; licenses: number }[];
  term: Term;
  nextRenewalAt: number | null;
  partials: Chain['partials'];
  needsReactivation: boolean;
  flagged: string | null;
  /**
   * The order a job is making right now, or left half done when it died (its intent). An
   * operator sees here why seat and payment events wait (for a first order or a renewal).
   */
  inFlight: { kind: Intent['kind']; orderId: string } | null;
  history: readonly HistoryEntry[];
}

export interface ChainView extends AddOnView {
  addOns: AddOnView[];
}

/**
 * When the chain's renewal fires, as shown (DESIGN §5): null while it is expired or flagged, or
 * suspended with its term ended. An expired chain with auto-renew on, like a suspended one whose
 * term has ended, renews at once when it becomes payable (a payment, an operator), and a flagged
 * one's failed job waits for a person, so no time can be named until then; the record keeps the
 * due time its jobs are scheduled by.
 */
export function shownNextRenewalAt(
  chain: Pick<Chain, 'status' | 'nextRenewalAt' | 'flagged' | 'term'>,
  now: number,
): number | null {
  const waitsForPayment =
    chain.status === 'expired' || (chain.status === 'suspended' && chain.term.expiresAt <= now);
  return waitsForPayment || chain.flagged !== null ? null : chain.nextRenewalAt;
}

/**
 * A chain read with its history, and, for an add-on, the counts its main chain keeps for its
 * renewals before a later date (`addOnLicensesUntil`).
 */
export type ShownChain = ChainWithHistory & { kept?: readonly KeptLicenses[] };

function baseView({ chain, history, kept = [] }: ShownChain, now: number): AddOnView {
  return {
    order: chain.order,
    customer: chain.customer,
    product: chain.product,
    duration: chain.duration,
    status: chain.status,
    autoRenew: chain.autoRenew,
    payment: chain.payment,
    licenses: chain.licenses,
    ...nextCounts(chain, kept, now),
    term: chain.term,
    nextRenewalAt: shownNextRenewalAt(chain, now),
    // In force or ahead (DESIGN §5): the record drops ended ones only at its next write.
    partials: chain.partials.filter((p) => p.expiresAt > now),
    needsReactivation: chain.needsReactivation,
    flagged: chain.flagged,
    inFlight: chain.intent ? { kind: chain.intent.kind, orderId: chain.intent.orderId } : null,
    history,
  };
}

/**
 * What the next renewal carries (it starts when the term ends, or now once it has ended), and
 * from which later dates the renewals after it carry less: each kept count ends on its date.
 */
function nextCounts(
  chain: Pick<Chain, 'nextLicenses' | 'term'>,
  kept: readonly KeptLicenses[],
  now: number,
): Pick<AddOnView, 'nextLicenses' | 'laterLicenses'> {
  const startsAt = Math.max(chain.term.expiresAt, now);
  const at = (t: number) => renewalLicenses(chain.nextLicenses, kept, t);
  const nextLicenses = at(startsAt);
  const laterLicenses: AddOnView['laterLicenses'] = [];
  const dates = [...new Set(kept.map((k) => k.until))].sort((a, b) => a - b);
  for (const from of dates.filter((t) => t > startsAt)) {
    const licenses = at(from);
    if (licenses !== (laterLicenses.at(-1)?.licenses ?? nextLicenses)) {
      laterLicenses.push({ from, licenses });
    }
  }
  return { nextLicenses, laterLicenses };
}

/** The main chain with its add-on chains (same shape, without `addOns`), as of `now`. */
export function chainView(main: ShownChain, addOns: readonly ShownChain[], now: number): ChainView {
  return { ...baseView(main, now), addOns: addOns.map((a) => baseView(a, now)) };
}
