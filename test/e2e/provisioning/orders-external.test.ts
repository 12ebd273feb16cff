// External orders over the real endpoint: createFirstOrder and its instance, createRenewalOrder
// and its window, replays, and cancel / suspend of whole chains by the first order's id.
import { beforeEach, describe, expect, it } from 'vitest';
import { partnerKeys } from '../../../src/provisioning/keys.js';
import { DAY, T0, useTestApp } from '../../helpers/app.js';
import {
  type Customer,
  createCustomer,
  newPartner,
  ORDER_FIELDS,
  type Order,
  ok,
  type PartnerClient,
  refusal,
  sortedKeys,
  utc,
} from './fixtures.js';

const app = useTestApp();

/** T0 (2026-01-15 12:00 UTC) plus one calendar month. */
const T0_PLUS_MONTH = utc(2026, 2, 15);

let client: PartnerClient;
let customer: Customer;

beforeEach(async () => {
  client = await newPartner(app, 'external');
  customer = await createCustomer(client, 'C-1');
});

const first = {
  customer: 'C-1',
  id: 'F-1',
  product: 'suite-std',
  licenses: 5,
  duration: 'monthly',
};

const firstOrder = async (params: Record<string, unknown> = {}) =>
  ok<Order>(await client.call('createFirstOrder', { ...first, ...params }));
const renew = (params: Record<string, unknown>) => client.call('createRenewalOrder', params);

/** The status the store keeps for an order: the only view of a chain-wide change. */
async function storedStatus(id: string): Promise<string | undefined> {
  const json = await app.redis.hget(partnerKeys(client.partnerId).orders, id);
  return json === null ? undefined : (JSON.parse(json) as { status: string }).status;
}

describe('createFirstOrder', () => {
  it('answers with the Order object: count 1, valid from now for one calendar month', async () => {
    const order = await firstOrder();

    expect(sortedKeys(order)).toEqual(ORDER_FIELDS);
    expect(typeof order.id).toBe('string');
    expect(order).toMatchObject({
      customer: String(customer.id),
      product: 'suite-std',
      licenses: 5,
      duration: 'monthly',
      count: 1,
      createdAt: T0,
      startsAt: T0,
      expiresAt: T0_PLUS_MONTH,
      remoteId: 'F-1',
    });
  });

  it('creates the instance of the customer, an integer', async () => {
    const order = await firstOrder();
    expect(Number.isInteger(order.instance)).toBe(true);
  });

  it('runs a yearly first order for one calendar year', async () => {
    const order = await firstOrder({ duration: 'yearly' });
    expect(order.expiresAt).toBe(utc(2027, 1, 15));
  });

  it('joins a second first order of the same customer to the same instance', async () => {
    const a = await firstOrder();
    app.clock.advance(3 * DAY);
    const b = await firstOrder({ id: 'F-2', product: 'erp-std', licenses: 2 });
    expect(b.instance).toBe(a.instance);
    expect(b).toMatchObject({ count: 1, startsAt: T0 + 3 * DAY, product: 'erp-std' });
    expect(b.id).not.toBe(a.id);
  });

  it('puts concurrent first orders of one customer into one instance', async () => {
    const results = await Promise.all(
      [1, 2, 3, 4].map((n) => client.call('createFirstOrder', { ...first, id: `F-${n}` })),
    );
    const instances = new Set(results.map((res) => ok<Order>(res).instance));
    expect(instances.size).toBe(1);
  });

  it('gives another customer another instance', async () => {
    await createCustomer(client, 'C-2');
    const a = await firstOrder();
    const b = await firstOrder({ customer: 'C-2', id: 'F-2' });
    expect(Number.isInteger(b.instance)).toBe(true);
    expect(b.instance).not.toBe(a.instance);
  });

  it('answers a replay with the same params with the stored order', async () => {
    const order = await firstOrder();
    app.clock.advance(DAY);
    expect(await firstOrder()).toEqual(order);
  });

  it('refuses the same id with other params', async () => {
    await firstOrder();
    expect(refusal(await client.call('createFirstOrder', { ...first, licenses: 6 }))).toContain(
      'F-1',
    );
  });

  it('refuses an unknown customer', async () => {
    const res = await client.call('createFirstOrder', { ...first, customer: 'NOBODY' });
    expect(refusal(res)).toBe('customer not found: NOBODY');
  });

  it.each<[string, Record<string, unknown>, string]>([
    ['licenses 0', { licenses: 0 }, 'params.licenses'],
    ['licenses 1.5', { licenses: 1.5 }, 'params.licenses'],
    ['a weekly duration', { duration: 'weekly' }, 'params.duration'],
    ['a missing duration', { duration: undefined }, 'params.duration'],
    ['a product outside the catalogue', { product: 'suite-gold' }, 'params.product'],
    ['a startsAt (not a param of createFirstOrder)', { startsAt: T0 }, 'startsAt'],
  ])('refuses %s, naming the field', async (_label, change, field) => {
    const text = refusal(await client.call('createFirstOrder', { ...first, ...change }));
    expect(text).toContain(field);
  });
});

