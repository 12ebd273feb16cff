// Marketplace orders over the real endpoint: the three forms of createOrder, renewals linked by
// `parent`, the renewal window, idempotent replays, validation, and cancel / suspend / unsuspend.
import { beforeEach, describe, expect, it } from 'vitest';
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
  client = await newPartner(app, 'marketplace');
  customer = await createCustomer(client, 'C-1');
});

const simple = { customer: 'C-1', product: 'suite-std', licenses: 5, duration: 'monthly' };

const createOrder = (params: Record<string, unknown>) => client.call('createOrder', params);
const placeOrder = async (params: Record<string, unknown>) => ok<Order>(await createOrder(params));

describe('createOrder, simple form', () => {
  it('answers with the Order object: valid from now for one calendar month', async () => {
    const order = await placeOrder({ ...simple, id: 'O-1' });

    expect(sortedKeys(order)).toEqual(ORDER_FIELDS);
    expect(typeof order.id).toBe('string');
    expect(order).toMatchObject({
      customer: customer.id,
      instance: null,
      product: 'suite-std',
      licenses: 5,
      duration: 'monthly',
      count: 1,
      createdAt: T0,
      startsAt: T0,
      expiresAt: T0_PLUS_MONTH,
      remoteId: 'O-1',
    });
  });

  it("names the customer by its internal id, not the caller's", async () => {
    const order = await placeOrder({ ...simple, id: 'O-1' });
    expect(order.customer).toBe(customer.id);
    expect(order.customer).not.toBe('C-1');
  });

  it('gives every order its own internal id', async () => {
    const a = await placeOrder({ ...simple, id: 'O-1' });
    const b = await placeOrder({ ...simple, id: 'O-2' });
    expect(a.id).not.toBe(b.id);
  });

  it('runs a yearly order for one calendar year', async () => {
    const order = await placeOrder({ ...simple, id: 'O-1', duration: 'yearly' });
    expect(order).toMatchObject({ duration: 'yearly', startsAt: T0, expiresAt: utc(2027, 1, 15) });
  });

  it('ends a monthly term that starts on Jan 31 on the last day of February', async () => {
    app.clock.set(utc(2026, 1, 31));
    const order = await placeOrder({ ...simple, id: 'O-1' });
    expect(order.expiresAt).toBe(utc(2026, 2, 28));
  });

  it.each(['suite-lite', 'suite-std', 'suite-ent', 'erp-std', 'erp-admin', 'erp-lim'])(
    'accepts the catalogue product %s',
    async (product) => {
      const order = await placeOrder({ ...simple, id: `O-${product}`, product });
      expect(order.product).toBe(product);
    },
  );
});

describe('createOrder, controlled start', () => {
  it('starts at the given startsAt and runs one term from there', async () => {
    const startsAt = utc(2026, 2, 1, 0);
    const order = await placeOrder({ ...simple, id: 'O-1', startsAt });
    expect(order).toMatchObject({
      count: 1,
      createdAt: T0,
      startsAt,
      expiresAt: utc(2026, 3, 1, 0),
      duration: 'monthly',
      instance: null,
    });
  });

  it('accepts a start in the past', async () => {
    const startsAt = utc(2026, 1, 1, 0);
    const order = await placeOrder({ ...simple, id: 'O-1', startsAt });
    expect(order).toMatchObject({ startsAt, expiresAt: utc(2026, 2, 1, 0), createdAt: T0 });
  });

  it('runs a yearly controlled start for one calendar year', async () => {
    const startsAt = utc(2026, 3, 1, 0);
    const order = await placeOrder({ ...simple, id: 'O-1', duration: 'yearly', startsAt });
    expect(order.expiresAt).toBe(utc(2027, 3, 1, 0));
  });
});

