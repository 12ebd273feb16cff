// The workers' record of an order chain (DESIGN §4, §5), parsed with zod whenever read back.
import { z } from 'zod';

export const termRecord = z.object({
  orderId: z.string(),
  /** 1-based number of the term in its chain. */
  count: z.int().min(1),
  startsAt: z.int(),
  expiresAt: z.int(),
});
export type Term = z.infer<typeof termRecord>;

/** An order about to be sent: written before the call, so a retry sends the same id and params. */
export const intentRecord = z.object({
  kind: z.enum(['first_order', 'renewal', 'customer', 'cancel']),
  method: z.string(),
  orderId: z.string(),
  params: z.record(z.string(), z.unknown()),
  /** The job that wrote it (the first attempt's), for the history's cause. */
  jobId: z.string().nullable(),
});
export type Intent = z.infer<typeof intentRecord>;

export const partialRecord = z.object({
  orderId: z.string(),
  licenses: z.int(),
  startsAt: z.int(),
  expiresAt: z.int(),
});

export const chainRecord = z.object({
  id: z.string(),
  /** The caller id of the chain's first order. */
  order: z.string(),
  customer: z.string(),
  product: z.string(),
  duration: z.enum(['monthly', 'yearly']),
  status: z.enum(['active', 'suspended', 'cancelled', 'expired']),
  autoRenew: z.boolean(),
  payment: z.enum(['ok', 'overdue']),
  needsReactivation: z.boolean().default(false),
  /** Licenses of the main order of the latest ordered term. */
  licenses: z.int(),
  /** What the next renewal not yet ordered will carry. */
  nextLicenses: z.int(),
  term: termRecord,
  /** The term in force when `term` was ordered early and has not started yet. */
  previousTerm: termRecord.nullable().default(null),
  partials: z.array(partialRecord).default([]),
  addOns: z.array(z.string()).default([]),
  /** Chain id of the main chain when this chain is an add-on. */
  mainChain: z.string().nullable().default(null),
  intent: intentRecord.nullable(),
  /** When the renewal job fires (epoch seconds); null when nothing will renew the chain. */
  nextRenewalAt: z.int().nullable(),
  /** A renewal the provider keeps refusing (e.g. its window) past the term's end. */
  flagged: z.string().nullable().default(null),
  version: z.int().min(0),
  createdAt: z.int(),
  updatedAt: z.int(),
});
export type Chain = z.infer<typeof chainRecord>;

export const causeRecord = z.object({
  webhookId: z.string().optional(),
  jobId: z.string().optional(),
  orderId: z.string().optional(),
  operator: z.string().optional(),
});
export type Cause = z.infer<typeof causeRecord>;

export const historyEntry = z.object({
  at: z.int(),
  event: z.string(),
  detail: z.string(),
  cause: causeRecord,
});
export type HistoryEntry = z.infer<typeof historyEntry>;
