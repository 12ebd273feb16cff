// Starts, reuses and stops the private redis-server against the real binary, in temp dirs.

import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../../../src/errors.js';
import {
  ensurePrivateRedis,
  findRedisServer,
  findRunningPrivateRedis,
  type PrivateRedis,
} from '../../../src/redis/private-redis.js';
import { startTestRedis, type TestRedis } from '../../helpers/redis-server.js';

// Well above Linux's pid_max (4,194,304 at most), so no process can have it.
const DEAD_PID = 2_147_483_646;

const log = pino({ level: 'silent' });
const tempDirs: string[] = [];
const started: PrivateRedis[] = [];
const clients: Redis[] = [];

async function makeDataDir(): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'private-redis-'));
  tempDirs.push(dir);
  return dir;
}

async function ensure(dataDir: string): Promise<PrivateRedis> {
  const redis = await ensurePrivateRedis({ dataDir, port: 0, log });
  started.push(redis);
  return redis;
}

function connect(url: string): Redis {
  const client = new Redis(url, { maxRetriesPerRequest: 0 });
  clients.push(client);
  return client;
}

afterEach(async () => {
  for (const client of clients.splice(0)) client.disconnect();
  await Promise.all(started.splice(0).map((redis) => redis.stop()));
});

afterAll(async () => {
  await Promise.all(tempDirs.map((dir) => rm(dir, { recursive: true, force: true })));
});

