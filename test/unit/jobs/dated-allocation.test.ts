// How a total needed from a later date inside the main chain's term is shared over a family
// whose add-ons renew on their own cycles: those renewing before the date keep what they carry,
// and the family carries the total exactly once each chain has renewed (fast-check over random
// families).
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { allocation } from '../../../jobs/seat-purchases.js';
import type { Chain } from '../../../src/chains/records.js';
import { manualClock } from '../../../src/clock.js';
import { SECONDS_PER_DAY } from '../../../src/domain/periods.js';
import { renewalLicenses } from '../../../src/domain/seats.js';
import { storedChain } from '../../helpers/chains.js';

const DAY = SECONDS_PER_DAY;
const now = Date.UTC(2026, 5, 10) / 1000;
const mainEnd = now + 20 * DAY;
const deps = {
  clock: manualClock(now),
  settings: { seatIncrease: 'addon' as const },
  provisioning: { variant: 'marketplace' as const, extensions: false },
};

function chain(fields: Partial<Chain> & Pick<Chain, 'id' | 'licenses' | 'term'>): Chain {
  return storedChain(now, fields);
}

/** A main chain of `licenses` to mainEnd, with add-ons of `licenses` ending `endsInDays`. */
function family(
  mainLicenses: number,
  addOns: readonly { licenses: number; share: number; endsInDays: number }[],
) {
  const addOnChains = addOns.map((a, i) =>
    chain({
      id: `M.a${i + 1}`,
      licenses: a.licenses,
      mainChain: 'M',
      term: {
        orderId: `M.a${i + 1}`,
        count: 1,
        startsAt: now + a.endsInDays * DAY - 30 * DAY,
        expiresAt: now + a.endsInDays * DAY,
      },
    }),
  );
  const main = chain({
    id: 'M',
    licenses: mainLicenses,
    term: { orderId: 'M', count: 1, startsAt: mainEnd - 30 * DAY, expiresAt: mainEnd },
    addOns: addOnChains.map((a) => a.id),
    addOnNextLicenses: Object.fromEntries(addOnChains.map((a, i) => [a.id, addOns[i]?.share ?? 0])),
  });
  return { main, addOns: addOnChains };
}

/** What each add-on's next renewal carries under the main chain's counts. */
function nextRenewals(main: Chain, addOns: readonly Chain[]) {
  return addOns.map((a) =>
    renewalLicenses(
      main.addOnNextLicenses[a.id] ?? 0,
      main.addOnLicensesUntil[a.id] ?? [],
      a.term.expiresAt,
    ),
  );
}

describe('allocation of a total needed from a later date inside the term', () => {
  it('keeps an add-on renewing before the date at its count, and takes the change from the main chain', () => {
    // 5 + an add-on of 3 renewing in 5 days; 6 from in 10 days.
    const { main, addOns } = family(5, [{ licenses: 3, share: 3, endsInDays: 5 }]);
    const counts = allocation(deps, main, addOns, 6, { from: now + 10 * DAY });
    expect(counts).toMatchObject({
      nextLicenses: 3,
      addOnNextLicenses: { 'M.a1': 3 },
      addOnLicensesUntil: {},
      sharesFrom: now + 10 * DAY,
    });
  });

  it('gives an add-on renewing before the date what the total needs from then, when that is more', () => {
    // 5 + an add-on of 3 whose share a decrease left at 1; then 8 from in 10 days, which the 3
    // still paid cover: nothing is bought, so the add-on's renewal must carry its 3 again.
    const { main, addOns } = family(5, [{ licenses: 3, share: 1, endsInDays: 5 }]);
    const counts = allocation(deps, main, addOns, 8, { from: now + 10 * DAY });
    expect(counts).toMatchObject({ nextLicenses: 5, addOnNextLicenses: { 'M.a1': 3 } });
  });

  it('keeps an add-on renewing mid-term at its count for a total needed from the term end', () => {
    const { main, addOns } = family(5, [{ licenses: 3, share: 3, endsInDays: 5 }]);
    for (const from of [mainEnd - DAY, mainEnd]) {
      expect(allocation(deps, main, addOns, 5, { from })).toMatchObject({
        nextLicenses: 2,
        addOnNextLicenses: { 'M.a1': 3 },
      });
    }
  });

  it('shrinks an add-on renewing after the date first, as any decrease does', () => {
    const { main, addOns } = family(5, [{ licenses: 3, share: 3, endsInDays: 15 }]);
    const counts = allocation(deps, main, addOns, 6, { from: now + 10 * DAY });
    expect(counts).toMatchObject({ nextLicenses: 5, addOnNextLicenses: { 'M.a1': 1 } });
  });

  it('keeps the count of add-ons that renew first and carry the whole total, until the date', () => {
    const { main, addOns } = family(5, [{ licenses: 3, share: 3, endsInDays: 5 }]);
    const from = now + 10 * DAY;
    const counts = allocation(deps, main, addOns, 3, { from });
    expect(counts).toMatchObject({
      nextLicenses: 3,
      addOnNextLicenses: { 'M.a1': 0 },
      addOnLicensesUntil: { 'M.a1': [{ until: from, licenses: 3 }] },
    });
  });

  it('carries the total exactly, never drops a renewal before the date, and shares it again the same way', () => {
    const addOn = fc.record({
      licenses: fc.integer({ min: 1, max: 8 }),
      share: fc.integer({ min: 0, max: 10 }),
      endsInDays: fc.integer({ min: 1, max: 45 }),
    });
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 10 }),
        fc.array(addOn, { maxLength: 4 }),
        fc.integer({ min: 1, max: 40 }),
        fc.integer({ min: 1, max: 20 }),
        (mainLicenses, shapes, total, fromDays) => {
          const { main, addOns } = family(mainLicenses, shapes);
          const from = now + fromDays * DAY;
          const counts = allocation(deps, main, addOns, total, { from });
          const next = { ...main, ...counts };
          const shares = Object.values(counts.addOnNextLicenses);
          expect(counts.nextLicenses + shares.reduce((a, b) => a + b, 0)).toBe(total);
          expect(counts.nextLicenses).toBeGreaterThanOrEqual(1);
          const renewals = nextRenewals(next, addOns);
          const early = addOns.map((a) => a.term.expiresAt < from);
          const before = nextRenewals(main, addOns);
          early.forEach((isEarly, i) => {
            if (isEarly) expect(renewals[i]).toBeGreaterThanOrEqual(before[i] ?? 0);
            else expect(counts.addOnLicensesUntil[addOns[i]?.id ?? '']).toBeUndefined();
          });
          // Nothing is bought for a total already paid: what is in force from the date until the
          // main chain renews (its licenses, the add-ons renewing after the date, the renewals
          // of those renewing before it) still covers it.
          const paid = mainLicenses + shapes.reduce((sum, a) => sum + a.licenses, 0);
          const inForce = addOns.reduce(
            (sum, a, i) => sum + (early[i] ? (renewals[i] ?? 0) : a.licenses),
            mainLicenses,
          );
          if (paid >= total) expect(inForce).toBeGreaterThanOrEqual(total);
          // Exact (nothing kept beside the shares) whenever the renewals of the add-ons renewing
          // first leave the main chain some of the total.
          const renewedFirst = renewals.reduce((sum, n, i) => (early[i] ? sum + n : sum), 0);
          if (renewedFirst < total) expect(counts.addOnLicensesUntil).toEqual({});
          // A purchase recorded later for the same total (keep) shares it the same way.
          expect(allocation(deps, next, addOns, total, { keep: true })).toEqual(counts);
        },
      ),
    );
  });
});

