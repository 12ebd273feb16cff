// The request shaping both provisioning clients share: params picked field by field, the
// extensions sent only when on, and answers checked against the interface's shapes.
import type { z } from 'zod';
import { MalformedAnswerError } from '../errors.js';
import type { Variant } from '../provisioning/schemas.js';
import { describeIssues, describeValue } from '../validation.js';
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
 * With `reads: 'status'` the caller needs only the success: the body is not decoded (the spec
 * shows none for cancelOrder, suspendOrder and unsuspendOrder).
 */
export type Send = (
  method: string,
  params: Record<string, unknown>,
  reads?: 'answer' | 'status',
) => Promise<unknown>;

/** Drops undefined fields, as JSON.stringify does, so both transports pass the same params. */
function defined(fields: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(fields).filter(([, value]) => value !== undefined));
}

/** A malformed answer is a protocol error (neither the caller's fault nor worth a retry). */
export function parseAnswer<T>(schema: z.ZodType<T>, method: string, answer: unknown): T {
  const parsed = schema.safeParse(answer, { reportInput: true });
  if (!parsed.success) {
    throw new MalformedAnswerError(
      `provisioning ${method} answered an unexpected shape: ${describeIssues(parsed.error, 'answer')}`,
      { method },
    );
  }
  return parsed.data;
}

/**
 * An answer about the object the call named: its `remoteId` equals the sent `id` (spec, Customer
 * and Order). Another object's answer (a gateway's cache, a mixed-up connection) would be recorded
 * as this one's, with its terms: a renewal recorded with the term in force would be due again at
 * once and buy that term twice. Retried like a malformed answer, never recorded.
 */
function answerFor<T extends { remoteId: string }>(id: unknown, method: string, answer: T): T {
  if (answer.remoteId !== id) {
    throw new MalformedAnswerError(
      `provisioning ${method} answered for ${describeValue(answer.remoteId)}, not for the ${JSON.stringify(id)} it was sent`,
      { method },
    );
  }
  return answer;
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
    answerFor(
      params.id,
      method,
      parseAnswer(orderResponse, method, await send(method, defined(params))),
    );
  // The spec shows no body for a change's answer: its status 200 is the whole success (the
  // embedded core answers `true`, a remote may answer `{}`, nothing, "OK"). Refusals are 400s.
  const change = async (method: string, id: string): Promise<true> => {
    await send(method, { id }, 'status');
    return true;
  };

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
      const answer = await send('createCustomer', params);
      return answerFor(
        p.id,
        'createCustomer',
        parseAnswer(customerResponse, 'createCustomer', answer),
      );
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
