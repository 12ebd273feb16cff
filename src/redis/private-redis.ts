// The embedded default's private redis-server under DATA_DIR: find it, start it once, stop it.

import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { accessSync, constants, statSync } from 'node:fs';
import { mkdir, open, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { z } from 'zod';
import { inDataDir } from '../data-dir.js';
import { ConfigError, TransientError } from '../errors.js';

const READY_LINE = 'Ready to accept connections';
const READY_TIMEOUT_MS = 10_000;
// Longer than READY_TIMEOUT_MS, so a waiter outlasts a holder that is still starting its server.
const LOCK_TIMEOUT_MS = 15_000;
const LOCK_POLL_MS = 100;
// A lock file without a pid is being written by its creator; past this age the creator died.
const EMPTY_LOCK_STALE_MS = 5_000;
const PROBE_TIMEOUT_MS = 1_000;
/** How long a live private Redis that does not answer is waited for before the start gives up. */
const PROBE_PATIENCE_MS = 15_000;
const STOP_TIMEOUT_MS = 20_000;
const OUTPUT_TAIL_CHARS = 4_000;
// Only an auto-picked port can lose the race between probing it and redis-server binding it.
const FREE_PORT_ATTEMPTS = 3;

const recordSchema = z.object({
  pid: z.number().int().positive(),
  port: z.number().int().min(1).max(65_535),
});
type RedisRecord = z.infer<typeof recordSchema>;

export interface PrivateRedis {
  url: string;
  /** False when an already running server was reused; its stop() then does nothing. */
  startedHere: boolean;
  stop(): Promise<void>;
  /**
   * Leaves a server started here running for other processes, which go on using it: this
   * process no longer holds it, so it can exit. Nothing to do for a reused one.
   */
  leave(): void;
}

export interface PrivateRedisOptions {
  dataDir: string;
  /** TCP port on 127.0.0.1; 0 picks a free one. */
  port: number;
  log: Logger;
  /** The redis-server binary; null means none is installed. Omitted: search `pathEnv`. */
  redisServerPath?: string | null;
  /** The search path used when `redisServerPath` is omitted; defaults to this process's PATH. */
  pathEnv?: string;
  /** How long a running private Redis that does not answer is waited for (ms; default 15 s). */
  patienceMs?: number;
}

// PATH is the operating system's lookup path, not a service setting, so config/ does not own it.
const systemPath = (): string => process.env.PATH ?? '';

/** The absolute path of the first executable `redis-server` on `pathEnv`, or null. */
export function findRedisServer(pathEnv: string = systemPath()): string | null {
  for (const dir of pathEnv.split(path.delimiter)) {
    if (dir === '') continue;
    // resolve, not join: a relative PATH entry would otherwise send spawn back to a PATH search.
    const candidate = path.resolve(dir, 'redis-server');
    try {
      accessSync(candidate, constants.X_OK);
      if (statSync(candidate).isFile()) return candidate;
    } catch {
      // Missing or not executable here; keep looking.
    }
  }
  return null;
}

/** The URL of the live private Redis recorded under `dataDir`, or null when none runs. */
export async function findRunningPrivateRedis(dataDir: string): Promise<string | null> {
  const record = await readLiveRecord(redisDir(dataDir));
  return record === null ? null : urlFor(record.port);
}

/**
 * Reuses the private Redis recorded under `<dataDir>/redis`, or starts one with append-only
 * persistence there. Only a server started here is stopped by the returned stop().
 */
export function ensurePrivateRedis(opts: PrivateRedisOptions): Promise<PrivateRedis> {
  return inDataDir(opts.dataDir, () => privateRedisOf(opts));
}

async function privateRedisOf(opts: PrivateRedisOptions): Promise<PrivateRedis> {
  const dir = redisDir(opts.dataDir);
  const running = await readLiveRecord(dir, opts.patienceMs);
  if (running !== null) return reuse(running, dir, opts.log);

  const bin =
    opts.redisServerPath === undefined ? findRedisServer(opts.pathEnv) : opts.redisServerPath;
  if (bin === null) throw missingServerError(opts.pathEnv ?? systemPath());

  await mkdir(dir, { recursive: true });
  const release = await acquireLock(path.join(dir, 'redis.lock'));
  try {
    // Another process may have started one while this one waited for the lock.
    const raced = await readLiveRecord(dir, opts.patienceMs);
    if (raced !== null) return reuse(raced, dir, opts.log);
    return await start(bin, dir, opts);
  } finally {
    await release();
  }
}

function redisDir(dataDir: string): string {
  return path.resolve(dataDir, 'redis');
}

function recordPath(dir: string): string {
  return path.join(dir, 'redis.json');
}

function urlFor(port: number): string {
  return `redis://127.0.0.1:${port}`;
}

function reuse(record: RedisRecord, dir: string, log: Logger): PrivateRedis {
  log.info({ pid: record.pid, port: record.port, dir }, 'private redis reused');
  return { url: urlFor(record.port), startedHere: false, stop: async () => {}, leave: () => {} };
}

function missingServerError(searched: string): ConfigError {
  return new ConfigError(
    'redis_server_missing',
    'redis-server was not found on PATH and REDIS_URL is not set. Install it with ' +
      '`sudo apt-get install -y redis-server` (Debian/Ubuntu) or `brew install redis` (macOS), ' +
      'or run `docker compose up -d redis` and set REDIS_URL=redis://127.0.0.1:6379, ' +
      `or set REDIS_URL to an existing Redis. Searched PATH=${searched}`,
    { path: searched },
  );
}

async function start(bin: string, dir: string, opts: PrivateRedisOptions): Promise<PrivateRedis> {
  const attempts = opts.port === 0 ? FREE_PORT_ATTEMPTS : 1;
  for (let attempt = 1; ; attempt++) {
    const port = opts.port === 0 ? await findFreePort() : opts.port;
    try {
      const child = await spawnRedisServer(bin, dir, port);
      return await adopt(child, dir, port, opts.log);
    } catch (error) {
      const lostPortRace =
        error instanceof ConfigError && String(error.details.output).includes('already in use');
      if (!lostPortRace || attempt >= attempts) throw error;
    }
  }
}

/** A TCP port free on 127.0.0.1 a moment ago (another process may take it before we do). */
export async function findFreePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (address === null || typeof address === 'string') {
    throw new Error(`expected a TCP address from a probe server, got ${String(address)}`);
  }
  return address.port;
}

