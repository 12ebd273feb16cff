// Concurrent calls over real HTTP: unique emails, one renewal per term, one instance per customer.
import { describe, expect, it } from 'vitest';
import { DAY, useTestApp } from '../../helpers/app.js';

const app = useTestApp({ resetClock: false });

const N = 25;
const times = <T>(n: number, make: (i: number) => Promise<T>) =>
  Promise.all(Array.from({ length: n }, (_, i) => make(i)));

async function createCustomer(apiKey: string, id: string) {
  const res = await app.call(apiKey, 'createCustomer', {
    id,
    name: `Customer ${id}`,
    admin: { email: `admin@${id}.test` },
  });
  expect(res.status).toBe(200);
  return res.body as { url?: string };
}

/** A marketplace instance id is the last segment of the customer's onboarding url. */
async function customerWithInstance(apiKey: string, id: string) {
  const customer = await createCustomer(apiKey, id);
  return customer.url?.split('/').pop() as string;
}

/** An external partner with one customer and one first order: a chain to renew. */
async function externalChain(
  customer: string,
  order: { id: string; product: string; licenses: number },
  renewalWindowDays?: number,
) {
  const { apiKey } = await app.addPartner('external', renewalWindowDays);
  await createCustomer(apiKey, customer);
  const first = await app.call(apiKey, 'createFirstOrder', {
    customer,
    ...order,
    duration: 'monthly',
  });
  expect(first.status).toBe(200);
  return apiKey;
}

describe('simultaneous createUser calls with one email', () => {
  it('create exactly one user and refuse the others as duplicates', async () => {
    const { apiKey } = await app.addPartner('marketplace');
    const instance = await customerWithInstance(apiKey, 'race-users');
    const results = await times(N, (i) =>
      app.call(apiKey, 'createUser', {
        email: i % 2 ? 'Same@Race.test' : 'same@race.test',
        password: `password-${i}`,
        instance,
        displayName: `User ${i}`,
      }),
    );
    const created = results.filter((r) => r.status === 200);
    expect(created).toHaveLength(1);
    for (const refused of results.filter((r) => r.status !== 200)) {
      expect(refused).toEqual({
        status: 400,
        body: 'duplicate key value violates unique constraint "users_email"',
      });
    }
    const read = await app.call(apiKey, 'getUserByEmail', { email: 'same@race.test' });
    expect((read.body as { id: number }).id).toBe(
      (created[0]?.body as { id: number } | undefined)?.id,
    );
  });
});

describe('simultaneous renewals of one chain', () => {
  it('give one external renewal when the ids differ', async () => {
    const apiKey = await externalChain('race-ext', { id: 'E1', product: 'suite-std', licenses: 4 });
    app.clock.advance(20 * DAY);
    const results = await times(N, (i) =>
      app.call(apiKey, 'createRenewalOrder', { parent: 'E1', id: `E1-renewal-${i}` }),
    );
    const made = results.filter((r) => r.status === 200);
    expect(made).toHaveLength(1);
    expect((made[0]?.body as { count: number } | undefined)?.count).toBe(2);
    for (const refused of results.filter((r) => r.status !== 200)) {
      expect(refused.status).toBe(400);
      expect(refused.body).toMatch(/^renewal refused: \d+ days remain in the current term/);
    }
  });

  it('answer every replay of one renewal id with the same order', async () => {
    const apiKey = await externalChain('race-replay', {
      id: 'R1',
      product: 'erp-std',
      licenses: 2,
    });
    app.clock.advance(25 * DAY);
    const results = await times(N, () =>
      app.call(apiKey, 'createRenewalOrder', { parent: 'R1', id: 'R1.r2' }),
    );
    expect(results.every((r) => r.status === 200)).toBe(true);
    const ids = new Set(results.map((r) => (r.body as { id: string }).id));
    expect(ids.size).toBe(1);
  });

  it('give one marketplace renewal through the parent extension', async () => {
    const { apiKey } = await app.addPartner('marketplace');
    await createCustomer(apiKey, 'race-mkt');
    await app.call(apiKey, 'createOrder', {
      customer: 'race-mkt',
      id: 'M1',
      product: 'suite-ent',
      licenses: 10,
      duration: 'yearly',
    });
    app.clock.advance(360 * DAY);
    const results = await times(N, (i) =>
      app.call(apiKey, 'createOrder', {
        customer: 'race-mkt',
        id: `M1-next-${i}`,
        product: 'suite-ent',
        licenses: 12,
        duration: 'yearly',
        parent: 'M1',
      }),
    );
    expect(results.filter((r) => r.status === 200)).toHaveLength(1);
  });
});

describe('a chain changed by renewals faster than one call can plan', () => {
  it('answers 503 chain_busy to the calls that lost too many plans, and they succeed once it settles', async () => {
    // A window longer than the terms, so every renewal is allowed and each write moves the chain.
    const apiKey = await externalChain(
      'race-busy',
      { id: 'B1', product: 'suite-lite', licenses: 1 },
      3650,
    );
    const renew = (i: number) =>
      app.call(apiKey, 'createRenewalOrder', { parent: 'B1', id: `B1-r${i}` });
    // More calls than the other races: each loser must lose five plans in a row.
    const calls = 2 * N;
    const results = await times(calls, renew);
    const busy = results.flatMap((r, i) => (r.status === 200 ? [] : [i]));
    // Each round of plans lets one renewal through; the rest lose their plans too often.
    expect(busy.length).toBeGreaterThan(0);
    for (const i of busy) {
      expect(results[i]).toEqual({
        status: 503,
        body: 'service unavailable: the chain changed concurrently too often; retry',
      });
    }
    for (const i of busy) expect((await renew(i)).status).toBe(200);
    // A replay answers with the stored order: every renewal was written once, as its own term
    // (2 .. calls + 1, no gap and no repeat).
    const counts = await times(
      calls,
      async (i) => ((await renew(i)).body as { count: number }).count,
    );
    expect([...counts].sort((a, b) => a - b)).toEqual(
      Array.from({ length: calls }, (_, i) => i + 2),
    );
  });
});

describe('simultaneous first orders of one external customer', () => {
  it('create one instance that every first order joins', async () => {
    const { apiKey } = await app.addPartner('external');
    await app.call(apiKey, 'createCustomer', {
      id: 'race-instance',
      name: 'One instance',
      admin: { email: 'admin@instance.test' },
    });
    const results = await times(N, (i) =>
      app.call(apiKey, 'createFirstOrder', {
        customer: 'race-instance',
        id: `F-${i}`,
        product: 'suite-lite',
        licenses: 1,
        duration: 'monthly',
      }),
    );
    expect(results.every((r) => r.status === 200)).toBe(true);
    const instances = new Set(results.map((r) => (r.body as { instance: number }).instance));
    expect(instances.size).toBe(1);
    expect(typeof [...instances][0]).toBe('number');
  });
});

describe('simultaneous createCustomer calls with one id', () => {
  it('store one customer and answer each call with it', async () => {
    const { apiKey } = await app.addPartner('marketplace');
    const params = { id: 'race-cust', name: 'Race', admin: { email: 'r@race.test' } };
    const results = await times(N, () => app.call(apiKey, 'createCustomer', params));
    expect(results.every((r) => r.status === 200)).toBe(true);
    expect(new Set(results.map((r) => JSON.stringify(r.body))).size).toBe(1);
  });
});
