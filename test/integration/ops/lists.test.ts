// The ops lists against a real redis-server: `upcoming` (GET /ops/renewals, `renewals upcoming`)
// and `ofCustomer` (GET /ops/customers/:customer/chains).
import { Queue } from 'bullmq';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { chainIdOf, indexKeys } from '../../../src/chains/keys.js';
import type { Chain } from '../../../src/chains/records.js';
import { ChainStore } from '../../../src/chains/store.js';
import { manualClock } from '../../../src/clock.js';
import { InvalidRequestError } from '../../../src/errors.js';
import { CUSTOMER_CHAINS_LIMIT, makeChainOperations } from '../../../src/ops/chain-operations.js';
import { chainFor } from '../../helpers/chains.js';
import { useTestRedisConnection } from '../../helpers/redis-server.js';

const NOW = Date.UTC(2025, 2, 1) / 1000;
const DAY = 86_400;

const db = useTestRedisConnection();
let store: ChainStore;
let queues: Queue[];

beforeAll(() => {
  queues = ['renewals', 'payment-signals'].map(
    (name) => new Queue(name, { connection: db.redis, prefix: 'upcoming-test' }),
  );
});

afterAll(async () => {
  await Promise.all(queues.map((q) => q.close()));
});

beforeEach(async () => {
  await db.redis.flushdb();
  store = new ChainStore(db.redis);
});

function operations() {
  const [renewals, paymentSignals] = queues as [Queue, Queue];
  return makeChainOperations({
    chains: store,
    renewals,
    paymentSignals,
    clock: manualClock(NOW),
    leadDays: 7,
    variant: 'marketplace',
  });
}

/** Stores a chain for `order` whose term ends in 11 days, as the workers would. */
async function saveChain(order: string, overrides: Partial<Omit<Chain, 'version'>>) {
  const next = chainFor(order, NOW - 20 * DAY, { nextRenewalAt: NOW + 4 * DAY, ...overrides });
  await store.lock(next.id, 't');
  await store.save({ chainId: next.id, token: 't', previous: null, next, release: true });
}

describe('upcoming renewals', () => {
  it('skips add-ons their main chain no longer renews without hiding renewals due after them', async () => {
    const addOnCount = 1_001;
    const addOns = Array.from({ length: addOnCount }, (_, i) => `MAIN.a${i + 1}`);
    await saveChain('MAIN', {
      autoRenew: false,
      nextRenewalAt: null,
      addOns: addOns.map(chainIdOf),
    });
    for (const order of addOns) {
      // Each add-on keeps its own due time; its main chain's auto-renew off stops it.
      await saveChain(order, { mainChain: chainIdOf('MAIN'), nextRenewalAt: NOW + DAY });
    }
    await saveChain('LATER', { nextRenewalAt: NOW + 3 * DAY });

    expect(await operations().upcoming(7)).toEqual({
      renewals: [
        { order: 'LATER', customer: 'cust-1', dueAt: NOW + 3 * DAY, expiresAt: NOW + 11 * DAY },
      ],
      next: null,
    });
  });

  it('answers at most 1000 renewals, the earliest, and where the next ones start', async () => {
    const orders = Array.from({ length: 1_002 }, (_, i) => `O-${String(i).padStart(4, '0')}`);
    for (const [i, order] of orders.entries()) {
      await saveChain(order, { nextRenewalAt: NOW + i });
    }
    const upcoming = await operations().upcoming(7);
    expect(upcoming.renewals.map((r) => r.order)).toEqual(orders.slice(0, 1_000));
    const rest = await operations().upcoming(7, upcoming.next ?? undefined);
    expect(rest).toEqual({ renewals: expect.any(Array), next: null });
    expect(rest.renewals.map((r) => r.order)).toEqual(orders.slice(1_000));
  });

  it('reads whole pages past add-ons their main chain no longer renews, and resumes after the last listed', async () => {
    for (let i = 0; i < 999; i += 1) {
      await saveChain(`F-${String(i).padStart(3, '0')}`, { nextRenewalAt: NOW + DAY });
    }
    const stopped = Array.from({ length: 1_500 }, (_, i) => `STOP.a${i + 1}`);
    await saveChain('STOP', {
      autoRenew: false,
      nextRenewalAt: null,
      addOns: stopped.map(chainIdOf),
    });
    for (const order of stopped) {
      await saveChain(order, { mainChain: chainIdOf('STOP'), nextRenewalAt: NOW + 2 * DAY });
    }
    await saveChain('G-1', { nextRenewalAt: NOW + 3 * DAY });
    await saveChain('G-2', { nextRenewalAt: NOW + 4 * DAY });

    const reads: number[] = [];
    const dueUntil = store.dueUntil.bind(store);
    store.dueUntil = async (...args) => {
      const page = await dueUntil(...args);
      reads.push(page.entries.length);
      return page;
    };
    const first = await operations().upcoming(7);
    expect(first.renewals).toHaveLength(1000);
    expect(first.renewals.at(-1)?.order).toBe('G-1');
    // Pages of 1000, not one entry at a time once 999 are listed.
    expect(reads).toEqual([1000, 1000, 501]);
    const rest = await operations().upcoming(7, first.next ?? undefined);
    expect(rest).toEqual({
      renewals: [
        { order: 'G-2', customer: 'cust-1', dueAt: NOW + 4 * DAY, expiresAt: NOW + 11 * DAY },
      ],
      next: null,
    });
  }, 120_000);

  it('lists every renewal due where a page ended, though an entry left by an older record goes', async () => {
    const t1 = NOW + DAY;
    const t2 = NOW + 2 * DAY;
    // 998 due at t1: the first page (1000 entries) ends two entries into t2.
    for (let i = 0; i < 998; i += 1) {
      await saveChain(`E-${String(i).padStart(3, '0')}`, { nextRenewalAt: t1 });
    }
    // At t2, in the index's order (by chain id): an expired chain that a version before the
    // rule left in the due index, then two that renew.
    const [legacy, first, second] = ['X-A', 'X-B', 'X-C', 'X-D', 'X-E', 'X-F']
      .sort((a, b) => (chainIdOf(a) < chainIdOf(b) ? -1 : 1))
      .slice(0, 3) as [string, string, string];
    await saveChain(legacy, { status: 'expired', nextRenewalAt: t2 });
    await db.redis.zadd(indexKeys.due, t2, chainIdOf(legacy));
    await saveChain(first, { nextRenewalAt: t2 });
    await saveChain(second, { nextRenewalAt: t2 });

    const { renewals } = await operations().upcoming(7);
    expect(renewals).toHaveLength(1_000);
    expect(renewals.slice(-2).map((r) => r.order)).toEqual([first, second]);
    // The stale entry is gone once read.
    expect(await db.redis.zscore(indexKeys.due, chainIdOf(legacy))).toBeNull();
  }, 60_000);
});