describe('createOrder, partial form', () => {
  it('runs from the given startsAt to the given expiresAt with duration null', async () => {
    const startsAt = utc(2026, 1, 20, 0);
    const expiresAt = utc(2026, 2, 15);
    const order = await placeOrder({
      customer: 'C-1',
      id: 'P-1',
      product: 'suite-std',
      licenses: 2,
      startsAt,
      expiresAt,
    });

    expect(sortedKeys(order)).toEqual(ORDER_FIELDS);
    expect(order).toMatchObject({
      customer: customer.id,
      instance: null,
      product: 'suite-std',
      licenses: 2,
      duration: null,
      createdAt: T0,
      startsAt,
      expiresAt,
      remoteId: 'P-1',
    });
    expect(Number.isInteger(order.count)).toBe(true);
  });
});

describe('renewals linked by parent', () => {
  describe('when the chain is anchored on Jan 31', () => {
    it('follows the anchor: Feb 28, then Mar 31, then Apr 30, then May 31', async () => {
      app.clock.set(utc(2026, 1, 31));
      const first = await placeOrder({ ...simple, id: 'O-1' });
      expect(first).toMatchObject({
        count: 1,
        startsAt: utc(2026, 1, 31),
        expiresAt: utc(2026, 2, 28),
      });

      app.clock.set(utc(2026, 2, 20));
      const second = await placeOrder({
        ...simple,
        id: 'O-2',
        parent: 'O-1',
        startsAt: first.expiresAt,
      });
      expect(second).toMatchObject({
        count: 2,
        startsAt: utc(2026, 2, 28),
        expiresAt: utc(2026, 3, 31),
        remoteId: 'O-2',
        createdAt: utc(2026, 2, 20),
      });

      app.clock.set(utc(2026, 3, 20));
      const third = await placeOrder({
        ...simple,
        id: 'O-3',
        parent: 'O-1',
        startsAt: second.expiresAt,
      });
      expect(third).toMatchObject({
        count: 3,
        startsAt: utc(2026, 3, 31),
        expiresAt: utc(2026, 4, 30),
      });

      app.clock.set(utc(2026, 4, 20));
      const fourth = await placeOrder({
        ...simple,
        id: 'O-4',
        parent: 'O-1',
        startsAt: third.expiresAt,
      });
      expect(fourth).toMatchObject({
        count: 4,
        startsAt: utc(2026, 4, 30),
        expiresAt: utc(2026, 5, 31),
      });
    });
  });

  it('starts a renewal inside the window at the old expiresAt when startsAt is left out', async () => {
    const first = await placeOrder({ ...simple, id: 'O-1' });
    app.clock.set(first.expiresAt - 10 * DAY);
    const renewal = await placeOrder({ ...simple, id: 'O-2', parent: 'O-1' });
    expect(renewal).toMatchObject({
      count: 2,
      startsAt: T0_PLUS_MONTH,
      expiresAt: utc(2026, 3, 15),
      duration: 'monthly',
      product: 'suite-std',
      customer: customer.id,
    });
  });

  it('carries the licenses of the renewal request', async () => {
    const first = await placeOrder({ ...simple, id: 'O-1' });
    app.clock.set(first.expiresAt - 5 * DAY);
    const renewal = await placeOrder({ ...simple, id: 'O-2', parent: 'O-1', licenses: 9 });
    expect(renewal.licenses).toBe(9);
  });

  it('allows a renewal when exactly 15 days remain', async () => {
    const first = await placeOrder({ ...simple, id: 'O-1' });
    app.clock.set(first.expiresAt - 15 * DAY);
    const renewal = await placeOrder({
      ...simple,
      id: 'O-2',
      parent: 'O-1',
      startsAt: first.expiresAt,
    });
    expect(renewal.count).toBe(2);
  });

  describe('outside the renewal window', () => {
    it('refuses a renewal right after the first order, counting 31 days', async () => {
      await placeOrder({ ...simple, id: 'O-1' });
      const res = await createOrder({
        ...simple,
        id: 'O-2',
        parent: 'O-1',
        startsAt: T0_PLUS_MONTH,
      });
      expect(refusal(res)).toBe(
        'renewal refused: 31 days remain in the current term (window: 15 days)',
      );
    });

    it('counts the whole days that remain', async () => {
      await placeOrder({ ...simple, id: 'O-1' });
      app.clock.advance(10 * DAY);
      const res = await createOrder({
        ...simple,
        id: 'O-2',
        parent: 'O-1',
        startsAt: T0_PLUS_MONTH,
      });
      expect(refusal(res)).toBe(
        'renewal refused: 21 days remain in the current term (window: 15 days)',
      );
    });

    it('refuses one hour before the window opens, counting the started day', async () => {
      await placeOrder({ ...simple, id: 'O-1' });
      app.clock.set(T0_PLUS_MONTH - 15 * DAY - 3600);
      const res = await createOrder({
        ...simple,
        id: 'O-2',
        parent: 'O-1',
        startsAt: T0_PLUS_MONTH,
      });
      expect(refusal(res)).toBe(
        'renewal refused: 16 days remain in the current term (window: 15 days)',
      );
    });

    it('stores nothing, so the same id is accepted once the window opens', async () => {
      await placeOrder({ ...simple, id: 'O-1' });
      refusal(await createOrder({ ...simple, id: 'O-2', parent: 'O-1' }));
      app.clock.set(T0_PLUS_MONTH - DAY);
      const renewal = await placeOrder({ ...simple, id: 'O-2', parent: 'O-1' });
      expect(renewal.count).toBe(2);
    });
  });

  describe('with a partner window of 30 days', () => {
    beforeEach(async () => {
      client = await newPartner(app, 'marketplace', 30);
      customer = await createCustomer(client, 'C-1');
    });

    it('refuses while 31 days remain, naming the partner window', async () => {
      await placeOrder({ ...simple, id: 'O-1' });
      const res = await createOrder({ ...simple, id: 'O-2', parent: 'O-1' });
      expect(refusal(res)).toBe(
        'renewal refused: 31 days remain in the current term (window: 30 days)',
      );
    });

    it('allows a renewal when 30 days remain', async () => {
      await placeOrder({ ...simple, id: 'O-1' });
      app.clock.advance(DAY);
      const renewal = await placeOrder({ ...simple, id: 'O-2', parent: 'O-1' });
      expect(renewal).toMatchObject({ count: 2, startsAt: T0_PLUS_MONTH });
    });
  });

  describe('when the chain has expired', () => {
    it('starts the renewal now and runs one term from now', async () => {
      await placeOrder({ ...simple, id: 'O-1' });
      const now = utc(2026, 2, 20, 9);
      app.clock.set(now);
      const renewal = await placeOrder({ ...simple, id: 'O-2', parent: 'O-1' });
      expect(renewal).toMatchObject({
        count: 2,
        startsAt: now,
        expiresAt: utc(2026, 3, 20, 9),
        createdAt: now,
      });
    });

    it('starts now a renewal that asks for the old end, long past (sent late, after an outage)', async () => {
      const first = await placeOrder({ ...simple, id: 'O-1' });
      const now = utc(2026, 5, 10, 9);
      app.clock.set(now);
      const renewal = await placeOrder({
        ...simple,
        id: 'O-2',
        parent: 'O-1',
        startsAt: first.expiresAt,
      });
      expect(renewal).toMatchObject({ count: 2, startsAt: now, expiresAt: utc(2026, 6, 10, 9) });
    });

    it('anchors later renewals on the new start', async () => {
      await placeOrder({ ...simple, id: 'O-1' });
      app.clock.set(utc(2026, 3, 31));
      const second = await placeOrder({ ...simple, id: 'O-2', parent: 'O-1' });
      expect(second.expiresAt).toBe(utc(2026, 4, 30));
      app.clock.set(utc(2026, 4, 25));
      const third = await placeOrder({ ...simple, id: 'O-3', parent: 'O-1' });
      expect(third).toMatchObject({
        count: 3,
        startsAt: utc(2026, 4, 30),
        expiresAt: utc(2026, 5, 31),
      });
    });
  });

  describe('refusals', () => {
    it('refuses a startsAt that overlaps the current term', async () => {
      await placeOrder({ ...simple, id: 'O-1' });
      app.clock.set(T0_PLUS_MONTH - 10 * DAY);
      const text = refusal(
        await createOrder({
          ...simple,
          id: 'O-2',
          parent: 'O-1',
          startsAt: T0_PLUS_MONTH - 5 * DAY,
        }),
      );
      expect(text).toContain('startsAt');
    });

    it('refuses a startsAt one second before the current term ends', async () => {
      await placeOrder({ ...simple, id: 'O-1' });
      app.clock.set(T0_PLUS_MONTH - 10 * DAY);
      refusal(
        await createOrder({ ...simple, id: 'O-2', parent: 'O-1', startsAt: T0_PLUS_MONTH - 1 }),
      );
    });

    it('refuses a parent of another customer', async () => {
      await createCustomer(client, 'C-2');
      await placeOrder({ ...simple, id: 'O-1' });
      app.clock.set(T0_PLUS_MONTH - DAY);
      const text = refusal(
        await createOrder({ ...simple, customer: 'C-2', id: 'O-2', parent: 'O-1' }),
      );
      expect(text).toContain('O-1');
    });

    it('refuses a parent of another product', async () => {
      await placeOrder({ ...simple, id: 'O-1' });
      app.clock.set(T0_PLUS_MONTH - DAY);
      const text = refusal(
        await createOrder({ ...simple, id: 'O-2', parent: 'O-1', product: 'suite-ent' }),
      );
      expect(text).toContain('O-1');
    });

    it('refuses a parent of another duration', async () => {
      await placeOrder({ ...simple, id: 'O-1' });
      app.clock.set(T0_PLUS_MONTH - DAY);
      const text = refusal(
        await createOrder({ ...simple, id: 'O-2', parent: 'O-1', duration: 'yearly' }),
      );
      expect(text).toContain('O-1');
    });

    it('refuses an unknown parent', async () => {
      const res = await createOrder({ ...simple, id: 'O-2', parent: 'NOPE' });
      expect(refusal(res)).toBe('order not found: NOPE');
    });

    it('refuses a parent that is itself a renewal', async () => {
      await placeOrder({ ...simple, id: 'O-1' });
      app.clock.set(T0_PLUS_MONTH - DAY);
      await placeOrder({ ...simple, id: 'O-2', parent: 'O-1' });
      app.clock.set(utc(2026, 3, 10));
      const text = refusal(await createOrder({ ...simple, id: 'O-3', parent: 'O-2' }));
      expect(text).toContain('O-2');
    });

    it('refuses a parent that is a partial order', async () => {
      await placeOrder({
        customer: 'C-1',
        id: 'P-1',
        product: 'suite-std',
        licenses: 2,
        startsAt: T0,
        expiresAt: T0 + 5 * DAY,
      });
      const text = refusal(await createOrder({ ...simple, id: 'O-2', parent: 'P-1' }));
      expect(text).toContain('P-1');
    });
  });
});

