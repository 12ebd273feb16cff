// Renewal decisions: every branch of decideRenewal and nextRenewalAt, plus fast-check properties.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SECONDS_PER_DAY } from '../../../src/domain/periods.js';
import {
  type ChainStatus,
  decideRenewal,
  nextRenewalAt,
  PAYMENT_RECHECK_SECONDS,
  type RenewalView,
  renewalDueAt,
} from '../../../src/domain/renewal.js';

const DAY = SECONDS_PER_DAY;
const LEAD = 7;
const expiresAt = Date.UTC(2025, 2, 31) / 1000;
const startsAt = Date.UTC(2025, 1, 28) / 1000;

function chain(overrides: Partial<RenewalView> = {}): RenewalView {
  return {
    status: 'active',
    autoRenew: true,
    payment: 'ok',
    needsReactivation: false,
    nextLicenses: 12,
    term: { count: 3, startsAt, expiresAt },
    ...overrides,
  };
}

function decide(view: RenewalView, now: number, forCount = view.term.count + 1) {
  return decideRenewal({ chain: view, forCount, now, leadDays: LEAD });
}

describe('renewalDueAt', () => {
  it('is lead days before the end of the term', () => {
    expect(renewalDueAt({ startsAt, expiresAt }, 7)).toBe(expiresAt - 7 * DAY);
    expect(renewalDueAt({ startsAt, expiresAt }, 1)).toBe(expiresAt - DAY);
  });

  it('is not before the term starts: a lead longer than a 28-day February waits for it', () => {
    // Term 2 (Jan 31 - Feb 28) ordered ahead; a 30-day lead would order term 3 on Jan 29,
    // while term 1 is still in force: three terms at once.
    const february = {
      startsAt: Date.UTC(2025, 0, 31) / 1000,
      expiresAt: Date.UTC(2025, 1, 28) / 1000,
    };
    expect(renewalDueAt(february, 30)).toBe(february.startsAt);
    expect(renewalDueAt(february, 27)).toBe(february.expiresAt - 27 * DAY);
  });

  it('never orders a term before the latest one has started, whatever the lead', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: Date.UTC(2100, 0, 1) / 1000 }),
        fc.integer({ min: 1, max: 400 }),
        fc.integer({ min: 1, max: 400 }),
        (start, termDays, leadDays) => {
          const term = { startsAt: start, expiresAt: start + termDays * DAY };
          const due = renewalDueAt(term, leadDays);
          expect(due).toBeGreaterThanOrEqual(term.startsAt);
          expect(due).toBeGreaterThanOrEqual(term.expiresAt - leadDays * DAY);
        },
      ),
    );
  });
});

