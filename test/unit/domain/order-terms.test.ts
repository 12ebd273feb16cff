// Chain terms: the first term, where each renewal's term lies, and that chains never drift.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  type ChainTerms,
  firstTerm,
  type PlannedTerm,
  planRenewalTerm,
} from '../../../src/domain/order-terms.js';
import { addTerms, type Duration, SECONDS_PER_DAY } from '../../../src/domain/periods.js';

const DAY = SECONDS_PER_DAY;
const WINDOW = 15;

/** Epoch seconds for a UTC wall-clock time; `month` is 1-based, as people write dates. */
function utc(year: number, month: number, day: number, h = 0, m = 0, s = 0): number {
  return Date.UTC(year, month - 1, day, h, m, s) / 1000;
}

/** The UTC instant as `YYYY-MM-DDTHH:MM:SS`, so failures read as dates. */
function iso(seconds: number): string {
  return new Date(seconds * 1000).toISOString().slice(0, 19);
}

function termsOf(term: PlannedTerm, duration: Duration): ChainTerms {
  return { duration, ...term };
}

/** Plans the next term and fails the test when it is refused. */
function renew(chain: ChainTerms, now: number, requestedStartsAt?: number): PlannedTerm {
  const plan = planRenewalTerm({ chain, now, windowDays: WINDOW, requestedStartsAt });
  if (plan.kind !== 'term') throw new Error(`expected a term, got ${JSON.stringify(plan)}`);
  const { kind: _kind, ...term } = plan;
  return term;
}

describe('firstTerm', () => {
  it('starts at the given time, lasts one term and anchors the chain as term 1', () => {
    const startsAt = utc(2025, 1, 31, 9, 30);
    expect(firstTerm({ startsAt, duration: 'monthly' })).toEqual({
      count: 1,
      startsAt,
      expiresAt: utc(2025, 2, 28, 9, 30),
      anchor: startsAt,
      anchorTerm: 1,
    });
  });

  it('runs a yearly term from Feb 29 to Feb 28 of the next year', () => {
    const startsAt = utc(2024, 2, 29);
    expect(iso(firstTerm({ startsAt, duration: 'yearly' }).expiresAt)).toBe('2025-02-28T00:00:00');
  });
});

