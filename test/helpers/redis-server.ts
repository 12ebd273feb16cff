// Starts a throwaway redis-server on a free port for one integration test file.

import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { tmpdir } from 'node:os';
import { afterAll, beforeAll } from 'vitest';
import { connectRedis, type RedisClient } from '../../src/redis/connection.js';
import { findFreePort, untilRedisReady } from '../../src/redis/private-redis.js';

export interface TestRedis {
  url: string;
  port: number;
  stop(): Promise<void>;
  /** Starts it again on the same port after `stop` (an empty database: no persistence). */
  restart(): Promise<void>;
}

/**
 * A redis-server without persistence on 127.0.0.1, ready when this resolves; `args` are more
 * of its command-line options (`--replicaof HOST PORT`).
 */
export async function startTestRedis(args: readonly string[] = []): Promise<TestRedis> {
  const port = await findFreePort();
  let child = await runRedisServer(port, args);
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = once(child, 'exit');
      child.kill('SIGKILL');
      await exited;
    },
    restart: async () => {
      child = await runRedisServer(port, args);
    },
  };
}

/**
 * A redis-server for one test file and a connection to it in the workers' role (the one BullMQ
 * and the chain store take), opened before the file's tests and closed after them. Read
 * `redis` from the returned holder inside hooks and tests, once it is open.
 */
export function useTestRedisConnection(): { readonly redis: RedisClient } {
  let server: TestRedis | undefined;
  let redis: RedisClient | undefined;
  beforeAll(async () => {
    server = await startTestRedis();
    redis = await connectRedis(server.url, 'worker');
  });
  afterAll(async () => {
    await redis?.quit();
    await server?.stop();
  });
  return {
    get redis(): RedisClient {
      if (!redis) throw new Error('the test Redis connection opens in beforeAll');
      return redis;
    },
  };
}

async function runRedisServer(port: number, args: readonly string[]): Promise<ChildProcess> {
  // In the temporary directory: a replica writes the snapshot its master sends it to its working
  // directory (`--save ''` or not), which must not be the checkout.
  const child = spawn(
    'redis-server',
    [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--save',
      '',
      '--appendonly',
      'no',
      '--dbfilename',
      `test-redis-${port}.rdb`,
      ...args,
    ],
    { stdio: ['ignore', 'pipe', 'pipe'], cwd: tmpdir() },
  );
  await untilRedisReady(
    child,
    (reason, output, cause) =>
      new Error(`test redis-server on port ${port} ${reason}:\n${output}`, { cause }),
  );
  // Nobody reads the logs after start, but a full pipe would block the server.
  child.stdout?.resume();
  child.stderr?.resume();
  return child;
}
