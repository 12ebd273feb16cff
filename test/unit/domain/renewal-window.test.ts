// The renewal window: when a renewal is refused, when the new term starts, and the refusal text.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SECONDS_PER_DAY } from '../../../src/domain/periods.js';
import {
  checkRenewalWindow,
  formatRenewalRefusal,
  isRenewalWindowRefusal,
  renewalStart,
} from '../../../src/domain/renewal-window.js';

const DAY = SECONDS_PER_DAY;
const expiresAt = Date.UTC(2025, 2, 31) / 1000;

const instantArb = fc.integer({ min: 0, max: Date.UTC(2100, 11, 31) / 1000 });
const windowDaysArb = fc.integer({ min: 0, max: 400 });

describe('checkRenewalWindow', () => {
  describe('with a 15-day window', () => {
    it('refuses a renewal while 23 days remain, reporting both counts', () => {
      const now = expiresAt - 23 * DAY;
      expect(checkRenewalWindow({ now, expiresAt, windowDays: 15 })).toEqual({
        kind: 'refused',
        remainingDays: 23,
        windowDays: 15,
      });
    });

    it('opens when exactly 15 days remain', () => {
      const now = expiresAt - 15 * DAY;
      expect(checkRenewalWindow({ now, expiresAt, windowDays: 15 })).toEqual({ kind: 'open' });
    });

    it('refuses one second before that, rounding the remaining days up to 16', () => {
      const now = expiresAt - 15 * DAY - 1;
      expect(checkRenewalWindow({ now, expiresAt, windowDays: 15 })).toEqual({
        kind: 'refused',
        remainingDays: 16,
        windowDays: 15,
      });
    });

    it('stays open once the term has expired', () => {
      const now = expiresAt + 3 * DAY;
      expect(checkRenewalWindow({ now, expiresAt, windowDays: 15 })).toEqual({ kind: 'open' });
    });
  });

  it('with a 0-day window, opens only at or after the end of the term', () => {
    expect(checkRenewalWindow({ now: expiresAt - 1, expiresAt, windowDays: 0 }).kind).toBe(
      'refused',
    );
    expect(checkRenewalWindow({ now: expiresAt, expiresAt, windowDays: 0 }).kind).toBe('open');
  });

  it('opens exactly when at most windowDays * 86400 seconds remain', () => {
    fc.assert(
      fc.property(instantArb, instantArb, windowDaysArb, (now, end, windowDays) => {
        const check = checkRenewalWindow({ now, expiresAt: end, windowDays });
        expect(check.kind === 'open').toBe(end - now <= windowDays * DAY);
      }),
    );
  });

  it('reports more remaining days than the window whenever it refuses', () => {
    fc.assert(
      fc.property(instantArb, instantArb, windowDaysArb, (now, end, windowDays) => {
        const check = checkRenewalWindow({ now, expiresAt: end, windowDays });
        if (check.kind === 'refused') {
          expect(check.windowDays).toBe(windowDays);
          expect(check.remainingDays).toBeGreaterThan(windowDays);
        }
      }),
    );
  });
});

describe('renewalStart', () => {
  it('starts the new term at the end of the current one while it is still running', () => {
    expect(renewalStart({ now: expiresAt - 10 * DAY, expiresAt })).toEqual({
      startsAt: expiresAt,
      expired: false,
    });
  });

  it('treats the end instant itself as expired, since terms are half-open', () => {
    expect(renewalStart({ now: expiresAt, expiresAt })).toEqual({
      startsAt: expiresAt,
      expired: true,
    });
  });

  it('starts the new term now once the current one has expired', () => {
    const now = expiresAt + 5 * DAY + 17;
    expect(renewalStart({ now, expiresAt })).toEqual({ startsAt: now, expired: true });
  });

  it('never starts a term before now, and starts at the term end while the term runs', () => {
    fc.assert(
      fc.property(instantArb, instantArb, (now, end) => {
        const start = renewalStart({ now, expiresAt: end });
        expect(start.startsAt).toBeGreaterThanOrEqual(now);
        expect(start.expired).toBe(end <= now);
        expect(start.startsAt).toBe(start.expired ? now : end);
      }),
    );
  });
});

describe('formatRenewalRefusal', () => {
  it('writes the message the provisioning interface returns', () => {
    expect(formatRenewalRefusal({ remainingDays: 23, windowDays: 15 })).toBe(
      'renewal refused: 23 days remain in the current term (window: 15 days)',
    );
  });

  it('uses the singular for one day', () => {
    expect(formatRenewalRefusal({ remainingDays: 1, windowDays: 1 })).toBe(
      'renewal refused: 1 day remains in the current term (window: 1 day)',
    );
  });

  it('uses the plural for a zero-day window', () => {
    expect(formatRenewalRefusal({ remainingDays: 2, windowDays: 0 })).toBe(
      'renewal refused: 2 days remain in the current term (window: 0 days)',
    );
  });

  it('formats a refusal straight from checkRenewalWindow', () => {
    const check = checkRenewalWindow({ now: expiresAt - 22.5 * DAY, expiresAt, windowDays: 15 });
    if (check.kind !== 'refused') throw new Error(`expected a refusal, got ${check.kind}`);
    expect(formatRenewalRefusal(check)).toBe(
      'renewal refused: 23 days remain in the current term (window: 15 days)',
    );
  });
});

describe('isRenewalWindowRefusal', () => {
  it('recognises every window refusal formatRenewalRefusal writes', () => {
    fc.assert(
      fc.property(fc.nat(4000), fc.nat(400), (remainingDays, windowDays) => {
        expect(isRenewalWindowRefusal(formatRenewalRefusal({ remainingDays, windowDays }))).toBe(
          true,
        );
      }),
    );
  });

  it('does not take a start inside the current term, or any other refusal, for one', () => {
    expect(
      isRenewalWindowRefusal(
        'renewal refused: startsAt 1795355456 is before the end of the current term of B-2 (1796219456)',
      ),
    ).toBe(false);
    expect(isRenewalWindowRefusal('order B-2 is cancelled')).toBe(false);
  });
});