function spawnRedisServer(bin: string, dir: string, port: number): Promise<ChildProcess> {
  // Its own process group (detached), so Ctrl-C in a terminal stops the app first: workers drain
  // against a Redis that is still up, and stop() then ends the server with SIGTERM (which fsyncs
  // the AOF). Nothing global (exit or signal hooks) is installed: the caller owns shutdown. The
  // piped stdio keeps the event loop alive until stop(), so a forgotten stop() shows as a hang.
  // If this process dies without stop(), the server lives on and the record lets the next start
  // reuse it instead of starting a second writer on the same AOF.
  const args = [
    ...['--port', String(port), '--bind', '127.0.0.1', '--dir', dir],
    ...['--appendonly', 'yes', '--appendfsync', 'everysec', '--maxmemory-policy', 'noeviction'],
    ...['--save', '', '--daemonize', 'no', '--protected-mode', 'yes'],
  ];
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  // The output it gives is already its tail (at most OUTPUT_TAIL_CHARS).
  return untilRedisReady(
    child,
    (reason, tail, cause) =>
      new ConfigError(
        'redis_start_failed',
        `redis-server ${bin} for --dir ${dir} on port ${port} ${reason}; its output:\n${tail}`,
        { bin, dir, port, output: tail },
        { cause },
      ),
  );
}

/**
 * Resolves with the spawned redis-server (stdout and stderr piped) once it accepts connections;
 * rejects with `failure(reason, the tail of its output)` when it exits first, cannot run, or is not
 * ready within READY_TIMEOUT_MS (then it is killed). Also the test suites' way to start one.
 */
export function untilRedisReady(
  child: ChildProcess,
  failure: (reason: string, output: string, cause?: unknown) => Error,
): Promise<ChildProcess> {
  let output = '';
  return new Promise((resolve, reject) => {
    const settle = (error?: Error): void => {
      clearTimeout(timer);
      child.stdout?.off('data', onOutput);
      child.stderr?.off('data', onOutput);
      child.off('close', onClose);
      child.off('error', onError);
      if (error === undefined) resolve(child);
      else reject(error);
    };
    const fail = (reason: string, cause?: unknown): void => settle(failure(reason, output, cause));
    const onOutput = (chunk: Buffer): void => {
      // Keeping a tail bounds memory and still finds a ready line split across chunks.
      output = (output + chunk.toString('utf8')).slice(-OUTPUT_TAIL_CHARS);
      if (output.includes(READY_LINE)) settle();
    };
    // 'close', not 'exit': it comes after the pipes drain, so the error shows the last lines.
    const onClose = (code: number | null, signal: string | null): void =>
      fail(`exited (code ${code}, signal ${signal}) before it was ready`);
    const onError = (error: Error): void => fail(`could not be run: ${error.message}`, error);
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      fail(`was not ready within ${READY_TIMEOUT_MS} ms`);
    }, READY_TIMEOUT_MS);
    child.stdout?.on('data', onOutput);
    child.stderr?.on('data', onOutput);
    child.once('close', onClose);
    child.once('error', onError);
  });
}

