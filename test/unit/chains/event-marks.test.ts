// What a chain remembers of an applied event: its webhook id with a digest of what it said, and
// the bare webhook ids that records written before marks hold.
import { describe, expect, it } from 'vitest';
import {
  eventMark,
  markedWebhookId,
  remembersEvent,
  sameEvent,
  withEventMark,
} from '../../../src/chains/event-marks.js';

const overdue = { webhookId: 'pay-1', type: 'payment.overdue', data: { order: 'A-1' } };
const received = { ...overdue, type: 'payment.received' };

describe('event marks', () => {
  it('tell two events under one webhook id apart, and name that id', () => {
    expect(eventMark(overdue)).not.toBe(eventMark(received));
    expect(sameEvent(eventMark(overdue), eventMark(received))).toBe(false);
    expect(markedWebhookId(eventMark(received))).toBe('pay-1');
  });

  it('take the same event sent again for the one applied, whatever the order of its fields', () => {
    const reordered = { ...overdue, data: { invoice: 'INV-1', order: 'A-1' } };
    const same = { ...overdue, data: { order: 'A-1', invoice: 'INV-1' } };
    expect(eventMark(reordered)).toBe(eventMark(same));
    expect(remembersEvent([eventMark(reordered)], eventMark(same))).toBe(true);
  });

  it('take a bare webhook id on either side for any event of that id (older records)', () => {
    expect(remembersEvent(['pay-1'], eventMark(received))).toBe(true);
    expect(remembersEvent([eventMark(overdue)], 'pay-1')).toBe(true);
    expect(remembersEvent(['pay-2'], eventMark(received))).toBe(false);
    expect(markedWebhookId('pay-1')).toBe('pay-1');
  });

  it('keep the latest marks, the newest last and each once', () => {
    const marks = withEventMark(['a', 'b', 'c'], 'a', 3);
    expect(marks).toEqual(['b', 'c', 'a']);
    expect(withEventMark(marks, 'd', 3)).toEqual(['c', 'a', 'd']);
  });
});
