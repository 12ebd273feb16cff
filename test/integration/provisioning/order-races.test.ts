// The order script's own checks, which close races the planning step cannot see: a renewal
// planned from a chain whose first order is cancelled before the write is not stored.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ProvisioningStore } from '../../../src/provisioning/store.js';
import { DAY, startTestApp, type TestApp } from '../../helpers/app.js';
import { startTestRedis, type TestRedis } from '../../helpers/redis-server.js';

let redis: TestRedis;
let app: TestApp;
let store: ProvisioningStore;

beforeAll(async () => {
  redis = await startTestRedis();
  app = await startTestApp(redis.url);
  store = new ProvisioningStore(app.redis);
});

afterAll(async () => {
  await app?.close();
  await redis?.stop();
});

describe.each(['external', 'marketplace'] as const)('a %s renewal racing a cancel', (variant) => {
  it('is refused at the write when the first order was cancelled after planning', async () => {
    const { partner, apiKey } = await app.addPartner(variant);
    await app.call(apiKey, 'createCustomer', {
      id: 'race-c',
      name: 'Race',
      admin: { email: `admin@race-${variant}.test` },
    });
    const firstParams = { customer: 'race-c', id: 'F-1', product: 'suite-std', licenses: 2 };
    const first = await app.call(
      apiKey,
      variant === 'external' ? 'createFirstOrder' : 'createOrder',
      { ...firstParams, duration: 'monthly' },
    );
    expect(first.status).toBe(200);
    // What a renewal planned now would write: the chain read before the cancel.
    const order = await store.getOrder(partner, 'F-1');
    const chain = await store.getChain(partner, 'F-1');
    if (!order || !chain) throw new Error('first order missing');
    const { id: _id, ...record } = order;
    const plan = {
      record: { ...record, remoteId: 'F-1.r2', count: 2, fingerprint: 'renewal' },
      chain: { ...chain, count: 2, orders: [...chain.orders, 'F-1.r2'] },
      plannedFromCount: chain.count,
      instanceRule: 'keep' as const,
    };

    app.clock.advance(20 * DAY);
    expect((await app.call(apiKey, 'cancelOrder', { id: 'F-1' })).body).toBe(true);
    expect(await store.insertOrder(partner, plan)).toEqual({ kind: 'parent_cancelled' });
    expect(await store.getOrder(partner, 'F-1.r2')).toBeNull();
    expect((await store.getChain(partner, 'F-1'))?.orders).toEqual(['F-1']);
  });
});