describe('ensurePrivateRedis', { timeout: 30_000 }, () => {
  describe('when no server runs for the data dir', () => {
    it('starts one with append-only persistence and no eviction', async () => {
      const dataDir = await makeDataDir();
      const redis = await ensure(dataDir);
      expect(redis.startedHere).toBe(true);
      const client = connect(redis.url);
      expect(await client.config('GET', 'appendonly')).toEqual(['appendonly', 'yes']);
      expect(await client.config('GET', 'maxmemory-policy')).toEqual([
        'maxmemory-policy',
        'noeviction',
      ]);
      expect(await client.config('GET', 'dir')).toEqual(['dir', path.join(dataDir, 'redis')]);
    });

    it('records its pid and port for the CLI', async () => {
      const dataDir = await makeDataDir();
      const redis = await ensure(dataDir);
      const record = JSON.parse(await readFile(path.join(dataDir, 'redis', 'redis.json'), 'utf8'));
      expect(redis.url).toBe(`redis://127.0.0.1:${record.port}`);
      expect(await findRunningPrivateRedis(dataDir)).toBe(redis.url);
    });
  });

  describe('when a server already runs for the data dir', () => {
    it('reuses it, and the reuser stop() leaves it running', async () => {
      const dataDir = await makeDataDir();
      const first = await ensure(dataDir);
      const second = await ensure(dataDir);
      expect(second.startedHere).toBe(false);
      expect(second.url).toBe(first.url);
      await second.stop();
      expect(await connect(first.url).ping()).toBe('PONG');
    });

    it('starts only one when two callers race', async () => {
      const dataDir = await makeDataDir();
      const both = await Promise.all([ensure(dataDir), ensure(dataDir)]);
      expect(both.map((redis) => redis.startedHere).sort()).toEqual([false, true]);
      expect(both[0]?.url).toBe(both[1]?.url);
    });
  });

  describe('when the running server does not answer for a while', () => {
    /** Stops the recorded server's process for `ms`, as an fsync stall or a swap-out would. */
    async function freeze(dataDir: string, ms: number) {
      const { pid } = JSON.parse(await readFile(path.join(dataDir, 'redis', 'redis.json'), 'utf8'));
      process.kill(pid, 'SIGSTOP');
      const thawed = delay(ms).then(() => process.kill(pid, 'SIGCONT'));
      return { thawed };
    }

    it('waits for it and reuses it, never starting a second one on the same data', async () => {
      const dataDir = await makeDataDir();
      const first = await ensure(dataDir);
      const { thawed } = await freeze(dataDir, 5_000);
      const second = await ensurePrivateRedis({ dataDir, port: 0, log, patienceMs: 10_000 });
      started.push(second);
      await thawed;
      expect(second).toMatchObject({ startedHere: false, url: first.url });
    });

    it('gives up with a config error naming the process, starting none', async () => {
      const dataDir = await makeDataDir();
      const first = await ensure(dataDir);
      const { thawed } = await freeze(dataDir, 4_000);
      const error = await ensurePrivateRedis({ dataDir, port: 0, log, patienceMs: 1_500 }).catch(
        (e: unknown) => e,
      );
      await thawed;
      expect(error).toBeInstanceOf(ConfigError);
      expect((error as Error).message).toMatch(
        /^the private Redis of .* \(pid \d+, port \d+\) is running but has not answered for 2 s; a second one on the same data would lose writes/,
      );
      expect(await findRunningPrivateRedis(dataDir)).toBe(first.url);
    });
  });

  describe('when stopped', () => {
    it('removes the record, and a restart serves the data written before', async () => {
      const dataDir = await makeDataDir();
      const first = await ensure(dataDir);
      const writer = connect(first.url);
      await writer.set('renewal:ch_42', 'due');
      await writer.quit();
      await first.stop();
      expect(await findRunningPrivateRedis(dataDir)).toBeNull();

      const second = await ensure(dataDir);
      expect(second.startedHere).toBe(true);
      expect(await connect(second.url).get('renewal:ch_42')).toBe('due');
    });
  });

  describe('when leftovers of a dead process remain', () => {
    it('ignores a record naming a dead pid', async () => {
      const dataDir = await makeDataDir();
      await mkdir(path.join(dataDir, 'redis'));
      await writeFile(
        path.join(dataDir, 'redis', 'redis.json'),
        JSON.stringify({ pid: DEAD_PID, port: 1 }),
      );
      expect(await findRunningPrivateRedis(dataDir)).toBeNull();
      const redis = await ensure(dataDir);
      expect(redis.startedHere).toBe(true);
    });

    it('breaks a lock held by a dead pid', async () => {
      const dataDir = await makeDataDir();
      await mkdir(path.join(dataDir, 'redis'));
      await writeFile(path.join(dataDir, 'redis', 'redis.lock'), String(DEAD_PID));
      const redis = await ensure(dataDir);
      expect(redis.startedHere).toBe(true);
    });

    describe('and the recorded port now serves a different Redis', () => {
      let other: TestRedis;
      beforeAll(async () => {
        other = await startTestRedis();
      });
      afterAll(async () => {
        await other.stop();
      });

      it('starts its own instead of reusing a server it did not start', async () => {
        const dataDir = await makeDataDir();
        await mkdir(path.join(dataDir, 'redis'));
        // A live pid that is not the server's, as after a reboot recycles both.
        const record = { pid: process.pid, port: other.port };
        await writeFile(path.join(dataDir, 'redis', 'redis.json'), JSON.stringify(record));
        expect(await findRunningPrivateRedis(dataDir)).toBeNull();
        const redis = await ensure(dataDir);
        expect(redis.startedHere).toBe(true);
        expect(redis.url).not.toBe(other.url);
      });
    });
  });

  describe('when no redis-server is installed', () => {
    it('finds none on a PATH without it', async () => {
      const emptyDir = await makeDataDir();
      expect(findRedisServer(emptyDir)).toBeNull();
      expect(findRedisServer()).toMatch(/redis-server$/);
    });

    it('fails with a config error that says how to install one', async () => {
      const dataDir = await makeDataDir();
      const emptyDir = await makeDataDir();
      const attempt = ensurePrivateRedis({ dataDir, port: 0, log, pathEnv: emptyDir });
      await expect(attempt).rejects.toBeInstanceOf(ConfigError);
      await expect(attempt).rejects.toMatchObject({
        code: 'redis_server_missing',
        message: expect.stringMatching(/apt-get install -y redis-server[\s\S]*brew install redis/),
      });
    });
  });
});
