// The key layout migration against real redis-servers: what it renames, what it leaves, and when
// it refuses, including servers where CLIENT LIST is not allowed.
import type { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/logger.js';
import { connectRedis } from '../../../src/redis/connection.js';
import { migrateKeyLayout } from '../../../src/redis/key-layout.js';
import { KEY_LAYOUT_KEY } from '../../../src/redis/key-space.js';
import { startTestRedis, type TestRedis } from '../../helpers/redis-server.js';

const log = createLogger('silent');
const cleanups: (() => Promise<void>)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function server(args: readonly string[] = []): Promise<TestRedis> {
  const started = await startTestRedis(args);
  cleanups.push(() => started.stop());
  return started;
}

async function connect(url: string): Promise<Redis> {
  const redis = (await connectRedis(url, 'request')) as Redis;
  cleanups.push(async () => redis.disconnect());
  return redis;
}

/** A connection named as the older version's BullMQ worker of `queue` names its own. */
async function oldWorkerConnection(url: string, queue: string): Promise<void> {
  const redis = await connect(url);
  await redis.client('SETNAME', `bc:${Buffer.from(queue).toString('base64')}`);
}

const keys = (redis: Redis) => redis.keys('*').then((all) => all.sort());

describe('migrateKeyLayout', () => {
  it('renames the older layout and leaves other keys, without writing old ones itself', async () => {
    const { url } = await server();
    const redis = await connect(url);
    await redis.set('bc:chain:c1', '1|{}');
    await redis.hset('pp:{p1}:orders', 'o1', '{}');
    await redis.set('bc:cache:1', 'not ours');
    await redis.set('pp:cache:1', 'not ours');

    await migrateKeyLayout(redis, log);

    expect(await keys(redis)).toEqual(
      ['{bc}:chain:c1', '{bc}:pp:p1:orders', 'bc:cache:1', 'pp:cache:1', KEY_LAYOUT_KEY].sort(),
    );
  });

  it('starts on a fresh database where CLIENT is not allowed, and migrates there too', async () => {
    const { url } = await server(['--rename-command', 'CLIENT', '']);
    const fresh = await connect(url);
    await migrateKeyLayout(fresh, log);
    expect(await fresh.get(KEY_LAYOUT_KEY)).toBe('tagged');

    await fresh.del(KEY_LAYOUT_KEY);
    await fresh.set('bc:index:due', 'x');
    await migrateKeyLayout(fresh, log);
    expect(await keys(fresh)).toEqual(['{bc}:index:due', KEY_LAYOUT_KEY].sort());
  });

  it('refuses while an older worker uses this database, not one on another database', async () => {
    const { url } = await server();
    const redis = await connect(url);
    await redis.set('bc:chain:c1', '1|{}');
    await oldWorkerConnection(`${url}/1`, 'renewals');
    await migrateKeyLayout(redis, log);
    expect(await redis.exists('{bc}:chain:c1')).toBe(1);

    await redis.del(KEY_LAYOUT_KEY);
    await redis.rename('{bc}:chain:c1', 'bc:chain:c1');
    await oldWorkerConnection(url, 'seat-changes');
    await expect(migrateKeyLayout(redis, log)).rejects.toThrow(
      'workers of an older version are still connected to this Redis (queues: seat-changes)',
    );
    expect(await keys(redis)).toEqual(['bc:chain:c1']);
  });
});
