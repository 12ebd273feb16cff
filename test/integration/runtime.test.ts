// openRuntime's private Redis shared by processes of one DATA_DIR: the last one out stops it.
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadSettings } from '../../config/settings.js';
import { openRuntime, type Runtime } from '../../src/embedded.js';
import { createLogger } from '../../src/logger.js';
import { registryKeys } from '../../src/provisioning/keys.js';
import { isRunning } from '../helpers/processes.js';
import { startTestRedis, type TestRedis } from '../helpers/redis-server.js';

const log = createLogger('silent');
const opened: Runtime[] = [];
const dirs: string[] = [];

afterEach(async () => {
  for (const runtime of opened.splice(0)) await runtime.close().catch(() => {});
  await Promise.all(dirs.splice(0).map((dir) => rm(dir, { recursive: true, force: true })));
});

async function open(dataDir: string): Promise<Runtime> {
  const runtime = await openRuntime(loadSettings({ DATA_DIR: dataDir }), log);
  opened.push(runtime);
  return runtime;
}

async function recordedPid(dataDir: string): Promise<number> {
  return JSON.parse(await readFile(path.join(dataDir, 'redis', 'redis.json'), 'utf8')).pid;
}

describe.each([
  ['the one that started it', 0],
  ['the one that found it running', 1],
])('a private Redis shared by two runtimes, %s closing first', (_, first) => {
  it('stays up for the other, which stops it when it closes', { timeout: 30_000 }, async () => {
    const dataDir = await mkdtemp(path.join(os.tmpdir(), 'runtime-'));
    dirs.push(dataDir);
    const both = [await open(dataDir), await open(dataDir)];
    const pid = await recordedPid(dataDir);
    expect(both[1]?.redisUrl).toBe(both[0]?.redisUrl);

    const [closing, staying] = first === 0 ? both : [both[1], both[0]];
    await closing?.close();
    expect(await staying?.redis.ping()).toBe('PONG');
    expect(await recordedPid(dataDir)).toBe(pid);

    await staying?.close();
    await expect.poll(() => isRunning(pid), { timeout: 10_000 }).toBe(false);
    await expect(readFile(path.join(dataDir, 'redis', 'redis.json'))).rejects.toThrow(/ENOENT/);
  });
});

describe('a private Redis shared by two runtimes closing at once (one Ctrl-C reaching both)', () => {
  it('is stopped: each sees the other leaving, not staying', { timeout: 30_000 }, async () => {
    const dataDir = await mkdtemp(path.join(os.tmpdir(), 'runtime-'));
    dirs.push(dataDir);
    const both = [await open(dataDir), await open(dataDir)];
    const pid = await recordedPid(dataDir);
    opened.length = 0;
    await Promise.all(both.map((runtime) => runtime.close()));
    await expect.poll(() => isRunning(pid), { timeout: 10_000 }).toBe(false);
    await expect(readFile(path.join(dataDir, 'redis', 'redis.json'))).rejects.toThrow(/ENOENT/);
  });
});

describe('processes of one Redis with different key-hash secrets', () => {
  let redis: TestRedis;
  beforeEach(async () => {
    redis = await startTestRedis();
  });
  afterEach(async () => {
    for (const runtime of opened.splice(0)) await runtime.close().catch(() => {});
    await redis.stop();
  });

  async function openOn(env: Record<string, string> = {}, url = redis.url): Promise<Runtime> {
    const dataDir = await mkdtemp(path.join(os.tmpdir(), 'runtime-secret-'));
    dirs.push(dataDir);
    const runtime = await openRuntime(
      loadSettings({ REDIS_URL: url, DATA_DIR: dataDir, ...env }),
      log,
    );
    opened.push(runtime);
    return runtime;
  }

  const otherSecret = { KEY_HASH_SECRET: 'x'.repeat(40) };

  it('stops one that checks or issues keys with another secret, naming where it came from', async () => {
    const first = await openOn();
    await first.holdKeyHashSecret();
    const { apiKey } = await first.partners.create({
      name: 'secret-first',
      variant: 'external',
      now: first.clock.now(),
    });
    const generated = await openOn();
    await expect(generated.holdKeyHashSecret()).rejects.toMatchObject({
      code: 'key_hash_secret_mismatch',
      message: expect.stringMatching(/^KEY_HASH_SECRET \(generated just now in .*runtime-secret-/),
    });
    const configured = await openOn(otherSecret);
    await expect(configured.holdKeyHashSecret()).rejects.toMatchObject({
      code: 'key_hash_secret_mismatch',
      message: expect.stringMatching(/^KEY_HASH_SECRET \(set in the environment\)/),
    });
    // The first one's keys still authenticate there, and it may start again.
    expect((await first.partners.authenticate(apiKey))?.name).toBe('secret-first');
    await first.holdKeyHashSecret();
  });

  it('lets processes with the same secret share partner keys', async () => {
    const env = { KEY_HASH_SECRET: 'shared-secret-of-forty-characters-000000' };
    const first = await openOn(env);
    const second = await openOn(env);
    await first.holdKeyHashSecret();
    await second.holdKeyHashSecret();
    const { apiKey } = await first.partners.create({
      name: 'secret-shared',
      variant: 'external',
      now: first.clock.now(),
    });
    expect((await second.partners.authenticate(apiKey))?.name).toBe('secret-shared');
  });

  it('records nothing for a process that never checks keys (a worker)', async () => {
    await openOn();
    const api = await openOn(otherSecret);
    await api.holdKeyHashSecret();
  });

  describe('a database from before the fingerprint, with partners', () => {
    async function withPartnersOnly() {
      const older = await openOn(otherSecret);
      await older.partners.create({ name: 'older', variant: 'external', now: older.clock.now() });
      await older.redis.del(registryKeys.keyHashFingerprint);
    }

    it('refuses to record a secret generated by this very start', async () => {
      await withPartnersOnly();
      const fresh = await openOn();
      await expect(fresh.holdKeyHashSecret()).rejects.toMatchObject({
        code: 'key_hash_secret_mismatch',
        message: expect.stringContaining('it already holds partner accounts'),
      });
      expect(await fresh.redis.get(registryKeys.keyHashFingerprint)).toBeNull();
    });

    it('records a configured or kept secret, which then holds', async () => {
      await withPartnersOnly();
      await (await openOn(otherSecret)).holdKeyHashSecret();
      const older = opened[0] as Runtime;
      expect(await older.redis.get(registryKeys.keyHashFingerprint)).toMatch(/^scrypt1:/);
      await expect((await openOn()).holdKeyHashSecret()).rejects.toMatchObject({
        code: 'key_hash_secret_mismatch',
      });
    });
  });

  it('opens and checks with a user that may only read', async () => {
    await (await openOn(otherSecret)).holdKeyHashSecret();
    const admin = opened[0] as Runtime;
    await admin.redis.call(
      'ACL',
      'SETUSER',
      'reader',
      'on',
      '>reader-password',
      '~*',
      '&*',
      '+@read',
      '+@connection',
      '+info',
      '+client',
    );
    const reader = await openOn(
      otherSecret,
      redis.url.replace('redis://', 'redis://reader:reader-password@'),
    );
    await reader.holdKeyHashSecret();
  });
});
