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
