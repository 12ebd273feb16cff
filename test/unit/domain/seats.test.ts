// Seat changes: every branch of planSeatChange and allocateNextLicenses, plus fast-check
// properties over whole terms of seat events (licenses bought never exceed the peak above paid).
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SECONDS_PER_DAY } from '../../../src/domain/periods.js';
import {
  allocateNextLicenses,
  type KeptLicenses,
  keepLicensesUntil,
  planSeatChange,
  renewalLicenses,
  type SeatChangeInput,
  type SeatDecision,
} from '../../../src/domain/seats.js';

const DAY = SECONDS_PER_DAY;
const utc = (year: number, month: number, day: number) => Date.UTC(year, month - 1, day) / 1000;

type PartTime = NonNullable<SeatChangeInput['partTime']>[number];

const termEnd = utc(2025, 7, 1);
const now = utc(2025, 3, 10);

/** The decision to buy `licenses` for [startsAt, endsAt), with `rest` false unless said. */
function buy(
  total: number,
  licenses: number,
  startsAt: number,
  endsAt: number,
  { rest = false }: { rest?: boolean } = {},
): SeatDecision {
  return { kind: 'buy', total, licenses, startsAt, endsAt, rest };
}

function plan(overrides: Partial<SeatChangeInput> = {}): SeatDecision {
  return planSeatChange({
    total: 12,
    paid: 10,
    neededAt: now,
    now,
    termEnd,
    style: 'coterm',
    runsOn: () => true,
    occurredAt: now,
    lastAppliedAt: null,
    ...overrides,
  });
}

