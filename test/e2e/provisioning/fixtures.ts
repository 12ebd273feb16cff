// Shared vocabulary of the provisioning end-to-end tests: a partner's client, the response
// shapes the spec names, and assertions for success and refusal.
import { expect } from 'vitest';
import type { TestApp } from '../../helpers/app.js';

export type Variant = 'marketplace' | 'external';

export interface CallResult {
  status: number;
  body: unknown;
}

/** One partner of the running app: its variant, its key and a call bound to that key. */
export interface PartnerClient {
  variant: Variant;
  partnerId: number;
  partnerName: string;
  apiKey: string;
  call(method: string, params?: unknown): Promise<CallResult>;
}

export async function newPartner(
  app: TestApp,
  variant: Variant,
  windowDays?: number,
): Promise<PartnerClient> {
  const { partner, apiKey } = await app.addPartner(variant, windowDays);
  return {
    variant,
    partnerId: partner.id,
    partnerName: partner.name,
    apiKey,
    call: (method, params) => app.call(apiKey, method, params),
  };
}

/** The Order object of the spec. */
export interface Order {
  id: string;
  customer: string;
  instance: string | number | null;
  product: string;
  licenses: number;
  duration: 'monthly' | 'yearly' | null;
  count: number;
  createdAt: number;
  startsAt: number;
  expiresAt: number;
  remoteId: string;
}

export const ORDER_FIELDS = [
  'count',
  'createdAt',
  'customer',
  'duration',
  'expiresAt',
  'id',
  'instance',
  'licenses',
  'product',
  'remoteId',
  'startsAt',
];

/** The Customer object of the spec. */
export interface Customer {
  name: string;
  partner: string | number;
  createdAt: number;
  id: string | number;
  isActive: boolean;
  admin: { email: string };
  remoteId: string;
  url?: string;
}

/** Epoch seconds of a UTC instant; `month` is 1-based. */
export function utc(year: number, month: number, day: number, hour = 12, minute = 0): number {
  return Date.UTC(year, month - 1, day, hour, minute) / 1000;
}

/** The body of a 200 response, failing with the refusal text otherwise. */
export function ok<T = unknown>(res: CallResult): T {
  expect(res.status, `expected 200, got ${res.status}: ${JSON.stringify(res.body)}`).toBe(200);
  return res.body as T;
}

/** The refusal text of an error response with `status`; error bodies are JSON strings. */
export function refusal(res: CallResult, status = 400): string {
  expect(res.status, `expected ${status}, got ${res.status}: ${JSON.stringify(res.body)}`).toBe(
    status,
  );
  expect(typeof res.body, `error body should be a JSON string: ${JSON.stringify(res.body)}`).toBe(
    'string',
  );
  return res.body as string;
}

export function sortedKeys(value: unknown): string[] {
  return Object.keys(value as object).sort();
}

/** A customer of `client` with the caller id `id`. */
export async function createCustomer(
  client: PartnerClient,
  id: string,
  overrides: Record<string, unknown> = {},
): Promise<Customer> {
  return ok<Customer>(
    await client.call('createCustomer', {
      id,
      name: `Company ${id}`,
      admin: { email: `admin-${id.toLowerCase().replace(/[^a-z0-9]/g, '')}@example.com` },
      ...overrides,
    }),
  );
}

/** The marketplace instance id of a customer: the last path segment of its onboarding url. */
export function marketplaceInstance(customer: Customer): string {
  const url = customer.url ?? '';
  const id = url.slice(url.lastIndexOf('/') + 1);
  expect(id).not.toBe('');
  return id;
}

/**
 * A fresh instance of the client's variant: marketplace instances come with the customer;
 * external ones with the customer's first createFirstOrder.
 */
export async function createInstance(
  client: PartnerClient,
  customerId: string,
): Promise<{ customer: Customer; instance: string | number }> {
  const customer = await createCustomer(client, customerId);
  if (client.variant === 'marketplace') {
    return { customer, instance: marketplaceInstance(customer) };
  }
  const order = ok<Order>(
    await client.call('createFirstOrder', {
      customer: customerId,
      id: `${customerId}-first`,
      product: 'suite-std',
      licenses: 3,
      duration: 'monthly',
    }),
  );
  expect(order.instance).not.toBeNull();
  return { customer, instance: order.instance as number };
}
