// Cancelling a chain at the provider: shared by `order.cancelled` jobs and the ops API.
import { randomUUID } from 'node:crypto';
import type { ProvisioningClient } from '../client/provisioning-client.js';
import { RefusalError } from '../errors.js';
import { familyOrdersInForce } from './orders-in-force.js';
import type { Cause, Chain, HistoryEntry } from './records.js';
import type { ChainStore } from './store.js';

/**
 * An order a crashed job may have made but not recorded (its intent is still on the chain) is
 * cancelled too; if the provider never made it, its "not found" answer is the expected outcome
 * (`made: false`), though a request of it that timed out may still be made (lateCheck).
 * External renewals belong to the first order's chain, which is cancelled already.
 */
async function cancelPendingIntent(
  provisioning: ProvisioningClient,
  chain: Chain,
): Promise<{ orderId: string; made: boolean } | null> {
  const intent = chain.intent;
  if (!intent || (provisioning.variant === 'external' && intent.kind === 'renewal')) return null;
  const made = (await cancelIfMade(provisioning, intent.orderId)) !== null;
  return { orderId: intent.orderId, made };
}

/** How a provider says it has no such order: the embedded core's words, or a remote's. */
const ORDER_UNKNOWN = /order\b.*(not found|does not exist)|unknown order|no such order/i;

/**
 * Cancels an order that may or may not exist at the provider: answers its id, or null when the
 * provider does not know it (it was never made), which is an outcome, not a failure.
 */
export async function cancelIfMade(
  provisioning: ProvisioningClient,
  orderId: string,
): Promise<string | null> {
  try {
    await provisioning.cancelOrder({ id: orderId });
    return orderId;
  } catch (error) {
    if (error instanceof RefusalError && ORDER_UNKNOWN.test(error.message)) return null;
    throw error;
  }
}

/**
 * Cancels the chain's orders at the provider (each call is idempotent there) and records the
 * chain as cancelled, with no more renewals. The caller holds the chain's lock.
 */
export async function cancelChain(input: {
  chains: ChainStore;
  provisioning: ProvisioningClient;
  held: { chain: Chain; token: string };
  now: number;
  cause: Cause;
  reason: string;
  /**
   * Settles the later look for the intent's order (jobs/late-orders): scheduled when the
   * provider did not know it (`made: false`), dropped when it did. Called before the save.
   */
  lateCheck: (orderId: string, made: boolean) => Promise<void>;
}): Promise<Chain> {
  const { chain, token } = input.held;
  const addOns = await input.chains.getMany(chain.addOns);
  const ids = familyOrdersInForce(chain, addOns, input.provisioning.variant, input.now);
  await input.chains.eachOrderUnderLock(chain.id, token, ids, (order) =>
    input.provisioning.cancelOrder(order),
  );
  const pending = await cancelPendingIntent(input.provisioning, chain);
  if (pending) await input.lateCheck(pending.orderId, pending.made);
  if (pending?.made) ids.push(pending.orderId);
  const saved = await input.chains.save({
    chainId: chain.id,
    token,
    previous: chain,
    next: {
      ...chain,
      status: 'cancelled',
      intent: null,
      // Nothing more is bought for a cancelled chain, the rest of a seat event included, and
      // nothing is unsuspended.
      unfinishedSeatEvent: null,
      laterSeatTotals: [],
      unsuspending: false,
      // Its orders are cancelled at the provider: none is left to reactivate there.
      needsReactivation: false,
      nextRenewalAt: null,
      updatedAt: input.now,
    },
    history: [
      {
        at: input.now,
        event: 'chain.cancelled',
        detail: `${input.reason}; cancelled at the provider: ${ids.join(', ') || 'nothing in force'}`,
        cause: input.cause,
      },
    ],
    release: false,
  });
  await markAddOnsCancelled(input.chains, addOns, input.now, input.cause);
  return saved;
}

/**
 * Records a cancelled chain's add-ons as cancelled with it. Also run by a repeat of the cancel
 * (a retried job, an operator's second request): the first may have died between its save and
 * these, which would otherwise wait for reconcile.
 */
export async function markAddOnsCancelled(
  chains: ChainStore,
  addOns: readonly Chain[],
  now: number,
  cause: Cause,
): Promise<void> {
  for (const addOn of addOns) await markAddOnCancelled(chains, addOn, now, cause);
}

/**
 * Records an add-on as cancelled with its main chain. Best effort: an add-on whose own renewal
 * job holds it right now is left, and that job cancels what it ordered once it sees its main
 * chain cancelled (renewals.ts). `held`: the add-on as its caller holds it (lock token).
 */
export async function markAddOnCancelled(
  chains: ChainStore,
  addOn: Chain,
  now: number,
  cause: Cause,
  options: { held?: { chain: Chain; token: string }; detail?: string } = {},
) {
  if (addOn.status === 'cancelled') return;
  const save = (chain: Chain, token: string) =>
    chains.save({
      chainId: addOn.id,
      token,
      previous: chain,
      next: cancelledWithMainChain(chain, now),
      history: [addOnCancelledEntry(now, cause, options.detail)],
      release: false,
    });
  if (options.held) {
    await save(options.held.chain, options.held.token);
    return;
  }
  const token = `cancel/${addOn.id}/${randomUUID()}`;
  const lock = await chains.lock(addOn.id, token);
  // `addOn` was read before the lock: another round (or operator) may have marked it since.
  if (lock.kind === 'locked' || !lock.chain || lock.chain.status === 'cancelled') {
    if (lock.kind === 'held') await chains.unlock(addOn.id, token);
    return;
  }
  try {
    await save(lock.chain, token);
  } finally {
    await chains.unlock(addOn.id, token);
  }
}

/** An add-on as recorded once its main chain is cancelled. */
export function cancelledWithMainChain(addOn: Chain, now: number): Chain {
  return { ...addOn, status: 'cancelled', nextRenewalAt: null, updatedAt: now };
}

/** The history entry of an add-on recorded as cancelled with its main chain. */
export function addOnCancelledEntry(
  now: number,
  cause: Cause,
  detail = 'cancelled with its main chain',
): HistoryEntry {
  return { at: now, event: 'chain.cancelled', detail, cause };
}
