// `npm run bench` as README "Benchmarks" describes it: its flags, its JSON lines, its redis-server.
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterEach, expect, it } from 'vitest';
import { commandLine, descendants, isRunning } from '../../helpers/processes.js';
import { runCommand } from '../../helpers/run-script.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const TSX = fileURLToPath(new URL('../../../node_modules/tsx/dist/cli.mjs', import.meta.url));
const BENCH = 'bench/renewal-burst.bench.ts';

/** How a command run from the repository ended (one still running after 2 minutes is ended). */
const outcome = (file: string, args: string[]) =>
  runCommand(file, args, { cwd: ROOT, timeout: 120_000 });

const bench = (args: string[]) => outcome(process.execPath, [TSX, BENCH, ...args]);

/** Running, not a zombie waiting to be reaped. */
function alive(pid: number): boolean {
  if (!isRunning(pid)) return false;
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

const leftovers: number[] = [];
const children: ChildProcess[] = [];
afterEach(() => {
  for (const pid of leftovers.splice(0)) if (isRunning(pid)) process.kill(pid, 'SIGKILL');
  for (const child of children.splice(0)) {
    if (child.exitCode === null && child.pid) process.kill(-child.pid, 'SIGKILL');
  }
});

it('`npm run -s bench -- --json` prints one JSON object per line on stdout, and nothing else', async () => {
  const { code, stdout, stderr } = await outcome('npm', [
    'run',
    '-s',
    'bench',
    '--',
    '--chains',
    '50',
    '--rounds',
    '1',
    '--json',
  ]);
  expect({ code, stderr }).toMatchObject({ code: 0 });
  const lines = stdout.trimEnd().split('\n');
  const parsed = lines.map((line) => JSON.parse(line) as Record<string, unknown>);
  expect(parsed.map((line) => line.name)).toEqual([
    'renewal-burst.throughput',
    'renewal-burst.ceiling',
    'renewal-burst.redis-round-trips',
    'renewal-burst.redis-commands',
  ]);
  for (const line of parsed) {
    expect(Object.keys(line)).toEqual(['name', 'unit', 'value', 'baseline', 'ratio']);
    expect(line.value).toBeGreaterThan(0);
    expect(line.baseline).toBeGreaterThan(0);
  }
  // Progress goes to stderr, for a person watching a scripted run.
  expect(stderr).toContain('chains 50, concurrency 50, rounds 1');
}, 120_000);

it.each([
  [['--chains', '99999999999999999999'], '--chains must be an integer from 1 to 1000000'],
  [['--chains', '0'], '--chains must be an integer from 1 to 1000000'],
  [['--concurrency', '1.5'], '--concurrency must be an integer from 1 to 10000'],
  [['--redis-url', 'notaurl'], '--redis-url: must be a redis://'],
  [['--redis-url', 'redis+cluster://127.0.0.1:7000'], '--redis-url: the benchmark runs on one'],
])(
  'refuses %j before it starts anything, with status 2',
  async (args, message) => {
    const { code, stdout, stderr } = await bench(args);
    expect({ code, stdout, stderr: stderr.split('\n')[0] }).toEqual({
      code: 2,
      stdout: '',
      stderr: expect.stringContaining(message),
    });
    expect(stderr).toContain('usage: npm run bench --');
  },
  60_000,
);

it('stops the redis-server it started when its terminal closes (a hangup)', async () => {
  const child = spawn(process.execPath, [TSX, BENCH, '--chains', '20000', '--rounds', '1'], {
    cwd: ROOT,
    detached: true,
    stdio: 'ignore',
  });
  children.push(child);
  const pid = child.pid as number;
  let redis: number[] = [];
  for (let i = 0; i < 100 && redis.length === 0; i += 1) {
    await new Promise((r) => setTimeout(r, 100));
    redis = descendants(pid).filter((p) => commandLine(p).startsWith('redis-server'));
  }
  expect(redis).toHaveLength(1);
  leftovers.push(...redis);
  const exited = new Promise((r) => child.once('exit', r));
  await new Promise((r) => setTimeout(r, 1000));
  // A terminal that closes sends SIGHUP to its foreground process group; redis-server ignores it.
  process.kill(-pid, 'SIGHUP');
  await exited;
  await expect
    .poll(() => redis.filter(alive).map((p) => commandLine(p)), { timeout: 5000 })
    .toEqual([]);
}, 60_000);
