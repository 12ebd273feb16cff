// The chain store against a real redis-server: its lock, versioned saves, history and indexes.
import { setTimeout as sleep } from 'node:timers/promises';
import type { Job } from 'bullmq';
import { beforeEach, describe, expect, it } from 'vitest';
import { withChainLock } from '../../../jobs/chain-lock.js';
import { chainIdOf, chainKeys, indexKeys } from '../../../src/chains/keys.js';
import type { Chain, HistoryEntry, Intent } from '../../../src/chains/records.js';
import { ChainStore } from '../../../src/chains/store.js';
import { TransientError } from '../../../src/errors.js';
import { chainFor as chainAt } from '../../helpers/chains.js';
import { useTestRedisConnection } from '../../helpers/redis-server.js';

const NOW = Date.UTC(2025, 2, 1) / 1000;
const DAY = 86_400;
/** Short enough to wait out in a test, long enough for a few round trips. */
// Long enough that a busy CI machine pausing the event loop does not lapse a lease the test holds.
const SHORT_LEASE_MS = 600;

const db = useTestRedisConnection();
let store: ChainStore;

beforeEach(async () => {
  await db.redis.flushdb();
  store = new ChainStore(db.redis);
});

/** A chain as the workers would write it, for the first order `order`. */
function chainFor(order: string, overrides: Partial<Omit<Chain, 'version'>> = {}) {
  return chainAt(order, NOW, overrides);
}

function entry(event: string, at = NOW): HistoryEntry {
  return { at, event, detail: `${event} detail`, cause: { jobId: 'job-1' } };
}

/** Takes the lock with `token` and creates the chain, keeping the lock unless told otherwise. */
async function create(
  next: Omit<Chain, 'version'>,
  options: {
    token?: string;
    release?: boolean;
    history?: HistoryEntry[];
    orderIds?: string[];
  } = {},
): Promise<Chain> {
  const token = options.token ?? 'creator';
  expect(await store.lock(next.id, token)).toEqual({ kind: 'held', chain: null });
  return store.save({
    chainId: next.id,
    token,
    previous: null,
    next,
    history: options.history,
    orderIds: options.orderIds ?? [next.order],
    release: options.release ?? true,
  });
}

describe('ChainStore lock', () => {
  const chainId = chainIdOf('ord-lock');

  it('is exclusive: a second token finds the chain locked', async () => {
    expect(await store.lock(chainId, 'a')).toEqual({ kind: 'held', chain: null });
    expect(await store.lock(chainId, 'b')).toEqual({ kind: 'locked' });
  });

  it('is re-entrant for the same token and renews its lease', async () => {
    expect((await store.lock(chainId, 'a', 5_000)).kind).toBe('held');
    expect((await store.lock(chainId, 'a', 60_000)).kind).toBe('held');
    expect(await db.redis.pttl(chainKeys(chainId).lock)).toBeGreaterThan(5_000);
  });

  it('reads the stored chain in the same call', async () => {
    const saved = await create(chainFor('ord-lock'));
    expect(await store.lock(chainId, 'a')).toEqual({ kind: 'held', chain: saved });
  });

  it('expires after its lease, so another token can take it', async () => {
    expect((await store.lock(chainId, 'a', SHORT_LEASE_MS)).kind).toBe('held');
    expect((await store.lock(chainId, 'b')).kind).toBe('locked');
    await expect
      .poll(async () => (await store.lock(chainId, 'b')).kind, { timeout: 5_000, interval: 50 })
      .toBe('held');
    expect((await store.lock(chainId, 'a')).kind).toBe('locked');
  });

  it('is released by unlock with our token', async () => {
    await store.lock(chainId, 'a');
    await store.unlock(chainId, 'a');
    expect((await store.lock(chainId, 'b')).kind).toBe('held');
  });

  it('is not released by unlock with another token', async () => {
    await store.lock(chainId, 'a');
    await store.unlock(chainId, 'b');
    expect((await store.lock(chainId, 'b')).kind).toBe('locked');
    expect(await db.redis.get(chainKeys(chainId).lock)).toBe('a');
  });
});