describe('idempotent creation', () => {
  it('answers a replay of a renewal, after the window would refuse a new one, with the stored order', async () => {
    await placeOrder({ ...simple, id: 'O-1' });
    app.clock.set(T0_PLUS_MONTH - 5 * DAY);
    const renewal = await placeOrder({ ...simple, id: 'O-2', parent: 'O-1' });

    // The chain now runs until Mar 15: a new renewal would be refused by the window.
    app.clock.advance(DAY);
    refusal(await createOrder({ ...simple, id: 'O-3', parent: 'O-1' }));

    const again = await createOrder({ ...simple, id: 'O-2', parent: 'O-1' });
    expect(again.status).toBe(200);
    expect(again.body).toEqual(renewal);
  });

  it('answers a replay of a simple order with the stored order, keeping its dates', async () => {
    const first = await placeOrder({ ...simple, id: 'O-1' });
    app.clock.advance(7 * DAY);
    const again = await placeOrder({ ...simple, id: 'O-1' });
    expect(again).toEqual(first);
  });

  it('answers a replay of a partial order with the stored order', async () => {
    const params = {
      customer: 'C-1',
      id: 'P-1',
      product: 'erp-std',
      licenses: 3,
      startsAt: T0,
      expiresAt: T0 + 9 * DAY,
    };
    const first = await placeOrder(params);
    expect(await placeOrder(params)).toEqual(first);
  });

  it('answers concurrent creations of one id with one and the same order', async () => {
    const results = await Promise.all([1, 2, 3].map(() => createOrder({ ...simple, id: 'O-1' })));
    const bodies = results.map((res) => ok<Order>(res));
    expect(bodies[1]).toEqual(bodies[0]);
    expect(bodies[2]).toEqual(bodies[0]);
  });

  it('makes exactly one of several concurrent renewals of one chain', async () => {
    await placeOrder({ ...simple, id: 'O-1' });
    app.clock.set(T0_PLUS_MONTH - DAY);
    const results = await Promise.all(
      [1, 2, 3, 4].map((n) => createOrder({ ...simple, id: `O-2-${n}`, parent: 'O-1' })),
    );
    expect(results.map((r) => r.status).sort()).toEqual([200, 400, 400, 400]);
  });

  it('refuses the same id with other params, naming the id', async () => {
    await placeOrder({ ...simple, id: 'O-1' });
    const text = refusal(await createOrder({ ...simple, id: 'O-1', licenses: 6 }));
    expect(text).toContain('O-1');
  });

  it('refuses the same id for another customer', async () => {
    await createCustomer(client, 'C-2');
    await placeOrder({ ...simple, id: 'O-1' });
    refusal(await createOrder({ ...simple, customer: 'C-2', id: 'O-1' }));
  });
});

