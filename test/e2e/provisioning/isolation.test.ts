// Partners over the real endpoint: each sees only its own customers, orders, users and
// instances, and two partners may use the same caller ids without meeting.
import { beforeEach, describe, expect, it } from 'vitest';
import { DAY, T0, useTestApp } from '../../helpers/app.js';
import {
  type Customer,
  createCustomer,
  createInstance,
  newPartner,
  type Order,
  ok,
  type PartnerClient,
  refusal,
  utc,
  type Variant,
} from './fixtures.js';

const app = useTestApp();

/** T0 (2026-01-15 12:00 UTC) plus one calendar month. */
const T0_PLUS_MONTH = utc(2026, 2, 15);

const monthly = { product: 'suite-std', licenses: 5, duration: 'monthly' };

describe('marketplace partners', () => {
  let a: PartnerClient;
  let b: PartnerClient;
  let customerOfB: Customer;

  beforeEach(async () => {
    a = await newPartner(app, 'marketplace');
    b = await newPartner(app, 'marketplace');
    customerOfB = await createCustomer(b, 'B-CUST');
    ok(await b.call('createOrder', { customer: 'B-CUST', id: 'B-ORDER', ...monthly }));
  });

  describe("partner A and partner B's customers", () => {
    it("cannot order for B's customer", async () => {
      const res = await a.call('createOrder', { customer: 'B-CUST', id: 'A-ORDER', ...monthly });
      expect(refusal(res)).toBe('customer not found: B-CUST');
    });
  });

  describe("partner A and partner B's orders", () => {
    it.each(['cancelOrder', 'suspendOrder', 'unsuspendOrder'])(
      "%s of B's order is refused as not found",
      async (method) => {
        expect(refusal(await a.call(method, { id: 'B-ORDER' }))).toBe('order not found: B-ORDER');
      },
    );

    it("leaves B's order as it was after A tried to cancel it", async () => {
      await a.call('cancelOrder', { id: 'B-ORDER' });
      expect(ok(await b.call('suspendOrder', { id: 'B-ORDER' }))).toBe(true);
      expect(ok(await b.call('unsuspendOrder', { id: 'B-ORDER' }))).toBe(true);
    });

    it("cannot name B's order as the parent of a renewal", async () => {
      await createCustomer(a, 'A-CUST');
      app.clock.set(T0_PLUS_MONTH - DAY);
      const res = await a.call('createOrder', {
        customer: 'A-CUST',
        id: 'A-ORDER',
        parent: 'B-ORDER',
        ...monthly,
      });
      expect(refusal(res)).toBe('order not found: B-ORDER');
    });

    it("does not move B's chain when A's renewal is refused", async () => {
      await createCustomer(a, 'A-CUST');
      app.clock.set(T0_PLUS_MONTH - DAY);
      await a.call('createOrder', {
        customer: 'A-CUST',
        id: 'A-ORDER',
        parent: 'B-ORDER',
        ...monthly,
      });
      const renewal = ok<Order>(
        await b.call('createOrder', {
          customer: 'B-CUST',
          id: 'B-RENEWAL',
          parent: 'B-ORDER',
          ...monthly,
        }),
      );
      expect(renewal).toMatchObject({ count: 2, startsAt: T0_PLUS_MONTH });
    });
  });

  describe('onboarding', () => {
    it("gives A's customer an onboarding url that no customer of B shares", async () => {
      const ofA = await createCustomer(a, 'A-CUST');
      expect(ofA.url).not.toBe(customerOfB.url);
    });
  });
});

describe('external partners', () => {
  let a: PartnerClient;
  let b: PartnerClient;

  beforeEach(async () => {
    a = await newPartner(app, 'external');
    b = await newPartner(app, 'external');
    await createCustomer(b, 'B-CUST');
    ok(await b.call('createFirstOrder', { customer: 'B-CUST', id: 'B-FIRST', ...monthly }));
  });

  it("cannot renew B's chain", async () => {
    app.clock.set(T0_PLUS_MONTH - DAY);
    const res = await a.call('createRenewalOrder', { parent: 'B-FIRST', id: 'A-RENEWAL' });
    expect(refusal(res)).toBe('order not found: B-FIRST');
  });

  it("cannot start a chain for B's customer", async () => {
    const res = await a.call('createFirstOrder', { customer: 'B-CUST', id: 'A-FIRST', ...monthly });
    expect(refusal(res)).toBe('customer not found: B-CUST');
  });

  it.each(['cancelOrder', 'suspendOrder'])(
    "%s of B's chain is refused as not found",
    async (method) => {
      expect(refusal(await a.call(method, { id: 'B-FIRST' }))).toBe('order not found: B-FIRST');
    },
  );

  it("leaves B's chain renewable after A tried to cancel it", async () => {
    await a.call('cancelOrder', { id: 'B-FIRST' });
    app.clock.set(T0_PLUS_MONTH - DAY);
    const renewal = ok<Order>(
      await b.call('createRenewalOrder', { parent: 'B-FIRST', id: 'B-RENEWAL' }),
    );
    expect(renewal.count).toBe(2);
  });
});