async function adopt(
  child: ChildProcess,
  dir: string,
  port: number,
  log: Logger,
): Promise<PrivateRedis> {
  const pid = child.pid;
  if (pid === undefined) throw new Error(`redis-server on port ${port} is ready but has no pid`);
  const record: RedisRecord = { pid, port };
  // Redis logs to stdout; a pipe nobody reads fills up and then blocks the server.
  const forward = (chunk: Buffer): void => {
    log.debug({ pid, output: chunk.toString('utf8').trimEnd() }, 'redis-server output');
  };
  child.stdout?.on('data', forward);
  child.stderr?.on('data', forward);
  let stopping: Promise<void> | undefined;
  child.once('exit', (code, signal) => {
    if (stopping === undefined) {
      log.error({ pid, port, code, signal }, 'private redis exited unexpectedly');
    }
  });
  try {
    await writeRecord(dir, record);
  } catch (error) {
    child.kill('SIGTERM');
    throw error;
  }
  log.info({ pid, port, dir }, 'private redis started');
  const stop = (): Promise<void> => {
    stopping ??= stopServer(child, dir, record, log);
    return stopping;
  };
  const leave = (): void => {
    if (stopping !== undefined) return;
    stopping = Promise.resolve();
    // Its output goes nowhere from now on (Redis ignores SIGPIPE); the pipes and the child no
    // longer keep this process alive.
    child.stdout?.destroy();
    child.stderr?.destroy();
    child.unref();
    log.info({ pid, port }, 'private redis left running for the other processes using it');
  };
  return { url: urlFor(port), startedHere: true, stop, leave };
}

/**
 * Shuts down the running private Redis of `dataDir` through `client`, a connection to it (a
 * server another process started: SHUTDOWN writes the AOF out, as SIGTERM does), and waits for
 * it to exit. Nothing to do when none runs.
 */
export async function shutdownPrivateRedis(
  dataDir: string,
  client: { call(command: string, ...args: string[]): Promise<unknown> },
  log: Logger,
): Promise<void> {
  const dir = redisDir(dataDir);
  const record = await readRecord(dir);
  if (record === null || !isProcessAlive(record.pid)) return;
  // The server closes the connection instead of answering.
  await client.call('SHUTDOWN').catch(() => {});
  const giveUpAt = Date.now() + STOP_TIMEOUT_MS;
  while (isProcessAlive(record.pid) && Date.now() < giveUpAt) await delay(20);
  if (isProcessAlive(record.pid)) {
    log.warn({ pid: record.pid, port: record.port }, 'private redis still running after SHUTDOWN');
    return;
  }
  await forgetStopped(dir, record, log);
}

async function stopServer(
  child: ChildProcess,
  dir: string,
  record: RedisRecord,
  log: Logger,
): Promise<void> {
  if (child.exitCode === null && child.signalCode === null) {
    const exited = once(child, 'exit');
    child.kill('SIGTERM');
    // Redis exits within milliseconds of SIGTERM; a stuck one must not hang our shutdown.
    const timer = setTimeout(() => {
      log.warn(
        { pid: record.pid, timeoutMs: STOP_TIMEOUT_MS },
        'private redis killed after SIGTERM',
      );
      child.kill('SIGKILL');
    }, STOP_TIMEOUT_MS);
    try {
      await exited;
    } finally {
      clearTimeout(timer);
    }
  }
  await forgetStopped(dir, record, log);
}

/** Removes the record of a server that exited, unless a newer server's replaced it meanwhile. */
async function forgetStopped(dir: string, record: RedisRecord, log: Logger): Promise<void> {
  const current = await readRecord(dir);
  if (current?.pid === record.pid) await rm(recordPath(dir), { force: true });
  log.info({ pid: record.pid, port: record.port }, 'private redis stopped');
}

async function writeRecord(dir: string, record: RedisRecord): Promise<void> {
  // Write then rename, so a reader never sees half a record.
  const temp = `${recordPath(dir)}.${process.pid}.tmp`;
  await writeFile(temp, `${JSON.stringify(record)}\n`);
  await rename(temp, recordPath(dir));
}

async function readRecord(dir: string): Promise<RedisRecord | null> {
  let text: string;
  try {
    text = await readFile(recordPath(dir), 'utf8');
  } catch (error) {
    if (errnoCode(error) === 'ENOENT') return null;
    throw error;
  }
  try {
    const parsed = recordSchema.safeParse(JSON.parse(text));
    return parsed.success ? parsed.data : null;
  } catch {
    // A corrupt record names no server; starting a new one rewrites it.
    return null;
  }
}