describe('planSeatChange', () => {
  describe('when the event is older than the last applied seat event', () => {
    it('is stale and buys nothing, even for an increase', () => {
      expect(plan({ total: 50, occurredAt: now - 1, lastAppliedAt: now })).toEqual({
        kind: 'stale',
        lastApplied: { occurredAt: now, sequence: null },
      });
    });

    it('applies an event that occurred at the same instant as the last applied one', () => {
      expect(plan({ occurredAt: now, lastAppliedAt: now })).toMatchObject({
        kind: 'buy',
        licenses: 2,
      });
    });

    it('applies a newer event', () => {
      expect(plan({ occurredAt: now + 1, lastAppliedAt: now })).toMatchObject({ kind: 'buy' });
    });

    it('never treats the first seat event of a chain as stale', () => {
      expect(plan({ occurredAt: 0, lastAppliedAt: null })).toMatchObject({ kind: 'buy' });
    });
  });

  describe('for a first term ordered to start later', () => {
    it('buys from the day the term starts, not from now or an earlier date needed', () => {
      const servedFrom = now + 19 * DAY;
      expect(plan({ servedFrom })).toEqual(buy(12, 2, servedFrom, termEnd));
      expect(plan({ servedFrom, neededAt: now + DAY })).toEqual(buy(12, 2, servedFrom, termEnd));
      expect(plan({ servedFrom, neededAt: servedFrom + DAY })).toEqual(
        buy(12, 2, servedFrom + DAY, termEnd),
      );
    });
  });

  describe('when the total is needed at or after the end of the latest ordered term', () => {
    it('only sets the next renewal count when needed exactly at the end of the term', () => {
      expect(plan({ total: 40, neededAt: termEnd })).toEqual({
        kind: 'next_renewal_only',
        total: 40,
        reason: 'after_term',
      });
    });

    it('only sets the next renewal count when needed after the end of the term', () => {
      expect(plan({ total: 40, neededAt: termEnd + 30 * DAY })).toEqual({
        kind: 'next_renewal_only',
        total: 40,
        reason: 'after_term',
      });
    });

    it('buys for the last second of the term, which is still inside it', () => {
      expect(plan({ total: 40, neededAt: termEnd - 1 })).toEqual(buy(40, 30, termEnd - 1, termEnd));
    });

    it('only sets the next renewal count when a past date is handled after the term ended', () => {
      expect(plan({ total: 40, neededAt: now, now: termEnd })).toEqual({
        kind: 'next_renewal_only',
        total: 40,
        reason: 'after_term',
      });
    });
  });

  describe('when the date needed is in the past', () => {
    it('buys from now, not from the past date', () => {
      expect(plan({ total: 15, neededAt: now - 20 * DAY })).toEqual(buy(15, 5, now, termEnd));
    });
  });

  describe('when the total is needed inside the term', () => {
    it('buys nothing for a decrease, which takes effect at the next renewal', () => {
      expect(plan({ total: 7, paid: 10 })).toEqual({
        kind: 'next_renewal_only',
        total: 7,
        reason: 'decrease',
      });
    });

    it('buys nothing when the total is already paid', () => {
      expect(plan({ total: 10, paid: 10 })).toEqual({
        kind: 'next_renewal_only',
        total: 10,
        reason: 'already_paid',
      });
    });

    it('buys the total minus what is paid, from the date needed to the end of the term', () => {
      const neededAt = now + 5 * DAY;
      expect(plan({ total: 25, paid: 10, neededAt })).toEqual(buy(25, 15, neededAt, termEnd));
    });
  });

  describe('after a renewal ordered ahead of time (two terms ahead, each with its own count)', () => {
    // The term in force ends at `renewedAt`, where the term ordered ahead starts.
    const renewedAt = now + 5 * DAY;
    const ahead = (
      inForce: number,
      ordered: number,
      total: number,
      at = now,
      style: SeatChangeInput['style'] = 'coterm',
    ) =>
      plan({
        total,
        paid: ordered,
        termInForce: { endsAt: renewedAt, paid: inForce },
        now: at,
        neededAt: at,
        style,
      });

    it('buys for the rest of the term in force when only it is short, ending with it', () => {
      // 5 in force, 8 already ordered for the next term (an increase asked from then on).
      expect(ahead(5, 8, 8)).toEqual(buy(8, 3, now, renewedAt));
    });

    it('buys from the start of the term ordered when only it is short', () => {
      // 10 in force, the next term ordered with 6 after a decrease; 8 needed now.
      expect(ahead(10, 6, 8)).toEqual(buy(8, 2, renewedAt, termEnd));
    });

    it('buys what the next term lacks over both terms when it lacks more', () => {
      // 5 in force, 4 ordered, 9 needed: the next term lacks 5, the term in force 4.
      expect(ahead(5, 4, 9)).toEqual(buy(9, 5, now, termEnd));
    });

    it('leaves the rest of a term in force that lacks more to a second partial', () => {
      // 5 in force, 8 ordered, 9 needed: 1 across both terms, then 3 ending with the term in force.
      expect(ahead(5, 8, 9)).toEqual(buy(9, 1, now, termEnd, { rest: true }));
      expect(ahead(6, 9, 9)).toEqual(buy(9, 3, now, renewedAt));
    });

    it('buys nothing when both terms have the total', () => {
      expect(ahead(8, 10, 8)).toEqual({
        kind: 'next_renewal_only',
        total: 8,
        reason: 'decrease',
      });
      expect(ahead(10, 8, 8)).toMatchObject({ kind: 'next_renewal_only', reason: 'already_paid' });
    });

    it('looks only at the term ordered once the term in force has ended', () => {
      expect(ahead(1, 8, 10, renewedAt)).toEqual(buy(10, 2, renewedAt, termEnd));
    });

    it('leaves no second short, never over-buys the next term, and needs at most two orders', () => {
      fc.assert(
        fc.property(
          fc.integer({ min: 0, max: 100 }),
          fc.integer({ min: 0, max: 100 }),
          fc.integer({ min: 1, max: 150 }),
          fc.integer({ min: now, max: termEnd - 1 }),
          (inForce, ordered, total, at) => {
            // What each term ahead holds, as the seat job buys and plans again.
            const held = { inForce: at < renewedAt ? inForce : null, ordered };
            let orders = 0;
            for (;;) {
              const decision =
                held.inForce === null
                  ? plan({ total, paid: held.ordered, now: at, neededAt: at })
                  : ahead(held.inForce, held.ordered, total, at);
              if (decision.kind !== 'buy') break;
              orders += 1;
              if (held.inForce !== null && decision.startsAt < renewedAt)
                held.inForce += decision.licenses;
              if (decision.endsAt > renewedAt || held.inForce === null)
                held.ordered += decision.licenses;
              if (!decision.rest) break;
            }
            expect(orders).toBeLessThanOrEqual(2);
            expect(held.ordered).toBe(Math.max(ordered, total));
            if (held.inForce !== null) {
              expect(held.inForce).toBeGreaterThanOrEqual(total);
              // Over-bought only when the next term lacked more, and by no more than that.
              const over = Math.max(0, total - ordered) - Math.max(0, total - inForce);
              expect(held.inForce).toBeLessThanOrEqual(
                Math.max(inForce, total) + Math.max(0, over),
              );
            }
          },
        ),
      );
    });

    describe('with add-ons, which run whole terms', () => {
      const addOn = (inForce: number, ordered: number, total: number) =>
        ahead(inForce, ordered, total, now, 'addon');

      it('buys nothing when only the term in force is short: the next term has the total', () => {
        expect(addOn(5, 8, 8)).toEqual({
          kind: 'next_renewal_only',
          total: 8,
          reason: 'next_term_has_it',
        });
      });

      it('sizes the add-on for the next term, from the first term short', () => {
        // 5 in force, 8 ordered, 9 needed: 1 more for the next term, bought from now.
        expect(addOn(5, 8, 9)).toEqual(buy(9, 1, now, termEnd));
        // 10 in force, 6 ordered (a decrease renewed), 8 needed: 2 from the next term's start.
        expect(addOn(10, 6, 8)).toMatchObject({ licenses: 2, startsAt: renewedAt });
      });

      it('never makes the next term carry more than the total', () => {
        fc.assert(
          fc.property(
            fc.integer({ min: 0, max: 100 }),
            fc.integer({ min: 0, max: 100 }),
            fc.integer({ min: 1, max: 150 }),
            (inForce, ordered, total) => {
              const decision = addOn(inForce, ordered, total);
              const bought = decision.kind === 'buy' ? decision.licenses : 0;
              expect(Math.max(ordered, total)).toBe(ordered + bought);
            },
          ),
        );
      });
    });
  });

  describe('with orders in force for part of a term (an add-on that stopped, one that starts later)', () => {
    /** Ends on `days` with nothing to renew it: not counted in `paid`. */
    const ending = (days: number, licenses: number) => ({
      startsAt: now - DAY,
      endsAt: now + days * DAY,
      licenses,
    });
    /** Starts on `days` and runs to the term's end: counted in `paid` (no gap orders). */
    const starting = (days: number, licenses: number) => ({
      startsAt: now + days * DAY,
      endsAt: termEnd,
      licenses,
    });

    it('buys what an ending order leaves missing from the day it ends, not from now', () => {
      // 10 paid to the end, 3 more until day 5: 12 are there until day 5.
      expect(plan({ total: 12, partTime: [ending(5, 3)] })).toEqual(
        buy(12, 2, now + 5 * DAY, termEnd),
      );
      // 14: 1 is missing even now, bought from now; the other 3 from day 5 (the rest).
      expect(plan({ total: 14, partTime: [ending(5, 3)] })).toEqual(
        buy(14, 1, now, termEnd, { rest: true }),
      );
    });

    it('buys in steps when orders end on different days, each from the day it is missing', () => {
      const partTime = [ending(10, 2), ending(5, 3)];
      // 13: 12 from day 5 (1 missing), 10 from day 10 (3 missing).
      expect(plan({ total: 13, partTime })).toEqual(
        buy(13, 1, now + 5 * DAY, termEnd, { rest: true }),
      );
      // Planned again once that one is recorded (it starts on day 5 and runs on): 2 from day 10.
      const first = { startsAt: now + 5 * DAY, endsAt: termEnd, licenses: 1 };
      expect(
        plan({ total: 13, paid: 11, neededAt: now + 5 * DAY, partTime: [...partTime, first] }),
      ).toEqual(buy(13, 2, now + 10 * DAY, termEnd));
      expect(plan({ total: 11, partTime })).toEqual(buy(11, 1, now + 10 * DAY, termEnd));
    });

    it('buys the rest of a term in force in steps too, around an order ending inside it', () => {
      // In force until day 5: 5, and an add-on of 2 until day 3; the next term ordered with 8.
      const renewedAt = now + 5 * DAY;
      const inForce = (paid: number, bought: { startsAt: number; licenses: number }[] = []) => ({
        endsAt: renewedAt,
        paid,
        partTime: [ending(3, 2), ...bought.map((b) => ({ ...b, endsAt: termEnd }))],
      });
      const ahead = (
        inForcePaid: number,
        ordered: number,
        bought: { startsAt: number; licenses: number }[] = [],
        neededAt = now,
      ) => plan({ total: 10, paid: ordered, termInForce: inForce(inForcePaid, bought), neededAt });
      // The next term's 2, over both terms; 3 are missing now, 5 from day 3.
      expect(ahead(5, 8)).toEqual(buy(10, 2, now, termEnd, { rest: true }));
      const p1 = { startsAt: now, licenses: 2 };
      // Then 1 now, ending with the term in force, and 2 more from day 3: never 3 from now.
      expect(ahead(7, 10, [p1])).toEqual(buy(10, 1, now, renewedAt, { rest: true }));
      expect(ahead(8, 10, [p1, { startsAt: now, licenses: 1 }])).toEqual(
        buy(10, 2, now + 3 * DAY, renewedAt),
      );
    });

    it('buys in one order when what it buys would not run on to the end of the term', () => {
      // In force until day 5: 10 and an add-on of 3 until day 2; the next term ordered with 10.
      // 14 needed: 1 is missing now, 4 from day 2.
      const asked: number[] = [];
      const twoTerms = (runsOn: boolean) =>
        plan({
          total: 14,
          paid: 10,
          termInForce: { endsAt: now + 5 * DAY, paid: 10, partTime: [ending(2, 3)] },
          style: 'addon',
          runsOn: (startsAt) => {
            asked.push(startsAt);
            return runsOn;
          },
        });
      expect(twoTerms(true)).toEqual(buy(14, 1, now, termEnd, { rest: true }));
      // An add-on bought now that will not renew ends inside the next term: a next step would
      // not count it and buy again. All 4 from now, in one add-on.
      expect(twoTerms(false)).toEqual(buy(14, 4, now, termEnd));
      expect(asked).toEqual([now, now]);
    });

    describe('when the next term still has the total when it starts (orders run into it)', () => {
      // In force until day 5: 5, and add-ons of 2 and 2 that end on days 8 and 12, inside the
      // next term, ordered with 8 (main only). 12 needed.
      const renewedAt = now + 5 * DAY;
      const runningInto = [
        { startsAt: now - DAY, endsAt: now + 8 * DAY, licenses: 2 },
        { startsAt: now - DAY, endsAt: now + 12 * DAY, licenses: 2 },
      ];
      const nextInput = (
        style: SeatChangeInput['style'],
        { inForce = 9, ordered = 8, bought = [] as PartTime[], neededAt = now } = {},
      ): Partial<SeatChangeInput> => ({
        total: 12,
        paid: ordered,
        partTime: [...runningInto, ...bought],
        termInForce: { endsAt: renewedAt, paid: inForce },
        neededAt,
        style,
      });
      const next = (style: SeatChangeInput['style'], held: Parameters<typeof nextInput>[1] = {}) =>
        plan(nextInput(style, held));

      it('buys the term in force alone, then the next term from each day it falls short', () => {
        expect(next('coterm')).toEqual(buy(12, 3, now, renewedAt, { rest: true }));
        expect(next('coterm', { inForce: 12 })).toEqual(
          buy(12, 2, now + 8 * DAY, termEnd, { rest: true }),
        );
        const p2 = { startsAt: now + 8 * DAY, endsAt: termEnd, licenses: 2 };
        expect(
          next('coterm', { inForce: 12, ordered: 10, bought: [p2], neededAt: now + 8 * DAY }),
        ).toEqual(buy(12, 2, now + 12 * DAY, termEnd));
      });

      it('leaves no day of either term short and pays no day of the next term twice', () => {
        const inside = (from: number, days: number) =>
          fc.integer({ min: 1, max: days - 1 }).map((d) => from + d * DAY);
        const orders = (from: number, days: number) =>
          fc.array(
            fc.record({ endsAt: inside(from, days), licenses: fc.integer({ min: 1, max: 20 }) }),
            {
              maxLength: 3,
            },
          );
        fc.assert(
          fc.property(
            fc.integer({ min: 0, max: 50 }),
            fc.integer({ min: 0, max: 50 }),
            orders(now, 5),
            orders(renewedAt, 40),
            fc.integer({ min: 1, max: 150 }),
            (main, ordered, endingInForce, endingInNext, total) => {
              const started = (o: { endsAt: number; licenses: number }) => ({
                ...o,
                startsAt: now - DAY,
              });
              const held = {
                inForce: { paid: main + sum(endingInNext), partTime: endingInForce.map(started) },
                next: { paid: ordered, partTime: endingInNext.map(started) },
              };
              const bought: { startsAt: number; endsAt: number; licenses: number }[] = [];
              let neededAt = now;
              for (;;) {
                const decision = plan({
                  total,
                  paid: held.next.paid,
                  partTime: held.next.partTime,
                  termInForce: { endsAt: renewedAt, ...held.inForce },
                  neededAt,
                });
                if (decision.kind !== 'buy') break;
                expect(bought.length).toBeLessThan(2 + endingInForce.length + endingInNext.length);
                bought.push(decision);
                const order = { ...decision, endsAt: termEnd };
                if (decision.startsAt < renewedAt) {
                  held.inForce.paid += decision.licenses;
                  held.inForce.partTime = [...held.inForce.partTime, order];
                }
                if (decision.endsAt > renewedAt) {
                  held.next.paid += decision.licenses;
                  held.next.partTime = [...held.next.partTime, order];
                }
                neededAt = decision.startsAt;
                if (!decision.rest) break;
              }
              const runs = (t: number) => (o: { startsAt: number; endsAt: number }) =>
                o.startsAt <= t && t < o.endsAt;
              const inForceAt = (t: number) =>
                main +
                sum(endingInNext) +
                sum(endingInForce.filter((o) => o.endsAt > t)) +
                sum(bought.filter(runs(t)));
              for (const t of [now, ...endingInForce.map((o) => o.endsAt)])
                expect(inForceAt(t)).toBeGreaterThanOrEqual(total);
              const without = (t: number) =>
                ordered + sum(endingInNext.filter((o) => o.endsAt > t));
              for (const t of [renewedAt, ...endingInNext.map((o) => o.endsAt)]) {
                expect(without(t) + sum(bought.filter(runs(t)))).toBe(Math.max(total, without(t)));
              }
            },
          ),
        );
      });

      it('buys add-ons for the next term only, from each day it falls short', () => {
        expect(next('addon')).toEqual(buy(12, 2, now + 8 * DAY, termEnd, { rest: true }));
        // Bought inside the next term, an add-on runs past its end even if it will not renew.
        const fromNextTerm = (startsAt: number) => startsAt >= renewedAt;
        expect(plan({ ...nextInput('addon'), runsOn: fromNextTerm })).toEqual(
          buy(12, 2, now + 8 * DAY, termEnd, { rest: true }),
        );
      });
    });

    it('counts a replacement waiting to start only from its start', () => {
      // 10, an add-on of 3 ending on day 5 and its replacement of 3 from then: 13 throughout
      // (paid counts the replacement). 14 are short from now, not from day 5.
      const partTime = [ending(5, 3), starting(5, 3)];
      expect(plan({ total: 14, paid: 13, partTime })).toEqual(buy(14, 1, now, termEnd));
      expect(plan({ total: 13, paid: 13, partTime })).toMatchObject({
        kind: 'next_renewal_only',
        reason: 'already_paid',
      });
    });

    it('still buys no gap order for a later start alone', () => {
      // A partial of 5 from day 5 (asked for then); the same total now needed from today.
      expect(plan({ total: 15, paid: 15, partTime: [starting(5, 5)] })).toMatchObject({
        kind: 'next_renewal_only',
      });
    });

    it('ignores orders that end before the licenses are needed', () => {
      const neededAt = now + 6 * DAY;
      expect(plan({ total: 12, neededAt, partTime: [ending(5, 3)] })).toEqual(
        buy(12, 2, neededAt, termEnd),
      );
    });

    it('starts an add-on for the term ordered ahead when the one ending runs into it', () => {
      // The term in force (to day 5) has 8 with the add-on; the term ordered has 5, and the
      // add-on's 3 until day 7: 3 more from day 7, when it ends.
      expect(
        plan({
          total: 8,
          paid: 5,
          partTime: [ending(7, 3)],
          termInForce: { endsAt: now + 5 * DAY, paid: 8 },
          style: 'addon',
        }),
      ).toEqual(buy(8, 3, now + 7 * DAY, termEnd));
    });

    /**
     * A seat job's purchases for one event: it buys, records the order (it runs on from its
     * start, so it counts in `paid`) and plans again from that start while `rest` says so.
     */
    function purchases(input: Partial<SeatChangeInput> & { paid: number; total: number }) {
      const bought: { startsAt: number; licenses: number }[] = [];
      let { paid, partTime = [], neededAt = now } = input;
      for (;;) {
        const decision = plan({ ...input, paid, partTime, neededAt });
        if (decision.kind !== 'buy') return bought;
        expect(decision.licenses).toBeGreaterThan(0);
        expect(bought.length).toBeLessThan(10);
        bought.push(decision);
        paid += decision.licenses;
        partTime = [...partTime, { ...decision, endsAt: termEnd }];
        neededAt = decision.startsAt;
        if (!decision.rest) return bought;
      }
    }

    const day = fc.integer({ min: 1, max: 111 }).map((d) => now + d * DAY);
    const sum = (orders: readonly { licenses: number }[]) =>
      orders.reduce((n, o) => n + o.licenses, 0);
    /** Up to `maxLength` orders in force now that end on days of the term. */
    const endingOrdersOf = (maxLength: number) =>
      fc.array(fc.record({ endsAt: day, licenses: fc.integer({ min: 1, max: 50 }) }), {
        maxLength,
      });

    it('buys the missing licenses from the first day short, and no day before it is short', () => {
      fc.assert(
        fc.property(
          fc.integer({ min: 0, max: 100 }),
          endingOrdersOf(3),
          fc.array(fc.record({ startsAt: day, licenses: fc.integer({ min: 1, max: 50 }) }), {
            maxLength: 3,
          }),
          fc.integer({ min: 1, max: 300 }),
          (runningOn, endingOrders, startingOrders, extra) => {
            const startingLate = startingOrders.map((o) => ({ ...o, endsAt: termEnd }));
            const endingEarly = endingOrders.map((o) => ({ ...o, startsAt: now - DAY }));
            const paid = runningOn + sum(startingLate);
            const total = paid + extra;
            const partTime = [...endingEarly, ...startingLate];
            const decision = plan({ total, paid, partTime });
            expect(decision).toMatchObject({ kind: 'buy', endsAt: termEnd });
            const startsAt = (decision as { startsAt: number }).startsAt;
            const inForceAt = (t: number) =>
              runningOn +
              sum(endingEarly.filter((o) => o.endsAt > t)) +
              sum(startingLate.filter((o) => o.startsAt <= t));
            const changes = [
              now,
              ...endingOrders.map((o) => o.endsAt),
              ...startingOrders.map((o) => o.startsAt),
            ];
            for (const t of changes.filter((t) => t < startsAt))
              expect(inForceAt(t)).toBeGreaterThanOrEqual(total);
            expect(inForceAt(startsAt)).toBeLessThan(total);

            // Every step buys from its own first day short: together exactly what the term
            // lacks, in no more orders than there are days the count in force changes.
            const steps = purchases({ total, paid, partTime });
            expect(sum(steps)).toBe(extra);
            expect(steps.length).toBeLessThanOrEqual(1 + endingOrders.length + startingLate.length);
            const starts = steps.map((o) => o.startsAt);
            expect(starts).toEqual([...starts].sort((a, b) => a - b));
          },
        ),
      );
    });

    it('leaves no day short and pays no day twice while orders end on different days', () => {
      fc.assert(
        fc.property(
          fc.integer({ min: 0, max: 100 }),
          endingOrdersOf(4),
          fc.integer({ min: 1, max: 300 }),
          (paid, endingOrders, extra) => {
            const partTime = endingOrders.map((o) => ({ ...o, startsAt: now - DAY }));
            const total = paid + extra;
            const steps = purchases({ total, paid, partTime });
            const without = (t: number) => paid + sum(partTime.filter((o) => o.endsAt > t));
            const bought = (t: number) => sum(steps.filter((o) => o.startsAt <= t));
            for (const t of [now, ...partTime.map((o) => o.endsAt)]) {
              // Exactly what is missing at each moment is in force: none short, none twice.
              expect(without(t) + bought(t)).toBe(Math.max(total, without(t)));
            }
          },
        ),
      );
    });
  });

  it('buys exactly the missing licenses from max(date needed, now) for any increase in the term', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 1000 }),
        fc.integer({ min: 1, max: 1000 }),
        fc.integer({ min: utc(2024, 1, 1), max: termEnd - 1 }),
        fc.integer({ min: utc(2024, 1, 1), max: termEnd - 1 }),
        (paid, extra, neededAt, at) => {
          const decision = plan({ total: paid + extra, paid, neededAt, now: at });
          expect(decision).toEqual(buy(paid + extra, extra, Math.max(neededAt, at), termEnd));
        },
      ),
    );
  });
});

