// What the workers say of a provisioning answer they cannot record: each bad field, by name.
import { describe, expect, it } from 'vitest';
import { parseAnswer } from '../../../src/client/client-over.js';
import { orderResponse } from '../../../src/client/provisioning-client.js';

const order = {
  id: 'ord-1',
  customer: 'cus-1',
  instance: 'inst-1',
  product: 'suite-std',
  licenses: 5,
  duration: 'monthly',
  count: 1,
  createdAt: 1_700_000_000,
  startsAt: 1_700_000_000,
  expiresAt: 1_702_592_000,
  remoteId: 'O-1',
};

function refusal(answer: unknown): string {
  try {
    parseAnswer(orderResponse, 'createOrder', answer);
  } catch (error) {
    return (error as Error).message;
  }
  throw new Error('accepted');
}

describe('an order answer the workers cannot record', () => {
  it('names a missing field as required, a union (instance, customer) as any other', () => {
    const { instance: _i, customer: _c, licenses: _l, ...rest } = order;
    expect(refusal(rest)).toBe(
      'provisioning createOrder answered an unexpected shape: answer.customer: is required; answer.instance: is required; answer.licenses: is required',
    );
  });

  it('names a wrong value with what it was', () => {
    expect(refusal({ ...order, licenses: '5' })).toMatch(/answer\.licenses: .*, got "5"$/);
  });
});
