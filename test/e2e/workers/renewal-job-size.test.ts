// README (Decisions, "Renewal jobs") sizes what a renewal job costs Redis: about 2.6 KB per
// completed job (265 MB for the 100,000 a queue may keep), about 4.9 KB of data for a chain
// that remembers 50 seat events. Measured on the real system, so a job that grows shows here.
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { renewalJobId } from '../../../jobs/renewals.js';
import { chainIdOf } from '../../../src/chains/keys.js';
import { manualClock } from '../../../src/clock.js';
import { QUEUE_PREFIX } from '../../../src/queues.js';
import { orderPlaced, useSystem } from '../../helpers/system.js';

const T0 = Date.UTC(2026, 0, 1, 9) / 1000;
/** README's figures, with a quarter of slack for "about" (and for BullMQ's own fields). */
const SLACK = 1.25;

describe('what renewal jobs cost Redis, against the README', () => {
  const clock = manualClock(T0);
  const system = useSystem({ clock, env: { RECONCILE_INTERVAL_SECONDS: '86400' } });
  let redis: Redis;
  beforeAll(() => {
    redis = new Redis(system.redisUrl);
  });
  afterAll(async () => {
    await redis.quit();
  });

  const jobKey = (order: string, count: number) =>
    `${QUEUE_PREFIX}:renewals:${renewalJobId(chainIdOf(order), count)}`;

  async function renewOnce(order: string) {
    const chain = await system.chain(order);
    clock.set((chain.nextRenewalAt as number) + 1);
    await system.promote('renewals', renewalJobId(chainIdOf(order), chain.term.count + 1));
    await system.waitForChain(order, (c) => c.term.count === chain.term.count + 1);
  }

  it('100,000 completed renewal jobs hold about 265 MB', async () => {
    await system.send('order.placed', orderPlaced({ order: 'MEM-1', startsAt: T0 }));
    await system.waitForChain('MEM-1', () => true);
    await renewOnce('MEM-1');
    const key = jobKey('MEM-1', 2);
    await expect.poll(() => redis.hget(key, 'finishedOn')).not.toBeNull();
    const perJob = Number(await redis.call('MEMORY', 'USAGE', key, 'SAMPLES', '0'));
    // 1.4 KB of data plus BullMQ's own fields.
    expect(perJob * 100_000).toBeLessThanOrEqual(265e6 * SLACK);
  });

  it('a chain that remembers 50 seat events makes a renewal job of about 4.9 KB of data', async () => {
    await system.send('order.placed', orderPlaced({ order: 'MEM-2', startsAt: clock.now() }));
    const placed = await system.waitForChain('MEM-2', () => true);
    const base = placed.history.length;
    for (let i = 0; i < 50; i++) {
      clock.advance(60);
      // Webhook ids as the README's example producer makes them (evt-<uuid>).
      const sent = await system.send('seats.changed', { order: 'MEM-2', licenses: 4 + (i % 2) });
      expect(sent.status).toBe(202);
      await system.waitForChain('MEM-2', (c) => c.history.length >= base + i + 1);
    }
    await renewOnce('MEM-2');
    // The next term's job carries the chain as that renewal wrote it: 50 seat events remembered.
    const data = (await redis.hget(jobKey('MEM-2', 3), 'data')) ?? '';
    const prepared = JSON.parse(data).prepared;
    expect(prepared.chain.appliedSeatEvents).toHaveLength(50);
    // Each remembered event is its webhook id and a digest of its content.
    expect(Buffer.byteLength(data)).toBeLessThanOrEqual(4900 * SLACK);
  });
});