describe('withChainLock', () => {
  const chainId = chainIdOf('ord-lease');
  const job = { id: 'job-lease' } as Job;

  it('keeps the lock for work longer than its lease, and releases it after', async () => {
    const short = new ChainStore(db.redis, { leaseMs: SHORT_LEASE_MS });
    let heldByOthers = false;
    await withChainLock(short, job, undefined, chainId, async () => {
      // Five leases of work (a slow provider call): nobody else may take the chain meanwhile.
      for (let i = 0; i < 10; i += 1) {
        await sleep(SHORT_LEASE_MS / 2);
        if ((await short.lock(chainId, `other-${i}`)).kind === 'held') heldByOthers = true;
      }
    });
    expect(heldByOthers).toBe(false);
    expect(await db.redis.exists(chainKeys(chainId).lock)).toBe(0);
  });

  it('renews only a lease that is still its own', async () => {
    await store.lock(chainId, 'a');
    expect(await store.renewLease(chainId, 'b')).toBe(false);
    await store.unlock(chainId, 'a');
    expect(await store.renewLease(chainId, 'a')).toBe(false);
    expect(await db.redis.exists(chainKeys(chainId).lock)).toBe(0);
  });
});

describe('ChainStore claimRenewal', () => {
  const intent: Intent = {
    kind: 'renewal',
    method: 'createOrder',
    orderId: 'ord-claim.r2',
    params: { id: 'ord-claim.r2', licenses: 10 },
    jobId: 'renew-x-2',
  };
  const claim = (version: number, now = NOW + 25 * DAY) => ({
    version,
    now,
    validFrom: NOW + 24 * DAY,
    validUntil: NOW + 31 * DAY,
    intent,
  });

  it('takes the lock and writes the prepared intent when the chain is at its version', async () => {
    const saved = await create(chainFor('ord-claim'));
    const result = await store.claimRenewal(saved.id, 'a', claim(saved.version));
    expect(result).toEqual({ kind: 'claimed', chain: { ...saved, intent } });
    expect(await store.get(saved.id)).toEqual({ ...saved, intent });
    expect((await store.lock(saved.id, 'b')).kind).toBe('locked');
  });

  it('only takes the lock when the chain changed since the intent was prepared', async () => {
    const saved = await create(chainFor('ord-claim'));
    expect(await store.claimRenewal(saved.id, 'a', claim(saved.version + 1))).toEqual({
      kind: 'held',
      chain: saved,
    });
    expect((await store.get(saved.id))?.intent).toBeNull();
  });

  it.each([
    ['before its range', NOW + 24 * DAY - 1],
    ['at the end of its range', NOW + 31 * DAY],
  ])('only takes the lock when now is %s', async (_, now) => {
    const saved = await create(chainFor('ord-claim'));
    expect(await store.claimRenewal(saved.id, 'a', claim(saved.version, now))).toEqual({
      kind: 'held',
      chain: saved,
    });
    expect((await store.get(saved.id))?.intent).toBeNull();
  });

  it('keeps an intent already in flight and hands it back', async () => {
    const other: Intent = { ...intent, kind: 'partial', orderId: 'ord-claim.p1' };
    const saved = await create(chainFor('ord-claim', { intent: other }));
    expect(await store.claimRenewal(saved.id, 'a', claim(saved.version))).toEqual({
      kind: 'held',
      chain: saved,
    });
    expect((await store.get(saved.id))?.intent).toEqual(other);
  });

  it('writes nothing for a chain that does not exist', async () => {
    const chainId = chainIdOf('ord-none');
    expect(await store.claimRenewal(chainId, 'a', claim(0))).toEqual({ kind: 'held', chain: null });
    expect(await db.redis.exists(chainKeys(chainId).intent)).toBe(0);
  });

  it('writes nothing while another job holds the lock', async () => {
    const saved = await create(chainFor('ord-claim'));
    await store.lock(saved.id, 'other');
    expect(await store.claimRenewal(saved.id, 'a', claim(saved.version))).toEqual({
      kind: 'locked',
    });
    expect((await store.get(saved.id))?.intent).toBeNull();
  });

  it('lets a later save clear the claimed intent', async () => {
    const saved = await create(chainFor('ord-claim'));
    const result = await store.claimRenewal(saved.id, 'a', claim(saved.version));
    if (result.kind !== 'claimed') throw new Error(`expected a claim, got ${result.kind}`);
    await store.save({
      chainId: saved.id,
      token: 'a',
      previous: result.chain,
      next: { ...result.chain, intent: null },
      release: true,
    });
    expect((await store.get(saved.id))?.intent).toBeNull();
    expect(await db.redis.exists(chainKeys(saved.id).intent)).toBe(0);
  });
});