describe('createOrder validation', () => {
  it.each<[string, Record<string, unknown>, string]>([
    ['licenses 0', { licenses: 0 }, 'params.licenses'],
    ['licenses 100001', { licenses: 100_001 }, 'params.licenses'],
    ['licenses 1.5', { licenses: 1.5 }, 'params.licenses'],
    ['licenses as a string', { licenses: '5' }, 'params.licenses'],
    ['a weekly duration', { duration: 'weekly' }, 'params.duration'],
    ['a product outside the catalogue', { product: 'suite-gold' }, 'params.product'],
    ['expiresAt together with duration', { startsAt: T0, expiresAt: T0 + DAY }, 'params.expiresAt'],
    ['a negative startsAt', { startsAt: -1 }, 'params.startsAt'],
    ['a startsAt of 1.5', { startsAt: T0 + 0.5 }, 'params.startsAt'],
    ['a startsAt as a string', { startsAt: String(T0) }, 'params.startsAt'],
    ['an id of 129 characters', { id: 'o'.repeat(129) }, 'params.id'],
    ['an empty id', { id: '' }, 'params.id'],
    ['a missing product', { product: undefined }, 'params.product'],
    ['a missing licenses', { licenses: undefined }, 'params.licenses'],
    ['a missing customer', { customer: undefined }, 'params.customer'],
    ['an unknown field', { coupon: 'FREE' }, 'coupon'],
  ])('refuses %s, naming the field', async (_label, change, field) => {
    const text = refusal(await createOrder({ ...simple, id: 'O-1', ...change }));
    expect(text).toContain(field);
  });

  it('accepts licenses 1 and 100000', async () => {
    expect((await placeOrder({ ...simple, id: 'O-1', licenses: 1 })).licenses).toBe(1);
    expect((await placeOrder({ ...simple, id: 'O-2', licenses: 100_000 })).licenses).toBe(100_000);
  });

  it('accepts an id of 128 characters', async () => {
    const id = 'o'.repeat(128);
    expect((await placeOrder({ ...simple, id })).remoteId).toBe(id);
  });

  const partial = { customer: 'C-1', id: 'P-1', product: 'suite-std', licenses: 2 };

  it('refuses a partial order without expiresAt, naming params.expiresAt', async () => {
    const text = refusal(await createOrder({ ...partial, startsAt: T0 }));
    expect(text).toContain('params.expiresAt');
  });

  it('refuses a partial order without startsAt, naming params.startsAt', async () => {
    const text = refusal(await createOrder({ ...partial, expiresAt: T0 + DAY }));
    expect(text).toContain('params.startsAt');
  });

  it('names the missing dates of a partial order along with another bad field', async () => {
    const text = refusal(await createOrder({ ...partial, product: 'suite-gold' }));
    expect(text).toContain('params.product');
    expect(text).toContain('params.startsAt: is required in a partial order');
    expect(text).toContain('params.expiresAt: is required in a partial order');
  });

  it('refuses an expiresAt equal to startsAt, naming params.expiresAt', async () => {
    const text = refusal(await createOrder({ ...partial, startsAt: T0, expiresAt: T0 }));
    expect(text).toContain('params.expiresAt');
  });

  it('refuses an expiresAt before startsAt, naming params.expiresAt', async () => {
    const text = refusal(await createOrder({ ...partial, startsAt: T0, expiresAt: T0 - DAY }));
    expect(text).toContain('params.expiresAt');
  });

  describe('with a startsAt whose term ends after the last instant the interface carries', () => {
    // The last second of year 9999 is the largest epoch second accepted; its term ends later,
    // so its expiresAt could never be sent back.
    const startsAt = 253_402_300_799;

    it('refuses it as a caller error naming startsAt, not as an internal error', async () => {
      const res = await createOrder({ ...simple, id: 'O-FAR', startsAt });
      expect(refusal(res)).toBe(
        `params.startsAt: the term from ${startsAt} would end after 253402300799 (9999-12-31T23:59:59Z)`,
      );
    });

    it('refuses a renewal whose term would end after it, and stores nothing', async () => {
      const first = await placeOrder({ ...simple, id: 'O-NEAR', startsAt: T0 - 20 * DAY });
      const far = await createOrder({ ...simple, id: 'O-NEAR-2', parent: 'O-NEAR', startsAt });
      expect(refusal(far)).toContain(`renewal refused for O-NEAR: the term from ${startsAt}`);
      const renewal = await placeOrder({ ...simple, id: 'O-NEAR-2', parent: 'O-NEAR' });
      expect(renewal).toMatchObject({ count: 2, startsAt: first.expiresAt });
    });

    it('leaves the id usable for a valid order afterwards', async () => {
      await createOrder({ ...simple, id: 'O-FAR', startsAt });
      const order = await placeOrder({ ...simple, id: 'O-FAR' });
      expect(order).toMatchObject({ remoteId: 'O-FAR', startsAt: T0 });
    });
  });

  it('refuses an unknown customer', async () => {
    const res = await createOrder({ ...simple, customer: 'NOBODY', id: 'O-1' });
    expect(refusal(res)).toBe('customer not found: NOBODY');
  });

  it.each([
    ['1e400', 'a number out of range'],
    ['-1e400', 'a number out of range'],
    ['9007199254740993', 'a number out of range'],
  ])(
    'quotes a licenses of %s, which no JSON number holds, as out of range',
    async (raw, quoted) => {
      const body = `{"method":"createOrder","params":{"customer":"C-1","id":"O-1","product":"suite-std","licenses":${raw},"duration":"monthly"}}`;
      const text = refusal(
        await app.call(client.apiKey, 'createOrder', undefined, { rawBody: body }),
      );
      expect(text).toMatch(new RegExp(`^params\\.licenses: .*, got ${quoted}$`));
      await expect(placeOrder({ ...simple, id: 'O-1' })).resolves.toMatchObject({ licenses: 5 });
    },
  );

  it('refuses every refused order without storing it', async () => {
    refusal(await createOrder({ ...simple, id: 'O-1', licenses: 0 }));
    const order = await placeOrder({ ...simple, id: 'O-1', licenses: 4 });
    expect(order.licenses).toBe(4);
  });
});

