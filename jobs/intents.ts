// Sends an intent (an order id with its exact params) through the provisioning client.

import type { Intent } from '../src/chains/records.js';
import type {
  CreateFirstOrderInput,
  CreateOrderInput,
  CreateRenewalOrderInput,
  OrderResponse,
  ProvisioningClient,
} from '../src/client/provisioning-client.js';
import { formatInstant } from '../src/format.js';

/** Retries send the stored params unchanged, so the provider answers with the order it made. */
export function sendIntent(client: ProvisioningClient, intent: Intent): Promise<OrderResponse> {
  switch (intent.method) {
    case 'createOrder':
      return client.createOrder(intent.params as unknown as CreateOrderInput);
    case 'createFirstOrder':
      return client.createFirstOrder(intent.params as unknown as CreateFirstOrderInput);
    case 'createRenewalOrder':
      return client.createRenewalOrder(intent.params as unknown as CreateRenewalOrderInput);
    default:
      throw new Error(`intent ${intent.orderId} names no order method: ${intent.method}`);
  }
}

/** "5 × suite-std, 2026-02-15T12:00:00Z – 2026-03-15T12:00:00Z" */
export function describeTerm(
  order: Pick<OrderResponse, 'licenses' | 'product' | 'startsAt' | 'expiresAt'>,
): string {
  return `${order.licenses} × ${order.product}, ${formatInstant(order.startsAt)} – ${formatInstant(order.expiresAt)}`;
}
