// What a chain remembers of the seat and payment events it applied, so that a job run again
// never applies its event twice, and yet a webhook id the intake forgot (WEBHOOK_DEDUP_DAYS) and
// a producer sent again with another event is that other event, not the one applied.
import { fingerprint } from '../provisioning/fingerprint.js';

/** No header value carries a line feed, so no webhook id holds one. */
const SEPARATOR = '\n';

/**
 * What tells events under one webhook id apart: a digest of their type and data (the
 * timestamps, and keys left undefined, do not count). The intake and the chains both use it.
 */
export function eventDigest(event: { type: string; data: unknown }): string {
  return fingerprint(event.type, event.data);
}

/** An event as a chain remembers it: its webhook id and its digest. */
export function eventMark(event: { webhookId: string; type: string; data: unknown }): string {
  return `${event.webhookId}${SEPARATOR}${eventDigest(event)}`;
}

/** The webhook id a mark (or a bare webhook id, as older records and intents hold) names. */
export function markedWebhookId(mark: string): string {
  const at = mark.indexOf(SEPARATOR);
  return at === -1 ? mark : mark.slice(0, at);
}

/**
 * Whether two marks name one event. Records written before marks hold bare webhook ids, and
 * intents written before them carry one: either side bare compares the ids alone, as those
 * records did.
 */
export function sameEvent(a: string, b: string): boolean {
  if (a === b) return true;
  const id = markedWebhookId(a);
  return (id === a || markedWebhookId(b) === b) && id === markedWebhookId(b);
}

/** Whether `marks` hold the event that `mark` names. */
export function remembersEvent(marks: readonly string[], mark: string): boolean {
  return marks.some((m) => sameEvent(m, mark));
}

/** `marks` with `mark` last, at most `limit` of them. */
export function withEventMark(marks: readonly string[], mark: string, limit: number): string[] {
  return [...marks.filter((m) => m !== mark), mark].slice(-limit);
}

/** The mark of a seat event as intents and waiting add-ons carry it (older ones: its webhook id). */
export function markOf(event: { webhookId: string; mark?: string | undefined }): string {
  return event.mark ?? event.webhookId;
}