describe('createRenewalOrder', () => {
  let parent: Order;

  beforeEach(async () => {
    parent = await firstOrder();
  });

  describe('while more than 15 days remain', () => {
    it('refuses a renewal right after the first order, counting 31 days', async () => {
      expect(refusal(await renew({ parent: 'F-1', id: 'R-1' }))).toBe(
        'renewal refused: 31 days remain in the current term (window: 15 days)',
      );
    });

    it('refuses one second before the window opens, counting 16 days', async () => {
      app.clock.set(T0_PLUS_MONTH - 15 * DAY - 1);
      expect(refusal(await renew({ parent: 'F-1', id: 'R-1' }))).toBe(
        'renewal refused: 16 days remain in the current term (window: 15 days)',
      );
    });
  });

  describe('when exactly 15 days remain', () => {
    beforeEach(() => {
      app.clock.set(T0_PLUS_MONTH - 15 * DAY);
    });

    it('starts the new term at the end of the current one, count 2', async () => {
      const renewal = ok<Order>(await renew({ parent: 'F-1', id: 'R-1' }));
      expect(sortedKeys(renewal)).toEqual(ORDER_FIELDS);
      expect(renewal).toMatchObject({
        customer: parent.customer,
        instance: parent.instance,
        product: 'suite-std',
        duration: 'monthly',
        count: 2,
        createdAt: T0_PLUS_MONTH - 15 * DAY,
        startsAt: T0_PLUS_MONTH,
        expiresAt: utc(2026, 3, 15),
        remoteId: 'R-1',
      });
      expect(renewal.id).not.toBe(parent.id);
    });

    it("carries the chain's licenses", async () => {
      const renewal = ok<Order>(await renew({ parent: 'F-1', id: 'R-1' }));
      expect(renewal.licenses).toBe(5);
    });

    it('takes the number of licenses from the optional licenses param', async () => {
      const renewal = ok<Order>(await renew({ parent: 'F-1', id: 'R-1', licenses: 8 }));
      expect(renewal.licenses).toBe(8);
    });

    it('carries a changed number of licenses into the next renewal', async () => {
      ok(await renew({ parent: 'F-1', id: 'R-1', licenses: 8 }));
      app.clock.set(utc(2026, 3, 10));
      const next = ok<Order>(await renew({ parent: 'F-1', id: 'R-2' }));
      expect(next).toMatchObject({ licenses: 8, count: 3, startsAt: utc(2026, 3, 15) });
    });

    it('refuses an accidental second renewal right after the first', async () => {
      ok(await renew({ parent: 'F-1', id: 'R-1' }));
      expect(refusal(await renew({ parent: 'F-1', id: 'R-1b' }))).toBe(
        'renewal refused: 43 days remain in the current term (window: 15 days)',
      );
    });

    it('makes exactly one of several concurrent renewals', async () => {
      const results = await Promise.all(
        [1, 2, 3, 4].map((n) => renew({ parent: 'F-1', id: `R-${n}` })),
      );
      const made = results.filter((r) => r.status === 200);
      expect(made).toHaveLength(1);
      expect(made[0]?.body).toMatchObject({ count: 2, startsAt: T0_PLUS_MONTH });
      for (const res of results.filter((r) => r.status !== 200)) {
        expect(refusal(res)).toBe(
          'renewal refused: 43 days remain in the current term (window: 15 days)',
        );
      }
    });

    it('answers a replay of the same renewal with the stored order', async () => {
      const renewal = ok<Order>(await renew({ parent: 'F-1', id: 'R-1' }));
      app.clock.advance(DAY);
      const again = await renew({ parent: 'F-1', id: 'R-1' });
      expect(again.status).toBe(200);
      expect(again.body).toEqual(renewal);
    });

    it('refuses the same renewal id with other params', async () => {
      ok(await renew({ parent: 'F-1', id: 'R-1' }));
      expect(refusal(await renew({ parent: 'F-1', id: 'R-1', licenses: 9 }))).toContain('R-1');
    });

    it('refuses a renewal id that names the first order', async () => {
      refusal(await renew({ parent: 'F-1', id: 'F-1' }));
    });
  });

  describe('when the current term has expired', () => {
    it('starts the new term now', async () => {
      const now = utc(2026, 2, 20, 8);
      app.clock.set(now);
      const renewal = ok<Order>(await renew({ parent: 'F-1', id: 'R-1' }));
      expect(renewal).toMatchObject({
        count: 2,
        startsAt: now,
        expiresAt: utc(2026, 3, 20, 8),
        licenses: 5,
      });
    });

    it('starts the new term now at the very instant the term ends', async () => {
      app.clock.set(T0_PLUS_MONTH);
      const renewal = ok<Order>(await renew({ parent: 'F-1', id: 'R-1' }));
      expect(renewal).toMatchObject({ startsAt: T0_PLUS_MONTH, expiresAt: utc(2026, 3, 15) });
    });
  });

  describe('with a partner window of 30 days', () => {
    beforeEach(async () => {
      client = await newPartner(app, 'external', 30);
      customer = await createCustomer(client, 'C-1');
      parent = await firstOrder();
    });

    it('refuses while 31 days remain and allows a renewal at 30', async () => {
      expect(refusal(await renew({ parent: 'F-1', id: 'R-1' }))).toBe(
        'renewal refused: 31 days remain in the current term (window: 30 days)',
      );
      app.clock.advance(DAY);
      expect(ok<Order>(await renew({ parent: 'F-1', id: 'R-1' })).startsAt).toBe(T0_PLUS_MONTH);
    });
  });

  describe('refusals', () => {
    it('refuses an unknown parent', async () => {
      expect(refusal(await renew({ parent: 'NOPE', id: 'R-1' }))).toBe('order not found: NOPE');
    });

    it('refuses a parent that is a renewal, naming it', async () => {
      app.clock.set(T0_PLUS_MONTH - DAY);
      ok(await renew({ parent: 'F-1', id: 'R-1' }));
      app.clock.set(utc(2026, 3, 10));
      expect(refusal(await renew({ parent: 'R-1', id: 'R-2' }))).toContain('R-1');
    });

    it.each<[string, Record<string, unknown>, string]>([
      ['a missing parent', { id: 'R-1' }, 'params.parent'],
      ['a missing id', { parent: 'F-1' }, 'params.id'],
      ['licenses 0', { parent: 'F-1', id: 'R-1', licenses: 0 }, 'params.licenses'],
      ['licenses 100001', { parent: 'F-1', id: 'R-1', licenses: 100_001 }, 'params.licenses'],
      ['an unknown field', { parent: 'F-1', id: 'R-1', startsAt: T0 }, 'startsAt'],
    ])('refuses %s, naming the field', async (_label, params, field) => {
      app.clock.set(T0_PLUS_MONTH - DAY);
      expect(refusal(await renew(params))).toContain(field);
    });
  });
});

