// The `billing` command as a user runs it: a real process against a real Redis.
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { type AddressInfo, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ChainStore } from '../../../src/chains/store.js';
import { signWebhook } from '../../../src/intake/sign.js';
import { UPCOMING_LIMIT } from '../../../src/ops/chain-operations.js';
import { QUEUE_PREFIX } from '../../../src/queues.js';
import { chainFor } from '../../helpers/chains.js';
import { commandLine, descendants, isRunning, serviceStarted } from '../../helpers/processes.js';
import { listen } from '../../helpers/proxy.js';
import { startTestRedis, type TestRedis } from '../../helpers/redis-server.js';
import { runScript, runScriptReaderGone } from '../../helpers/run-script.js';

const BIN = join(import.meta.dirname, '../../../bin/billing.js');

let redis: TestRedis;
let dataDir: string;

beforeAll(async () => {
  redis = await startTestRedis();
  dataDir = await mkdtemp(join(tmpdir(), 'billing-cli-'));
  // The first run may build dist/; later ones reuse it.
  const help = await runScript(BIN, ['--help'], cleanEnv());
  if (help.code !== 0) throw new Error(`billing --help failed: ${help.stderr}`);
}, 120_000);

afterAll(async () => {
  await redis.stop();
  await rm(dataDir, { recursive: true, force: true });
});

function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const { REDIS_URL: _ignored, ...env } = process.env;
  return { ...env, DATA_DIR: dataDir, LOG_LEVEL: 'warn', ...extra };
}

function billing(args: string[], extra: Record<string, string> = {}) {
  return runScript(BIN, args, cleanEnv(extra));
}

