// Payment delays: when a suspension fires, which payment events are stale, what a payment restores.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SECONDS_PER_DAY } from '../../../src/domain/periods.js';
import {
  isStalePaymentEvent,
  planPaymentReceived,
  suspensionDueAt,
} from '../../../src/domain/suspension.js';

const overdueAt = Date.UTC(2025, 4, 12, 9, 30) / 1000;

describe('suspensionDueAt', () => {
  it('suspends at once when there is no grace period', () => {
    expect(suspensionDueAt({ overdueAt, graceDays: 0 })).toBe(overdueAt);
  });

  it('suspends three days (259200 seconds) after the overdue notice by default', () => {
    expect(suspensionDueAt({ overdueAt, graceDays: 3 })).toBe(overdueAt + 259_200);
  });

  it('is always whole grace days after the overdue notice, never before it', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 4_102_444_800 }),
        fc.integer({ min: 0, max: 90 }),
        (at, graceDays) => {
          const due = suspensionDueAt({ overdueAt: at, graceDays });
          expect(due - at).toBe(graceDays * SECONDS_PER_DAY);
          expect(due).toBeGreaterThanOrEqual(at);
        },
      ),
    );
  });
});

describe('isStalePaymentEvent', () => {
  const last = { occurredAt: overdueAt, sequence: 7 };

  it('treats an event older than the last applied payment event as stale', () => {
    expect(isStalePaymentEvent({ occurredAt: overdueAt - 1, sequence: 9 }, last)).toBe(true);
  });

  it('applies a newer event, whatever order intake accepted it in', () => {
    expect(isStalePaymentEvent({ occurredAt: overdueAt + 1, sequence: 3 }, last)).toBe(false);
  });

  it('orders two events of the same second by the order intake accepted them in', () => {
    expect(isStalePaymentEvent({ occurredAt: overdueAt, sequence: 6 }, last)).toBe(true);
    expect(isStalePaymentEvent({ occurredAt: overdueAt, sequence: 8 }, last)).toBe(false);
  });

  it('applies an event of the same second when either was not numbered by intake', () => {
    expect(isStalePaymentEvent({ occurredAt: overdueAt, sequence: null }, last)).toBe(false);
    expect(
      isStalePaymentEvent(
        { occurredAt: overdueAt, sequence: 1 },
        { occurredAt: overdueAt, sequence: null },
      ),
    ).toBe(false);
  });

  it('never treats the first payment event of a chain as stale', () => {
    expect(isStalePaymentEvent({ occurredAt: 0, sequence: 1 }, null)).toBe(false);
  });

  it('is a strict order: of two distinct numbered events, exactly one is stale after the other', () => {
    const event = fc.record({
      occurredAt: fc.integer({ min: 0, max: 10 }),
      sequence: fc.integer({ min: 1, max: 10 }),
    });
    fc.assert(
      fc.property(event, event, (a, b) => {
        fc.pre(a.occurredAt !== b.occurredAt || a.sequence !== b.sequence);
        expect(isStalePaymentEvent(a, b)).toBe(!isStalePaymentEvent(b, a));
      }),
    );
  });
});

describe('planPaymentReceived', () => {
  describe('when the chain is not suspended', () => {
    it('has nothing to restore in either variant', () => {
      expect(planPaymentReceived({ suspended: false, variant: 'marketplace' })).toEqual({
        kind: 'nothing_suspended',
      });
      expect(planPaymentReceived({ suspended: false, variant: 'external' })).toEqual({
        kind: 'nothing_suspended',
      });
    });
  });

  describe('when the chain is suspended', () => {
    it('unsuspends its orders in the marketplace variant', () => {
      expect(planPaymentReceived({ suspended: true, variant: 'marketplace' })).toEqual({
        kind: 'unsuspend',
      });
    });

    it('asks an operator for manual reactivation in the external variant, which cannot unsuspend', () => {
      expect(planPaymentReceived({ suspended: true, variant: 'external' })).toEqual({
        kind: 'manual_reactivation',
      });
    });
  });
});
