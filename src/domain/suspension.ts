// Payment delays: when a chain is suspended, and what a payment restores.

import { SECONDS_PER_DAY } from './periods.js';

/** When the suspension of an overdue episode fires (epoch seconds): after the grace period. */
export function suspensionDueAt(input: { overdueAt: number; graceDays: number }): number {
  return input.overdueAt + input.graceDays * SECONDS_PER_DAY;
}

export type PaymentReceivedPlan =
  | { readonly kind: 'nothing_suspended' }
  | { readonly kind: 'unsuspend' }
  /** The external variant has no unsuspendOrder: an operator reactivates by hand. */
  | { readonly kind: 'manual_reactivation' };

export function planPaymentReceived(input: {
  suspended: boolean;
  variant: 'marketplace' | 'external';
}): PaymentReceivedPlan {
  if (!input.suspended) return { kind: 'nothing_suspended' };
  return input.variant === 'marketplace' ? { kind: 'unsuspend' } : { kind: 'manual_reactivation' };
}

/**
 * Whether a family's orders stand suspended for a payment still overdue: overdue, and this
 * episode's suspension done (no suspension pending), whatever it found. One that found nothing
 * in force (the term had ended) left the chain unsuspended, yet an order arriving after it, a
 * renewal sent only after a provider outage, joins the suspension all the same, and its main
 * chain is recorded suspended from then, for the payment to unsuspend (or reactivate) it. A
 * chain suspended before and awaiting its manual reactivation (external) that falls overdue
 * again is in the new episode's grace until that suspension runs: an order bought or renewed
 * meanwhile stays active, and that suspension takes it along (or a payment in time spares it).
 */
export function suspendedForNonPayment(chain: {
  readonly status: string;
  readonly payment: string;
  readonly suspendAt: number | null;
}): boolean {
  return chain.payment === 'overdue' && chain.suspendAt === null && chain.status !== 'cancelled';
}

/**
 * What a history entry adds for an order bought or renewed into a suspended family, which the
 * suspension's own entry, written before the order existed, does not name.
 */
export function suspendedOnArrival(joinsSuspension: boolean): string {
  return joinsSuspension ? '; suspended on arrival: the payment is overdue' : '';
}

/** The same for an order the provider refused to suspend (its words): it stays active. */
export function suspensionRefusedOnArrival(refusal: string): string {
  return `; the provider refused to suspend it (${JSON.stringify(refusal)}): it stays active while the payment is overdue`;
}

/**
 * A chain's suspended orders (`suspendedOrders`) once `ids` are suspended too: a chain not
 * suspended before starts a list; a suspended one's list grows, unless it is unknown (a record
 * from before lists were kept), which stays unknown.
 */
export function withSuspendedOrders(
  chain: { readonly status: string; readonly suspendedOrders: readonly string[] | null },
  ids: readonly string[],
): string[] | null {
  if (chain.status !== 'suspended') return [...new Set(ids)];
  if (chain.suspendedOrders === null) return null;
  return [...new Set([...chain.suspendedOrders, ...ids])];
}

/**
 * The orders a suspended chain's record says are suspended at the provider: its list, with the
 * calls of a newer episode's suspension under way. Null when the record cannot say (not
 * suspended, or lists from before they were kept): then any order in force may be.
 */
export function recordedSuspendedOrders(chain: {
  readonly status: string;
  readonly suspendedOrders: readonly string[] | null;
  readonly suspending: number | null;
  readonly suspensionCalls: readonly string[] | null;
}): string[] | null {
  if (chain.status !== 'suspended' || chain.suspendedOrders === null) return null;
  if (chain.suspending === null) return [...chain.suspendedOrders];
  if (chain.suspensionCalls === null) return null;
  return [...new Set([...chain.suspendedOrders, ...chain.suspensionCalls])];
}
