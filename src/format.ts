// How instants read in history entries, logs and CLI tables.

/** `2026-02-15T12:00:00Z` for epoch seconds (UTC, whole seconds). */
export function formatInstant(epochSeconds: number): string {
  return new Date(epochSeconds * 1000).toISOString().replace('.000Z', 'Z');
}
