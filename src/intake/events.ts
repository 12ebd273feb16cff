// The webhook events producers send (DESIGN §5), parsed with zod at the edge.
//
// Producers may add fields without breaking intake: objects drop the fields the workers do not
// read, so the job (kept for days, shown in Bull Board) never holds what a producer sent beyond
// them (an admin's initial password, say). Fields we read are typed and bounded like the
// provisioning interface's own params.
import { z } from 'zod';
import { MAX_PARENT_ORDER_ID_LENGTH } from '../domain/ids.js';
import {
  callerId,
  duration,
  email,
  epochSeconds,
  licenses,
  WELL_FORMED,
} from '../provisioning/schemas.js';

const text = z
  .string()
  .min(1, 'must not be empty')
  .max(200, 'must be at most 200 characters')
  .regex(...WELL_FORMED);

/** Order ids that the workers derive for renewals, partials and add-ons; producers may not use them. */
export const RESERVED_ORDER_SUFFIX = /\.(r|p|a)\d+$/;

/**
 * The ops API names chains and customers in its paths (`/ops/chains/:order`), and HTTP clients
 * resolve a path segment "." or ".." (even percent-encoded) before sending it: an order or a
 * customer so named could never be looked at or switched.
 */
const DOT_SEGMENT = /^\.{1,2}$/;
const notADotSegment = {
  message: 'must not be "." or ".." (the ops API names it in a URL path, which cannot hold them)',
};

const orderPlaced = z.object({
  customer: z.object({
    id: callerId.refine((id) => !DOT_SEGMENT.test(id), notADotSegment),
    name: text,
    admin: z.object({
      email,
      phone: z
        .string()
        .max(64, 'must be at most 64 characters')
        .regex(...WELL_FORMED)
        .optional(),
      displayName: text.optional(),
    }),
  }),
  order: z.object({
    id: callerId
      .max(
        MAX_PARENT_ORDER_ID_LENGTH,
        `must be at most ${MAX_PARENT_ORDER_ID_LENGTH} characters (the workers add suffixes for renewals, partials and add-ons, within the 128 of the interface)`,
      )
      .refine((id) => !RESERVED_ORDER_SUFFIX.test(id), {
        message: 'must not end in .r<n>, .p<n> or .a<n> (reserved for orders the workers create)',
      })
      .refine((id) => !DOT_SEGMENT.test(id), notADotSegment),
    product: z
      .string()
      .min(1, 'must not be empty')
      .max(64, 'must be at most 64 characters')
      .regex(...WELL_FORMED),
    licenses,
    duration,
    startsAt: epochSeconds.optional(),
  }),
  autoRenew: z.boolean('must be a boolean').optional(),
  occurredAt: epochSeconds.optional(),
});

const orderRef = { order: callerId, occurredAt: epochSeconds.optional() };
const invoice = z
  .string()
  .max(200, 'must be at most 200 characters')
  .regex(...WELL_FORMED)
  .optional();

export const eventSchemas = {
  'order.placed': orderPlaced,
  'order.cancelled': z.object(orderRef),
  'seats.changed': z.object({ ...orderRef, licenses, effectiveAt: epochSeconds.optional() }),
  'payment.overdue': z.object({ ...orderRef, invoice }),
  'payment.received': z.object({ ...orderRef, invoice }),
} as const;

export type EventType = keyof typeof eventSchemas;
export const eventTypes = Object.keys(eventSchemas) as EventType[];

export type OrderPlacedData = z.infer<(typeof eventSchemas)['order.placed']>;
export type OrderCancelledData = z.infer<(typeof eventSchemas)['order.cancelled']>;
export type SeatsChangedData = z.infer<(typeof eventSchemas)['seats.changed']>;
export type PaymentData = z.infer<(typeof eventSchemas)['payment.overdue']>;

/**
 * The envelope: `{ "type": ..., "data": {...} }`. Other fields are accepted, except one that
 * this type's `data` reads and `data` lacks: an `occurredAt` or `effectiveAt` beside `data`
 * would be ignored without a word, and the event applied as of the wrong time. (A routing field
 * beside `data` that the type does not read, or that `data` holds too, is the producer's own.)
 */
export const webhookBody = z
  .looseObject({
    type: z.enum(eventTypes as [EventType, ...EventType[]], {
      error: `must be one of ${eventTypes.join(', ')}`,
    }),
    data: z.looseObject({}, 'must be an object'),
  })
  .superRefine((body, ctx) => {
    const read = Object.keys(eventSchemas[body.type].shape);
    for (const key of read.filter((k) => k in body && !(k in body.data))) {
      ctx.addIssue({
        code: 'custom',
        path: [key],
        message: `belongs inside data (data.${key}), where ${body.type} reads it`,
      });
    }
  });

/**
 * The job name people read in Bull Board: the event type and the order it is about (and, for a
 * placed order, its customer). `data` passed intake's schema, so these ids are strings.
 */
export function eventJobName(type: EventType, data: Record<string, unknown>): string {
  if (type === 'order.placed') {
    const { order, customer } = data as OrderPlacedData;
    return `${type} ${order.id} for customer ${customer.id}`;
  }
  return `${type} ${(data as OrderCancelledData).order}`;
}

/** What intake enqueues for every accepted event, named by eventJobName. */
export const eventJobData = z.object({
  webhookId: z.string().min(1),
  type: webhookBody.shape.type,
  /** The event's `data`, validated at intake and parsed again by the processor. */
  data: z.record(z.string(), z.unknown()),
  /** `data.occurredAt`, else the `webhook-timestamp` (epoch seconds): orders one chain's events. */
  occurredAt: z.int().min(0),
  /** When intake accepted it, by the Clock (epoch seconds). */
  receivedAt: z.int().min(0),
  /**
   * The order intake accepted it in, across every API process: orders one chain's payment
   * events that occurred in the same second. Absent from jobs enqueued before it existed.
   */
  sequence: z.int().min(1).optional(),
});
export type EventJobData = z.infer<typeof eventJobData>;
