// Payment delays: when a chain is suspended, and what a payment restores.

import { SECONDS_PER_DAY } from './periods.js';

/** When the suspension of an overdue episode fires (epoch seconds): after the grace period. */
export function suspensionDueAt(input: { overdueAt: number; graceDays: number }): number {
  return input.overdueAt + input.graceDays * SECONDS_PER_DAY;
}

/** Where a payment event stands in its chain's order. */
export interface PaymentEventOrder {
  /** When it occurred (epoch seconds). */
  occurredAt: number;
  /** The order intake accepted it in; null for an event enqueued before intake numbered them. */
  sequence: number | null;
}

/**
 * Payment events keep their own order: one older than the last applied payment event is stale.
 * Two that occurred in the same second go in the order intake accepted them when both are
 * numbered, so a payment.received sent right after a payment.overdue is never undone by that
 * overdue notice reaching the chain second; otherwise the same second is applied.
 */
export function isStalePaymentEvent(
  event: PaymentEventOrder,
  lastApplied: PaymentEventOrder | null,
): boolean {
  if (lastApplied === null) return false;
  if (event.occurredAt !== lastApplied.occurredAt) return event.occurredAt < lastApplied.occurredAt;
  return (
    event.sequence !== null &&
    lastApplied.sequence !== null &&
    event.sequence < lastApplied.sequence
  );
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
