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
  kind: z.enum(['first_order', 'renewal', 'partial', 'addon']),
  method: z.string(),
  orderId: z.string(),
  params: z.record(z.string(), z.unknown()),
  /** The job that wrote it (the first attempt's), for the history's cause. */
  jobId: z.string().nullable(),
  /**
   * For seat purchases: the event that asked for them, so whoever finishes the intent records it.
   * `rest`: the event needs more purchases, so recording this one does not apply it yet.
   */
  event: z
    .object({
      webhookId: z.string(),
      /** The event's mark (src/chains/event-marks.ts; absent in older records: its webhook id). */
      mark: z.string().optional(),
      occurredAt: z.int(),
      /** Intake's number of the event (absent in older records and for events it did not number). */
      sequence: z.int().optional(),
      total: z.int(),
      rest: z.boolean().optional(),
      /** Where the rest is planned from when not this purchase's start (see `pendingAddOn`). */
      restFrom: z.int().optional(),
    })
    .optional(),
});
export type Intent = z.infer<typeof intentRecord>;

const keptLicensesRecord = z.object({ until: z.int(), licenses: z.int().min(0) });

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
  /**
   * The term in force when `term` was ordered early and has not started yet, with its main
   * order's licenses (absent in records written before they were kept: seat changes then count
   * only the latest term).
   */
  previousTerm: termRecord
    .extend({ licenses: z.int().min(0).optional() })
    .nullable()
    .default(null),
  partials: z.array(partialRecord).default([]),
  addOns: z.array(z.string()).default([]),
  /** Chain id of the main chain when this chain is an add-on. */
  mainChain: z.string().nullable().default(null),
  intent: intentRecord.nullable(),
  /** When the renewal job fires (epoch seconds); null when nothing will renew the chain. */
  nextRenewalAt: z.int().nullable(),
  /** A renewal the provider keeps refusing (e.g. its window) past the term's end. */
  flagged: z.string().nullable().default(null),
  /** `occurredAt` of the last applied seat event; older ones are stale. */
  lastSeatEventAt: z.int().nullable().default(null),
  /** Intake's `sequence` of the last applied seat event of that second, when it had one. */
  lastSeatEventSequence: z.int().nullable().default(null),
  /** `occurredAt` of the last applied payment event; payment events keep their own order. */
  lastPaymentEventAt: z.int().nullable().default(null),
  /** Intake's `sequence` of the last applied payment event, when it had one. */
  lastPaymentEventSequence: z.int().nullable().default(null),
  /**
   * Marks of the latest payment events applied or ignored (src/chains/event-marks.ts; older
   * records: webhook ids), the last one last: a job run again after a crash past its save (a
   * stalled job, a SIGKILL) never applies its event a second time, also once newer events were
   * applied since.
   */
  handledPaymentEvents: z.array(z.string()).default([]),
  /** Number of the current (or last) overdue episode: each gets its own suspension job. */
  overdueEpisode: z.int().min(0).default(0),
  /** When the current overdue episode's suspension fires (epoch seconds), or null. */
  suspendAt: z.int().nullable().default(null),
  /**
   * The overdue episode whose suspension has begun at the provider and is not recorded yet, or
   * null: set before the first suspendOrder, so a payment that arrives while a suspension job
   * is half done (failed, retrying, killed) knows some orders may be suspended.
   */
  suspending: z.int().min(1).nullable().default(null),
  /**
   * The orders whose suspendOrder call has begun in the suspension in progress (`suspending`),
   * each written before its call: a payment then asks to reactivate only those, not orders the
   * job never reached. Null with `suspending` in a record from before it was kept: any order in
   * force may be suspended.
   */
  suspensionCalls: z.array(z.string()).nullable().default(null),
  /**
   * While the chain is `suspended`: the orders suspended at the provider for non-payment, as the
   * variant names them (external: whole chains by their first orders), by the suspension and by
   * orders joining it since, also those whose term has ended since (an external chain stays
   * suspended at the provider), for a payment to ask for exactly their reactivation. Null in a
   * record from before it was kept: then any order in force may be. Meaningless otherwise.
   */
  suspendedOrders: z.array(z.string()).nullable().default(null),
  /**
   * A payment received (marketplace) whose unsuspension has begun at the provider and is not
   * recorded yet: set, with the payment, before the first unsuspendOrder, so whoever holds the
   * chain next (the job's retry, a newer payment event) finishes it instead of leaving the
   * family half unsuspended.
   */
  unsuspending: z.boolean().default(false),
  /** An add-on bought for a date that has not come yet (external: createFirstOrder starts now). */
  pendingAddOn: z
    .object({
      licenses: z.int().min(1),
      startsAt: z.int(),
      occurredAt: z.int(),
      /** The event's total (absent in older records: then what is paid plus `licenses`). */
      total: z.int().min(0).optional(),
      /** More licenses are missing later (a step): once it is bought, the event is planned again. */
      rest: z.boolean().default(false),
      /**
       * Where that rest is planned from, when a newer event needs more from a later day than the
       * add-on's (absent: from the add-on's day). The add-on is still bought on its own day, as
       * the older event asked, and the newer event's rest on its own.
       */
      restFrom: z.int().optional(),
      /** The event that asked for it (absent in older records: the last applied one). */
      webhookId: z.string().optional(),
      /** The event's mark (src/chains/event-marks.ts; absent in older records: its webhook id). */
      mark: z.string().optional(),
    })
    .nullable()
    .default(null),
  /**
   * Totals that newer seat events need from later days than a waiting add-on and its rest
   * (external), the earliest first; the last is the newest event's, which the next renewals carry. Once what
   * comes before one is bought, it becomes the unfinished event and is planned from its day, so
   * each event's licenses are there from the day it asked for them. A newer event drops those
   * from its own day on.
   */
  laterSeatTotals: z
    .array(
      z.object({
        webhookId: z.string(),
        /** The event's mark (src/chains/event-marks.ts; absent in older records: its webhook id). */
        mark: z.string().optional(),
        occurredAt: z.int(),
        total: z.int().min(0),
        from: z.int(),
      }),
    )
    .default([]),
  /**
   * A seat event whose first purchase is bought and whose rest is not yet (the rest of a term in
   * force that lacked more than the next term, or licenses missing from a later day, when an
   * order ending inside the term ends): whoever holds the chain next plans it again and buys
   * the rest, as it finishes an intent, so neither a crash nor a newer event in between loses
   * it. `neededAt`: when the last purchase started. `style`: how it is bought (records written
   * before add-ons could have a rest are partials').
   */
  unfinishedSeatEvent: z
    .object({
      webhookId: z.string(),
      /** The event's mark (src/chains/event-marks.ts; absent in older records: its webhook id). */
      mark: z.string().optional(),
      occurredAt: z.int(),
      total: z.int().min(0),
      neededAt: z.int(),
      style: z.enum(['coterm', 'addon']).default('coterm'),
    })
    .nullable()
    .default(null),
  /** How many partials and add-ons were made, for their derived ids `.p{k}` and `.a{k}`. */
  partialCount: z.int().min(0).default(0),
  addOnCount: z.int().min(0).default(0),
  /** Main chain: each add-on chain's licenses for its next renewal (add-ons shrink first). */
  addOnNextLicenses: z.record(z.string(), z.int().min(0)).default({}),
  /**
   * Main chain: counts that an add-on's renewals keep while they start before a later-dated
   * total applies (renewalLicenses), when the add-ons renewing before that date already carry
   * more than the whole total (jobs/seat-purchases.ts, allocation).
   */
  addOnLicensesUntil: z.record(z.string(), z.array(keptLicensesRecord)).default({}),
  /**
   * Main chain: when the total the next counts share is needed from, while that is later than
   * when they were shared (null: from then). A purchase recorded later for the same total
   * shares it the same way.
   */
  sharesFrom: z.int().nullable().default(null),
  /**
   * Marks of the latest applied seat events (src/chains/event-marks.ts; older records: webhook
   * ids): a retried job never applies one twice.
   */
  appliedSeatEvents: z.array(z.string()).default([]),
  /**
   * Seat events whose purchase the provider refused and that are not applied, with the refusal
   * and the attempt of the event's own job that fails with it (null until that job has run since
   * another job met the refusal): run again within that attempt (its worker died), the job fails
   * with it instead of deciding the purchase afresh; retried after that failure, it decides
   * afresh (jobs/seat-purchases.ts, withRefusalSettled).
   */
  refusedSeatEvents: z
    .array(
      z.object({
        /** The event's mark (older records: its webhook id). */
        webhookId: z.string(),
        reason: z.string(),
        attempt: z.int().min(0).nullable().default(null),
      }),
    )
    .default([]),
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

/** A chain with its history, as read together (ChainStore.getManyWithHistory). */
export interface ChainWithHistory {
  chain: Chain;
  history: readonly HistoryEntry[];
}

export type NewChain = Omit<Chain, 'version'>;
const newChainSchema = chainRecord.omit({ version: true });

/** A chain about to be stored for the first time, with every defaulted field filled in. */
export function newChainRecord(fields: z.input<typeof newChainSchema>): NewChain {
  return newChainSchema.parse(fields);
}