describe('planRenewalTerm', () => {
  const first = firstTerm({ startsAt: utc(2025, 1, 31), duration: 'monthly' });
  const chain = termsOf(first, 'monthly');

  describe('before the renewal window opens', () => {
    it('refuses with the remaining days and the window', () => {
      const now = first.expiresAt - 23 * DAY;
      expect(planRenewalTerm({ chain, now, windowDays: WINDOW })).toEqual({
        kind: 'refused',
        reason: 'window',
        remainingDays: 23,
        windowDays: WINDOW,
      });
    });

    it('refuses one second before the window opens and accepts at its opening', () => {
      const opens = first.expiresAt - WINDOW * DAY;
      expect(planRenewalTerm({ chain, now: opens - 1, windowDays: WINDOW })).toMatchObject({
        kind: 'refused',
        reason: 'window',
        remainingDays: WINDOW + 1,
      });
      expect(planRenewalTerm({ chain, now: opens, windowDays: WINDOW }).kind).toBe('term');
    });
  });

  describe('with a requested start inside the current term', () => {
    it('refuses the overlap', () => {
      const now = first.expiresAt - DAY;
      expect(
        planRenewalTerm({ chain, now, windowDays: WINDOW, requestedStartsAt: first.expiresAt - 1 }),
      ).toEqual({
        kind: 'refused',
        reason: 'overlap',
        startsAt: first.expiresAt - 1,
        currentExpiresAt: first.expiresAt,
      });
    });
  });

  describe('inside the window, before the term ends', () => {
    it('continues at the end of the term, keeping the anchor: Jan 31, Feb 28, Mar 31, Apr 30', () => {
      const second = renew(chain, first.expiresAt - DAY);
      expect(second).toEqual({
        count: 2,
        startsAt: first.expiresAt,
        expiresAt: utc(2025, 3, 31),
        anchor: first.anchor,
        anchorTerm: 1,
      });
      const third = renew(termsOf(second, 'monthly'), second.expiresAt - DAY);
      expect([iso(third.startsAt), iso(third.expiresAt)]).toEqual([
        '2025-03-31T00:00:00',
        '2025-04-30T00:00:00',
      ]);
      expect(third).toMatchObject({ count: 3, anchor: first.anchor, anchorTerm: 1 });
    });

    it('continues at the end when the requested start is exactly the end', () => {
      const second = renew(chain, first.expiresAt - DAY, first.expiresAt);
      expect(second).toMatchObject({ startsAt: first.expiresAt, anchor: first.anchor });
      expect(iso(second.expiresAt)).toBe('2025-03-31T00:00:00');
    });
  });

  describe('at the very second the term ends (expired, but no gap)', () => {
    it('keeps the anchor, ending as a renewal a second earlier does: Feb 28 → Mar 31', () => {
      const atEnd = renew(chain, first.expiresAt);
      expect(atEnd).toEqual(renew(chain, first.expiresAt - 1));
      expect(atEnd).toMatchObject({ startsAt: first.expiresAt, anchor: first.anchor });
      expect(iso(atEnd.expiresAt)).toBe('2025-03-31T00:00:00');
      // A second later there is a gap: a new anchor, a month from then.
      expect(iso(renew(chain, first.expiresAt + 1).expiresAt)).toBe('2025-03-28T00:00:01');
    });
  });

  describe('after a gap', () => {
    it('starts an expired chain now, with a new anchor at that term', () => {
      const now = utc(2025, 3, 3, 12);
      expect(renew(chain, now)).toEqual({
        count: 2,
        startsAt: now,
        expiresAt: utc(2025, 4, 3, 12),
        anchor: now,
        anchorTerm: 2,
      });
    });

    it('starts an expired chain now when the requested start (its old end) has passed', () => {
      const now = utc(2025, 5, 10, 12);
      expect(renew(chain, now, first.expiresAt)).toEqual({
        count: 2,
        startsAt: now,
        expiresAt: utc(2025, 6, 10, 12),
        anchor: now,
        anchorTerm: 2,
      });
    });

    it('keeps a requested start after the gap that is still ahead', () => {
      const now = utc(2025, 3, 3, 12);
      const startsAt = utc(2025, 3, 10);
      expect(renew(chain, now, startsAt)).toMatchObject({ startsAt, anchor: startsAt });
    });

    it('anchors a requested later start and keeps that anchor for the terms after it', () => {
      const startsAt = utc(2025, 3, 31);
      const second = renew(chain, first.expiresAt - DAY, startsAt);
      expect(second).toEqual({
        count: 2,
        startsAt,
        expiresAt: utc(2025, 4, 30),
        anchor: startsAt,
        anchorTerm: 2,
      });
      const third = renew(termsOf(second, 'monthly'), second.expiresAt - DAY);
      expect(iso(third.expiresAt)).toBe('2025-05-31T00:00:00');
      expect(third).toMatchObject({ count: 3, anchor: startsAt, anchorTerm: 2 });
    });
  });
});

/** Written out from the Gregorian rules, independently of the code under test. */
function daysInMonth(year: number, month: number): number {
  if (month === 2) return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0 ? 29 : 28;
  return [4, 6, 9, 11].includes(month) ? 30 : 31;
}

/** Whether `at` falls on the anchor's day of month (clamped) at the anchor's time of day. */
function onAnchorDay(anchor: number, at: number): boolean {
  const a = new Date(anchor * 1000);
  const d = new Date(at * 1000);
  const day = Math.min(a.getUTCDate(), daysInMonth(d.getUTCFullYear(), d.getUTCMonth() + 1));
  return d.getUTCDate() === day && anchor % DAY === at % DAY;
}

