// Events of one kind (payments, seats) keep their own order on a chain: one older than the last
// applied is stale, so an event delayed on its way (a retry, a lock) never undoes a newer one.
import { formatInstant } from '../format.js';

/** Where an event stands in its chain's order. */
export interface EventOrder {
  /** When it occurred (epoch seconds). */
  occurredAt: number;
  /** The order intake accepted it in; null for an event enqueued before intake numbered them. */
  sequence: number | null;
}

/**
 * Whether `event` is older than the last applied event of its kind. Two that occurred in the
 * same second go in the order intake accepted them when both are numbered (a payment.received
 * sent right after a payment.overdue is never undone by that notice reaching the chain second);
 * otherwise the same second is applied.
 */
export function isStaleEvent(event: EventOrder, lastApplied: EventOrder | null): boolean {
  if (lastApplied === null) return false;
  if (event.occurredAt !== lastApplied.occurredAt) return event.occurredAt < lastApplied.occurredAt;
  return (
    event.sequence !== null &&
    lastApplied.sequence !== null &&
    event.sequence < lastApplied.sequence
  );
}

/** Where an event of a job's data stands: its time and intake's number, when it has one. */
export function eventOrderOf(event: {
  occurredAt: number;
  sequence?: number | null | undefined;
}): EventOrder {
  return { occurredAt: event.occurredAt, sequence: event.sequence ?? null };
}

/** The last applied event of a kind as a chain keeps it, or null before the first. */
export function lastAppliedEvent(
  occurredAt: number | null,
  sequence: number | null | undefined,
): EventOrder | null {
  return occurredAt === null ? null : { occurredAt, sequence: sequence ?? null };
}

/**
 * Why a stale event is ignored, in the chain's history; `kind` names the events of its order
 * ('payment', 'seat').
 */
export function staleEventReason(event: EventOrder, lastApplied: EventOrder, kind: string): string {
  const at = formatInstant(event.occurredAt);
  return event.occurredAt === lastApplied.occurredAt
    ? `event of ${at} was accepted before the last applied ${kind} event of the same second`
    : `event of ${at} is older than the last applied ${kind} event (${formatInstant(lastApplied.occurredAt)})`;
}