describe('cancelOrder and suspendOrder', () => {
  beforeEach(async () => {
    await firstOrder();
    app.clock.set(T0_PLUS_MONTH - DAY);
    ok(await renew({ parent: 'F-1', id: 'R-1' }));
  });

  describe("with the first order's id", () => {
    it('cancels the whole chain, answering true', async () => {
      expect(ok(await client.call('cancelOrder', { id: 'F-1' }))).toBe(true);
      expect(await storedStatus('F-1')).toBe('cancelled');
      expect(await storedStatus('R-1')).toBe('cancelled');
    });

    it('refuses a renewal of a cancelled chain', async () => {
      ok(await client.call('cancelOrder', { id: 'F-1' }));
      app.clock.set(utc(2026, 3, 10));
      expect(refusal(await renew({ parent: 'F-1', id: 'R-2' }))).toContain('F-1');
    });

    it('accepts a repeated cancel', async () => {
      ok(await client.call('cancelOrder', { id: 'F-1' }));
      expect(ok(await client.call('cancelOrder', { id: 'F-1' }))).toBe(true);
    });

    it('refuses to suspend a cancelled chain', async () => {
      ok(await client.call('cancelOrder', { id: 'F-1' }));
      expect(refusal(await client.call('suspendOrder', { id: 'F-1' }))).toContain('F-1');
    });

    it('suspends the whole chain, answering true, and accepts suspending twice', async () => {
      expect(ok(await client.call('suspendOrder', { id: 'F-1' }))).toBe(true);
      expect(ok(await client.call('suspendOrder', { id: 'F-1' }))).toBe(true);
      expect(await storedStatus('F-1')).toBe('suspended');
      expect(await storedStatus('R-1')).toBe('suspended');
    });

    it('cancels a suspended chain', async () => {
      ok(await client.call('suspendOrder', { id: 'F-1' }));
      expect(ok(await client.call('cancelOrder', { id: 'F-1' }))).toBe(true);
      expect(await storedStatus('R-1')).toBe('cancelled');
    });

    it('leaves another chain of the same customer alone', async () => {
      await firstOrder({ id: 'F-2' });
      ok(await client.call('cancelOrder', { id: 'F-1' }));
      expect(await storedStatus('F-2')).toBe('active');
      expect(ok(await client.call('suspendOrder', { id: 'F-2' }))).toBe(true);
    });
  });

  describe("with a renewal's id", () => {
    it.each(['cancelOrder', 'suspendOrder'])('%s refuses it, naming the first order', async (m) => {
      const text = refusal(await client.call(m, { id: 'R-1' }));
      expect(text).toContain('R-1');
      expect(text).toContain('F-1');
      expect(await storedStatus('R-1')).toBe('active');
    });
  });

  describe('with an unknown id', () => {
    it.each(['cancelOrder', 'suspendOrder'])('%s refuses it with order not found', async (m) => {
      expect(refusal(await client.call(m, { id: 'NOPE-9' }))).toBe('order not found: NOPE-9');
    });
  });
});

describe('methods of the marketplace variant', () => {
  it.each(['unsuspendOrder', 'createOrder'])('%s is not offered', async (method) => {
    await firstOrder();
    const params =
      method === 'createOrder'
        ? { customer: 'C-1', id: 'O-1', product: 'suite-std', licenses: 1, duration: 'monthly' }
        : { id: 'F-1' };
    expect(refusal(await client.call(method, params))).toBe(
      `method ${method} is not offered in the external variant`,
    );
  });
});
