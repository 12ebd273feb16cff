// A closed terminal sends SIGHUP to its job's process group: the service stops once, draining
// its active jobs as on Ctrl-C (README, Stopping), under `npm start` (npm and its shell die of
// the signal: the orphan watch must not add a second stop) and under `npm run quickstart` (the
// service runs in a process group of its own: quickstart passes the signal on).
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { signWebhook } from '../../../src/intake/sign.js';
import { commandLine, descendants, isRunning, serviceStarted } from '../../helpers/processes.js';
import { listen } from '../../helpers/proxy.js';
import { startTestRedis, type TestRedis } from '../../helpers/redis-server.js';

let redis: TestRedis;
let dataDir: string;
let provider: Awaited<ReturnType<typeof listen>>;
/** Requests the provider received; it never answers them. */
const received: string[] = [];
const left: number[] = [];

beforeAll(async () => {
  redis = await startTestRedis();
  dataDir = await mkdtemp(join(tmpdir(), 'billing-sighup-'));
  provider = await listen((req) => {
    received.push(req.url ?? '');
  });
});

afterAll(async () => {
  for (const pid of left.filter(isRunning)) process.kill(pid, 'SIGKILL');
  await provider.close();
  await redis.stop();
  await rm(dataDir, { recursive: true, force: true });
});

describe('npm start in a terminal that closes (SIGHUP to its process group)', () => {
  it('stops once, draining its active job, as on Ctrl-C', async () => {
    const secret = `whsec_${randomBytes(24).toString('base64')}`;
    const { REDIS_URL: _ignored, ...env } = process.env;
    const npmCli = process.env.npm_execpath;
    const [command, args] = npmCli?.endsWith('.js')
      ? [process.execPath, [npmCli, 'start']]
      : ['npm', ['start']];
    const npm = spawn(command, args, {
      cwd: join(import.meta.dirname, '../../..'),
      env: {
        ...env,
        DATA_DIR: dataDir,
        REDIS_URL: redis.url,
        PORT: '0',
        LOG_LEVEL: 'info',
        PROVISIONING_URL: provider.url,
        PROVISIONING_API_KEY: 'remote-key',
        PROVISIONING_TIMEOUT_MS: '120000',
        SHUTDOWN_TIMEOUT_SECONDS: '5',
        WEBHOOK_SECRET: secret,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    let output = '';
    npm.stdout?.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    const started = await serviceStarted(npm);
    const below = descendants(npm.pid as number);
    left.push(npm.pid as number, ...below);
    const service = below.find((pid) => /^\S*node scripts\/start\.mjs/.test(commandLine(pid)));
    expect(service).toBeDefined();

    // A job in flight: it waits on the provider, which never answers.
    const body = JSON.stringify({
      type: 'order.placed',
      data: {
        customer: { id: 'C-HUP-1', name: 'Hup', admin: { email: 'admin@hup.test' } },
        order: { id: 'HUP-1', product: 'suite-std', licenses: 1, duration: 'monthly' },
      },
    });
    const sent = await request(`${started.url}/webhooks/events`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...signWebhook(secret, 'evt-hup-1', Math.floor(Date.now() / 1000), body),
      },
      body,
    });
    expect(sent.statusCode).toBe(202);
    await sent.body.dump();
    await vi.waitFor(() => expect(received.length).toBeGreaterThan(0), { timeout: 10_000 });

    // The terminal closes.
    process.kill(-(npm.pid as number), 'SIGHUP');

    await vi.waitFor(() => expect(isRunning(service as number)).toBe(false), { timeout: 30_000 });
    expect(output).toContain('"signal":"SIGHUP","msg":"shutting down"');
    // Drained for SHUTDOWN_TIMEOUT_SECONDS, as on one SIGTERM or Ctrl-C.
    expect(output).not.toContain('second signal');
    expect(output).toContain('active jobs did not finish in time; closing workers anyway');
  }, 60_000);
});

describe('npm run quickstart in a terminal that closes (SIGHUP to its process group)', () => {
  it('stops the service', async () => {
    const { REDIS_URL: _ignored, ...env } = process.env;
    // quickstart.mjs as the terminal's job: a process group of its own.
    const quickstart = spawn(process.execPath, ['scripts/quickstart.mjs'], {
      cwd: join(import.meta.dirname, '../../..'),
      env: { ...env, DATA_DIR: dataDir, REDIS_URL: redis.url, PORT: '0', LOG_LEVEL: 'info' },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    await serviceStarted(quickstart);
    const below = descendants(quickstart.pid as number);
    left.push(quickstart.pid as number, ...below);
    const service = below.find((pid) => /^\S*node scripts\/start\.mjs/.test(commandLine(pid)));
    expect(service).toBeDefined();

    // The terminal closes.
    process.kill(-(quickstart.pid as number), 'SIGHUP');

    await vi.waitFor(() => expect(isRunning(service as number)).toBe(false), { timeout: 20_000 });
  }, 60_000);
});
