// An upgrade from the untagged key layout: the data an older version left (chains, BullMQ jobs,
// the core's orders, webhook claims) is found under the tagged names at the next start.
import { Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chainIdOf } from '../../../src/chains/keys.js';
import { PROVIDER_KEY } from '../../../src/chains/provider-binding.js';
import { systemClock } from '../../../src/clock.js';
import { webhookDedupKey } from '../../../src/intake/webhooks.js';
import { KEY_LAYOUT_KEY, KEY_TAG } from '../../../src/redis/key-space.js';
import { startTestRedis, type TestRedis } from '../../helpers/redis-server.js';
import { DAY, orderPlaced, startSystem } from '../../helpers/system.js';

let server: TestRedis;
let redis: Redis;

beforeAll(async () => {
  server = await startTestRedis();
  redis = new Redis(server.url, { maxRetriesPerRequest: null });
});

afterAll(async () => {
  await redis.quit();
  await server.stop();
});

/** The name the older version gave a tagged key: the inverse of taggedKeyName. */
function untaggedKeyName(key: string): string {
  const rest = key.slice(`${KEY_TAG}:`.length);
  const partner = /^pp:p(\d+):/.exec(rest);
  if (partner) return `pp:{p${partner[1]}}:${rest.slice(partner[0].length)}`;
  return rest.startsWith('pp:') ? rest : `bc:${rest}`;
}

/** KEYS is fine on a test's own small database. */
const keysMatching = (pattern: string) => redis.keys(pattern);

/** Turns the database into what the older version would have written. */
async function downgradeKeys(): Promise<number> {
  const tagged = await keysMatching(`${KEY_TAG}:*`);
  for (const key of tagged) {
    // Keys the older version never wrote.
    if (key === KEY_LAYOUT_KEY || key === PROVIDER_KEY) await redis.del(key);
    else await redis.rename(key, untaggedKeyName(key));
  }
  return tagged.length;
}

/** The same partner account across the upgrade, as a deployment's settings keep it. */
const env = { PARTNER_NAME: 'key-layout' };

const renewalJobId = (order: string, count: number) => `renew-${chainIdOf(order)}-${count}`;

describe('an upgrade from the untagged key layout', () => {
  it('keeps chains, their jobs, the core and webhook claims, and renews on', async () => {
    const first = await startSystem({ redisUrl: server.url, env });
    const now = systemClock.now();
    await first.send('order.placed', orderPlaced({ order: 'KL-1', startsAt: now - 25 * DAY }), {
      id: 'wh-kl-1',
    });
    const before = await first.waitForChain('KL-1', (c) => c.term.count === 2);
    await first.close();

    expect(await downgradeKeys()).toBeGreaterThan(20);
    expect(await keysMatching(`${KEY_TAG}:*`)).toEqual([]);
    expect(await redis.exists('bc:renewals:delayed', 'pp:partners')).toBe(2);

    const second = await startSystem({ redisUrl: server.url, env });
    try {
      expect(await keysMatching('bc:*')).toEqual([]);
      expect(await keysMatching('pp:*')).toEqual([]);
      expect(await redis.get(KEY_LAYOUT_KEY)).toBe('tagged');

      // The chain, its history and the core's orders read as before.
      expect(await second.chain('KL-1')).toEqual(before);
      expect((await second.providerOrder('KL-1.r2'))?.status).toBe('active');
      // The next term's delayed job is still there for the workers.
      const next = await second.queue('renewals').getJob(renewalJobId('KL-1', 3));
      expect(await next?.getState()).toBe('delayed');
      // The webhook's claim too, for the rest of the dedup window.
      expect(await redis.exists(webhookDedupKey('wh-kl-1'))).toBe(1);
      expect(await redis.pttl(webhookDedupKey('wh-kl-1'))).toBeGreaterThan(DAY * 1000);
      // And the upgraded system renews a new chain.
      await second.send('order.placed', orderPlaced({ order: 'KL-2', startsAt: now - 25 * DAY }));
      await second.waitForChain('KL-2', (c) => c.term.count === 2);
    } finally {
      await second.close();
    }
  });

  it('refuses to start while workers of the older version are connected, renaming nothing', async () => {
    await downgradeKeys();
    const old = new Worker('renewals', async () => {}, {
      connection: { host: '127.0.0.1', port: server.port, maxRetriesPerRequest: null },
      prefix: 'bc',
    });
    await old.waitUntilReady();
    try {
      await expect(startSystem({ redisUrl: server.url, env })).rejects.toThrow(
        /workers of an older version are still connected to this Redis \(queues: renewals\)/,
      );
      expect(await keysMatching(`${KEY_TAG}:*`)).toEqual([]);
      expect(await keysMatching('bc:chain:*')).not.toEqual([]);
    } finally {
      await old.close();
    }
  });
});