describe('allocation with an add-on waiting for its day (external)', () => {
  const afterTerm = mainEnd + 3 * DAY;

  it.each([
    ['the main chain', 0],
    ['the newest add-on', 1],
  ])('has %s carry a total above what is paid and waiting, when nothing more is bought', (_, n) => {
    // 5 (+ an add-on of 3), an add-on of 18 waiting, then 38 needed after the term: nothing is
    // bought for it, so the renewals must carry it, also one before the waiting add-on's day.
    const { main, addOns } = family(5, [{ licenses: 3, share: 3, endsInDays: 15 }].slice(0, n));
    const counts = allocation(deps, main, addOns, 38, {
      waiting: { licenses: 18, rest: false },
      from: afterTerm,
    });
    const carried =
      counts.nextLicenses + Object.values(counts.addOnNextLicenses).reduce((a, b) => a + b, 0);
    expect(carried + 18).toBe(38);
    expect(counts.nextLicenses).toBe(n === 0 ? 20 : 5);
  });

  it('leaves the excess to the purchases after the waiting add-on (its rest)', () => {
    const { main, addOns } = family(5, []);
    const counts = allocation(deps, main, addOns, 10, { waiting: { licenses: 2, rest: true } });
    expect(counts.nextLicenses).toBe(5);
  });

  it('gives the waiting add-on no more than the total leaves it', () => {
    const { main, addOns } = family(5, []);
    const counts = allocation(deps, main, addOns, 6, { waiting: { licenses: 2, rest: false } });
    expect(counts.nextLicenses).toBe(5);
  });
});

describe("allocation once the main chain's term has ended", () => {
  /** 5 + add-ons of 3 and 2 still in force, the main term ended a day ago (it renews at once). */
  function ended() {
    const { main, addOns } = family(5, [
      { licenses: 3, share: 3, endsInDays: 12 },
      { licenses: 2, share: 2, endsInDays: 25 },
    ]);
    const term = { ...main.term, startsAt: now - 31 * DAY, expiresAt: now - DAY };
    return { main: { ...main, term }, addOns };
  }

  it('gives an increase needed now to the main chain, whose renewal comes first', () => {
    const { main, addOns } = ended();
    expect(allocation(deps, main, addOns, 13)).toMatchObject({
      nextLicenses: 8,
      addOnNextLicenses: { 'M.a1': 3, 'M.a2': 2 },
    });
  });

  it('gives one needed from a later date to the last chain renewing by then', () => {
    const { main, addOns } = ended();
    // The first add-on renews in 12 days, before the date: in force on it from then.
    expect(allocation(deps, main, addOns, 13, { from: now + 15 * DAY })).toMatchObject({
      nextLicenses: 5,
      addOnNextLicenses: { 'M.a1': 6, 'M.a2': 2 },
    });
    // Needed before any add-on renews: the main chain's renewal, at once, carries it.
    expect(allocation(deps, main, addOns, 13, { from: now + 5 * DAY })).toMatchObject({
      nextLicenses: 8,
      addOnNextLicenses: { 'M.a1': 3, 'M.a2': 2 },
    });
  });

  it('shrinks the newest add-ons first for a decrease, as ever', () => {
    const { main, addOns } = ended();
    expect(allocation(deps, main, addOns, 6)).toMatchObject({
      nextLicenses: 5,
      addOnNextLicenses: { 'M.a1': 1, 'M.a2': 0 },
    });
  });
});
