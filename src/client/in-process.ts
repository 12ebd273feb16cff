// The embedded core as a ProvisioningClient, and the request shaping that both clients share.
import { z } from 'zod';
import { RefusalError, TransientError } from '../errors.js';
import type { ProvisioningCore } from '../provisioning/operations.js';
import type { Partner } from '../provisioning/records.js';
import type { Variant } from '../provisioning/schemas.js';
import { isRedisUnavailable } from '../redis/connection.js';
import { describeIssues } from '../validation.js';
import {
  type CustomerResponse,
  customerResponse,
  type OrderResponse,
  orderResponse,
  type ProvisioningClient,
} from './provisioning-client.js';

/**
 * Carries one call `{method, params}` to a provisioning service and resolves with its decoded
 * answer, or throws RefusalError, ConfigError or TransientError as ProvisioningClient documents.
 */
export type Send = (method: string, params: Record<string, unknown>) => Promise<unknown>;

const done = z.literal(true);

/** Drops undefined fields, as JSON.stringify does, so both transports pass the same params. */
function defined(fields: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(fields).filter(([, value]) => value !== undefined));
}

/** A malformed answer is a protocol error (neither the caller's fault nor worth a retry). */
function parseAnswer<T>(schema: z.ZodType<T>, method: string, answer: unknown): T {
  const parsed = schema.safeParse(answer, { reportInput: true });
  if (!parsed.success) {
    throw new Error(
      `provisioning ${method} answered an unexpected shape: ${describeIssues(parsed.error, 'answer')}`,
    );
  }
  return parsed.data;
}

/**
 * A ProvisioningClient over any transport. Params are picked field by field, so an input object
 * with extra properties never reaches the strict schemas of the service, and the extensions
 * (`parent` on createOrder, `licenses` on createRenewalOrder) are sent only when `extensions` is
 * on: a remote service that does not know them would refuse the unknown field.
 */
export function clientOver(opts: {
  variant: Variant;
  extensions: boolean;
  send: Send;
  close: () => Promise<void>;
}): ProvisioningClient {
  const { send, extensions } = opts;
  const order = async (method: string, params: Record<string, unknown>): Promise<OrderResponse> =>
    parseAnswer(orderResponse, method, await send(method, defined(params)));
  const change = async (method: string, id: string): Promise<true> =>
    parseAnswer(done, method, await send(method, { id }));

  return {
    variant: opts.variant,
    extensions,
    async createCustomer(p): Promise<CustomerResponse> {
      const params = {
        id: p.id,
        name: p.name,
        admin: defined({
          email: p.admin.email,
          phone: p.admin.phone,
          displayName: p.admin.displayName,
        }),
      };
      return parseAnswer(customerResponse, 'createCustomer', await send('createCustomer', params));
    },
    createOrder: (p) =>
      order('createOrder', {
        customer: p.customer,
        id: p.id,
        product: p.product,
        licenses: p.licenses,
        duration: p.duration,
        startsAt: p.startsAt,
        expiresAt: p.expiresAt,
        parent: extensions ? p.parent : undefined,
      }),
    createFirstOrder: (p) =>
      order('createFirstOrder', {
        customer: p.customer,
        id: p.id,
        product: p.product,
        licenses: p.licenses,
        duration: p.duration,
      }),
    createRenewalOrder: (p) =>
      order('createRenewalOrder', {
        parent: p.parent,
        id: p.id,
        licenses: extensions ? p.licenses : undefined,
      }),
    cancelOrder: (p) => change('cancelOrder', p.id),
    suspendOrder: (p) => change('suspendOrder', p.id),
    unsuspendOrder: (p) => change('unsuspendOrder', p.id),
    close: opts.close,
  };
}

/**
 * The embedded core, called in the same process as the partner `partner`. Failures are
 * classified exactly as the HTTP client classifies the endpoint's statuses (400 refusal, 503
 * transient), so workers behave the same in embedded and remote mode.
 */
export function inProcessClient(opts: {
  core: ProvisioningCore;
  partner: Partner;
  /** Whether the `parent` and `licenses` extensions are sent; default true (the core has them). */
  extensions?: boolean;
}): ProvisioningClient {
  const { core, partner } = opts;
  const send: Send = async (method, params) => {
    try {
      return await core.invoke(partner, method, params);
    } catch (error) {
      if (error instanceof RefusalError) {
        throw new RefusalError('provisioning_refused', error.message, { method }, { cause: error });
      }
      if (error instanceof TransientError || isRedisUnavailable(error)) {
        const reason = error instanceof Error ? error.message : String(error);
        throw new TransientError(
          'provisioning_unavailable',
          `provisioning ${method} unavailable: ${reason}`,
          { method },
          { cause: error },
        );
      }
      throw error;
    }
  };
  return clientOver({
    variant: partner.variant,
    extensions: opts.extensions ?? true,
    send,
    // The core and its Redis connection belong to whoever built them.
    close: async () => {},
  });
}
