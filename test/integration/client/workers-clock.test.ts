// The clock a process that does not run the workers (the `billing` command) uses to act on their
// chains: the one the workers ask, scoped to their partner in embedded mode (DESIGN §2).
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { loadSettings, type Settings } from '../../../config/settings.js';
import type { Clock } from '../../../src/clock.js';
import { openRuntime, type Runtime } from '../../../src/embedded.js';
import { createLogger } from '../../../src/logger.js';
import { makeProvisioningClient, workersSide } from '../../../src/provisioning-client-factory.js';
import { startTestRedis, type TestRedis } from '../../helpers/redis-server.js';

const BASE = Date.UTC(2026, 2, 1, 12) / 1000;
/** Every partner its own time, 10 s per partner id ahead of the process's (no partner). */
const clock: Clock = { now: (scope) => BASE + (scope === undefined ? 0 : 10 * Number(scope)) };

let server: TestRedis;
beforeAll(async () => {
  server = await startTestRedis();
});
afterAll(() => server.stop());
const opened: Runtime[] = [];
const dirs: string[] = [];

afterEach(async () => {
  for (const runtime of opened.splice(0)) await runtime.close().catch(() => {});
  await Promise.all(dirs.splice(0).map((dir) => rm(dir, { recursive: true, force: true })));
});

/** The clock the `billing` command acts for the workers by. */
async function workersClock(settings: Settings, runtime: Runtime): Promise<Clock> {
  return (await workersSide(settings, runtime)).clock;
}

async function open(env: Record<string, string>) {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'workers-clock-'));
  dirs.push(dataDir);
  const settings = loadSettings({ DATA_DIR: dataDir, REDIS_URL: server.url, ...env });
  const runtime = await openRuntime(settings, createLogger('silent'), clock);
  opened.push(runtime);
  return { settings, runtime };
}

describe("workersSide's clock", () => {
  it("answers as the workers' partner once the service created it, as the workers do", async () => {
    const { settings, runtime } = await open({ PARTNER_NAME: 'clock-workers' });
    await runtime.partners.create({
      name: 'another partner',
      variant: 'marketplace',
      renewalWindowDays: 15,
      now: BASE,
    });
    const workers = await makeProvisioningClient(settings, runtime);

    const cli = await workersClock(settings, runtime);

    expect(cli.now()).toBe(workers.clock.now());
    expect(cli.now()).not.toBe(clock.now());
  });

  it('answers as the runtime before the workers created their partner', async () => {
    const { settings, runtime } = await open({ PARTNER_NAME: 'never-started' });

    expect((await workersClock(settings, runtime)).now()).toBe(clock.now());
    // Asking creates nothing: the partner is the service's to create.
    expect((await runtime.partners.list()).map((p) => p.name)).not.toContain('never-started');
  });

  it('answers as the runtime in remote mode, where the remote keeps its own time', async () => {
    const { settings, runtime } = await open({
      PARTNER_NAME: 'clock-remote',
      PROVISIONING_URL: 'http://127.0.0.1:9',
      PROVISIONING_API_KEY: 'k'.repeat(32),
    });

    expect((await workersClock(settings, runtime)).now()).toBe(clock.now());
  });
});
