// README, Ops API: a 503 means Redis did not answer within 5 seconds: retry. A lock command
// Redis runs after the request gave up must not leave the chain held (409 to the retry).
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ChainStore } from '../../../src/chains/store.js';
import { systemClock } from '../../../src/clock.js';
import { startTestRedis, type TestRedis } from '../../helpers/redis-server.js';
import { DAY, orderPlaced, type System, startSystem } from '../../helpers/system.js';

describe('an ops request whose lock command Redis answered after the 5-second timeout', () => {
  let redis: TestRedis;
  let system: System;
  beforeAll(async () => {
    redis = await startTestRedis();
    system = await startSystem({ redisUrl: redis.url });
  });
  afterAll(async () => {
    await system?.close();
    await redis?.stop();
  });

  it('answers 503, and the retry is then served, not refused 409', async () => {
    await system.send(
      'order.placed',
      orderPlaced({ order: 'OL-1', startsAt: systemClock.now() - 2 * DAY }),
    );
    await system.waitForChain('OL-1', () => true);
    // Redis stalls for 6 s just as the operator's lock command is sent: it runs the command
    // when it comes back, after the request gave up at 5 s.
    const lock = ChainStore.prototype.lock;
    let stalled = false;
    const spy = vi.spyOn(ChainStore.prototype, 'lock').mockImplementation(function (
      this: ChainStore,
      ...args
    ) {
      if (!stalled && String(args[1]).startsWith('ops/')) {
        stalled = true;
        redis.pause();
        setTimeout(() => redis.resume(), 6_000);
      }
      return lock.apply(this, args);
    });
    try {
      const first = await system.ops('PUT', '/ops/chains/OL-1/auto-renew', { enabled: false });
      expect(first).toMatchObject({ status: 503, body: { error: 'unavailable' } });
    } finally {
      spy.mockRestore();
    }
    await expect.poll(async () => (await system.chain('OL-1')).autoRenew).toBe(true);

    const retry = await system.ops('PUT', '/ops/chains/OL-1/auto-renew', { enabled: false });
    expect(retry.status).toBe(200);
    expect((await system.chain('OL-1')).autoRenew).toBe(false);
  }, 60_000);
});