interface Term {
  readonly start: number;
  readonly end: number;
}

interface SeatEvent {
  readonly total: number;
  readonly neededAt: number;
  readonly occurredAt: number;
  /** When the processor handles the event. */
  readonly now: number;
}

interface Step {
  readonly event: SeatEvent;
  readonly paidBefore: number;
  readonly decision: SeatDecision;
}

/** Runs the seat processor's loop over one term: a purchase adds its licenses to what is paid. */
function runTerm(p0: number, term: Term, events: readonly SeatEvent[]) {
  let paid = p0;
  let bought = 0;
  let lastAppliedAt: number | null = null;
  const steps: Step[] = [];
  for (const event of events) {
    const decision = planSeatChange({
      total: event.total,
      paid,
      neededAt: event.neededAt,
      now: event.now,
      termEnd: term.end,
      style: 'coterm',
      runsOn: () => true,
      occurredAt: event.occurredAt,
      lastAppliedAt,
    });
    steps.push({ event, paidBefore: paid, decision });
    if (decision.kind === 'stale') continue;
    lastAppliedAt = event.occurredAt;
    if (decision.kind === 'buy') {
      bought += decision.licenses;
      paid += decision.licenses;
    }
  }
  const applied = steps.filter((s) => s.decision.kind !== 'stale').map((s) => s.event);
  return { steps, applied, bought, paid };
}