describe('ChainStore save', () => {
  describe('when it creates a chain', () => {
    it('stores version 0 and returns what it stored', async () => {
      const next = chainFor('ord-1');
      const saved = await create(next);
      expect(saved).toEqual({ ...next, version: 0 });
      expect(await store.get(next.id)).toEqual(saved);
    });

    it('releases the lock when asked to', async () => {
      const next = chainFor('ord-1');
      await create(next, { release: true });
      expect(await db.redis.exists(chainKeys(next.id).lock)).toBe(0);
    });

    it('keeps the lock when not asked to release it', async () => {
      const next = chainFor('ord-1');
      await create(next, { token: 'keeper', release: false });
      expect(await db.redis.get(chainKeys(next.id).lock)).toBe('keeper');
    });

    it('refuses to create a chain that already exists', async () => {
      const next = chainFor('ord-1');
      await create(next, { token: 't', release: false });
      await expect(
        store.save({ chainId: next.id, token: 't', previous: null, next, release: true }),
      ).rejects.toMatchObject({ name: 'TransientError', code: 'chain_changed' });
    });
  });

  describe('when it updates a chain', () => {
    it('bumps the version on each write', async () => {
      const first = await create(chainFor('ord-1'), { token: 't', release: false });
      const second = await store.save({
        chainId: first.id,
        token: 't',
        previous: first,
        next: { ...first, licenses: 12, updatedAt: NOW + 1 },
        release: false,
      });
      const third = await store.save({
        chainId: first.id,
        token: 't',
        previous: second,
        next: { ...second, nextLicenses: 15, updatedAt: NOW + 2 },
        release: true,
      });
      expect([first.version, second.version, third.version]).toEqual([0, 1, 2]);
      expect(await store.get(first.id)).toEqual(third);
      expect(third).toMatchObject({ licenses: 12, nextLicenses: 15 });
    });

    it('keeps the fields a newer version wrote, which this one does not know', async () => {
      const first = await create(chainFor('ord-1'), { token: 't', release: false });
      const key = chainKeys(first.id).chain;
      const stored = (await db.redis.get(key)) as string;
      const bar = stored.indexOf('|');
      const fromNewer = { ...JSON.parse(stored.slice(bar + 1)), keptByNewer: [{ id: 'x' }] };
      await db.redis.set(key, `${stored.slice(0, bar)}|${JSON.stringify(fromNewer)}`);

      const read = (await store.get(first.id)) as Chain;
      await store.save({
        chainId: first.id,
        token: 't',
        previous: read,
        next: { ...read, licenses: 12, updatedAt: NOW + 1 },
        release: true,
      });

      const saved = (await db.redis.get(key)) as string;
      expect(JSON.parse(saved.slice(saved.indexOf('|') + 1))).toMatchObject({
        licenses: 12,
        keptByNewer: [{ id: 'x' }],
      });
    });

    it('appends history entries in order, across writes', async () => {
      const first = await create(chainFor('ord-1'), {
        token: 't',
        release: false,
        history: [entry('chain.created', NOW), entry('order.created', NOW + 1)],
      });
      await store.save({
        chainId: first.id,
        token: 't',
        previous: first,
        next: first,
        history: [entry('renewal.ordered', NOW + 2)],
        release: true,
      });
      expect((await store.history(first.id)).map((e) => e.event)).toEqual([
        'chain.created',
        'order.created',
        'renewal.ordered',
      ]);
      expect((await store.history(first.id))[0]).toEqual(entry('chain.created', NOW));
      // Read with its history in one transaction; an unknown id is left out.
      const [read, ...none] = await store.getManyWithHistory([first.id, 'no-such-chain']);
      expect(none).toEqual([]);
      expect(read?.chain).toEqual(await store.get(first.id));
      expect(read?.history).toEqual(await store.history(first.id));
    });

    it('maps every order id of the chain back to it', async () => {
      const first = await create(chainFor('ord-1'), { token: 't', release: false });
      const second = await store.save({
        chainId: first.id,
        token: 't',
        previous: first,
        next: first,
        orderIds: ['ord-1.r2', 'ord-1.p1'],
        release: true,
      });
      for (const orderId of ['ord-1', 'ord-1.r2', 'ord-1.p1']) {
        expect(await store.chainIdOfOrder(orderId)).toBe(first.id);
        expect(await store.getByOrder(orderId)).toEqual(second);
      }
      expect(await store.getByOrder('ord-2')).toBe(null);
    });

    it('refuses a write with a stale previous version', async () => {
      const first = await create(chainFor('ord-1'), { token: 't', release: false });
      await store.save({
        chainId: first.id,
        token: 't',
        previous: first,
        next: { ...first, licenses: 11 },
        release: false,
      });
      const stale = store.save({
        chainId: first.id,
        token: 't',
        previous: first,
        next: { ...first, licenses: 99 },
        release: true,
      });
      await expect(stale).rejects.toBeInstanceOf(TransientError);
      await expect(stale).rejects.toMatchObject({ code: 'chain_changed' });
      expect(await store.get(first.id)).toMatchObject({ version: 1, licenses: 11 });
    });
  });

  describe('when the lock is not ours', () => {
    it('refuses a write without the lock', async () => {
      const next = chainFor('ord-1');
      await expect(
        store.save({ chainId: next.id, token: 't', previous: null, next, release: true }),
      ).rejects.toMatchObject({ name: 'TransientError', code: 'chain_lock_lost' });
      expect(await store.get(next.id)).toBe(null);
    });

    it('refuses a write after the lease ran out and another token took the lock', async () => {
      const first = await create(chainFor('ord-1'));
      expect((await store.lock(first.id, 'slow', SHORT_LEASE_MS)).kind).toBe('held');
      await expect
        .poll(async () => (await store.lock(first.id, 'fast')).kind, {
          timeout: 5_000,
          interval: 50,
        })
        .toBe('held');
      const late = store.save({
        chainId: first.id,
        token: 'slow',
        previous: first,
        next: { ...first, licenses: 99 },
        history: [entry('late.write')],
        orderIds: ['ord-1.r2'],
        release: true,
      });
      await expect(late).rejects.toBeInstanceOf(TransientError);
      await expect(late).rejects.toMatchObject({ code: 'chain_lock_lost' });
      expect(await store.get(first.id)).toEqual(first);
      expect(await store.history(first.id)).toEqual([]);
      expect(await store.chainIdOfOrder('ord-1.r2')).toBe(null);
      expect(await db.redis.get(chainKeys(first.id).lock)).toBe('fast');
    });
  });

  describe('without a lock token (a read, decision and write in one step)', () => {
    const renewal = (first: Chain) => ({
      chainId: first.id,
      token: null,
      previous: first,
      next: { ...first, licenses: 12 },
      history: [entry('renewal.ordered')],
      orderIds: ['ord-1.r2'],
      release: true,
    });

    it('writes the chain when no job holds its lock and no intent is pending', async () => {
      const first = await create(chainFor('ord-1'));
      expect(await store.save(renewal(first))).toMatchObject({ version: 1, licenses: 12 });
      expect(await store.get(first.id)).toMatchObject({ version: 1, licenses: 12 });
      expect(await store.chainIdOfOrder('ord-1.r2')).toBe(first.id);
      expect(await db.redis.exists(chainKeys(first.id).lock)).toBe(0);
    });

    it("refuses while a job holds the lock, and leaves that job's lock alone", async () => {
      const first = await create(chainFor('ord-1'));
      expect((await store.lock(first.id, 'seat-change')).kind).toBe('held');
      await expect(store.save(renewal(first))).rejects.toMatchObject({
        name: 'TransientError',
        code: 'chain_lock_lost',
      });
      expect(await store.get(first.id)).toEqual(first);
      expect(await store.history(first.id)).toEqual([]);
      expect(await db.redis.get(chainKeys(first.id).lock)).toBe('seat-change');
    });

    it('refuses while an intent is pending, though the version did not move', async () => {
      const first = await create(chainFor('ord-1'));
      const claimed = await store.claimRenewal(first.id, 'renewal-job', {
        version: first.version,
        now: NOW,
        validFrom: NOW - DAY,
        validUntil: NOW + DAY,
        intent: {
          kind: 'renewal',
          method: 'createOrder',
          orderId: 'ord-1.r2',
          params: { id: 'ord-1.r2', licenses: 10 },
          jobId: 'renewal-job',
        },
      });
      expect(claimed.kind).toBe('claimed');
      await store.unlock(first.id, 'renewal-job');
      await expect(store.save(renewal(first))).rejects.toMatchObject({
        name: 'TransientError',
        code: 'chain_changed',
      });
      expect(await store.get(first.id)).toMatchObject({ version: 0, licenses: 10 });
    });

    it('refuses when the chain moved on since it was read', async () => {
      const first = await create(chainFor('ord-1'), { token: 't', release: false });
      await store.save({
        chainId: first.id,
        token: 't',
        previous: first,
        next: first,
        release: true,
      });
      await expect(store.save(renewal(first))).rejects.toMatchObject({ code: 'chain_changed' });
      expect(await store.get(first.id)).toMatchObject({ version: 1, licenses: 10 });
    });
  });
});