/**
 * The record of the private Redis that runs now, or null when none does. A live process that
 * does not answer (an fsync or AOF rewrite stall, a long script, a stopped process) is asked
 * again for `patienceMs` and then refused: taking it for gone would start a second server
 * on the same append-only files, with writes that the first one never sees.
 */
async function readLiveRecord(
  dir: string,
  patienceMs = PROBE_PATIENCE_MS,
): Promise<RedisRecord | null> {
  const record = await readRecord(dir);
  if (record === null || !isProcessAlive(record.pid)) return null;
  const giveUpAt = Date.now() + patienceMs;
  for (;;) {
    const probe = await probeRedis(record);
    if (probe === 'ours') return record;
    if (probe === 'not-ours') return null;
    if (!isProcessAlive(record.pid)) return null;
    if (Date.now() >= giveUpAt) {
      throw new ConfigError(
        'private_redis_unresponsive',
        `the private Redis of ${dir} (pid ${record.pid}, port ${record.port}) is running but has not answered for ${Math.ceil(patienceMs / 1000)} s; a second one on the same data would lose writes, so none is started: wait for it, or stop that process (if pid ${record.pid} is no redis-server, delete ${recordPath(dir)})`,
        { pid: record.pid, port: record.port },
      );
    }
  }
}

/**
 * Whether the recorded server is this Redis (`ours`), something else (`not-ours`: a recycled pid
 * or port after a reboot), or does not answer within PROBE_TIMEOUT_MS (`no-answer`).
 */
async function probeRedis({ pid, port }: RedisRecord): Promise<'ours' | 'not-ours' | 'no-answer'> {
  const client = new Redis({
    host: '127.0.0.1',
    port,
    lazyConnect: true,
    connectTimeout: PROBE_TIMEOUT_MS,
    commandTimeout: PROBE_TIMEOUT_MS,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    enableOfflineQueue: false,
    // The ready check would wait out a long AOF load; INFO answers during loading anyway.
    enableReadyCheck: false,
  });
  // Failures arrive through the awaited calls; the listener stops ioredis printing them too.
  client.on('error', () => {});
  try {
    await client.connect();
    // INFO rather than PING: PING answers LOADING while the AOF loads, and that server is still
    // ours. The pid check catches a recycled pid or port after a reboot.
    const info = await client.info('server');
    return Number(/^process_id:(\d+)/m.exec(info)?.[1]) === pid ? 'ours' : 'not-ours';
  } catch (error) {
    // Only a refused connection says that nothing listens there. A stopped or stalled server
    // still has its connections accepted by the kernel, and ioredis then reports a timeout or a
    // closed connection.
    return errnoCode(error) === 'ECONNREFUSED' ? 'not-ours' : 'no-answer';
  } finally {
    client.disconnect();
  }
}

function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: the process exists but belongs to another user.
    return errnoCode(error) === 'EPERM';
  }
}

function errnoCode(error: unknown): string | undefined {
  return error instanceof Error && 'code' in error ? String(error.code) : undefined;
}

async function acquireLock(file: string): Promise<() => Promise<void>> {
  const deadline = Date.now() + LOCK_TIMEOUT_MS;
  for (;;) {
    try {
      const handle = await open(file, 'wx');
      try {
        await handle.writeFile(String(process.pid));
      } finally {
        await handle.close();
      }
      return () => rm(file, { force: true });
    } catch (error) {
      if (errnoCode(error) !== 'EEXIST') throw error;
    }
    const holder = await readLockHolder(file);
    if (holder.stale) {
      // Two waiters can both judge a lock stale and one may delete the other's fresh lock; the
      // window is a few microseconds after a crash, which is acceptable for a local dev default.
      await rm(file, { force: true });
      continue;
    }
    if (Date.now() >= deadline) {
      throw new TransientError(
        'redis_lock_busy',
        `lock ${file} is still held by pid ${holder.pid} after ${LOCK_TIMEOUT_MS} ms; ` +
          'if no billing process is starting Redis for this DATA_DIR, delete the file',
        { file, pid: holder.pid },
      );
    }
    await delay(LOCK_POLL_MS);
  }
}

async function readLockHolder(file: string): Promise<{ pid: number | null; stale: boolean }> {
  try {
    const [text, info] = await Promise.all([readFile(file, 'utf8'), stat(file)]);
    const pid = Number.parseInt(text, 10);
    if (Number.isInteger(pid) && pid > 0) return { pid, stale: !isProcessAlive(pid) };
    return { pid: null, stale: Date.now() - info.mtimeMs > EMPTY_LOCK_STALE_MS };
  } catch (error) {
    // Released between our open and this read: not stale, just try to take it again.
    if (errnoCode(error) === 'ENOENT') return { pid: null, stale: false };
    throw error;
  }
}
