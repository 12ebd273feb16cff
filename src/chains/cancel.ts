// Cancelling a chain at the provider: shared by `order.cancelled` jobs and the ops API.
import type { ProvisioningClient } from '../client/provisioning-client.js';
import { ordersInForce } from './orders-in-force.js';
import type { Cause, Chain } from './records.js';
import type { ChainStore } from './store.js';

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
}): Promise<Chain> {
  const { chain, token } = input.held;
  const ids = ordersInForce(chain, input.provisioning.variant, input.now);
  for (const id of ids) await input.provisioning.cancelOrder({ id });
  return input.chains.save({
    chainId: chain.id,
    token,
    previous: chain,
    next: {
      ...chain,
      status: 'cancelled',
      intent: null,
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
}