describe('billing partners', () => {
  it('adds a partner and prints its key once as JSON', async () => {
    const out = await billing(
      [
        'partners',
        'add',
        '--name',
        'cli-json',
        '--variant',
        'external',
        '--renewal-window-days',
        '20',
        '--json',
      ],
      { REDIS_URL: redis.url },
    );
    expect(out.code).toBe(0);
    const lines = out.stdout.trim().split('\n');
    expect(lines).toHaveLength(1);
    const created = JSON.parse(lines[0] ?? '');
    expect(Object.keys(created)).toEqual(['name', 'variant', 'apiKey']);
    expect(created).toMatchObject({ name: 'cli-json', variant: 'external' });
    expect(created.apiKey).toMatch(/^[A-Za-z0-9_-]{43}$/);

    const list = await billing(['partners', 'list', '--json'], { REDIS_URL: redis.url });
    const partners = JSON.parse(list.stdout).partners as {
      name: string;
      renewalWindowDays: number;
    }[];
    expect(partners.find((p) => p.name === 'cli-json')?.renewalWindowDays).toBe(20);
    expect(list.stdout).not.toContain(created.apiKey);
  });

  it('lists partners as a table for people', async () => {
    await billing(['partners', 'add', '--name', 'cli-table', '--variant', 'marketplace'], {
      REDIS_URL: redis.url,
    });
    const list = await billing(['partners', 'list'], { REDIS_URL: redis.url });
    expect(list.stdout).toMatch(/^id\s+name\s+variant/);
    expect(list.stdout).toMatch(/cli-table\s+marketplace\s+15/);
  });

  it('ends quietly when the reader of its output stops early (| head)', async () => {
    const { code, stderr } = await runScriptReaderGone(
      BIN,
      ['partners', 'list'],
      cleanEnv({ REDIS_URL: redis.url }),
    );
    expect(stderr).not.toMatch(/EPIPE|Error/);
    expect(code).toBe(141);
  });

  it('refuses a duplicate name, a bad variant and a bad window, naming them', async () => {
    const env = { REDIS_URL: redis.url };
    await billing(['partners', 'add', '--name', 'cli-dup', '--variant', 'external'], env);
    const dup = await billing(
      ['partners', 'add', '--name', 'cli-dup', '--variant', 'external'],
      env,
    );
    expect(dup.code).not.toBe(0);
    expect(dup.stderr).toContain('partner already exists: cli-dup');
    const variant = await billing(['partners', 'add', '--name', 'x', '--variant', 'consumer'], env);
    expect(variant.code).not.toBe(0);
    expect(variant.stderr).toContain('--variant');
    const window = await billing(
      ['partners', 'add', '--name', 'x', '--variant', 'external', '--renewal-window-days', '0'],
      env,
    );
    expect(window.code).not.toBe(0);
    expect(window.stderr).toContain('--renewal-window-days');
    // `partners list` prints names: a bell or a bidi override would garble its table.
    for (const name of ['p3\x07bell', 'a\u202Eb']) {
      const unprintable = await billing(
        ['partners', 'add', '--name', name, '--variant', 'external'],
        env,
      );
      expect(unprintable).toMatchObject({
        code: 2,
        stderr: `billing: --name must not contain control or format characters, got ${JSON.stringify(name)}\n`,
      });
    }
    // Found by their exact name later (set-window, PARTNER_NAME): kept as typed or refused.
    const spaced = await billing(
      ['partners', 'add', '--name', 'spaced ', '--variant', 'external'],
      env,
    );
    expect(spaced).toMatchObject({
      code: 2,
      stderr: 'billing: --name must not start or end with white space, got "spaced "\n',
    });
    // 200 characters, as PARTNER_NAME counts them: an emoji is one.
    const emoji = '\u{1F600}'.repeat(150);
    const wide = await billing(['partners', 'add', '--name', emoji, '--variant', 'external'], env);
    expect(wide.code).toBe(0);
    const list = await billing(['partners', 'list', '--json'], env);
    expect(list.stdout).not.toContain('bell');
    expect(list.stdout).not.toContain('spaced');
    expect(list.stdout).toContain(emoji);
  });

  it('says what the service will do with its own partner, made by hand before it starts', async () => {
    const env = { REDIS_URL: redis.url, PARTNER_NAME: 'cli-own', PARTNER_VARIANT: 'external' };
    const other = await billing(
      ['partners', 'add', '--name', 'cli-own', '--variant', 'marketplace'],
      env,
    );
    expect(other.code).toBe(0);
    expect(other.stderr).toBe(
      "billing: cli-own is the workers' partner (PARTNER_NAME), and the service starts only with PARTNER_VARIANT=marketplace now (it is external): set it, or choose another name for this partner.\n",
    );
    const envWindow = { ...env, PARTNER_NAME: 'cli-own-2' };
    const window = await billing(
      [
        'partners',
        'add',
        '--name',
        'cli-own-2',
        '--variant',
        'external',
        '--renewal-window-days',
        '30',
      ],
      envWindow,
    );
    expect(window.stderr).toBe(
      "billing: cli-own-2 is the workers' partner (PARTNER_NAME): the service's next start sets its window to PARTNER_RENEWAL_WINDOW_DAYS=15; set PARTNER_RENEWAL_WINDOW_DAYS=30 to keep it.\n",
    );
  });

  it('stops on an invalid setting with a message naming the variable', async () => {
    const out = await billing(['partners', 'list'], { REDIS_URL: 'http://nope', PORT: 'abc' });
    expect(out.code).toBe(2);
    expect(out.stderr).toContain('REDIS_URL="http://nope"');
    expect(out.stderr).toContain('PORT="abc"');
  });

  it("changes a partner's renewal window, and refuses an unknown partner", async () => {
    const env = { REDIS_URL: redis.url };
    await billing(['partners', 'add', '--name', 'cli-window', '--variant', 'marketplace'], env);
    const changed = await billing(
      ['partners', 'set-window', '--name', 'cli-window', '--days', '30', '--json'],
      env,
    );
    expect(changed.code).toBe(0);
    expect(JSON.parse(changed.stdout)).toEqual({
      name: 'cli-window',
      renewalWindowDays: 30,
      before: 15,
    });
    const list = await billing(['partners', 'list', '--json'], env);
    const partners = JSON.parse(list.stdout).partners as {
      name: string;
      renewalWindowDays: number;
    }[];
    expect(partners.find((p) => p.name === 'cli-window')?.renewalWindowDays).toBe(30);

    const unknown = await billing(
      ['partners', 'set-window', '--name', 'nobody', '--days', '30'],
      env,
    );
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toBe('billing: no partner named nobody\n');
    const tooLong = await billing(
      ['partners', 'set-window', '--name', 'cli-window', '--days', '366'],
      env,
    );
    expect(tooLong.stderr).toContain('--days must be an integer from 1 to 365, got "366"');
    // Another partner's change says nothing more.
    expect(changed.stderr).toBe('');
  });

  it("says that the service's next start resets the window of its own partner", async () => {
    const env = { REDIS_URL: redis.url, PARTNER_NAME: 'cli-workers' };
    const added = await billing(
      ['partners', 'add', '--name', 'cli-workers', '--variant', 'marketplace'],
      env,
    );
    expect(added.stderr).toBe(
      "billing: cli-workers is the workers' partner (PARTNER_NAME): the service acts for it.\n",
    );
    const changed = await billing(
      ['partners', 'set-window', '--name', 'cli-workers', '--days', '20'],
      env,
    );
    expect(changed.code).toBe(0);
    expect(changed.stdout).toBe('Partner cli-workers: renewal window 20 days (was 15).\n');
    expect(changed.stderr).toBe(
      "billing: cli-workers is the workers' partner (PARTNER_NAME): running workers keep the window they started with, and the service's next start sets it back to PARTNER_RENEWAL_WINDOW_DAYS=15; set PARTNER_RENEWAL_WINDOW_DAYS=20 to keep it.\n",
    );

    // Shorter than the lead the workers renew with: the provider would refuse their renewals.
    const short = await billing(
      ['partners', 'set-window', '--name', 'cli-workers', '--days', '3'],
      env,
    );
    expect(short.code).toBe(2);
    expect(short.stderr).toMatch(
      /^billing: --days 3: cli-workers is the workers' partner \(PARTNER_NAME\), and they renew RENEWAL_LEAD_DAYS=7 days before/,
    );
    const list = await billing(['partners', 'list', '--json'], env);
    const partners = JSON.parse(list.stdout).partners as {
      name: string;
      renewalWindowDays: number;
    }[];
    expect(partners.find((p) => p.name === 'cli-workers')?.renewalWindowDays).toBe(20);
  });

  it('refuses partner commands in remote mode, where the core is not served', async () => {
    const out = await billing(['partners', 'list'], {
      REDIS_URL: redis.url,
      PROVISIONING_URL: 'http://127.0.0.1:9/provisioning',
      PROVISIONING_API_KEY: 'remote-key-0123456789abcdef',
    });
    expect(out.code).toBe(2);
    expect(out.stderr).toMatch(/^billing: partners belong to the embedded provisioning core/);
  });

  it('tells an unreachable Redis in one line, with no stack trace', async () => {
    const out = await billing(['partners', 'list'], { REDIS_URL: 'redis://127.0.0.1:1' });
    expect(out.code).toBe(1);
    expect(out.stderr.trim()).toMatch(
      /^billing: cannot reach the Redis of REDIS_URL=redis:\/\/127\.0\.0\.1:1: .*ECONNREFUSED[^\n]*$/,
    );
  });

  it('without REDIS_URL uses the private Redis of DATA_DIR, and its data persists', async () => {
    const first = await billing([
      'partners',
      'add',
      '--name',
      'private-one',
      '--variant',
      'external',
    ]);
    expect(first.code).toBe(0);
    // Nothing ran it: the person may have meant a service's REDIS_URL, so the command says so.
    expect(first.stderr).toContain(
      `billing: REDIS_URL is not set and no service runs the private Redis of DATA_DIR=${dataDir}: this command started it`,
    );
    expect(first.stderr).toContain('set REDIS_URL for this command too');
    const list = await billing(['partners', 'list', '--json']);
    expect(JSON.parse(list.stdout).partners.map((p: { name: string }) => p.name)).toEqual([
      'private-one',
    ]);
  });
});