describe('decideRenewal', () => {
  const due = expiresAt - LEAD * DAY;

  describe('when the chain will not renew', () => {
    it('skips a cancelled chain, even when due and paid', () => {
      expect(decide(chain({ status: 'cancelled' }), due)).toEqual({
        kind: 'skip',
        reason: 'cancelled',
      });
    });

    it('skips a chain whose auto-renew is off', () => {
      expect(decide(chain({ autoRenew: false }), due)).toEqual({
        kind: 'skip',
        reason: 'auto_renew_off',
      });
    });

    it('skips a job for a term that is already ordered', () => {
      expect(decide(chain(), due, 3)).toEqual({ kind: 'skip', reason: 'already_renewed' });
      expect(decide(chain(), due, 2)).toEqual({ kind: 'skip', reason: 'already_renewed' });
    });

    it('skips a stale job for a term further ahead than the next one', () => {
      expect(decide(chain(), due, 5)).toEqual({ kind: 'skip', reason: 'stale_job' });
    });

    it('skips a chain that waits for an operator to confirm its reactivation', () => {
      expect(decide(chain({ needsReactivation: true, status: 'suspended' }), due)).toEqual({
        kind: 'skip',
        reason: 'needs_reactivation',
      });
    });

    it('skips an add-on whose main chain is flagged, its renewal waiting for a person', () => {
      expect(decide(chain({ mainFlagged: true }), due)).toEqual({
        kind: 'skip',
        reason: 'main_flagged',
      });
    });
  });

  describe('when the renewal is not due yet', () => {
    it('waits until lead days before the end of the term', () => {
      expect(decide(chain(), due - 1)).toEqual({ kind: 'wait', until: due, reason: 'not_due' });
      expect(decide(chain(), expiresAt - 30 * DAY)).toEqual({
        kind: 'wait',
        until: due,
        reason: 'not_due',
      });
    });

    it('waits for the due time before looking at an overdue payment', () => {
      expect(decide(chain({ payment: 'overdue' }), due - 1)).toEqual({
        kind: 'wait',
        until: due,
        reason: 'not_due',
      });
    });
  });

  describe('when the payment is overdue', () => {
    it('waits and checks the payment again later', () => {
      const now = due + 3600;
      expect(decide(chain({ payment: 'overdue' }), now)).toEqual({
        kind: 'wait',
        until: now + PAYMENT_RECHECK_SECONDS,
        reason: 'payment_overdue',
      });
    });

    it('keeps waiting after the term has expired', () => {
      const now = expiresAt + DAY;
      expect(decide(chain({ payment: 'overdue', status: 'suspended' }), now)).toMatchObject({
        kind: 'wait',
        reason: 'payment_overdue',
      });
    });
  });

  describe('when the renewal is due and the term is in force', () => {
    it('renews exactly at the due time, the new term starting at the old end', () => {
      expect(decide(chain(), due)).toEqual({
        kind: 'renew',
        count: 4,
        startsAt: expiresAt,
        expired: false,
        licenses: 12,
      });
    });

    it('carries the licenses meant for the next renewal', () => {
      expect(decide(chain({ nextLicenses: 5 }), expiresAt - 1)).toMatchObject({
        kind: 'renew',
        startsAt: expiresAt,
        licenses: 5,
      });
    });

    it('keeps a count needed until a later date when its term starts before then', () => {
      const kept = [{ until: expiresAt + 10 * DAY, licenses: 9 }];
      const view = chain({ nextLicenses: 5, licensesUntil: kept });
      expect(decide(view, expiresAt - 1)).toMatchObject({ startsAt: expiresAt, licenses: 9 });
      const later = chain({ nextLicenses: 5, licensesUntil: [{ until: expiresAt, licenses: 9 }] });
      expect(decide(later, expiresAt - 1)).toMatchObject({ startsAt: expiresAt, licenses: 5 });
    });
  });

  describe('when the term has expired', () => {
    it('renews at once, the new term starting now', () => {
      const now = expiresAt + 2 * DAY;
      expect(decide(chain({ status: 'expired' }), now)).toEqual({
        kind: 'renew',
        count: 4,
        startsAt: now,
        expired: true,
        licenses: 12,
      });
    });

    it('keeps a count needed until a later date by when the new term starts: now', () => {
      const now = expiresAt + 2 * DAY;
      const kept = [{ until: expiresAt + DAY, licenses: 9 }];
      expect(decide(chain({ nextLicenses: 5, licensesUntil: kept }), now)).toMatchObject({
        startsAt: now,
        licenses: 5,
      });
    });

    it('counts the very end of the term as expired (terms are half-open)', () => {
      expect(decide(chain(), expiresAt)).toMatchObject({
        kind: 'renew',
        startsAt: expiresAt,
        expired: true,
      });
    });
  });
});

describe('nextRenewalAt', () => {
  const due = expiresAt - LEAD * DAY;

  it('is null when auto-renew is off', () => {
    expect(nextRenewalAt({ chain: chain({ autoRenew: false }), now: 0, leadDays: LEAD })).toBe(
      null,
    );
  });

  it('is null when the chain is cancelled', () => {
    expect(nextRenewalAt({ chain: chain({ status: 'cancelled' }), now: 0, leadDays: LEAD })).toBe(
      null,
    );
  });

  it('is null while an operator must confirm a reactivation', () => {
    const view = chain({ needsReactivation: true, status: 'suspended' });
    expect(nextRenewalAt({ chain: view, now: 0, leadDays: LEAD })).toBe(null);
  });

  it("is null for an add-on while its main chain's renewal waits for a person", () => {
    expect(nextRenewalAt({ chain: chain({ mainFlagged: true }), now: 0, leadDays: LEAD })).toBe(
      null,
    );
  });

  it('is the due time while that is ahead', () => {
    expect(nextRenewalAt({ chain: chain(), now: due - 30 * DAY, leadDays: LEAD })).toBe(due);
  });

  it('is now once the due time has passed', () => {
    const now = expiresAt + DAY;
    expect(nextRenewalAt({ chain: chain({ status: 'expired' }), now, leadDays: LEAD })).toBe(now);
  });

  it('still schedules a suspended or overdue chain, whose job then waits for the payment', () => {
    const view = chain({ status: 'suspended', payment: 'overdue' });
    expect(nextRenewalAt({ chain: view, now: 0, leadDays: LEAD })).toBe(due);
  });
});

