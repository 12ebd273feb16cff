// Term arithmetic: month-end clamping examples plus fast-check properties over 1970..2100.
import fc from 'fast-check';
import { DateTime } from 'luxon';
import { describe, expect, it } from 'vitest';
import {
  addTerms,
  type Duration,
  remainingDays,
  SECONDS_PER_DAY,
  termBounds,
} from '../../../src/domain/periods.js';

/** Epoch seconds for a UTC wall-clock time; `month` is 1-based, as people write dates. */
function utc(year: number, month: number, day: number, h = 0, m = 0, s = 0): number {
  return Date.UTC(year, month - 1, day, h, m, s) / 1000;
}

/** The UTC instant as `YYYY-MM-DDTHH:MM:SS`, so failures read as dates. */
function iso(seconds: number): string {
  return new Date(seconds * 1000).toISOString().slice(0, 19);
}

function parts(seconds: number): { year: number; month: number; day: number; second: number } {
  const d = new Date(seconds * 1000);
  return {
    year: d.getUTCFullYear(),
    month: d.getUTCMonth() + 1,
    day: d.getUTCDate(),
    second: ((seconds % SECONDS_PER_DAY) + SECONDS_PER_DAY) % SECONDS_PER_DAY,
  };
}

/** Written out from the Gregorian rules, independently of the code under test. */
function isLeapYear(year: number): boolean {
  return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
}

function daysInMonth(year: number, month: number): number {
  if (month === 2) return isLeapYear(year) ? 29 : 28;
  return [4, 6, 9, 11].includes(month) ? 30 : 31;
}

const FIRST = utc(1970, 1, 1);
const LAST = utc(2100, 12, 31, 23, 59, 59);

/** Any second in 1970..2100, or one near a month end (the last four days), where clamping bites. */
const anchorArb = fc.oneof(
  fc.integer({ min: FIRST, max: LAST }),
  fc
    .record({
      year: fc.integer({ min: 1970, max: 2100 }),
      month: fc.integer({ min: 1, max: 12 }),
      back: fc.integer({ min: 0, max: 3 }),
      second: fc.integer({ min: 0, max: SECONDS_PER_DAY - 1 }),
    })
    .map(({ year, month, back, second }) => {
      return utc(year, month, daysInMonth(year, month) - back) + second;
    }),
);
const durationArb = fc.constantFrom<Duration>('monthly', 'yearly');
const nArb = fc.integer({ min: 0, max: 1200 });
const kArb = fc.integer({ min: 1, max: 1200 });

