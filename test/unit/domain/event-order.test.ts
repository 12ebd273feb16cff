// The order of a chain's events of one kind: which are stale.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  isStaleEvent,
  lastAppliedEvent,
  staleEventReason,
} from '../../../src/domain/event-order.js';

const overdueAt = Date.UTC(2025, 4, 12, 9, 30) / 1000;

describe('isStaleEvent', () => {
  const last = { occurredAt: overdueAt, sequence: 7 };

  it('treats an event older than the last applied event of its kind as stale', () => {
    expect(isStaleEvent({ occurredAt: overdueAt - 1, sequence: 9 }, last)).toBe(true);
  });

  it('applies a newer event, whatever order intake accepted it in', () => {
    expect(isStaleEvent({ occurredAt: overdueAt + 1, sequence: 3 }, last)).toBe(false);
  });

  it('orders two events of the same second by the order intake accepted them in', () => {
    expect(isStaleEvent({ occurredAt: overdueAt, sequence: 6 }, last)).toBe(true);
    expect(isStaleEvent({ occurredAt: overdueAt, sequence: 8 }, last)).toBe(false);
  });

  it('applies an event of the same second when either was not numbered by intake', () => {
    expect(isStaleEvent({ occurredAt: overdueAt, sequence: null }, last)).toBe(false);
    expect(
      isStaleEvent(
        { occurredAt: overdueAt, sequence: 1 },
        { occurredAt: overdueAt, sequence: null },
      ),
    ).toBe(false);
  });

  it('never treats the first event of its kind on a chain as stale', () => {
    expect(isStaleEvent({ occurredAt: 0, sequence: 1 }, null)).toBe(false);
  });

  it('is a strict order: of two distinct numbered events, exactly one is stale after the other', () => {
    const event = fc.record({
      occurredAt: fc.integer({ min: 0, max: 10 }),
      sequence: fc.integer({ min: 1, max: 10 }),
    });
    fc.assert(
      fc.property(event, event, (a, b) => {
        fc.pre(a.occurredAt !== b.occurredAt || a.sequence !== b.sequence);
        expect(isStaleEvent(a, b)).toBe(!isStaleEvent(b, a));
      }),
    );
  });
});

describe('staleEventReason', () => {
  const last = { occurredAt: overdueAt, sequence: 7 };

  it('names both times when the event is older', () => {
    expect(staleEventReason({ occurredAt: overdueAt - 90, sequence: 9 }, last, 'seat')).toBe(
      'event of 2025-05-12T09:28:30Z is older than the last applied seat event (2025-05-12T09:30:00Z)',
    );
  });

  it('says intake accepted it first when both occurred in the same second', () => {
    expect(staleEventReason({ occurredAt: overdueAt, sequence: 6 }, last, 'payment')).toBe(
      'event of 2025-05-12T09:30:00Z was accepted before the last applied payment event of the same second',
    );
  });
});

describe('lastAppliedEvent', () => {
  it('is null before a chain applied any event of the kind', () => {
    expect(lastAppliedEvent(null, null)).toBeNull();
  });

  it('keeps an event recorded before intake numbered them as unnumbered', () => {
    expect(lastAppliedEvent(overdueAt, undefined)).toEqual({
      occurredAt: overdueAt,
      sequence: null,
    });
  });
});
