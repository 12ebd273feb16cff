// The `expired` status (DESIGN §4): a chain whose term in force ended with no next term.
import type { Cause, Chain, HistoryEntry } from './records.js';
import type { ChainStore } from './store.js';

/**
 * Why an active chain is expired as of `now`, not yet marked: its term ended with nothing ordered
 * after it, and nothing will renew it (`not_renewing`: auto-renew off, or its renewal flagged and
 * waiting for a person, who may still renew it, the term starting then) or its renewal waits for
 * an overdue payment (`payment_overdue`; it renews at once when paid, the new term starting
 * then). Null when it is not. `governed` is the chain as whatever governs it sees it: an add-on's
 * schedule and payment are its main chain's. A renewal in flight is its job's to finish, not an
 * expiry.
 * A suspended chain stays `suspended`: its orders are, at the provider, until the payment.
 */
export function expiryOf(
  governed: Pick<Chain, 'status' | 'term' | 'intent' | 'nextRenewalAt' | 'payment' | 'flagged'>,
  now: number,
): 'not_renewing' | 'payment_overdue' | null {
  if (governed.status !== 'active' || governed.term.expiresAt > now) return null;
  if (governed.intent?.kind === 'renewal') return null;
  if (governed.nextRenewalAt === null || governed.flagged !== null) return 'not_renewing';
  return governed.payment === 'overdue' ? 'payment_overdue' : null;
}

/** The chain marked expired for `reason`, and the history entry that says why. */
export function expired(
  chain: Chain,
  reason: 'not_renewing' | 'payment_overdue',
  now: number,
  cause: Cause,
): { next: Chain; history: HistoryEntry[] } {
  const term = `term ${chain.term.count} (${chain.term.orderId})`;
  const detail =
    reason === 'not_renewing'
      ? `${term} ended with no renewal`
      : `${term} ended while the payment is overdue: the renewal waits for the payment, and its term starts when paid`;
  return {
    next: { ...chain, status: 'expired', updatedAt: now },
    history: [{ at: now, event: 'chain.expired', detail, cause }],
  };
}

/** Saves the held chain marked expired for `reason` (its lock kept), with its history entry. */
export function saveExpired(
  chains: ChainStore,
  { chain, token }: { chain: Chain; token: string },
  reason: 'not_renewing' | 'payment_overdue',
  now: number,
  cause: Cause,
): Promise<Chain> {
  const { next, history } = expired(chain, reason, now, cause);
  return chains.save({ chainId: chain.id, token, previous: chain, next, history, release: false });
}

/**
 * Whether no term of the chain will ever be ordered again: cancelled, or expired with no renewal
 * to come (auto-renew off, or waiting for an operator). Seat events and waiting purchases of such
 * a chain change nothing; an expired chain waiting for its payment still takes them for the
 * renewal the payment brings.
 */
export function renewsNoMore(chain: Pick<Chain, 'status' | 'nextRenewalAt' | 'intent'>): boolean {
  if (chain.status === 'cancelled') return true;
  return chain.status === 'expired' && !hasRenewalToCome(chain);
}

/** "a cancelled chain" or "an expired chain", for history entries about a chain that renews no more. */
export function finishedChainName(status: Chain['status']): string {
  return `${/^[aeiou]/.test(status) ? 'an' : 'a'} ${status} chain`;
}

/** Whether a renewal of the chain is scheduled or in flight (whatever its status says). */
export function hasRenewalToCome(chain: Pick<Chain, 'nextRenewalAt' | 'intent'>): boolean {
  return chain.nextRenewalAt !== null || chain.intent?.kind === 'renewal';
}