describe('addTerms', () => {
  describe('monthly from Jan 31 2025', () => {
    const anchor = utc(2025, 1, 31);

    it('clamps to Feb 28 and returns to the 31st in March, then clamps to Apr 30', () => {
      expect([1, 2, 3, 4].map((n) => iso(addTerms(anchor, 'monthly', n)))).toEqual([
        '2025-02-28T00:00:00',
        '2025-03-31T00:00:00',
        '2025-04-30T00:00:00',
        '2025-05-31T00:00:00',
      ]);
    });

    it('keeps the 31st after a year of terms, with no drift from the short months', () => {
      expect(iso(addTerms(anchor, 'monthly', 12))).toBe('2026-01-31T00:00:00');
      expect(iso(addTerms(anchor, 'monthly', 1200))).toBe('2125-01-31T00:00:00');
    });
  });

  it('clamps Jan 31 to Feb 29 in a leap year', () => {
    expect(iso(addTerms(utc(2024, 1, 31), 'monthly', 1))).toBe('2024-02-29T00:00:00');
  });

  it('clamps Jan 30 and Jan 29 to the last day of February too', () => {
    expect(iso(addTerms(utc(2025, 1, 30), 'monthly', 1))).toBe('2025-02-28T00:00:00');
    expect(iso(addTerms(utc(2025, 1, 29), 'monthly', 1))).toBe('2025-02-28T00:00:00');
    expect(iso(addTerms(utc(2025, 1, 30), 'monthly', 2))).toBe('2025-03-30T00:00:00');
  });

  it('keeps the time of day of the anchor', () => {
    const anchor = utc(2025, 1, 31, 13, 45, 7);
    expect(iso(addTerms(anchor, 'monthly', 1))).toBe('2025-02-28T13:45:07');
    expect(iso(addTerms(anchor, 'yearly', 3))).toBe('2028-01-31T13:45:07');
  });

  it('rolls December over into January of the next year', () => {
    expect(iso(addTerms(utc(2025, 12, 15, 8), 'monthly', 1))).toBe('2026-01-15T08:00:00');
    expect(iso(addTerms(utc(2025, 12, 31), 'monthly', 2))).toBe('2026-02-28T00:00:00');
    expect(iso(addTerms(utc(2025, 12, 31), 'monthly', 14))).toBe('2027-02-28T00:00:00');
  });

  describe('yearly from Feb 29 2024', () => {
    const anchor = utc(2024, 2, 29, 6);

    it('clamps to Feb 28 in common years and returns to Feb 29 in the next leap year', () => {
      expect([1, 2, 3, 4].map((n) => iso(addTerms(anchor, 'yearly', n)))).toEqual([
        '2025-02-28T06:00:00',
        '2026-02-28T06:00:00',
        '2027-02-28T06:00:00',
        '2028-02-29T06:00:00',
      ]);
    });

    it('clamps to Feb 28 in 2100, which is not a leap year', () => {
      expect(iso(addTerms(anchor, 'yearly', 76))).toBe('2100-02-28T06:00:00');
      expect(iso(addTerms(anchor, 'yearly', 80))).toBe('2104-02-29T06:00:00');
    });
  });

  it('returns the anchor itself for zero terms', () => {
    expect(addTerms(utc(2025, 1, 31, 12), 'monthly', 0)).toBe(utc(2025, 1, 31, 12));
  });

  it('refuses a negative or fractional count of terms, naming the value', () => {
    expect(() => addTerms(utc(2025, 1, 1), 'monthly', -1)).toThrow(
      new RangeError('n must be an integer >= 0, got -1'),
    );
    expect(() => addTerms(utc(2025, 1, 1), 'monthly', 1.5)).toThrow(RangeError);
  });

  describe('for any anchor in 1970..2100 and up to 1200 terms', () => {
    it('returns the anchor for zero terms', () => {
      fc.assert(
        fc.property(anchorArb, durationArb, (anchor, duration) => {
          expect(addTerms(anchor, duration, 0)).toBe(anchor);
        }),
      );
    });

    it('lands on the anchor day, or on the last day of a month too short for it', () => {
      fc.assert(
        fc.property(anchorArb, durationArb, nArb, (anchor, duration, n) => {
          const a = parts(anchor);
          const end = parts(addTerms(anchor, duration, n));
          const monthsAfter = a.month - 1 + n * (duration === 'monthly' ? 1 : 12);
          expect(end.year).toBe(a.year + Math.floor(monthsAfter / 12));
          expect(end.month).toBe((monthsAfter % 12) + 1);
          expect(end.day).toBe(Math.min(a.day, daysInMonth(end.year, end.month)));
          expect(end.second).toBe(a.second);
        }),
      );
    });

    it('agrees with luxon adding calendar months or years in UTC', () => {
      fc.assert(
        fc.property(anchorArb, durationArb, nArb, (anchor, duration, n) => {
          const start = DateTime.fromSeconds(anchor, { zone: 'utc' });
          const end = duration === 'monthly' ? start.plus({ months: n }) : start.plus({ years: n });
          expect(addTerms(anchor, duration, n)).toBe(end.toSeconds());
        }),
      );
    });

    it('grows strictly with the number of terms', () => {
      fc.assert(
        fc.property(anchorArb, durationArb, nArb, nArb, (anchor, duration, n1, n2) => {
          fc.pre(n1 !== n2);
          const [lo, hi] = n1 < n2 ? [n1, n2] : [n2, n1];
          expect(addTerms(anchor, duration, lo)).toBeLessThan(addTerms(anchor, duration, hi));
        }),
      );
    });
  });
});

