// What the workers need from a provisioning service, whether embedded (in-process) or remote (HTTP).
import { z } from 'zod';
import type { Companion } from '../provisioning/order-operations.js';
import { epochSeconds, type Variant } from '../provisioning/schemas.js';

/**
 * An order as the provisioning interface answers it (both variants). Where the spec leaves room,
 * the check does too, for fields the workers do not record: `customer` is the customer's internal
 * id, an integer in the external variant's Customer, and the answer to a partial order is not
 * shown (it may carry no `duration`, as it was sent none). Its dates are the interface's epoch
 * seconds and its term is not empty: an answer in milliseconds, say, would otherwise be recorded
 * and put the next renewal in the year 58,000, where the chain would never renew again.
 */
export const orderResponse = z
  .looseObject({
    id: z.string(),
    customer: z.union([z.string(), z.int()]),
    instance: z.union([z.string(), z.int()]).nullable(),
    product: z.string(),
    licenses: z.int().min(0),
    duration: z.enum(['monthly', 'yearly']).nullish(),
    count: z.int(),
    createdAt: epochSeconds,
    startsAt: epochSeconds,
    expiresAt: epochSeconds,
    remoteId: z.string(),
  })
  .refine((order) => order.expiresAt > order.startsAt, {
    path: ['expiresAt'],
    error: (issue) => {
      const order = issue.input as { startsAt: number; expiresAt: number };
      return `must be after startsAt (${order.startsAt}), got ${order.expiresAt}`;
    },
  });
export type OrderResponse = z.infer<typeof orderResponse>;

export const customerResponse = z.looseObject({
  name: z.string(),
  remoteId: z.string(),
  createdAt: z.int(),
  isActive: z.boolean(),
});
export type CustomerResponse = z.infer<typeof customerResponse>;

export interface CreateCustomerInput {
  id: string;
  name: string;
  admin: { email: string; phone?: string | undefined; displayName?: string | undefined };
}

export interface CreateOrderInput {
  customer: string;
  id: string;
  product: string;
  licenses: number;
  duration?: 'monthly' | 'yearly' | undefined;
  startsAt?: number | undefined;
  expiresAt?: number | undefined;
  /** Extension: links a renewal into its chain (sent only when extensions are on). */
  parent?: string | undefined;
}

export interface CreateFirstOrderInput {
  customer: string;
  id: string;
  product: string;
  licenses: number;
  duration: 'monthly' | 'yearly';
}

export interface CreateRenewalOrderInput {
  parent: string;
  id: string;
  /** Extension: the renewal's license count (sent only when extensions are on). */
  licenses?: number | undefined;
}

/**
 * One provisioning service, as the workers see it. Every method either resolves with the
 * service's answer or throws one of three kinds (src/errors.ts):
 * - RefusalError (code `provisioning_refused`): the service answered 400, the interface's one
 *   refusal; `message` is (an excerpt of) its text.
 * - ConfigError: 401 or 403 (`provisioning_unauthorized`: the API key is wrong), a certificate
 *   not trusted here (`provisioning_tls`), a request that cannot be sent as configured. Jobs
 *   still retry it with backoff, so a setting fixed meanwhile needs no retry by hand.
 * - TransientError: any other status (5xx, 408, 429, a gateway's 404), a timeout, a connection
 *   reset or refused, an answer that is not HTTP: retry later.
 * A 200 whose answer is not the interface's (not JSON, another shape, larger than the client
 * reads, or about another object than the one sent) is a plain Error: retried, never recorded.
 */
export interface ProvisioningClient {
  readonly variant: Variant;
  /** Whether the `parent` (createOrder) and `licenses` (createRenewalOrder) extensions are sent. */
  readonly extensions: boolean;
  createCustomer(params: CreateCustomerInput): Promise<CustomerResponse>;
  /** Marketplace only. */
  createOrder(params: CreateOrderInput): Promise<OrderResponse>;
  /** External only. */
  createFirstOrder(params: CreateFirstOrderInput): Promise<OrderResponse>;
  /** External only. */
  createRenewalOrder(params: CreateRenewalOrderInput): Promise<OrderResponse>;
  cancelOrder(params: { id: string }): Promise<true>;
  suspendOrder(params: { id: string }): Promise<true>;
  /** Marketplace only. */
  unsuspendOrder(params: { id: string }): Promise<true>;
  /**
   * Embedded mode only (the in-process client): a renewal order and the workers' record of it
   * (`companion`, built from the planned order) written in one atomic script, or neither.
   * `recorded` means both were written (with the service's id of the order, whose terms the
   * companion already has); `unrecorded` that the order existed already (a replay:
   * nothing was written, the caller records it as usual); `companion_refused` that the record
   * could not be written (its lock or version), so the order was not made either.
   */
  createRecorded?(
    method: 'createOrder' | 'createRenewalOrder',
    params: Record<string, unknown>,
    companion: Companion,
  ): Promise<RecordedOrder>;
  close(): Promise<void>;
}

export type RecordedOrder =
  | { kind: 'recorded'; id: string }
  | { kind: 'unrecorded'; order: OrderResponse }
  | { kind: 'companion_refused'; code: number };

/**
 * Whether a renewal can carry another license count than the term it renews: not an external
 * one without the `licenses` extension (createRenewalOrder renews the same count), which is
 * flagged for an operator instead.
 */
export function renewalCountCanChange(
  provisioning: Pick<ProvisioningClient, 'variant' | 'extensions'>,
): boolean {
  return provisioning.variant === 'marketplace' || provisioning.extensions;
}