/** What one term may cost: the largest total reached above what was paid at its start. */
function peakAbovePaid(p0: number, totals: readonly number[]): number {
  return Math.max(0, Math.max(p0, ...totals) - p0);
}

const termArb: fc.Arbitrary<Term> = fc
  .record({
    start: fc.integer({ min: utc(2020, 1, 1), max: utc(2030, 12, 31) }),
    days: fc.integer({ min: 28, max: 366 }),
  })
  .map(({ start, days }) => ({ start, end: start + days * DAY }));

const p0Arb = fc.integer({ min: 1, max: 500 });

/**
 * 1..30 seat events with a date needed inside the term (past ones included) and processed inside
 * it. In order, occurredAt never decreases; shuffled, it comes in any order. Ties are frequent.
 */
function eventsArb(term: Term, order: 'in_order' | 'shuffled'): fc.Arbitrary<SeatEvent[]> {
  const instant = fc.integer({ min: term.start, max: term.end - 1 });
  return fc
    .array(
      fc.record({
        total: fc.integer({ min: 1, max: 1000 }),
        neededAt: instant,
        occurredAt: instant,
        now: instant,
        sameInstantAsPrevious: fc.boolean(),
      }),
      { minLength: 1, maxLength: 30 },
    )
    .map((raw) => {
      const occurred = raw.map((r) => r.occurredAt);
      if (order === 'in_order') occurred.sort((a, b) => a - b);
      const handled = raw.map((r) => r.now).sort((a, b) => a - b);
      const events: SeatEvent[] = [];
      for (const [i, r] of raw.entries()) {
        const previous = events.at(-1);
        events.push({
          total: r.total,
          neededAt: r.neededAt,
          occurredAt:
            r.sameInstantAsPrevious && previous
              ? previous.occurredAt
              : (occurred[i] ?? r.occurredAt),
          now: handled[i] ?? r.now,
        });
      }
      return events;
    });
}

