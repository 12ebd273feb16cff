// Embedded mode's one-script renewal: the in-process client writes a renewal order and the
// workers' record of it together (createOrderAndSaveChain), or neither, against a real core and
// a real Redis.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chainIdOf, chainKeys } from '../../../src/chains/keys.js';
import { type Chain, newChainRecord } from '../../../src/chains/records.js';
import { ChainStore } from '../../../src/chains/store.js';
import { inProcessClient } from '../../../src/client/in-process.js';
import type { ProvisioningClient } from '../../../src/client/provisioning-client.js';
import { RefusalError } from '../../../src/errors.js';
import type { PlannedOrder } from '../../../src/provisioning/order-operations.js';
import { connectRedis, type RedisClient } from '../../../src/redis/connection.js';
import { DAY, T0, useTestApp } from '../../helpers/app.js';

const app = useTestApp({ resetClock: false });
let storeRedis: RedisClient;
let chains: ChainStore;

beforeAll(async () => {
  storeRedis = await connectRedis(app.redisUrl, 'store');
  chains = new ChainStore(storeRedis);
});

afterAll(async () => {
  await storeRedis?.quit();
});

interface Fixture {
  client: ProvisioningClient;
  chain: Chain;
  /** The lock token the chain is held with. */
  token: string;
  renewal: Record<string, unknown>;
}

let sequence = 0;

/** A customer with a first order 25 days into its term, and the workers' chain of it, locked. */
async function fixture(): Promise<Fixture> {
  sequence += 1;
  const { partner } = await app.addPartner('marketplace');
  const client = inProcessClient({ core: app.core, partner });
  const customer = `C-${sequence}`;
  const order = `O-${sequence}`;
  await client.createCustomer({ id: customer, name: 'C', admin: { email: `c${sequence}@x.test` } });
  const first = await client.createOrder({
    customer,
    id: order,
    product: 'suite-std',
    licenses: 5,
    duration: 'monthly',
    startsAt: T0 - 25 * DAY,
  });
  const chainId = chainIdOf(order);
  const token = `job-${sequence}/token`;
  await chains.lock(chainId, token);
  const chain = await chains.save({
    chainId,
    token,
    previous: null,
    next: newChainRecord({
      id: chainId,
      order,
      customer,
      product: 'suite-std',
      duration: 'monthly',
      status: 'active',
      autoRenew: true,
      payment: 'ok',
      licenses: 5,
      nextLicenses: 5,
      term: { orderId: order, count: 1, startsAt: first.startsAt, expiresAt: first.expiresAt },
      intent: null,
      nextRenewalAt: first.expiresAt - 7 * DAY,
      createdAt: T0,
      updatedAt: T0,
    }),
    release: false,
  });
  const renewal = {
    customer,
    id: `${order}.r2`,
    product: 'suite-std',
    licenses: 5,
    duration: 'monthly',
    startsAt: first.expiresAt,
    parent: order,
  };
  return { client, chain, token, renewal };
}

/** The record the workers would write for the renewal `order`, under `token`. */
function recordOf(f: Fixture, order: PlannedOrder, token = f.token) {
  return chains.saveWrite({
    chainId: f.chain.id,
    token,
    previous: f.chain,
    next: {
      ...f.chain,
      licenses: order.licenses,
      term: {
        orderId: order.remoteId,
        count: 2,
        startsAt: order.startsAt,
        expiresAt: order.expiresAt,
      },
      updatedAt: T0,
    },
    history: [{ at: T0, event: 'renewal.ordered', detail: order.remoteId, cause: {} }],
    orderIds: [order.remoteId],
    release: true,
  }).write;
}

const createRecorded = (client: ProvisioningClient) => {
  if (!client.createRecorded) throw new Error('the in-process client writes recorded orders');
  return client.createRecorded.bind(client);
};

describe('createRecorded', () => {
  it('writes the renewal order and the chain save in one step', async () => {
    const f = await fixture();
    const outcome = await createRecorded(f.client)('createOrder', f.renewal, (order) =>
      recordOf(f, order),
    );
    expect(outcome).toEqual({ kind: 'recorded', id: expect.stringMatching(/^ord-\d+$/) });
    const stored = await chains.get(f.chain.id);
    expect(stored?.version).toBe(f.chain.version + 1);
    expect(stored?.term).toMatchObject({ orderId: f.renewal.id, count: 2 });
    expect(await chains.chainIdOfOrder(f.renewal.id as string)).toBe(f.chain.id);
    expect((await chains.history(f.chain.id)).map((entry) => entry.event)).toEqual([
      'renewal.ordered',
    ]);
    // The save released the lock.
    expect(await storeRedis.exists(chainKeys(f.chain.id).lock)).toBe(0);
    // The core made the order: the same params again are a replay of it.
    const replay = await f.client.createOrder(f.renewal as never);
    expect(replay).toMatchObject({
      id: outcome.kind === 'recorded' ? outcome.id : 'none',
      startsAt: f.renewal.startsAt,
    });
  });

  it('writes neither when the chain save is refused (the lock is not ours)', async () => {
    const f = await fixture();
    const outcome = await createRecorded(f.client)('createOrder', f.renewal, (order) =>
      recordOf(f, order, 'someone-else'),
    );
    expect(outcome).toEqual({ kind: 'companion_refused', code: -1 });
    expect((await chains.get(f.chain.id))?.version).toBe(f.chain.version);
    expect(await chains.chainIdOfOrder(f.renewal.id as string)).toBeNull();
    // No order was made: the core accepts other params under the same id.
    const made = await f.client.createOrder({ ...f.renewal, licenses: 6 } as never);
    expect(made.licenses).toBe(6);
  });

  it('answers an order made before as unrecorded and writes nothing', async () => {
    const f = await fixture();
    const earlier = await f.client.createOrder(f.renewal as never);
    let asked = 0;
    const outcome = await createRecorded(f.client)('createOrder', f.renewal, (order) => {
      asked += 1;
      return recordOf(f, order);
    });
    expect(asked).toBe(0);
    expect(outcome).toMatchObject({ kind: 'unrecorded', order: { id: earlier.id } });
    expect((await chains.get(f.chain.id))?.version).toBe(f.chain.version);
  });

  it('throws the core refusals as the other methods do, with nothing written', async () => {
    const f = await fixture();
    const early = { ...f.renewal, startsAt: (f.renewal.startsAt as number) - DAY };
    await expect(
      createRecorded(f.client)('createOrder', early, (order) => recordOf(f, order)),
    ).rejects.toMatchObject({ constructor: RefusalError, code: 'provisioning_refused' });
    expect((await chains.get(f.chain.id))?.version).toBe(f.chain.version);
  });
});
