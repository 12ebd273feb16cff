// The order script's own checks, which close races the planning step cannot see: a renewal
// planned from a chain whose first order is cancelled before the write is not stored, alone
// (createOrder) or with the workers' record of it (createOrderAndSaveChain, embedded mode).
import { beforeAll, describe, expect, it } from 'vitest';
import { chainIdOf } from '../../../src/chains/keys.js';
import { newChainRecord } from '../../../src/chains/records.js';
import { ChainStore } from '../../../src/chains/store.js';
import { ProvisioningStore } from '../../../src/provisioning/store.js';
import { DAY, useTestApp } from '../../helpers/app.js';

const app = useTestApp({ resetClock: false });
let store: ProvisioningStore;
let chains: ChainStore;

beforeAll(() => {
  store = new ProvisioningStore(app.redis);
  chains = new ChainStore(app.redis);
});

/**
 * The workers' record of a renewal, as embedded mode writes it with the order: here a valid
 * first save of the chain, which the script would write were the order not refused first.
 */
function workersRecord(order: string, term: { startsAt: number; expiresAt: number }) {
  const chainId = chainIdOf(order);
  const next = newChainRecord({
    id: chainId,
    order,
    customer: 'race-c',
    product: 'suite-std',
    duration: 'monthly',
    status: 'active',
    autoRenew: true,
    payment: 'ok',
    licenses: 2,
    nextLicenses: 2,
    term: { orderId: `${order}.r2`, count: 2, ...term },
    intent: null,
    nextRenewalAt: null,
    createdAt: term.startsAt,
    updatedAt: term.startsAt,
  });
  const { write } = chains.saveWrite({
    chainId,
    token: null,
    previous: null,
    next,
    history: [{ at: term.startsAt, event: 'renewal.ordered', detail: 'race', cause: {} }],
    orderIds: [`${order}.r2`],
    release: true,
  });
  return { chainId, write };
}

describe.each([
  ['external', 'alone'],
  ['marketplace', 'alone'],
  ['external', 'with its record'],
  ['marketplace', 'with its record'],
] as const)('a %s renewal written %s, racing a cancel', (variant, written) => {
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

    // Every case orders 'F-1' (for its own partner); the workers' chains share one keyspace.
    const companion = written === 'alone' ? undefined : workersRecord(`F-1-${partner.id}`, order);

    app.clock.advance(20 * DAY);
    expect((await app.call(apiKey, 'cancelOrder', { id: 'F-1' })).body).toBe(true);
    expect(await store.insertOrder(partner, plan, companion?.write)).toEqual({
      kind: 'parent_cancelled',
    });
    expect(await store.getOrder(partner, 'F-1.r2')).toBeNull();
    expect((await store.getChain(partner, 'F-1'))?.orders).toEqual(['F-1']);
    if (companion) {
      expect(await chains.get(companion.chainId)).toBeNull();
      expect(await chains.history(companion.chainId)).toEqual([]);
    }
  });
});