describe.each<Variant>(['marketplace', 'external'])('users of %s partners', (variant) => {
  let a: PartnerClient;
  let b: PartnerClient;
  let instanceOfB: string | number;
  const email = `worker-${variant}@b.example`;

  beforeEach(async () => {
    a = await newPartner(app, variant);
    b = await newPartner(app, variant);
    ({ instance: instanceOfB } = await createInstance(b, 'B-CUST'));
    ok(
      await b.call('createUser', {
        email,
        password: 'correct horse',
        instance: instanceOfB,
        displayName: 'B Worker',
      }),
    );
  });

  it("A cannot read B's user", async () => {
    expect(refusal(await a.call('getUserByEmail', { email }))).toContain(email);
  });

  it("A cannot deactivate B's user, and B's user stays active", async () => {
    refusal(await a.call('updateUserByEmail', { email, isActive: false }));
    const user = ok<{ isActive: boolean }>(await b.call('getUserByEmail', { email }));
    expect(user.isActive).toBe(true);
  });

  it("A cannot reset the password of B's user", async () => {
    refusal(await a.call('resetPasswordByEmail', { email, password: 'taken over!' }));
  });

  it("A cannot create a user in B's instance", async () => {
    const res = await a.call('createUser', {
      email: 'intruder@a.example',
      password: 'correct horse',
      instance: instanceOfB,
      displayName: 'Intruder',
    });
    expect(refusal(res)).toContain(String(instanceOfB));
  });

  it('A may create a user with the email of a user of B', async () => {
    const { instance } = await createInstance(a, 'A-CUST');
    ok(
      await a.call('createUser', {
        email,
        password: 'correct horse',
        instance,
        displayName: 'A Worker',
      }),
    );
    const ofA = ok<{ displayName: string; instance: unknown }>(
      await a.call('getUserByEmail', { email }),
    );
    const ofB = ok<{ displayName: string }>(await b.call('getUserByEmail', { email }));
    expect(ofA).toMatchObject({ displayName: 'A Worker', instance });
    expect(ofB.displayName).toBe('B Worker');
  });
});

describe.each<Variant>(['marketplace', 'external'])(
  'the same caller ids at two %s partners',
  (variant) => {
    let a: PartnerClient;
    let b: PartnerClient;
    const orderMethod = variant === 'marketplace' ? 'createOrder' : 'createFirstOrder';

    beforeEach(async () => {
      a = await newPartner(app, variant);
      b = await newPartner(app, variant);
    });

    it('creates two independent customers under one id', async () => {
      const ofA = await createCustomer(a, 'SHARED', { name: 'Alpha' });
      const ofB = await createCustomer(b, 'SHARED', { name: 'Beta' });
      expect(ofA).toMatchObject({ remoteId: 'SHARED', name: 'Alpha' });
      expect(ofB).toMatchObject({ remoteId: 'SHARED', name: 'Beta' });
      // Neither is a replay of the other.
      expect(ofB.partner).not.toBe(ofA.partner);
    });

    it('creates two independent orders under one id, with other params', async () => {
      await createCustomer(a, 'SHARED');
      await createCustomer(b, 'SHARED');
      const ofA = ok<Order>(
        await a.call(orderMethod, { customer: 'SHARED', id: 'ORDER', ...monthly, licenses: 2 }),
      );
      app.clock.advance(3600);
      const ofB = ok<Order>(
        await b.call(orderMethod, { customer: 'SHARED', id: 'ORDER', ...monthly, licenses: 7 }),
      );
      expect(ofA).toMatchObject({ licenses: 2, createdAt: T0, count: 1 });
      expect(ofB).toMatchObject({ licenses: 7, createdAt: T0 + 3600, count: 1 });
    });

    it("keeps a cancel by A away from B's order of the same id", async () => {
      await createCustomer(a, 'SHARED');
      await createCustomer(b, 'SHARED');
      ok(await a.call(orderMethod, { customer: 'SHARED', id: 'ORDER', ...monthly }));
      ok(await b.call(orderMethod, { customer: 'SHARED', id: 'ORDER', ...monthly }));
      expect(ok(await a.call('cancelOrder', { id: 'ORDER' }))).toBe(true);
      expect(ok(await b.call('suspendOrder', { id: 'ORDER' }))).toBe(true);
      refusal(await a.call('suspendOrder', { id: 'ORDER' }));
    });
  },
);