/** `billing start` on the given Redis, any free port, logging JSON lines at info. */
function spawnBilling(redisUrl: string, extra: Record<string, string> = {}): ChildProcess {
  return spawn(process.execPath, [BIN, 'start'], {
    env: cleanEnv({ REDIS_URL: redisUrl, PORT: '0', LOG_LEVEL: 'info', ...extra }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

describe('billing start', () => {
  let server: ChildProcess | undefined;

  afterAll(() => {
    server?.kill('SIGKILL');
  });

  it('serves the provisioning core and health, and stops cleanly on SIGTERM', async () => {
    server = spawnBilling(redis.url);
    let output = '';
    server.stdout?.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    const started = await serviceStarted(server);
    // The test Redis keeps nothing on disk: the start says what a restart of it would lose.
    expect(output).toContain('"msg":"the Redis of REDIS_URL keeps nothing on disk');
    const health = await request(started.provisioning.replace('/provisioning', '/healthz'));
    expect(await health.body.json()).toEqual({ status: 'ok' });
    const noKey = await request(started.provisioning, {
      method: 'GET',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ method: 'getUserByEmail', params: { email: 'a@b.test' } }),
    });
    expect(noKey.statusCode).toBe(401);
    expect(await noKey.body.json()).toBe('missing x-api-key header');

    const exit = new Promise<number | null>((resolve) => server?.once('exit', resolve));
    server.kill('SIGTERM');
    expect(await exit).toBe(0);
  });

  it('stops cleanly on SIGHUP (its terminal closed), as on SIGTERM', async () => {
    server = spawnBilling(redis.url);
    let output = '';
    server.stdout?.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    await serviceStarted(server);
    const exit = new Promise<[number | null, string | null]>((resolve) =>
      server?.once('exit', (code, signal) => resolve([code, signal])),
    );
    server.kill('SIGHUP');
    expect(await exit).toEqual([0, null]);
    expect(output).toContain('"signal":"SIGHUP","msg":"shutting down"');
  });
});

describe('npm start', () => {
  const left: number[] = [];

  afterAll(() => {
    for (const pid of left.filter(isRunning)) process.kill(pid, 'SIGKILL');
  });

  /**
   * `npm start` (or `npx billing start`: `npm exec`) in a process group of its own, and the
   * service's pid below it.
   */
  async function npmStart(npmArgs = ['start'], service = /^\S*node scripts\/start\.mjs/) {
    // npm as the test runner's own, else the one on PATH.
    const npmCli = process.env.npm_execpath;
    const [command, args] = npmCli?.endsWith('.js')
      ? [process.execPath, [npmCli, ...npmArgs]]
      : ['npm', npmArgs];
    const npm = spawn(command, args, {
      cwd: join(import.meta.dirname, '../../..'),
      env: cleanEnv({ REDIS_URL: redis.url, PORT: '0', LOG_LEVEL: 'info' }),
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    const run = { npm, output: '', service: 0 };
    npm.stdout?.on('data', (chunk: Buffer) => {
      run.output += chunk.toString();
    });
    await serviceStarted(npm);
    // npm runs `sh -c "node scripts/start.mjs"`: the service is npm's grandchild.
    const below = descendants(npm.pid as number);
    left.push(...below);
    const found = below.find((pid) => service.test(commandLine(pid)));
    expect(found).toBeDefined();
    run.service = found as number;
    return run;
  }

  it('under npx, stops on a signal that comes while it is still starting', async () => {
    // A Redis that takes connections and never answers: the start waits on it.
    let connections = 0;
    const silent = createServer((socket) => {
      connections += 1;
      socket.on('error', () => {});
    });
    silent.listen(0, '127.0.0.1');
    await once(silent, 'listening');
    const { port } = silent.address() as AddressInfo;
    try {
      const starting = spawn(process.execPath, [BIN, 'start'], {
        env: cleanEnv({ REDIS_URL: `redis://127.0.0.1:${port}`, PORT: '0', npm_command: 'exec' }),
        stdio: 'ignore',
      });
      await vi.waitFor(() => expect(connections).toBeGreaterThan(0), { timeout: 10_000 });
      starting.kill('SIGINT');
      const [code, signal] = (await once(starting, 'exit')) as [number | null, string | null];
      // Stopped by the signal, not by the start giving up on Redis later.
      expect({ code, signal }).toEqual({ code: null, signal: 'SIGINT' });
    } finally {
      silent.close();
    }
  });

  it('under npx, stops when npm gets SIGTERM (kill $!), though npm does not pass it on', async () => {
    const run = await npmStart(['exec', '--', 'billing', 'start'], /bin\/billing(\.js)? start/);

    run.npm.kill('SIGTERM');

    await vi.waitFor(() => expect(isRunning(run.service)).toBe(false), { timeout: 20_000 });
    expect(run.output).toContain('"signal":"SIGTERM","msg":"shutting down"');
    expect(run.output).not.toContain('second signal');
  });

  it("stops when npm's own pid gets SIGTERM (kill $!), though npm does not pass it on", async () => {
    const run = await npmStart();

    run.npm.kill('SIGTERM');

    await vi.waitFor(() => expect(isRunning(run.service)).toBe(false), { timeout: 20_000 });
    expect(run.output).toContain('"signal":"SIGTERM","msg":"shutting down"');
    expect(run.output).not.toContain('second signal');
  });

  // A terminal's Ctrl-C reaches npm, its shell and the service at once, and npm passes its own
  // on to the shell: the service must see one signal only (a second one exits at once, without
  // draining), as it would with `exec` in the script, where npm's forwarded one reached it too.
  it('stops once on Ctrl-C, SIGINT to its whole process group', async () => {
    const run = await npmStart();

    process.kill(-(run.npm.pid as number), 'SIGINT');

    await vi.waitFor(() => expect(isRunning(run.service)).toBe(false), { timeout: 20_000 });
    expect(run.output).toContain('"signal":"SIGINT","msg":"shutting down"');
    expect(run.output).not.toContain('second signal');
  });
});

describe('billing start on a port in use', () => {
  it('stops with the reason, and stops the private Redis it started', async () => {
    const taken = await listen(() => {});
    const ownDataDir = await mkdtemp(join(tmpdir(), 'billing-cli-port-'));
    try {
      const out = await runScript(BIN, ['start'], {
        ...cleanEnv({ DATA_DIR: ownDataDir, PORT: new URL(taken.url).port }),
      });
      expect(out.code).toBe(1);
      const port = new URL(taken.url).port;
      expect(out.stderr).toMatch(
        new RegExp(
          `^billing: cannot listen on HOST=127\\.0\\.0\\.1 PORT=${port}: listen EADDRINUSE[^\n]*$`,
          'm',
        ),
      );
      expect(out.stderr).not.toMatch(/^\s+at /m);
      // The secrets it generated are kept for the next start, and shown now, the only time.
      const opsToken = (await readFile(join(ownDataDir, 'secrets', 'ops-token'), 'utf8')).trim();
      expect(out.stderr).toContain(`OPS_TOKEN was not set; generated one`);
      expect(out.stderr).toContain(opsToken);
      const record = await readFile(join(ownDataDir, 'redis', 'redis.json'), 'utf8').catch(
        () => null,
      );
      if (record !== null) {
        const { pid } = JSON.parse(record) as { pid: number };
        expect(() => process.kill(pid, 0)).toThrow(/ESRCH/);
      }
    } finally {
      await taken.close();
      await rm(ownDataDir, { recursive: true, force: true });
    }
  });
});

describe('billing commands that hash no partner key', () => {
  it('leave DATA_DIR as they found it: no secret is generated for them', async () => {
    const ownDataDir = await mkdtemp(join(tmpdir(), 'billing-cli-reads-'));
    try {
      const env = { DATA_DIR: ownDataDir, REDIS_URL: redis.url };
      const show = await billing(['chains', 'show', 'NOPE'], env);
      expect(show.code).toBe(2);
      expect(show.stderr).toContain('no chain has an order NOPE');
      expect((await billing(['partners', 'list'], env)).code).toBe(0);
      expect((await billing(['renewals', 'upcoming'], env)).code).toBe(0);
      expect(await readdir(ownDataDir)).toEqual([]);
    } finally {
      await rm(ownDataDir, { recursive: true, force: true });
    }
  });
});

describe('billing renewals upcoming', () => {
  it('says on stderr when more renewals may be due than the 1000 it lists, and --all lists them all', async () => {
    const db = new Redis(`${redis.url}/3`);
    try {
      const store = new ChainStore(db);
      const now = Math.floor(Date.now() / 1000);
      for (let i = 0; i <= UPCOMING_LIMIT; i += 1) {
        const next = chainFor(`UP-${i}`, now - 20 * 86_400, { nextRenewalAt: now + 3600 + i });
        await store.lock(next.id, 't');
        await store.save({ chainId: next.id, token: 't', previous: null, next, release: true });
      }
      const env = { REDIS_URL: `${redis.url}/3` };
      const listed = await billing(['renewals', 'upcoming', '--within', '1', '--json'], env);
      expect(listed.code).toBe(0);
      expect((JSON.parse(listed.stdout) as { renewals: unknown[] }).renewals).toHaveLength(
        UPCOMING_LIMIT,
      );
      expect(listed.stderr).toContain(
        'billing: the first 1000 renewals are listed, and more may be due within 1 day: --all lists every one',
      );
      const all = await billing(['renewals', 'upcoming', '--within', '1', '--all', '--json'], env);
      expect(all).toMatchObject({ code: 0, stderr: '' });
      const orders = (JSON.parse(all.stdout) as { renewals: { order: string }[] }).renewals.map(
        (r) => r.order,
      );
      expect(orders).toHaveLength(UPCOMING_LIMIT + 1);
      expect(orders.at(-1)).toBe(`UP-${UPCOMING_LIMIT}`);
      expect(new Set(orders).size).toBe(UPCOMING_LIMIT + 1);
      const fewer = await billing(['renewals', 'upcoming', '--within', '0'], env);
      expect(fewer).toMatchObject({ code: 0, stderr: '' });
    } finally {
      await db.flushdb();
      db.disconnect();
    }
  }, 60_000);
});

describe('billing start with an unusable kept secret', () => {
  it('stops naming the file, before it starts a private Redis', async () => {
    const ownDataDir = await mkdtemp(join(tmpdir(), 'billing-cli-secret-'));
    try {
      await mkdir(join(ownDataDir, 'secrets'), { recursive: true });
      const file = join(ownDataDir, 'secrets', 'key-hash-secret');
      await writeFile(file, 'short\n');
      const out = await runScript(BIN, ['start'], cleanEnv({ DATA_DIR: ownDataDir, PORT: '0' }));
      expect(out.code).toBe(2);
      expect(out.stderr).toContain(`billing: the secret kept in ${file} is not usable`);
      expect(await readdir(ownDataDir)).toEqual(['secrets']);
    } finally {
      await rm(ownDataDir, { recursive: true, force: true });
    }
  });
});

describe('billing with a DATA_DIR that is a file', () => {
  it.each([
    [['start'], { PORT: '0' }],
    [['partners', 'list'], {}],
  ])('%j stops with status 2 naming DATA_DIR, no stack trace', async (args, extra) => {
    const scratch = await mkdtemp(join(tmpdir(), 'billing-cli-datadir-'));
    try {
      const file = join(scratch, 'not-a-folder');
      await writeFile(file, '');
      const out = await runScript(BIN, args, cleanEnv({ DATA_DIR: file, ...extra }));
      expect(out.code).toBe(2);
      expect(out.stderr).toMatch(
        new RegExp(`^billing: DATA_DIR=${file}: not a folder this process can use \\(ENOTDIR`, 'm'),
      );
      expect(out.stderr).not.toMatch(/^\s+at /m);
    } finally {
      await rm(scratch, { recursive: true, force: true });
    }
  });
});

describe('billing start when Redis goes away', () => {
  let server: ChildProcess | undefined;
  let own: TestRedis;

  beforeAll(async () => {
    own = await startTestRedis();
  });
  afterAll(async () => {
    server?.kill('SIGKILL');
    await own.stop();
  });

  it('answers /readyz 503 not ready, naming Redis, and 200 again once it is back', async () => {
    server = spawnBilling(own.url, { OPS_TOKEN: 'ops-token-for-redis-away-test-0123456789' });
    const started = await serviceStarted(server);
    const readyz = started.provisioning.replace('/provisioning', '/readyz');
    const ready = async () => {
      const res = await request(readyz);
      return { status: res.statusCode, body: await res.body.json() };
    };
    expect(await ready()).toEqual({
      status: 200,
      body: { status: 'ready', redis: true, workers: true },
    });

    await own.stop();
    expect(await ready()).toMatchObject({
      status: 503,
      body: { status: 'not ready', redis: false },
    });
    // The ops API says so in its own words, not ioredis's.
    const ops = await request(started.provisioning.replace('/provisioning', '/ops/chains/NONE'), {
      headers: { authorization: 'Bearer ops-token-for-redis-away-test-0123456789' },
    });
    expect({ status: ops.statusCode, body: await ops.body.json() }).toEqual({
      status: 503,
      body: { error: 'unavailable', message: 'storage unreachable, retry later' },
    });

    await own.restart();
    await vi.waitFor(async () => expect((await ready()).status).toBe(200), { timeout: 10_000 });
  });
});

describe('billing start stopping while a job waits on the provider', () => {
  let server: ChildProcess | undefined;
  let own: TestRedis;
  let provider: Awaited<ReturnType<typeof listen>>;
  /** Requests the provider received; it never answers them. */
  const received: string[] = [];

  beforeAll(async () => {
    own = await startTestRedis();
    provider = await listen((req) => {
      received.push(req.url ?? '');
    });
  });
  afterAll(async () => {
    server?.kill('SIGKILL');
    await provider.close();
    await own.stop();
  });

  /**
   * Starts the service against the provider that never answers and sends it an order: its job
   * then waits on createCustomer. Answers the output so far, read at any time.
   */
  async function startWithJobInFlight(shutdownTimeoutSeconds: number, order: string) {
    const secret = `whsec_${randomBytes(24).toString('base64')}`;
    const child = spawnBilling(own.url, {
      PROVISIONING_URL: provider.url,
      PROVISIONING_API_KEY: 'remote-key',
      PROVISIONING_TIMEOUT_MS: '120000',
      SHUTDOWN_TIMEOUT_SECONDS: String(shutdownTimeoutSeconds),
      WEBHOOK_SECRET: secret,
    });
    server = child;
    let output = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    const started = await serviceStarted(child);
    const body = JSON.stringify({
      type: 'order.placed',
      data: {
        customer: { id: `C-${order}`, name: 'Term', admin: { email: 'admin@term.test' } },
        order: { id: order, product: 'suite-std', licenses: 1, duration: 'monthly' },
      },
    });
    const asked = received.length;
    const sent = await request(`${started.url}/webhooks/events`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...signWebhook(secret, `evt-${order}`, Math.floor(Date.now() / 1000), body),
      },
      body,
    });
    expect(sent.statusCode).toBe(202);
    await sent.body.dump();
    await vi.waitFor(() => expect(received.length).toBeGreaterThan(asked), { timeout: 10_000 });
    const exit = new Promise<number | null>((resolve) => child.once('exit', resolve));
    return { server: child, exit, output: () => output };
  }

  it('closes its workers after SHUTDOWN_TIMEOUT_SECONDS and exits, leaving the job for a retry', async () => {
    const { server, exit, output } = await startWithJobInFlight(1, 'TERM-1');
    server.kill('SIGTERM');
    // Long before the provider timeout (120 s): the wait for active jobs is bounded.
    expect(await exit).toBe(0);
    expect(output()).toContain('active jobs did not finish in time; closing workers anyway');
    // The job stays active, so the stalled check gives it to the next worker to run again.
    const redis = new Redis(own.url);
    const orders = new Queue('orders', { connection: redis, prefix: QUEUE_PREFIX });
    try {
      expect(await orders.getActiveCount()).toBe(1);
    } finally {
      await orders.close();
      await redis.quit();
    }
  }, 60_000);

  it('exits at once, status 1, on a second signal while it waits for active jobs', async () => {
    const { server, exit, output } = await startWithJobInFlight(60, 'TERM-2');
    server.kill('SIGTERM');
    await vi.waitFor(() => expect(output()).toContain('"shutting down"'), { timeout: 5_000 });
    server.kill('SIGINT');
    expect(await exit).toBe(1);
    expect(output()).toContain('second signal: exiting now');
  }, 60_000);
});
