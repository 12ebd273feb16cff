// A start that fails halfway closes what it had opened.
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue, Worker } from 'bullmq';
import { request } from 'undici';
import { afterAll, afterEach, beforeAll, expect, it, vi } from 'vitest';
import { loadSettings } from '../../config/settings.js';
import { createLogger } from '../../src/logger.js';
import { start } from '../../src/main.js';
import { queueNames } from '../../src/queues.js';
import { capturingLogger } from '../helpers/logger.js';
import { startTestRedis, type TestRedis } from '../helpers/redis-server.js';

let redis: TestRedis;
let dataDir: string;

beforeAll(async () => {
  redis = await startTestRedis();
  dataDir = await mkdtemp(join(tmpdir(), 'billing-start-'));
});

afterEach(() => {
  vi.restoreAllMocks();
});

afterAll(async () => {
  await redis.stop();
  await rm(dataDir, { recursive: true, force: true });
});

/** Settings of a process on the test's Redis, with `dir` for DATA_DIR. */
function settingsOn(dir: string, extra: Record<string, string> = {}) {
  return loadSettings({
    REDIS_URL: redis.url,
    HOST: '127.0.0.1',
    PORT: '0',
    DATA_DIR: dir,
    OPS_TOKEN: randomBytes(16).toString('hex'),
    WEBHOOK_SECRET: `whsec_${randomBytes(24).toString('base64')}`,
    ...extra,
  });
}

it('closes the workers it started when scheduling reconcile fails', async () => {
  const settings = settingsOn(dataDir);
  vi.spyOn(Queue.prototype, 'upsertJobScheduler').mockRejectedValue(new Error('Redis said no'));
  const closed = vi.spyOn(Worker.prototype, 'close');
  await expect(start(settings, createLogger('silent'), 'worker')).rejects.toThrow('Redis said no');
  expect(new Set(closed.mock.contexts.map((worker) => (worker as Worker).name))).toEqual(
    new Set(queueNames),
  );
});

it('refuses to serve the provisioning API with another key-hash secret, and lets workers start', async () => {
  const settingsWith = (secret: string, dir: string) =>
    settingsOn(dir, { KEY_HASH_SECRET: secret, RECONCILE_INTERVAL_SECONDS: '3600' });
  const log = createLogger('silent');
  const first = await start(settingsWith('a'.repeat(40), dataDir), log, 'api');
  await first.stop();
  const otherDir = await mkdtemp(join(tmpdir(), 'billing-start-other-'));
  try {
    await expect(start(settingsWith('b'.repeat(40), otherDir), log, 'api')).rejects.toMatchObject({
      code: 'key_hash_secret_mismatch',
    });
    const worker = await start(settingsWith('b'.repeat(40), otherDir), log, 'worker');
    await worker.stop();
  } finally {
    await rm(otherDir, { recursive: true, force: true });
  }
});

it('names PARTNER_VARIANT when its partner exists with the other variant', async () => {
  const log = createLogger('silent');
  const on = (variant: string) =>
    settingsOn(dataDir, {
      PARTNER_NAME: 'variant-fixed',
      PARTNER_VARIANT: variant,
      RECONCILE_INTERVAL_SECONDS: '3600',
    });
  const first = await start(on('marketplace'), log, 'worker');
  await first.stop();
  await expect(start(on('external'), log, 'worker')).rejects.toMatchObject({
    name: 'ConfigError',
    message: expect.stringMatching(
      /^PARTNER_VARIANT=external: the partner PARTNER_NAME=variant-fixed exists here with variant marketplace.*set PARTNER_VARIANT=marketplace/,
    ),
  });
});

it('warns when HOST binds every address and PUBLIC_URL is left to follow it', async () => {
  const lines = async (extra: Record<string, string>) => {
    const { log, captured } = capturingLogger();
    const started = await start(
      settingsOn(dataDir, {
        HOST: '0.0.0.0',
        RECONCILE_INTERVAL_SECONDS: '3600',
        // The one this Redis's partner keys are hashed with (the test above).
        KEY_HASH_SECRET: 'a'.repeat(40),
        ...extra,
      }),
      log,
      'api',
    );
    await started.stop();
    return captured.map((line) => JSON.parse(line) as { level: number; msg: string });
  };
  const unreachable = (entries: { level: number; msg: string }[]) =>
    entries.filter((e) => e.level === 40 && e.msg.startsWith('PUBLIC_URL names no address'));

  expect(unreachable(await lines({}))).toHaveLength(1);
  expect(unreachable(await lines({ PUBLIC_URL: 'https://billing.example.com' }))).toHaveLength(0);
});

it('points onboarding links at the port it listens on when PORT=0 picks one', async () => {
  const started = await start(
    settingsOn(dataDir, { RECONCILE_INTERVAL_SECONDS: '3600', KEY_HASH_SECRET: 'a'.repeat(40) }),
    createLogger('silent'),
    'api',
  );
  try {
    const { apiKey } = await started.runtime.partners.create({
      name: `onboarding-${randomBytes(4).toString('hex')}`,
      variant: 'marketplace',
      now: started.clock.now(),
    });
    const res = await request(`http://127.0.0.1:${started.port}/provisioning`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': apiKey },
      body: JSON.stringify({
        method: 'createCustomer',
        params: { id: 'ONB-1', name: 'Onboarding', admin: { email: 'a@onb.example' } },
      }),
    });
    const customer = (await res.body.json()) as { url: string };
    expect(customer.url).toMatch(
      new RegExp(`^http://127\\.0\\.0\\.1:${started.port}/onboarding/[^/]+$`),
    );
  } finally {
    await started.stop();
  }
});