const anchorArb = fc.oneof(
  fc.integer({ min: utc(1970, 1, 1), max: utc(2090, 12, 31) }),
  fc
    .record({
      year: fc.integer({ min: 1970, max: 2090 }),
      month: fc.integer({ min: 1, max: 12 }),
      back: fc.integer({ min: 0, max: 3 }),
      second: fc.integer({ min: 0, max: DAY - 1 }),
    })
    .map(
      ({ year, month, back, second }) => utc(year, month, daysInMonth(year, month) - back) + second,
    ),
);
const durationArb = fc.constantFrom<Duration>('monthly', 'yearly');
const windowDaysArb = fc.integer({ min: 1, max: 28 });
/** Where inside the window (a fraction of it) each renewal happens, one per renewal. */
const pointsArb = fc.array(fc.double({ min: 0, max: 1, noNaN: true }), {
  minLength: 1,
  maxLength: 40,
});

describe('chain term properties', () => {
  it('renewing term after term inside the window yields contiguous terms on the anchor day', () => {
    fc.assert(
      fc.property(
        anchorArb,
        durationArb,
        windowDaysArb,
        pointsArb,
        (anchor, duration, windowDays, points) => {
          let chain = termsOf(firstTerm({ startsAt: anchor, duration }), duration);
          for (const point of points) {
            const opens = chain.expiresAt - windowDays * DAY;
            const now = Math.min(chain.expiresAt - 1, opens + Math.floor(point * windowDays * DAY));
            const plan = planRenewalTerm({ chain, now, windowDays });
            if (plan.kind !== 'term') throw new Error(`refused: ${JSON.stringify(plan)}`);
            expect(plan.count).toBe(chain.count + 1);
            expect(plan.startsAt).toBe(chain.expiresAt);
            expect(plan.expiresAt).toBeGreaterThan(plan.startsAt);
            expect(plan.anchor).toBe(anchor);
            expect(plan.anchorTerm).toBe(1);
            expect(plan.expiresAt).toBe(addTerms(anchor, duration, plan.count));
            expect(onAnchorDay(anchor, plan.expiresAt)).toBe(true);
            chain = termsOf(plan, duration);
          }
        },
      ),
    );
  });

  it('after gaps, each term starts at or after the previous end and follows its own anchor', () => {
    fc.assert(
      fc.property(
        anchorArb,
        durationArb,
        windowDaysArb,
        fc.array(
          fc.oneof(
            fc.double({ min: 0, max: 1, noNaN: true }).map((point) => ({ gap: 0, point })),
            fc.integer({ min: 0, max: 400 * DAY }).map((gap) => ({ gap, point: 0 })),
          ),
          { minLength: 1, maxLength: 30 },
        ),
        (anchor, duration, windowDays, steps) => {
          let chain = termsOf(firstTerm({ startsAt: anchor, duration }), duration);
          for (const { gap, point } of steps) {
            const opens = chain.expiresAt - windowDays * DAY;
            const now =
              gap > 0
                ? chain.expiresAt + gap
                : Math.min(chain.expiresAt - 1, opens + Math.floor(point * windowDays * DAY));
            const plan = planRenewalTerm({ chain, now, windowDays });
            if (plan.kind !== 'term') throw new Error(`refused: ${JSON.stringify(plan)}`);
            expect(plan.startsAt).toBe(gap > 0 ? now : chain.expiresAt);
            expect(plan.expiresAt).toBeGreaterThan(plan.startsAt);
            expect(plan.expiresAt).toBe(
              addTerms(plan.anchor, duration, plan.count - plan.anchorTerm + 1),
            );
            expect(onAnchorDay(plan.anchor, plan.expiresAt)).toBe(true);
            if (gap > 0) expect([plan.anchor, plan.anchorTerm]).toEqual([now, plan.count]);
            else expect([plan.anchor, plan.anchorTerm]).toEqual([chain.anchor, chain.anchorTerm]);
            chain = termsOf(plan, duration);
          }
        },
      ),
    );
  });
});