const termWithEvents = (order: 'in_order' | 'shuffled') =>
  fc
    .tuple(p0Arb, termArb)
    .chain(([p0, term]) => fc.tuple(fc.constant(p0), fc.constant(term), eventsArb(term, order)));

describe('seat events over one term', () => {
  it('buys only above the previous paid maximum after a decrease', () => {
    const term = { start: utc(2025, 1, 1), end: utc(2026, 1, 1) };
    const at = (day: number) => term.start + day * DAY;
    const run = runTerm(10, term, [
      { total: 15, neededAt: at(10), occurredAt: at(10), now: at(10) },
      { total: 8, neededAt: at(20), occurredAt: at(20), now: at(20) },
      { total: 14, neededAt: at(30), occurredAt: at(30), now: at(30) },
      { total: 20, neededAt: at(40), occurredAt: at(40), now: at(40) },
    ]);
    expect(run.steps.map((s) => s.decision)).toEqual([
      buy(15, 5, at(10), term.end),
      { kind: 'next_renewal_only', total: 8, reason: 'decrease' },
      { kind: 'next_renewal_only', total: 14, reason: 'decrease' },
      buy(20, 5, at(40), term.end),
    ]);
    expect(run.bought).toBe(10);
  });

  it('buys nothing the second time the same total arrives', () => {
    const term = { start: utc(2025, 1, 1), end: utc(2025, 2, 1) };
    const at = term.start + 3 * DAY;
    const event = { total: 30, neededAt: at, occurredAt: at, now: at };
    const run = runTerm(12, term, [event, event]);
    expect(run.steps.map((s) => s.decision.kind)).toEqual(['buy', 'next_renewal_only']);
    expect(run.steps[1]?.decision).toMatchObject({ reason: 'already_paid' });
    expect(run.bought).toBe(18);
  });

  describe('in order of occurrence', () => {
    it('applies every event and buys exactly the largest total reached above the paid start', () => {
      fc.assert(
        fc.property(termWithEvents('in_order'), ([p0, term, events]) => {
          const run = runTerm(p0, term, events);
          expect(run.applied).toEqual(events);
          expect(run.bought).toBe(
            peakAbovePaid(
              p0,
              events.map((e) => e.total),
            ),
          );
          expect(run.paid).toBe(p0 + run.bought);
        }),
        { numRuns: 500 },
      );
    });

    it('buys at least one license with every purchase, from inside the term', () => {
      fc.assert(
        fc.property(termWithEvents('in_order'), ([p0, term, events]) => {
          for (const { event, decision } of runTerm(p0, term, events).steps) {
            if (decision.kind !== 'buy') continue;
            expect(decision.licenses).toBeGreaterThanOrEqual(1);
            expect(decision.startsAt).toBe(Math.max(event.neededAt, event.now));
            expect(decision.startsAt).toBeLessThan(term.end);
            expect(decision.endsAt).toBe(term.end);
          }
        }),
      );
    });

    it('buys each time only what exceeds the paid start and every earlier total', () => {
      fc.assert(
        fc.property(termWithEvents('in_order'), ([p0, term, events]) => {
          const { steps } = runTerm(p0, term, events);
          for (const [i, { event, decision }] of steps.entries()) {
            const previousMax = Math.max(p0, ...events.slice(0, i).map((e) => e.total));
            if (event.total > previousMax) {
              expect(decision).toMatchObject({
                kind: 'buy',
                licenses: event.total - previousMax,
              });
            } else {
              expect(decision.kind).toBe('next_renewal_only');
            }
          }
        }),
      );
    });

    it('after a decrease, an increase buys only above the previous paid maximum', () => {
      const scenario = fc
        .tuple(p0Arb, fc.integer({ min: 2, max: 1000 }), fc.integer({ min: 1, max: 1000 }))
        .chain(([p0, high, later]) =>
          fc.tuple(
            fc.constant(p0),
            fc.constant(high),
            fc.integer({ min: 1, max: high - 1 }),
            fc.constant(later),
          ),
        );
      fc.assert(
        fc.property(scenario, ([p0, high, low, later]) => {
          const term = { start: utc(2025, 1, 1), end: utc(2025, 12, 1) };
          const at = (day: number) => term.start + day * DAY;
          const events = [high, low, later].map((total, i) => ({
            total,
            neededAt: at(i),
            occurredAt: at(i),
            now: at(i),
          }));
          const { steps, bought } = runTerm(p0, term, events);
          expect(steps[1]?.decision.kind).toBe('next_renewal_only');
          const paidMax = Math.max(p0, high);
          const last = steps[2]?.decision;
          if (later > paidMax) {
            expect(last).toMatchObject({ kind: 'buy', licenses: later - paidMax });
          } else {
            expect(last?.kind).toBe('next_renewal_only');
          }
          expect(bought).toBe(peakAbovePaid(p0, [high, later]));
        }),
      );
    });

    it('buys nothing for a repeat of the same total, and repeats change nothing bought', () => {
      fc.assert(
        fc.property(termWithEvents('in_order'), ([p0, term, events]) => {
          const repeated = events.flatMap((e) => [e, e]);
          const run = runTerm(p0, term, repeated);
          const repeats = run.steps.filter((_, i) => i % 2 === 1);
          for (const { decision } of repeats) expect(decision.kind).toBe('next_renewal_only');
          expect(run.bought).toBe(runTerm(p0, term, events).bought);
        }),
      );
    });
  });

  describe('out of order of occurrence', () => {
    it('applies only events not older than any earlier one, and buys the peak over them', () => {
      fc.assert(
        fc.property(termWithEvents('shuffled'), ([p0, term, events]) => {
          const run = runTerm(p0, term, events);
          const notOlder = events.filter((e, i) =>
            events.slice(0, i).every((earlier) => earlier.occurredAt <= e.occurredAt),
          );
          expect(run.applied).toEqual(notOlder);
          expect(run.bought).toBe(
            peakAbovePaid(
              p0,
              notOlder.map((e) => e.total),
            ),
          );
          for (const { decision } of run.steps) {
            if (decision.kind === 'buy') expect(decision.licenses).toBeGreaterThanOrEqual(1);
          }
        }),
        { numRuns: 500 },
      );
    });
  });
});