describe('ChainStore indexes', () => {
  it('lists the chains due until a time, earliest first', async () => {
    await create(chainFor('late', { nextRenewalAt: NOW + 20 * DAY }));
    await create(chainFor('early', { nextRenewalAt: NOW + 10 * DAY }));
    await create(chainFor('never', { nextRenewalAt: null, autoRenew: false }));
    expect((await store.dueUntil(NOW + 9 * DAY)).chains.map((c) => c.order)).toEqual([]);
    expect((await store.dueUntil(NOW + 10 * DAY)).chains.map((c) => c.order)).toEqual(['early']);
    expect((await store.dueUntil(NOW + 365 * DAY)).chains.map((c) => c.order)).toEqual([
      'early',
      'late',
    ]);
    expect((await store.dueUntil(NOW + 365 * DAY, 1)).chains.map((c) => c.order)).toEqual([
      'early',
    ]);
  });

  it('pages the due chains by time, each chain once, however many fall due at one time', async () => {
    const times = [5, 5, 5, 5, 5, 7, 7, 9];
    for (const [i, day] of times.entries()) {
      await create(chainFor(`due-${i}`, { nextRenewalAt: NOW + day * DAY }));
    }
    for (const limit of [1, 2, 3, 5, 8]) {
      const read: string[] = [];
      let page = await store.dueUntil(NOW + 8 * DAY, limit);
      for (;;) {
        read.push(...page.chains.map((c) => c.order));
        if (page.next === null) break;
        page = await store.dueUntil(NOW + 8 * DAY, limit, page.next);
      }
      expect(read.sort()).toEqual(['due-0', 'due-1', 'due-2', 'due-3', 'due-4', 'due-5', 'due-6']);
    }
  });

  it('goes on where a page ended when its last chain has moved or left since, or one before it', async () => {
    // Many chains due at one second: the index keeps them in byte order of their ids, which the
    // next page follows whatever the server's collation (upper case sorts before lower case).
    const orders = Array.from({ length: 12 }, (_, i) => `tie-${i}`);
    for (const order of orders) await create(chainFor(order, { nextRenewalAt: NOW + DAY }));
    const inIndexOrder = [...orders].sort((a, b) =>
      Buffer.compare(Buffer.from(chainIdOf(a)), Buffer.from(chainIdOf(b))),
    );
    const first = await store.dueUntil(NOW + DAY, 4);
    expect(first.chains.map((c) => c.order)).toEqual(inIndexOrder.slice(0, 4));
    const cursor = first.next as NonNullable<typeof first.next>;
    // The page's last chain renewed (due a month later), and one listed before it left.
    await db.redis.zadd(indexKeys.due, NOW + 30 * DAY, cursor.chainId);
    await db.redis.zrem(indexKeys.due, chainIdOf(inIndexOrder[1] as string));
    const second = await store.dueUntil(NOW + DAY, 4, cursor);
    expect(second.chains.map((c) => c.order)).toEqual(inIndexOrder.slice(4, 8));
    // Now a chain listed before the cursor moves on: the cursor itself still places the page.
    await db.redis.zrem(indexKeys.due, chainIdOf(inIndexOrder[5] as string));
    const third = await store.dueUntil(NOW + DAY, 4, second.next ?? undefined);
    expect(third.chains.map((c) => c.order)).toEqual(inIndexOrder.slice(8, 12));
  });

  it('leaves out a chain that renews only after a payment or a person (expired, flagged)', async () => {
    await create(chainFor('expired', { status: 'expired', nextRenewalAt: NOW + DAY }));
    await create(chainFor('flagged', { flagged: 'refused', nextRenewalAt: NOW + DAY }));
    await create(chainFor('renews', { nextRenewalAt: NOW + DAY }));
    expect((await store.dueUntil(NOW + DAY)).chains.map((c) => c.order)).toEqual(['renews']);
  });

  it('forgets the entries of records older than that rule once read, unless saved since', async () => {
    const expired = await create(
      chainFor('old-expired', { status: 'expired', nextRenewalAt: NOW + DAY }),
    );
    const flagged = await create(
      chainFor('old-flagged', { flagged: 'refused', nextRenewalAt: NOW + DAY }),
      {
        token: 't',
        release: false,
      },
    );
    // As a version before the rule indexed them.
    await store.redis.zadd(indexKeys.due, NOW + DAY, expired.id, NOW + DAY, flagged.id);
    const read = (await store.dueUntil(NOW + DAY)).chains;
    expect(read.map((c) => c.order).sort()).toEqual(['old-expired', 'old-flagged']);
    // Unflagged since it was read: its own save listed it again, which stays.
    await store.save({
      chainId: flagged.id,
      token: 't',
      previous: flagged,
      next: { ...flagged, flagged: null },
      release: true,
    });
    await store.forgetUnlistedDue(read);
    expect((await store.dueUntil(NOW + DAY)).chains.map((c) => c.order)).toEqual(['old-flagged']);
  });

  it('moves a chain in the due index when its renewal time changes', async () => {
    const first = await create(chainFor('ord-1', { nextRenewalAt: NOW + 20 * DAY }), {
      token: 't',
      release: false,
    });
    await store.save({
      chainId: first.id,
      token: 't',
      previous: first,
      next: { ...first, nextRenewalAt: NOW + 5 * DAY },
      release: true,
    });
    expect((await store.dueUntil(NOW + 5 * DAY)).chains.map((c) => c.order)).toEqual(['ord-1']);
  });

  it('drops a chain from the due index when its renewal time is removed', async () => {
    const first = await create(chainFor('ord-1'), { token: 't', release: false });
    expect((await store.dueUntil(NOW + 365 * DAY)).chains).toHaveLength(1);
    await store.save({
      chainId: first.id,
      token: 't',
      previous: first,
      next: { ...first, autoRenew: false, nextRenewalAt: null },
      release: true,
    });
    expect((await store.dueUntil(NOW + 365 * DAY)).chains).toEqual([]);
    expect(await store.get(first.id)).toMatchObject({ nextRenewalAt: null, version: 1 });
  });

  it("lists a customer's chains, oldest first, and only theirs", async () => {
    await create(chainFor('b-newer', { customer: 'cust:1', createdAt: NOW + 2 }));
    await create(chainFor('a-older', { customer: 'cust:1', createdAt: NOW + 1 }));
    await create(chainFor('other', { customer: 'cust-2', createdAt: NOW }));
    await create(chainFor('c-same-second', { customer: 'cust:1', createdAt: NOW + 2 }));
    const [first, second] = [chainIdOf('b-newer'), chainIdOf('c-same-second')].sort((a, b) =>
      Buffer.compare(Buffer.from(a), Buffer.from(b)),
    );
    expect(await store.customerChainIds('cust:1')).toEqual([chainIdOf('a-older'), first, second]);
    expect(await store.customerChainIds('cust-2')).toEqual([chainIdOf('other')]);
    expect(await store.customerChainIds('nobody')).toEqual([]);
  });

  it('pages through every chain id, oldest first, keeping the creation order on updates', async () => {
    const orders = ['o0', 'o1', 'o2', 'o3', 'o4'];
    for (const [i, order] of orders.entries()) {
      await create(chainFor(order, { createdAt: NOW + i }), { token: 't', release: false });
    }
    const oldest = await store.get(chainIdOf('o0'));
    if (!oldest) throw new Error('o0 was not stored');
    await store.save({
      chainId: oldest.id,
      token: 't',
      previous: oldest,
      next: { ...oldest, createdAt: NOW + 100, updatedAt: NOW + 100 },
      release: true,
    });

    const pages: string[][] = [];
    for (let offset = 0; ; offset += 2) {
      const page = await store.pageOfChainIds(offset, 2);
      if (page.length === 0) break;
      pages.push(page);
    }
    expect(pages.map((page) => page.length)).toEqual([2, 2, 1]);
    expect(pages.flat()).toEqual(orders.map(chainIdOf));
  });
});
