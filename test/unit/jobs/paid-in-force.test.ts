// What a seat change counts as paid, per term ahead: the main order, partials and add-ons, with
// add-ons that renewed early themselves, and add-ons that stopped.
import { describe, expect, it } from 'vitest';
import { paidAhead, paidInForce, paidInTermInForce } from '../../../jobs/seat-purchases.js';
import type { Chain } from '../../../src/chains/records.js';
import { SECONDS_PER_DAY } from '../../../src/domain/periods.js';
import { planSeatChange } from '../../../src/domain/seats.js';
import { storedChain } from '../../helpers/chains.js';

const DAY = SECONDS_PER_DAY;
const now = Date.UTC(2026, 5, 24) / 1000;
/** The main term in force ends on Jun 30; the next one, renewed early, runs to Jul 30. */
const renewedAt = now + 6 * DAY;
const nextEnd = renewedAt + 30 * DAY;

function chain(fields: Partial<Chain> & Pick<Chain, 'id' | 'licenses' | 'term'>): Chain {
  return storedChain(now, fields);
}

/** A main chain of 10 in force to Jun 30, renewed early with `next` to Jul 30. */
function main(next: number, addOns: string[] = []): Chain {
  return chain({
    id: 'M',
    licenses: next,
    term: { orderId: 'M.r2', count: 2, startsAt: renewedAt, expiresAt: nextEnd },
    previousTerm: {
      orderId: 'M',
      count: 1,
      startsAt: renewedAt - 30 * DAY,
      expiresAt: renewedAt,
      licenses: 10,
    },
    addOns,
  });
}

/** An add-on of 3 that stopped (a share of 0 at its renewal) and ends at `expiresAt`. */
function stoppedAddOn(expiresAt: number): Chain {
  return chain({
    id: 'A',
    licenses: 3,
    mainChain: 'M',
    nextRenewalAt: null,
    term: { orderId: 'A', count: 1, startsAt: expiresAt - 30 * DAY, expiresAt },
  });
}