describe('allocateNextLicenses', () => {
  describe('with co-terminated partials', () => {
    it('lets the main chain carry the whole total', () => {
      expect(allocateNextLicenses({ total: 17, main: 10, addOns: [], style: 'coterm' })).toEqual({
        main: 17,
        addOns: [],
      });
      expect(allocateNextLicenses({ total: 4, main: 10, addOns: [], style: 'coterm' })).toEqual({
        main: 4,
        addOns: [],
      });
    });
  });

  describe('with add-on chains', () => {
    const current = { main: 10, addOns: [5, 3], style: 'addon' as const };

    it('lets the main chain carry the total while no add-on exists yet', () => {
      expect(allocateNextLicenses({ total: 14, main: 10, addOns: [], style: 'addon' })).toEqual({
        main: 14,
        addOns: [],
      });
    });

    it('renews every chain in full when the total equals what they hold', () => {
      expect(allocateNextLicenses({ ...current, total: 18 })).toEqual({ main: 10, addOns: [5, 3] });
    });

    it('gives any excess to the newest add-on', () => {
      expect(allocateNextLicenses({ ...current, total: 25 })).toEqual({
        main: 10,
        addOns: [5, 10],
      });
    });

    it('shrinks the newest add-ons first on a decrease', () => {
      expect(allocateNextLicenses({ ...current, total: 12 })).toEqual({ main: 10, addOns: [2, 0] });
      expect(allocateNextLicenses({ ...current, total: 16 })).toEqual({ main: 10, addOns: [5, 1] });
    });

    it('shrinks the main chain only once every add-on stops renewing', () => {
      expect(allocateNextLicenses({ ...current, total: 7 })).toEqual({ main: 7, addOns: [0, 0] });
      expect(allocateNextLicenses({ ...current, total: 0 })).toEqual({ main: 0, addOns: [0, 0] });
    });
  });

  describe('for a total needed from a later date', () => {
    const current = { main: 10, addOns: [5, 3], style: 'addon' as const };
    // The main chain renews on day 30, the add-ons on days 40 and 20.
    const renewsAt = [30, 40, 20];

    it('gives an increase needed before the main renewal to the chain renewing first from then', () => {
      expect(
        allocateNextLicenses({ ...current, total: 20, dated: { from: 15, renewsAt } }),
      ).toEqual({ main: 10, addOns: [5, 5] });
      expect(
        allocateNextLicenses({ ...current, total: 20, dated: { from: 25, renewsAt } }),
      ).toEqual({ main: 12, addOns: [5, 3] });
    });

    it('gives one needed from the main renewal on to the last chain renewing by then', () => {
      // In force on the date, paid from that renewal: not missing until a renewal after it.
      for (const from of [30, 35]) {
        expect(allocateNextLicenses({ ...current, total: 20, dated: { from, renewsAt } })).toEqual({
          main: 12,
          addOns: [5, 3],
        });
      }
      expect(
        allocateNextLicenses({ ...current, total: 25, dated: { from: 50, renewsAt } }),
      ).toEqual({ main: 10, addOns: [12, 3] });
    });

    it('gives it to the main chain when another renews at the same time', () => {
      const dated = { from: 30, renewsAt: [30, 30, 20] };
      expect(allocateNextLicenses({ ...current, total: 20, dated })).toEqual({
        main: 12,
        addOns: [5, 3],
      });
    });

    it('shrinks as undated on a decrease: the newest add-ons first, never the main chain first', () => {
      for (const total of [0, 7, 12, 16, 18]) {
        expect(allocateNextLicenses({ ...current, total, dated: { from: 25, renewsAt } })).toEqual(
          allocateNextLicenses({ ...current, total }),
        );
      }
    });
  });

  const allocationArb = fc.record({
    total: fc.integer({ min: 0, max: 3000 }),
    main: fc.integer({ min: 1, max: 500 }),
    addOns: fc.array(fc.integer({ min: 1, max: 500 }), { minLength: 0, maxLength: 6 }),
    style: fc.constantFrom<'coterm' | 'addon'>('coterm', 'addon'),
    dated: fc.option(
      fc.record({ from: fc.nat(100), renewsAt: fc.array(fc.nat(100), { maxLength: 7 }) }),
      { nil: undefined },
    ),
  });

  it('always splits exactly the total, with no negative share', () => {
    fc.assert(
      fc.property(allocationArb, (input) => {
        const split = allocateNextLicenses(input);
        expect(split.addOns).toHaveLength(input.addOns.length);
        expect(split.main + split.addOns.reduce((sum, n) => sum + n, 0)).toBe(input.total);
        for (const n of [split.main, ...split.addOns]) expect(n).toBeGreaterThanOrEqual(0);
      }),
    );
  });

  it('never grows the main chain or an older add-on when add-ons exist', () => {
    fc.assert(
      fc.property(
        allocationArb.filter((i) => i.addOns.length > 0),
        ({ dated: _dated, ...input }) => {
          const split = allocateNextLicenses({ ...input, style: 'addon' });
          expect(split.main).toBeLessThanOrEqual(input.main);
          for (const [i, share] of split.addOns.slice(0, -1).entries()) {
            expect(share).toBeLessThanOrEqual(input.addOns[i] ?? 0);
          }
        },
      ),
    );
  });

  it('never cuts the main chain below the total it can carry, dated or not', () => {
    fc.assert(
      fc.property(allocationArb, (input) => {
        const split = allocateNextLicenses(input);
        const floor =
          input.style === 'coterm' || input.addOns.length === 0 ? input.total : input.main;
        expect(split.main).toBeGreaterThanOrEqual(Math.min(input.total, floor));
      }),
    );
  });

  it('shrinks newest first: a chain that is cut leaves nothing to any newer add-on', () => {
    fc.assert(
      fc.property(
        allocationArb.filter((i) => i.addOns.length > 0),
        (input) => {
          const split = allocateNextLicenses({ ...input, style: 'addon' });
          const held = [input.main, ...input.addOns];
          const shares = [split.main, ...split.addOns];
          const firstCut = shares.findIndex((share, i) => share < (held[i] ?? 0));
          if (firstCut === -1) return;
          for (const share of shares.slice(firstCut + 1)) expect(share).toBe(0);
        },
      ),
    );
  });
});

