// The `billing` command's exit statuses as a script reads them: 2 asks a person to change
// something, 75 (EX_TEMPFAIL) says the same command may work later, 141 that the reader of its
// output left early. Real processes against a real Redis, or the private one of DATA_DIR.
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { loadSettings } from '../../../config/settings.js';
import { chainIdOf } from '../../../src/chains/keys.js';
import { ChainStore } from '../../../src/chains/store.js';
import { openRuntime } from '../../../src/embedded.js';
import { createLogger } from '../../../src/logger.js';
import { chainFor } from '../../helpers/chains.js';
import { isRunning } from '../../helpers/processes.js';
import { startTestRedis, type TestRedis } from '../../helpers/redis-server.js';
import { runScript, runScriptReaderGone } from '../../helpers/run-script.js';

const BIN = join(import.meta.dirname, '../../../bin/billing.js');
const dirs: string[] = [];
const leftovers: number[] = [];
let redis: TestRedis;

beforeAll(async () => {
  redis = await startTestRedis();
});

afterAll(async () => {
  for (const pid of leftovers) if (isRunning(pid)) process.kill(pid, 'SIGKILL');
  await redis.stop();
});

afterEach(async () => {
  await Promise.all(dirs.splice(0).map((d) => rm(d, { recursive: true, force: true })));
});

async function freshDataDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'billing-exit-'));
  dirs.push(dir);
  return dir;
}

function env(extra: Record<string, string>): NodeJS.ProcessEnv {
  const { REDIS_URL: _ignored, ...rest } = process.env;
  return { ...rest, LOG_LEVEL: 'warn', ...extra };
}

const REMOTE = {
  PROVISIONING_URL: 'http://127.0.0.1:9/provisioning',
  PROVISIONING_API_KEY: 'remote-key-0123456789abcdef',
  PARTNER_VARIANT: 'external',
};

describe('billing orders reactivate in remote mode', () => {
  it('is refused with status 2 before Redis is reached, as the partner commands are', async () => {
    const out = await runScript(
      BIN,
      ['orders', 'reactivate', 'E-1'],
      env({ ...REMOTE, DATA_DIR: await freshDataDir(), REDIS_URL: 'redis://127.0.0.1:1' }),
    );
    expect({ code: out.code, stderr: out.stderr }).toEqual({
      code: 2,
      stderr: expect.stringMatching(/^billing: PROVISIONING_URL is set/),
    });
  });

  it('starts no private Redis just to refuse', async () => {
    const dataDir = await freshDataDir();
    const out = await runScript(
      BIN,
      ['orders', 'reactivate', 'E-1'],
      env({ ...REMOTE, DATA_DIR: dataDir }),
    );
    expect(out.code).toBe(2);
    expect(out.stderr).not.toContain('this command started it');
    expect(await readdir(dataDir)).toEqual([]);
  });
});

describe('billing when the same command may work later', () => {
  it('exits 75 on a chain another holder is changing right now', async () => {
    const chains = new ChainStore(new Redis(redis.url));
    try {
      const chain = chainFor('EXIT-BUSY-1', 1_700_000_000);
      await chains.lock(chain.id, 'setup');
      await chains.save({
        chainId: chain.id,
        token: 'setup',
        previous: null,
        next: chain,
        orderIds: [chain.order],
        release: false,
      });
      const out = await runScript(
        BIN,
        ['chains', 'auto-renew', 'EXIT-BUSY-1', 'off'],
        env({ DATA_DIR: await freshDataDir(), REDIS_URL: redis.url }),
      );
      expect({ code: out.code, stderr: out.stderr }).toEqual({
        code: 75,
        stderr: expect.stringMatching(/^billing: a job or another request is changing this chain/),
      });
      expect((await chains.get(chainIdOf('EXIT-BUSY-1')))?.autoRenew).toBe(true);
    } finally {
      await chains.redis.quit();
    }
  }, 30_000);

  it('exits 75 while another live process holds the start lock of the private Redis', async () => {
    const dataDir = await freshDataDir();
    await mkdir(join(dataDir, 'redis'), { recursive: true });
    await writeFile(join(dataDir, 'redis', 'redis.lock'), String(process.pid));
    const out = await runScript(BIN, ['chains', 'show', 'A-1'], env({ DATA_DIR: dataDir }));
    expect(out.stderr).toMatch(/^billing: lock .*redis\.lock is still held by pid/);
    expect(out.code).toBe(75);
  }, 40_000);
});

describe('billing orders reactivate | head (the reader stops early)', () => {
  it('reactivates every order named and stops the private Redis it started', async () => {
    const dataDir = await freshDataDir();
    const settings = loadSettings({ DATA_DIR: dataDir, PARTNER_NAME: 'ext' });
    const rt = await openRuntime(settings, createLogger('silent'));
    const { partner } = await rt.partners.create({
      name: 'ext',
      variant: 'external',
      now: rt.clock.now(),
    });
    await rt.core.invoke(partner, 'createCustomer', {
      id: 'C-1',
      name: 'C',
      admin: { email: 'c@example.com' },
    });
    for (const id of ['E-1', 'E-2']) {
      await rt.core.invoke(partner, 'createFirstOrder', {
        customer: 'C-1',
        id,
        product: 'suite-std',
        licenses: 1,
        duration: 'monthly',
      });
      await rt.core.invoke(partner, 'suspendOrder', { id });
    }
    await rt.close();

    const { code, stderr } = await runScriptReaderGone(
      BIN,
      ['orders', 'reactivate', 'E-1', 'E-2', '--partner', 'ext'],
      env({ DATA_DIR: dataDir }),
    );
    expect(code).toBe(141);
    expect(stderr).toContain('this command started it');
    expect(stderr).not.toMatch(/EPIPE|Error/);

    const recorded = await readFile(join(dataDir, 'redis', 'redis.json'), 'utf8').catch(() => null);
    const pid = recorded === null ? null : (JSON.parse(recorded) as { pid: number }).pid;
    if (pid !== null) leftovers.push(pid);
    expect({ pid, running: pid !== null && isRunning(pid) }).toEqual({ pid: null, running: false });

    const after = await openRuntime(settings, createLogger('silent'));
    try {
      const statuses = await Promise.all(
        ['E-1', 'E-2'].map(async (id) => (await after.core.reactivateOrder(partner, id)).status),
      );
      expect(statuses).toEqual(['active', 'active']);
    } finally {
      await after.close();
    }
  }, 60_000);
});
