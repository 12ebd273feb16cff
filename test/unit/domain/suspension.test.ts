// Payment delays: when a suspension fires, what a payment restores.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SECONDS_PER_DAY } from '../../../src/domain/periods.js';
import {
  planPaymentReceived,
  recordedSuspendedOrders,
  suspendedForNonPayment,
  suspensionDueAt,
  withSuspendedOrders,
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

describe('suspendedForNonPayment', () => {
  it('holds for a suspended, overdue chain whose episode was suspended', () => {
    expect(
      suspendedForNonPayment({ status: 'suspended', payment: 'overdue', suspendAt: null }),
    ).toBe(true);
  });

  it('does not hold in the grace of a chain suspended before, awaiting its reactivation', () => {
    const awaiting = { status: 'suspended', payment: 'overdue', suspendAt: overdueAt };
    expect(suspendedForNonPayment(awaiting)).toBe(false);
  });

  it('does not hold for a paid chain, or an active one in its grace', () => {
    expect(suspendedForNonPayment({ status: 'suspended', payment: 'ok', suspendAt: null })).toBe(
      false,
    );
    expect(
      suspendedForNonPayment({ status: 'active', payment: 'overdue', suspendAt: overdueAt }),
    ).toBe(false);
  });

  it('holds once a suspension found nothing in force: what arrives after it joins', () => {
    for (const status of ['active', 'expired']) {
      expect(suspendedForNonPayment({ status, payment: 'overdue', suspendAt: null })).toBe(true);
    }
  });

  it('does not hold for a cancelled chain', () => {
    expect(
      suspendedForNonPayment({ status: 'cancelled', payment: 'overdue', suspendAt: null }),
    ).toBe(false);
  });
});

describe('withSuspendedOrders', () => {
  it('starts a list for a chain not suspended, whatever an earlier one left', () => {
    expect(withSuspendedOrders({ status: 'active', suspendedOrders: ['A'] }, ['B', 'B'])).toEqual([
      'B',
    ]);
  });

  it("grows a suspended chain's list, each order once", () => {
    expect(
      withSuspendedOrders({ status: 'suspended', suspendedOrders: ['A', 'B'] }, ['B', 'C']),
    ).toEqual(['A', 'B', 'C']);
  });

  it("keeps an older record's unknown list unknown", () => {
    expect(withSuspendedOrders({ status: 'suspended', suspendedOrders: null }, ['B'])).toBeNull();
  });
});

describe('recordedSuspendedOrders', () => {
  const suspended = {
    status: 'suspended',
    suspendedOrders: ['A', 'A.a1'],
    suspending: null,
    suspensionCalls: null,
  };

  it('names the orders its list keeps', () => {
    expect(recordedSuspendedOrders(suspended)).toEqual(['A', 'A.a1']);
  });

  it("adds those a newer episode's suspension under way has reached", () => {
    expect(
      recordedSuspendedOrders({ ...suspended, suspending: 2, suspensionCalls: ['A', 'A.a2'] }),
    ).toEqual(['A', 'A.a1', 'A.a2']);
  });

  it('cannot say for a chain not suspended, or a record from before lists were kept', () => {
    expect(recordedSuspendedOrders({ ...suspended, status: 'active' })).toBeNull();
    expect(recordedSuspendedOrders({ ...suspended, suspendedOrders: null })).toBeNull();
    expect(recordedSuspendedOrders({ ...suspended, suspending: 2 })).toBeNull();
  });
});