describe("a customer's chains", () => {
  it('pages them oldest first, add-ons inside their main chain, each main chain once', async () => {
    const count = 2 * CUSTOMER_CHAINS_LIMIT + 5;
    // In threes per second, so pages end among chains created in the same second.
    const mains = Array.from({ length: count }, (_, i) => `K-${i}`);
    for (const [i, order] of mains.entries()) {
      const addOns = i % 50 === 0 ? [`${order}.a1`] : [];
      const createdAt = NOW - 30 * DAY + Math.floor(i / 3);
      await saveChain(order, { customer: 'many', createdAt, addOns: addOns.map(chainIdOf) });
      for (const addOn of addOns) {
        await saveChain(addOn, { customer: 'many', createdAt, mainChain: chainIdOf(order) });
      }
    }
    await saveChain('ELSEWHERE', { customer: 'other' });

    const listed: string[] = [];
    const pageSizes: number[] = [];
    let after: string | undefined;
    for (;;) {
      const page = await operations().ofCustomer('many', after);
      pageSizes.push(page.chains.length);
      listed.push(...page.chains.map((c) => c.order));
      if (page.next === null) break;
      expect(page.next).toBe(page.chains.at(-1)?.order);
      after = page.next;
    }
    expect(pageSizes).toEqual([CUSTOMER_CHAINS_LIMIT, CUSTOMER_CHAINS_LIMIT, 5]);
    expect([...listed].sort()).toEqual([...mains].sort());
    // Oldest first: by the second each was created in.
    const createdSecond = (order: string) => Math.floor(Number(order.slice(2)) / 3);
    expect(listed.map(createdSecond)).toEqual([...listed.map(createdSecond)].sort((a, b) => a - b));
    const withAddOn = (await operations().ofCustomer('many')).chains[0];
    expect(withAddOn?.addOns.map((a) => a.order)).toEqual(['K-0.a1']);
  }, 60_000);

  it('ends on a full page when only add-ons follow it, with no empty page after', async () => {
    const mains = Array.from({ length: CUSTOMER_CHAINS_LIMIT }, (_, i) => `F-${i}`);
    for (const [i, order] of mains.entries()) {
      await saveChain(order, { customer: 'full', createdAt: NOW - 30 * DAY + i });
    }
    // Added to the first main chain after the last one was placed: its id sorts last.
    await saveChain('F-0.a1', {
      customer: 'full',
      createdAt: NOW - DAY,
      mainChain: chainIdOf('F-0'),
    });
    const page = await operations().ofCustomer('full');
    expect(page.chains.map((c) => c.order)).toEqual(mains);
    expect(page.next).toBeNull();
    // Many add-ons after a full page are read in whole batches, not one round trip each.
    for (let i = 2; i <= 150; i += 1) {
      await saveChain(`F-0.a${i}`, {
        customer: 'full',
        createdAt: NOW - DAY + i,
        mainChain: chainIdOf('F-0'),
      });
    }
    const reads = vi.spyOn(store, 'getMany');
    expect((await operations().ofCustomer('full')).next).toBeNull();
    expect(reads.mock.calls.length).toBeLessThanOrEqual(3);
  }, 60_000);

  it('refuses an `after` that names no chain of the customer, and answers none for a stranger', async () => {
    await saveChain('MINE', { customer: 'me' });
    await saveChain('THEIRS', { customer: 'them' });
    await expect(operations().ofCustomer('me', 'THEIRS')).rejects.toThrow(
      new InvalidRequestError('query.after: no chain of customer me has the order "THEIRS"'),
    );
    expect(await operations().ofCustomer('nobody')).toEqual({ chains: [], next: null });
  });
});
