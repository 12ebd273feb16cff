// When a chain is expired (DESIGN §4), and when nothing will renew it again.
import { describe, expect, it } from 'vitest';
import { expired, expiryOf, renewsNoMore } from '../../../src/chains/expiry.js';
import type { Chain } from '../../../src/chains/records.js';
import { chainFor } from '../../helpers/chains.js';

const DAY = 86_400;
const placedAt = 1_700_000_000;
const chain = (overrides: Partial<Chain> = {}): Chain => ({
  ...chainFor('X-1', placedAt, overrides),
  version: 3,
});
const ended = placedAt + 32 * DAY;
const renewalIntent = {
  kind: 'renewal' as const,
  method: 'createOrder' as const,
  orderId: 'X-1.r2',
  params: {},
  jobId: 'renew-1',
};

describe('expiryOf', () => {
  it('is null while the term is in force, whatever the payment', () => {
    expect(expiryOf(chain({ payment: 'overdue' }), placedAt + 30 * DAY)).toBeNull();
    expect(expiryOf(chain({ nextRenewalAt: null }), placedAt + 31 * DAY - 1)).toBeNull();
  });

  it('is not_renewing for an ended term that nothing will renew', () => {
    expect(expiryOf(chain({ nextRenewalAt: null }), ended)).toBe('not_renewing');
  });

  it('is payment_overdue for an ended term whose renewal waits for the payment', () => {
    expect(expiryOf(chain({ payment: 'overdue' }), ended)).toBe('payment_overdue');
    // At the very second the term ends.
    expect(expiryOf(chain({ payment: 'overdue' }), placedAt + 31 * DAY)).toBe('payment_overdue');
  });

  it('is null for a paid chain that will renew, a renewal in flight, or a chain not active', () => {
    expect(expiryOf(chain(), ended)).toBeNull();
    expect(expiryOf(chain({ payment: 'overdue', intent: renewalIntent }), ended)).toBeNull();
    for (const status of ['suspended', 'cancelled', 'expired'] as const) {
      expect(expiryOf(chain({ status, payment: 'overdue' }), ended)).toBeNull();
    }
  });
});

describe('expired', () => {
  it('marks the chain and says why in its history entry', () => {
    const { next, history } = expired(chain(), 'payment_overdue', ended, { jobId: 'renew-1' });
    expect(next).toMatchObject({ status: 'expired', updatedAt: ended, version: 3 });
    expect(history).toEqual([
      {
        at: ended,
        event: 'chain.expired',
        detail: expect.stringContaining('term 1 (X-1) ended while the payment is overdue'),
        cause: { jobId: 'renew-1' },
      },
    ]);
    expect(expired(chain(), 'not_renewing', ended, { jobId: 'r' }).history[0]?.detail).toBe(
      'term 1 (X-1) ended with no renewal',
    );
  });
});

describe('renewsNoMore', () => {
  it('holds for a cancelled chain, and an expired one with no renewal to come', () => {
    expect(renewsNoMore(chain({ status: 'cancelled' }))).toBe(true);
    expect(renewsNoMore(chain({ status: 'expired', nextRenewalAt: null }))).toBe(true);
  });

  it('does not hold for an expired chain that will renew (when paid), or one renewing now', () => {
    expect(renewsNoMore(chain({ status: 'expired', payment: 'overdue' }))).toBe(false);
    expect(
      renewsNoMore(chain({ status: 'expired', nextRenewalAt: null, intent: renewalIntent })),
    ).toBe(false);
    expect(renewsNoMore(chain({ status: 'suspended', nextRenewalAt: null }))).toBe(false);
  });
});