describe('paid per term ahead, after an early renewal', () => {
  it('counts the term in force and the next term apart', () => {
    const m = main(6);
    expect(paidInTermInForce(m, [], now)).toEqual({
      endsAt: renewedAt,
      paid: 10,
      partTime: [],
    });
    expect(paidInForce(m, [], now)).toBe(6);
  });

  it('counts an add-on that renewed early itself by its lower count while both its terms run', () => {
    // Add-on: 5 until Jun 27, then 2 (a decrease renewed) to Jul 27.
    const addOn = chain({
      id: 'A',
      licenses: 2,
      mainChain: 'M',
      term: { orderId: 'A.r2', count: 2, startsAt: now + 3 * DAY, expiresAt: now + 33 * DAY },
      previousTerm: {
        orderId: 'A',
        count: 1,
        startsAt: now - 27 * DAY,
        expiresAt: now + 3 * DAY,
        licenses: 5,
      },
    });
    const m = main(10, ['A']);
    // Jun 24..30: 5 until Jun 27, then 2: 2 throughout.
    expect(paidInTermInForce(m, [addOn], now)?.paid).toBe(10 + 2);
    expect(paidInForce(m, [addOn], now)).toBe(10 + 2);

    // The reverse (2, renewed early with 5) running into the next main term: 2 throughout it.
    const grown = {
      ...addOn,
      licenses: 5,
      term: { ...addOn.term, startsAt: renewedAt + 3 * DAY, expiresAt: renewedAt + 33 * DAY },
      previousTerm: {
        ...(addOn.previousTerm as NonNullable<Chain['previousTerm']>),
        expiresAt: renewedAt + 3 * DAY,
        licenses: 2,
      },
    };
    expect(paidInForce(m, [grown], now)).toBe(10 + 2);
    expect(paidInTermInForce(m, [grown], now)?.paid).toBe(10 + 2);
  });

  it('counts an add-on that stopped only for the terms it runs through', () => {
    const stopped = stoppedAddOn(now + 3 * DAY);
    const m = main(10, ['A']);
    // It ends on Jun 27, before either main term does: it counts for neither, and covers the
    // term in force until it ends.
    expect(paidInTermInForce(m, [stopped], now)).toMatchObject({
      paid: 10,
      partTime: [{ startsAt: now, endsAt: now + 3 * DAY, licenses: 3 }],
    });
    expect(paidInForce(m, [stopped], now)).toBe(10);
    expect(paidAhead(m, [stopped], now, 'addon').partTime).toEqual([]);
    // One that renews on its own cycle still counts: its next term is not ordered yet.
    const renewing = { ...stopped, nextRenewalAt: now };
    expect(paidInTermInForce(m, [renewing], now)?.paid).toBe(10 + 3);
    expect(paidInForce(m, [renewing], now)).toBe(10 + 3);
    // Ending on Jul 3, it runs through the term in force but not the next one.
    const later = { ...stopped, term: { ...stopped.term, expiresAt: renewedAt + 3 * DAY } };
    expect(paidInTermInForce(m, [later], now)).toMatchObject({ paid: 10 + 3, partTime: [] });
    expect(paidAhead(m, [later], now, 'addon')).toMatchObject({
      paid: 10,
      partTime: [{ startsAt: renewedAt, endsAt: renewedAt + 3 * DAY, licenses: 3 }],
    });
  });

  it('counts an add-on that stopped and ends before the main term does, without an early renewal', () => {
    const m = chain({
      id: 'M',
      licenses: 5,
      addOns: ['A'],
      term: { orderId: 'M', count: 1, startsAt: now - 10 * DAY, expiresAt: now + 20 * DAY },
    });
    const stopped = stoppedAddOn(now + 5 * DAY);
    expect(paidInTermInForce(m, [stopped], now)).toBeUndefined();
    expect(paidAhead(m, [stopped], now, 'addon')).toMatchObject({
      paid: 5,
      partTime: [{ startsAt: now, endsAt: now + 5 * DAY, licenses: 3 }],
    });
    const throughTerm = { ...stopped, term: { ...stopped.term, expiresAt: now + 20 * DAY } };
    expect(paidInForce(m, [throughTerm], now)).toBe(5 + 3);
    // Its own schedule says it renews, but its main chain's does not: it will not renew either.
    const governed = { ...stopped, nextRenewalAt: now + DAY };
    expect(paidInForce(m, [governed], now)).toBe(5 + 3);
    expect(paidAhead({ ...m, autoRenew: false }, [governed], now, 'addon')).toMatchObject({
      paid: 5,
      partTime: [{ startsAt: now, endsAt: now + 5 * DAY, licenses: 3 }],
    });
    // An add-on bought now would not renew either, but it runs a whole term, past the main
    // term's end; one bought 20 days ago would end before it.
    const off = paidAhead({ ...m, autoRenew: false }, [governed], now, 'addon');
    expect(off.runsOn(now)).toBe(true);
    expect(off.runsOn(now - 20 * DAY)).toBe(false);
    expect(paidAhead(m, [governed], now, 'addon').runsOn(now - 20 * DAY)).toBe(true);
    const coterm = paidAhead({ ...m, autoRenew: false }, [governed], now, 'coterm');
    expect(coterm.runsOn(now - 20 * DAY)).toBe(true);
    expect(paidInForce({ ...m, needsReactivation: true }, [governed], now)).toBe(5);
  });

  it('counts a replacement waiting to start for the term, and says when it starts', () => {
    // 10 + a stopped add-on of 3 to Jun 29, and its replacement of 3 from then (no early renewal).
    const m = chain({
      id: 'M',
      licenses: 10,
      addOns: ['A', 'B'],
      term: { orderId: 'M', count: 1, startsAt: now - 10 * DAY, expiresAt: now + 20 * DAY },
    });
    const stopped = stoppedAddOn(now + 5 * DAY);
    const replacement = chain({
      id: 'B',
      licenses: 3,
      mainChain: 'M',
      term: { orderId: 'B', count: 1, startsAt: now + 5 * DAY, expiresAt: now + 35 * DAY },
    });
    const ahead = paidAhead(m, [stopped, replacement], now, 'addon');
    expect(ahead).toMatchObject({
      paid: 10 + 3,
      partTime: [
        { startsAt: now, endsAt: now + 5 * DAY, licenses: 3 },
        { startsAt: now + 5 * DAY, endsAt: now + 20 * DAY, licenses: 3 },
      ],
    });
    // 13 are in force throughout: 14 lack one from now, not only from Jun 29.
    const plan = (total: number) =>
      planSeatChange({
        ...ahead,
        total,
        neededAt: now,
        style: 'addon',
        occurredAt: now,
        lastAppliedAt: null,
      });
    expect(plan(14)).toMatchObject({ kind: 'buy', licenses: 1, startsAt: now });
    expect(plan(13)).toMatchObject({ kind: 'next_renewal_only', reason: 'already_paid' });
  });

  it('counts in neither term an add-on whose term has ended, even one about to renew', () => {
    const ended = chain({
      id: 'A',
      licenses: 3,
      mainChain: 'M',
      nextRenewalAt: now,
      term: { orderId: 'A', count: 1, startsAt: now - 30 * DAY, expiresAt: now },
    });
    const m = main(10, ['A']);
    expect(paidInTermInForce(m, [ended], now)?.paid).toBe(10);
    expect(paidInForce(m, [ended], now)).toBe(10);
  });
});
