// Term arithmetic: calendar months and years from a billing anchor, clamped to month ends, in UTC.

/** The length of one term: one calendar month or one calendar year. */
export type Duration = 'monthly' | 'yearly';

export const SECONDS_PER_DAY = 86400;

const MONTHS_PER_TERM: Readonly<Record<Duration, number>> = { monthly: 1, yearly: 12 };

/** Days in a UTC calendar month; `month` is 0-based and may run past 11 into later years. */
function daysInMonth(year: number, month: number): number {
  return new Date(Date.UTC(year, month + 1, 0)).getUTCDate();
}

function assertCount(field: string, value: number, min: number): void {
  if (!Number.isSafeInteger(value) || value < min) {
    throw new RangeError(`${field} must be an integer >= ${min}, got ${value}`);
  }
}

/**
 * The instant `n` terms after `anchor`, both in UTC epoch seconds, keeping the time of day.
 *
 * The day of month is the anchor's, clamped to the last day of a shorter month: an anchor on
 * Jan 31 gives Feb 28 (Feb 29 in leap years), Mar 31, Apr 30; yearly from Feb 29 gives Feb 28 in
 * common years. It is always computed from the anchor, never by chaining terms, because chaining
 * would lose the 31st after the first short month and drift for good.
 *
 * @param n a non-negative integer; throws RangeError otherwise (a caller bug, not an outcome).
 */
export function addTerms(anchor: number, duration: Duration, n: number): number {
  assertCount('n', n, 0);
  const start = new Date(anchor * 1000);
  const year = start.getUTCFullYear();
  const month = start.getUTCMonth();
  const day = start.getUTCDate();
  const secondOfDay = anchor - Date.UTC(year, month, day) / 1000;
  // Date.UTC carries a month index past 11 into the following years.
  const targetMonth = month + n * MONTHS_PER_TERM[duration];
  const targetDay = Math.min(day, daysInMonth(year, targetMonth));
  return Date.UTC(year, targetMonth, targetDay) / 1000 + secondOfDay;
}

/**
 * The k-th term (1-based) of a chain anchored at `anchor`: the half-open interval
 * `[startsAt, expiresAt)` in UTC epoch seconds, from anchor + (k-1) terms to anchor + k terms.
 *
 * @param k an integer >= 1; throws RangeError otherwise (a caller bug, not an outcome).
 */
export function termBounds(
  anchor: number,
  duration: Duration,
  k: number,
): { startsAt: number; expiresAt: number } {
  assertCount('k', k, 1);
  return { startsAt: addTerms(anchor, duration, k - 1), expiresAt: addTerms(anchor, duration, k) };
}

/**
 * Whole days left from `now` until `expiresAt` (both epoch seconds), rounded up, so 23.1 days
 * left is 24; 0 once `now >= expiresAt`.
 */
export function remainingDays(now: number, expiresAt: number): number {
  return Math.max(0, Math.ceil((expiresAt - now) / SECONDS_PER_DAY));
}
