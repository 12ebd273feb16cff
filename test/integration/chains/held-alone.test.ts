// whileHeldAlone against a real redis-server: one holder at a time, a lease kept alive while its
// holder works, and let go after (or lapsing, for a holder that died).
import { setTimeout as delay } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { whileHeldAlone } from '../../../src/chains/lease.js';
import { ChainStore } from '../../../src/chains/store.js';
import { connectRedis } from '../../../src/redis/connection.js';
import { startTestRedis, type TestRedis } from '../../helpers/redis-server.js';

let server: TestRedis;
let redis: Redis;
let chains: ChainStore;

beforeAll(async () => {
  server = await startTestRedis();
  redis = (await connectRedis(server.url, 'store')) as Redis;
  chains = new ChainStore(redis);
});

afterAll(async () => {
  redis.disconnect();
  await server.stop();
});

describe('whileHeldAlone', () => {
  it('runs the work of one holder at a time, and lets the key go after', async () => {
    let release = () => {};
    const first = whileHeldAlone(chains, '{bc}:test:one', 'a', 10_000, async () => {
      await new Promise<void>((resolve) => {
        release = resolve;
      });
      return 'first';
    });
    await expect.poll(() => redis.get('{bc}:test:one')).toBe('a');
    let ranSecond = false;
    const second = await whileHeldAlone(chains, '{bc}:test:one', 'b', 10_000, async () => {
      ranSecond = true;
    });
    expect({ second, ranSecond }).toEqual({ second: { ran: false }, ranSecond: false });
    release();
    expect(await first).toEqual({ ran: true, value: 'first' });
    expect(await redis.exists('{bc}:test:one')).toBe(0);
  });

  it('keeps its hold past the lease while the work runs', async () => {
    const held = whileHeldAlone(chains, '{bc}:test:long', 'a', 300, () => delay(1_000));
    await delay(800);
    expect(await redis.get('{bc}:test:long')).toBe('a');
    await held;
    expect(await redis.exists('{bc}:test:long')).toBe(0);
  });

  it('lets go of its work when it fails', async () => {
    const failing = whileHeldAlone(chains, '{bc}:test:fail', 'a', 10_000, async () => {
      throw new Error('boom');
    });
    await expect(failing).rejects.toThrow('boom');
    expect(await redis.exists('{bc}:test:fail')).toBe(0);
  });

  it("never lets go of another holder's key (its own lease lapsed and was taken)", async () => {
    const held = whileHeldAlone(chains, '{bc}:test:lapsed', 'a', 10_000, async () => {
      await redis.set('{bc}:test:lapsed', 'b');
    });
    await held;
    expect(await redis.get('{bc}:test:lapsed')).toBe('b');
  });
});
