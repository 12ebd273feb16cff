// The start's warning about a REDIS_URL Redis that would lose the product's state on a restart.
import { describe, expect, it } from 'vitest';
import { connectRedis } from '../../../src/redis/connection.js';
import {
  evictionWarning,
  persistenceWarning,
  warnUnlessDurable,
} from '../../../src/redis/durability.js';
import { capturingLogger } from '../../helpers/logger.js';
import { startTestRedis } from '../../helpers/redis-server.js';

describe('persistenceWarning', () => {
  it('says nothing of a Redis with an append-only file', () => {
    expect(persistenceWarning('yes', '')).toBeNull();
    expect(persistenceWarning('yes', '3600 1')).toBeNull();
  });

  it('says everything is lost without an append-only file or save points', () => {
    expect(persistenceWarning('no', '')).toMatch(/^keeps nothing on disk/);
  });

  it('says what changed since the last snapshot is lost with save points only', () => {
    expect(persistenceWarning('no', '3600 1 300 100')).toBe(
      'keeps only RDB snapshots (appendonly no, save 3600 1 300 100): when it restarts, what changed since the last snapshot is lost, orders made at the provider included',
    );
  });
});

describe('evictionWarning', () => {
  it('says nothing of a Redis that refuses writes when full', () => {
    expect(evictionWarning('noeviction')).toBeNull();
  });

  it('says what an evicting Redis may drop, naming its policy', () => {
    expect(evictionWarning('volatile-lru')).toMatch(
      /^evicts keys when it reaches its maxmemory \(maxmemory-policy volatile-lru\): a chain's lock/,
    );
  });
});

/** The warnings warnUnlessDurable logs for a Redis started with `args`, after `prepare`. */
async function warningsFor(args: readonly string[], prepare?: (url: string) => Promise<void>) {
  const server = await startTestRedis(args);
  const redis = await connectRedis(server.url, 'request');
  try {
    await prepare?.(server.url);
    const { log, captured } = capturingLogger();
    await warnUnlessDurable(redis, 'redis://127.0.0.1', log);
    return captured.map((line) => JSON.parse(line) as { level: number; msg: string });
  } finally {
    redis.disconnect();
    await server.stop();
  }
}

describe('warnUnlessDurable against a real redis-server', () => {
  it('warns of a Redis without persistence, naming the setting to change', async () => {
    const lines = await warningsFor([]);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ level: 40 });
    expect(lines[0]?.msg).toBe(
      'the Redis of REDIS_URL keeps nothing on disk (appendonly no, no save points): when it restarts, every chain, order, partner and scheduled renewal is lost; run it with appendonly yes (README: What is kept under DATA_DIR)',
    );
  });

  it('says nothing once the Redis keeps an append-only file', async () => {
    const lines = await warningsFor([], async (url) => {
      const admin = await connectRedis(url, 'request');
      await admin.config('SET', 'appendonly', 'yes');
      admin.disconnect();
    });
    expect(lines).toEqual([]);
  });

  it('warns of a Redis that evicts keys when full, naming the setting to change', async () => {
    const lines = await warningsFor(['--appendonly', 'yes', '--maxmemory-policy', 'allkeys-lru']);
    expect(lines.map((line) => line.msg)).toEqual([
      "the Redis of REDIS_URL evicts keys when it reaches its maxmemory (maxmemory-policy allkeys-lru): a chain's lock, a webhook's dedup claim, a scheduled renewal or a chain itself could vanish, and with them the guarantee of one order per renewal; run it with maxmemory-policy noeviction (README: What is kept under DATA_DIR)",
    ]);
  });

  it('gives both warnings to a Redis that neither keeps nor holds its keys', async () => {
    const lines = await warningsFor(['--maxmemory-policy', 'allkeys-random']);
    expect(lines.map((line) => line.msg.split(' (')[0])).toEqual([
      'the Redis of REDIS_URL keeps nothing on disk',
      'the Redis of REDIS_URL evicts keys when it reaches its maxmemory',
    ]);
  });

  it('says nothing, and does not fail, where CONFIG is not allowed (managed Redis)', async () => {
    expect(await warningsFor(['--rename-command', 'CONFIG', ''])).toEqual([]);
  });
});