describe('termBounds', () => {
  it('counts terms from the anchor, 1-based: Jan 31, Feb 28, Mar 31, Apr 30', () => {
    const anchor = utc(2025, 1, 31);
    const terms = [1, 2, 3].map((k) => termBounds(anchor, 'monthly', k));
    expect(terms.map((t) => [iso(t.startsAt), iso(t.expiresAt)])).toEqual([
      ['2025-01-31T00:00:00', '2025-02-28T00:00:00'],
      ['2025-02-28T00:00:00', '2025-03-31T00:00:00'],
      ['2025-03-31T00:00:00', '2025-04-30T00:00:00'],
    ]);
  });

  it('makes the first term start at the anchor', () => {
    expect(termBounds(utc(2024, 2, 29), 'yearly', 1)).toEqual({
      startsAt: utc(2024, 2, 29),
      expiresAt: utc(2025, 2, 28),
    });
  });

  it('refuses term number 0, since terms are numbered from 1', () => {
    expect(() => termBounds(utc(2025, 1, 1), 'monthly', 0)).toThrow(
      new RangeError('k must be an integer >= 1, got 0'),
    );
  });

  describe('for any anchor in 1970..2100 and up to 1200 terms', () => {
    it('ends term k exactly where term k+1 starts, leaving no gap or overlap', () => {
      fc.assert(
        fc.property(anchorArb, durationArb, kArb, (anchor, duration, k) => {
          const term = termBounds(anchor, duration, k);
          expect(termBounds(anchor, duration, k + 1).startsAt).toBe(term.expiresAt);
        }),
      );
    });

    it('ends every term after it starts', () => {
      fc.assert(
        fc.property(anchorArb, durationArb, kArb, (anchor, duration, k) => {
          const { startsAt, expiresAt } = termBounds(anchor, duration, k);
          expect(expiresAt).toBeGreaterThan(startsAt);
        }),
      );
    });

    it('makes a monthly term 28 to 31 days long', () => {
      fc.assert(
        fc.property(anchorArb, kArb, (anchor, k) => {
          const { startsAt, expiresAt } = termBounds(anchor, 'monthly', k);
          const days = (expiresAt - startsAt) / SECONDS_PER_DAY;
          expect(Number.isInteger(days)).toBe(true);
          expect(days).toBeGreaterThanOrEqual(28);
          expect(days).toBeLessThanOrEqual(31);
        }),
      );
    });

    it('makes a yearly term 365 or 366 days long', () => {
      fc.assert(
        fc.property(anchorArb, kArb, (anchor, k) => {
          const { startsAt, expiresAt } = termBounds(anchor, 'yearly', k);
          expect([365, 366]).toContain((expiresAt - startsAt) / SECONDS_PER_DAY);
        }),
      );
    });
  });
});

describe('remainingDays', () => {
  const expiresAt = utc(2025, 3, 31);

  it('rounds a part day up: 23.1 days left is 24', () => {
    expect(remainingDays(expiresAt - 23.1 * SECONDS_PER_DAY, expiresAt)).toBe(24);
  });

  it('counts exactly 23 days as 23', () => {
    expect(remainingDays(expiresAt - 23 * SECONDS_PER_DAY, expiresAt)).toBe(23);
  });

  it('counts a single second left as one day', () => {
    expect(remainingDays(expiresAt - 1, expiresAt)).toBe(1);
  });

  it('is 0 at the end of the term and after it', () => {
    expect(remainingDays(expiresAt, expiresAt)).toBe(0);
    expect(remainingDays(expiresAt + 40 * SECONDS_PER_DAY, expiresAt)).toBe(0);
  });

  it('is the smallest whole number of days that covers the time left', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: FIRST, max: LAST }),
        fc.integer({ min: FIRST, max: LAST }),
        (now, end) => {
          const days = remainingDays(now, end);
          if (end <= now) {
            expect(days).toBe(0);
          } else {
            expect(days * SECONDS_PER_DAY).toBeGreaterThanOrEqual(end - now);
            expect((days - 1) * SECONDS_PER_DAY).toBeLessThan(end - now);
          }
        },
      ),
    );
  });
});