const instantArb = fc.integer({ min: 0, max: Date.UTC(2100, 11, 31) / 1000 });
const statusArb = fc.constantFrom<ChainStatus>('active', 'suspended', 'cancelled', 'expired');
const viewArb: fc.Arbitrary<RenewalView> = fc.record({
  status: statusArb,
  autoRenew: fc.boolean(),
  payment: fc.constantFrom<'ok' | 'overdue'>('ok', 'overdue'),
  needsReactivation: fc.boolean(),
  mainFlagged: fc.boolean(),
  nextLicenses: fc.integer({ min: 1, max: 10_000 }),
  term: fc
    .record({ count: fc.integer({ min: 1, max: 500 }), expiresAt: instantArb })
    .map((t) => ({ ...t, startsAt: t.expiresAt - 28 * DAY })),
});
const leadDaysArb = fc.integer({ min: 1, max: 60 });
/** Mostly near the term's end, where the branches change, sometimes anywhere. */
const nowNearArb = (end: number) =>
  fc.oneof(fc.integer({ min: end - 90 * DAY, max: end + 90 * DAY }), instantArb);
/** A chain and an instant near the end of its term. */
const viewAndNowArb = viewArb.chain((view) =>
  fc.tuple(fc.constant(view), nowNearArb(view.term.expiresAt)),
);

describe('renewal properties', () => {
  it('never renews before lead days ahead of the end of the term', () => {
    fc.assert(
      fc.property(
        viewAndNowArb,
        leadDaysArb,
        fc.integer({ min: -2, max: 3 }),
        ([view, now], leadDays, delta) => {
          const forCount = Math.max(1, view.term.count + delta);
          const decision = decideRenewal({ chain: view, forCount, now, leadDays });
          if (decision.kind === 'renew') {
            expect(now).toBeGreaterThanOrEqual(view.term.expiresAt - leadDays * DAY);
          }
        },
      ),
    );
  });

  it('starts an expired renewal now or later, and any other at the old end', () => {
    fc.assert(
      fc.property(viewAndNowArb, leadDaysArb, ([view, now], leadDays) => {
        const decision = decideRenewal({
          chain: view,
          forCount: view.term.count + 1,
          now,
          leadDays,
        });
        if (decision.kind !== 'renew') return;
        expect(decision.count).toBe(view.term.count + 1);
        expect(decision.licenses).toBe(view.nextLicenses);
        expect(decision.expired).toBe(view.term.expiresAt <= now);
        if (decision.expired) expect(decision.startsAt).toBeGreaterThanOrEqual(now);
        else expect(decision.startsAt).toBe(view.term.expiresAt);
      }),
    );
  });

  it('always skips a job for a term that is already ordered', () => {
    fc.assert(
      fc.property(
        viewArb,
        fc.integer({ min: 0, max: 499 }),
        instantArb,
        leadDaysArb,
        (view, back, now, leadDays) => {
          const forCount = Math.max(1, view.term.count - back);
          expect(decideRenewal({ chain: view, forCount, now, leadDays }).kind).toBe('skip');
        },
      ),
    );
  });

  it('never schedules the renewal before now', () => {
    fc.assert(
      fc.property(viewArb, instantArb, leadDaysArb, (view, now, leadDays) => {
        const at = nextRenewalAt({ chain: view, now, leadDays });
        if (at !== null) expect(at).toBeGreaterThanOrEqual(now);
      }),
    );
  });

  it('never makes the renewal due before the partner window opens, with lead <= window', () => {
    fc.assert(
      fc.property(
        instantArb,
        fc
          .integer({ min: 1, max: 400 })
          .chain((windowDays) =>
            fc.tuple(fc.integer({ min: 1, max: windowDays }), fc.constant(windowDays)),
          ),
        viewArb,
        (end, [leadDays, windowDays], view) => {
          const opens = end - windowDays * DAY;
          const term = { ...view.term, startsAt: end - 31 * DAY, expiresAt: end };
          expect(renewalDueAt(term, leadDays)).toBeGreaterThanOrEqual(opens);
          const at = nextRenewalAt({
            chain: { ...view, term },
            now: opens - DAY,
            leadDays,
          });
          if (at !== null) expect(at).toBeGreaterThanOrEqual(opens);
        },
      ),
    );
  });

  it('finds a paid renewal due at the time nextRenewalAt schedules it', () => {
    fc.assert(
      fc.property(viewAndNowArb, leadDaysArb, ([view, now], leadDays) => {
        const at = nextRenewalAt({ chain: view, now, leadDays });
        if (at === null) return;
        const decision = decideRenewal({
          chain: { ...view, payment: 'ok' },
          forCount: view.term.count + 1,
          now: at,
          leadDays,
        });
        expect(decision.kind).toBe('renew');
      }),
    );
  });
});