describe('renewalLicenses and keepLicensesUntil: a decrease needed from a later date', () => {
  const from = utc(2025, 3, 20);

  it('keeps the earlier count for a renewal that starts before the date, and the share from it', () => {
    // 5 licenses, then a total needed from the 20th leaves this chain 2: a renewal on the 10th
    // still needs the 5 until the 20th, and renews a whole term.
    const kept = keepLicensesUntil({ kept: [], before: 5, share: 2, from, now });
    expect(kept).toEqual([{ until: from, licenses: 5 }]);
    expect(renewalLicenses(2, kept, utc(2025, 3, 10) + 1)).toBe(5);
    expect(renewalLicenses(2, kept, from - 1)).toBe(5);
    expect(renewalLicenses(2, kept, from)).toBe(2);
    expect(renewalLicenses(2, kept, utc(2025, 4, 10))).toBe(2);
  });

  it('keeps nothing for an increase: it is carried early, as a total needed from the next term is', () => {
    expect(keepLicensesUntil({ kept: [], before: 5, share: 8, from, now })).toEqual([]);
  });

  it('drops a kept count whose date has passed: no renewal starts before now', () => {
    const kept = [{ until: now - 1, licenses: 9 }];
    expect(keepLicensesUntil({ kept, before: 5, share: 2, from, now })).toEqual([
      { until: from, licenses: 5 },
    ]);
  });

  it('caps an older kept count at the newer date, and keeps the higher of the two before it', () => {
    const later = utc(2025, 4, 5);
    const kept = [{ until: later, licenses: 9 }];
    // 9 until the 5th of April (an older event), then 5 from the 20th of March: before the 20th
    // the 9 still hold (the older decrease had not applied yet); from then, the newer total.
    expect(keepLicensesUntil({ kept, before: 7, share: 5, from, now })).toEqual([
      { until: from, licenses: 9 },
    ]);
  });

  /**
   * The count a renewal starting at `s` needs after a run of totals: an undated total applies
   * from now; a dated one from its date, before which the earlier need still holds unless the
   * new share is higher (an increase is carried early).
   */
  function need(events: readonly { share: number; from: number | null }[], start: number) {
    return (s: number) =>
      events.reduce(
        (before, e) => (e.from === null || s >= e.from ? e.share : Math.max(e.share, before)),
        start,
      );
  }

  it('gives every later renewal exactly the count the run of totals needs at its start', () => {
    const event = fc.record({
      share: fc.integer({ min: 0, max: 20 }),
      // Days after the event's own time; null: needed now.
      fromDays: fc.option(fc.integer({ min: 1, max: 90 }), { nil: null }),
      // Days since the previous event.
      gapDays: fc.integer({ min: 0, max: 40 }),
    });
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 20 }),
        fc.array(event, { minLength: 1, maxLength: 8 }),
        fc.array(fc.integer({ min: 0, max: 200 * DAY }), { minLength: 1, maxLength: 10 }),
        (start, events, offsets) => {
          let t = now;
          let share = start;
          let kept: KeptLicenses[] = [];
          const applied: { share: number; from: number | null }[] = [];
          for (const e of events) {
            t += e.gapDays * DAY;
            const from = e.fromDays === null ? null : t + e.fromDays * DAY;
            kept =
              from === null
                ? []
                : keepLicensesUntil({ kept, before: share, share: e.share, from, now: t });
            share = e.share;
            applied.push({ share, from });
            // Bounded: one kept count per dated event at most, each for a date still to come.
            expect(kept.length).toBeLessThanOrEqual(applied.length);
            for (const k of kept) {
              expect(k.until).toBeGreaterThan(t);
              expect(k.licenses).toBeGreaterThan(share);
            }
          }
          const needed = need(applied, start);
          for (const offset of offsets) {
            const s = t + 1 + offset;
            expect(renewalLicenses(share, kept, s)).toBe(needed(s));
          }
        },
      ),
    );
  });
});