describe('cancelOrder, suspendOrder and unsuspendOrder', () => {
  beforeEach(async () => {
    await placeOrder({ ...simple, id: 'O-1' });
  });

  it('cancels an order, answering true', async () => {
    expect(ok(await client.call('cancelOrder', { id: 'O-1' }))).toBe(true);
  });

  it('accepts a repeated cancel', async () => {
    ok(await client.call('cancelOrder', { id: 'O-1' }));
    expect(ok(await client.call('cancelOrder', { id: 'O-1' }))).toBe(true);
  });

  it('suspends an order, answering true, and accepts a repeated suspend', async () => {
    expect(ok(await client.call('suspendOrder', { id: 'O-1' }))).toBe(true);
    expect(ok(await client.call('suspendOrder', { id: 'O-1' }))).toBe(true);
  });

  it('unsuspends a suspended order, answering true, and accepts a repeated unsuspend', async () => {
    ok(await client.call('suspendOrder', { id: 'O-1' }));
    expect(ok(await client.call('unsuspendOrder', { id: 'O-1' }))).toBe(true);
    expect(ok(await client.call('unsuspendOrder', { id: 'O-1' }))).toBe(true);
  });

  it('lets an unsuspended order be suspended and cancelled again', async () => {
    ok(await client.call('suspendOrder', { id: 'O-1' }));
    ok(await client.call('unsuspendOrder', { id: 'O-1' }));
    expect(ok(await client.call('suspendOrder', { id: 'O-1' }))).toBe(true);
    expect(ok(await client.call('cancelOrder', { id: 'O-1' }))).toBe(true);
  });

  it('cancels a suspended order', async () => {
    ok(await client.call('suspendOrder', { id: 'O-1' }));
    expect(ok(await client.call('cancelOrder', { id: 'O-1' }))).toBe(true);
  });

  describe('when the order is cancelled', () => {
    beforeEach(async () => {
      ok(await client.call('cancelOrder', { id: 'O-1' }));
    });

    it('refuses to suspend it', async () => {
      expect(refusal(await client.call('suspendOrder', { id: 'O-1' }))).toContain('O-1');
    });

    it('refuses to unsuspend it', async () => {
      expect(refusal(await client.call('unsuspendOrder', { id: 'O-1' }))).toContain('O-1');
    });

    it('refuses a renewal that names it as parent', async () => {
      app.clock.set(T0_PLUS_MONTH - DAY);
      const text = refusal(await createOrder({ ...simple, id: 'O-2', parent: 'O-1' }));
      expect(text).toContain('O-1');
    });

    it('still answers a replay of its creation with the stored order', async () => {
      const again = await placeOrder({ ...simple, id: 'O-1' });
      expect(again.remoteId).toBe('O-1');
    });
  });

  describe('when the order is suspended then cancelled', () => {
    it('refuses to unsuspend it', async () => {
      ok(await client.call('suspendOrder', { id: 'O-1' }));
      ok(await client.call('cancelOrder', { id: 'O-1' }));
      refusal(await client.call('unsuspendOrder', { id: 'O-1' }));
    });
  });

  describe('when the order is unknown', () => {
    it.each(['cancelOrder', 'suspendOrder', 'unsuspendOrder'])(
      '%s refuses it with order not found',
      async (method) => {
        const res = await client.call(method, { id: 'NOPE-9' });
        expect(refusal(res)).toBe('order not found: NOPE-9');
      },
    );
  });

  it.each(['cancelOrder', 'suspendOrder', 'unsuspendOrder'])(
    '%s refuses params other than id, naming them',
    async (method) => {
      expect(refusal(await client.call(method, {}))).toContain('params.id');
      expect(refusal(await client.call(method, { id: 'O-1', reason: 'x' }))).toContain('reason');
    },
  );

  describe('in a chain', () => {
    beforeEach(async () => {
      app.clock.set(T0_PLUS_MONTH - DAY);
      await placeOrder({ ...simple, id: 'O-2', parent: 'O-1' });
    });

    it('cancelling a renewal leaves the first order changeable', async () => {
      expect(ok(await client.call('cancelOrder', { id: 'O-2' }))).toBe(true);
      expect(ok(await client.call('suspendOrder', { id: 'O-1' }))).toBe(true);
      expect(ok(await client.call('unsuspendOrder', { id: 'O-1' }))).toBe(true);
    });

    it('cancelling the first order leaves the renewal changeable', async () => {
      ok(await client.call('cancelOrder', { id: 'O-1' }));
      expect(ok(await client.call('suspendOrder', { id: 'O-2' }))).toBe(true);
    });

    it('suspending the first order leaves the renewal as it was', async () => {
      ok(await client.call('suspendOrder', { id: 'O-1' }));
      ok(await client.call('cancelOrder', { id: 'O-2' }));
      // O-1 was only suspended: it can still leave suspension.
      expect(ok(await client.call('unsuspendOrder', { id: 'O-1' }))).toBe(true);
    });
  });
});
