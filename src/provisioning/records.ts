// What the core keeps in Redis, parsed with zod whenever it is read back.
import { z } from 'zod';
import { duration } from './schemas.js';

export const partnerRecord = z.object({
  id: z.int(),
  name: z.string(),
  variant: z.enum(['marketplace', 'external']),
  renewalWindowDays: z.int(),
  createdAt: z.int(),
});
export type Partner = z.infer<typeof partnerRecord>;

const internalId = z.union([z.string(), z.int()]);

export const customerRecord = z.object({
  id: internalId,
  remoteId: z.string(),
  name: z.string(),
  admin: z.object({
    email: z.string(),
    phone: z.string().optional(),
    displayName: z.string().optional(),
  }),
  partner: internalId,
  createdAt: z.int(),
  isActive: z.boolean(),
  /** Marketplace: created with the customer. External: created by its first createFirstOrder. */
  instance: internalId.nullable(),
  url: z.string().optional(),
  fingerprint: z.string(),
});
export type CustomerRecord = z.infer<typeof customerRecord>;

export const orderStatus = z.enum(['active', 'suspended', 'cancelled']);
export type OrderStatus = z.infer<typeof orderStatus>;

export const orderRecord = z.object({
  id: z.string(),
  remoteId: z.string(),
  customer: z.string(),
  customerRemoteId: z.string(),
  instance: internalId.nullable(),
  product: z.string(),
  licenses: z.int(),
  duration: duration.nullable(),
  count: z.int(),
  createdAt: z.int(),
  startsAt: z.int(),
  expiresAt: z.int(),
  status: orderStatus,
  /** Caller id of the chain's first order; null for an order outside chains (partial). */
  parent: z.string().nullable(),
  fingerprint: z.string(),
});
export type OrderRecord = z.infer<typeof orderRecord>;

/** A chain of terms, keyed by its first order's caller id. */
export const chainRecord = z.object({
  parent: z.string(),
  customerRemoteId: z.string(),
  product: z.string(),
  duration,
  anchor: z.int(),
  anchorTerm: z.int(),
  count: z.int(),
  startsAt: z.int(),
  expiresAt: z.int(),
  licenses: z.int(),
  /** Caller ids of every order of the chain, first order first. */
  orders: z.array(z.string()).min(1),
});
export type ChainRecord = z.infer<typeof chainRecord>;

export const userRecord = z.object({
  id: z.int(),
  instance: internalId,
  email: z.string(),
  displayName: z.string(),
  createdAt: z.int(),
  isAdmin: z.boolean(),
  isSysAdmin: z.boolean(),
  settings: z.array(z.int()).length(4),
  apps: z.array(z.int()).length(3),
  notificationReminder: z.int(),
  rootFiles: z.int(),
  trashFiles: z.int(),
  inbox: z.int(),
  spam: z.int(),
  sent: z.int(),
  trashEmail: z.int(),
  drafts: z.int(),
  mainCalendar: z.int(),
});
export type UserRecord = z.infer<typeof userRecord>;

/** Parses a JSON value read from Redis; a corrupt one is a bug, not a caller's refusal. */
export function parseStored<T>(schema: z.ZodType<T>, json: string, what: string): T {
  const parsed = schema.safeParse(JSON.parse(json));
  if (!parsed.success) {
    throw new Error(`stored ${what} does not match its schema: ${z.prettifyError(parsed.error)}`);
  }
  return parsed.data;
}
