// The workers' connections against a real redis-server: commands sent in one burst of callbacks
// leave in one socket write, also after a reconnect; BullMQ's worker connections are left alone.
import { setTimeout as delay } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type ConnectionRole,
  connectRedis,
  isRedisUnavailable,
  REQUEST_COMMAND_TIMEOUT_MS,
} from '../../../src/redis/connection.js';
import { startTestRedis, type TestRedis } from '../../helpers/redis-server.js';

const BURST = 200;

let server: TestRedis;
let admin: Redis;
const clients: Redis[] = [];

beforeAll(async () => {
  server = await startTestRedis();
  admin = (await connectRedis(server.url, 'worker')) as Redis;
});

afterAll(async () => {
  for (const client of [...clients, admin]) client.disconnect();
  await server?.stop();
});

async function open(role: ConnectionRole): Promise<Redis> {
  // One server: a Redis, not a Cluster, whose socket the tests look into.
  const redis = (await connectRedis(server.url, role)) as Redis;
  clients.push(redis);
  return redis;
}

type Writes = { _write: (...a: unknown[]) => void; _writev?: (...a: unknown[]) => void };

/**
 * How many writes the socket handed to the operating system for a burst of BURST commands sent
 * in one go: each call of the stream's `_write` or `_writev` is one. (Redis' own read counter
 * cannot tell: the kernel joins small writes that arrive faster than Redis reads them.)
 */
async function writesForBurst(redis: Redis): Promise<number> {
  const socket = redis.stream as unknown as Writes;
  let writes = 0;
  const { _write: write, _writev: writev } = socket;
  socket._write = (...args) => {
    writes += 1;
    write.apply(socket, args);
  };
  if (writev) {
    socket._writev = (...args) => {
      writes += 1;
      writev.apply(socket, args);
    };
  }
  try {
    const replies = await Promise.all(
      Array.from({ length: BURST }, (_, i) => redis.echo(`burst-${i}`)),
    );
    expect(replies).toEqual(Array.from({ length: BURST }, (_, i) => `burst-${i}`));
    return writes;
  } finally {
    socket._write = write;
    if (writev) socket._writev = writev;
  }
}

describe('connectRedis', () => {
  it.each(['store', 'request'] as const)(
    'sends a burst of commands on a %s connection in one write',
    async (role) => {
      const redis = await open(role);
      expect(await writesForBurst(redis)).toBe(1);
    },
  );

  it('keeps coalescing after the connection is dropped and comes back', async () => {
    const redis = await open('store');
    const id = await redis.client('ID');
    const reconnected = new Promise((resolve) => redis.once('ready', resolve));
    await admin.client('KILL', 'ID', String(id));
    await reconnected;
    expect(await writesForBurst(redis)).toBe(1);
  });

  it('takes a Redis busy in a long script for unavailable: retry later, not a bug', async () => {
    const redis = await open('request');
    const admin = await open('request');
    const limit = await admin.config('GET', 'busy-reply-threshold');
    await admin.config('SET', 'busy-reply-threshold', '100');
    // A script that runs for a second: every other command meanwhile is answered BUSY.
    const spin =
      'local t = redis.call("TIME"); local s = t[1] * 1e6 + t[2]; repeat t = redis.call("TIME") until t[1] * 1e6 + t[2] - s > 1e6';
    const running = admin.eval(spin, 0).catch(() => undefined);
    try {
      await delay(300);
      const error = await redis.ping().catch((e: unknown) => e);
      expect((error as Error).message).toMatch(/^BUSY /);
      expect(isRedisUnavailable(error)).toBe(true);
    } finally {
      await running;
      await admin.config('SET', 'busy-reply-threshold', String(limit[1]));
    }
  });

  it('gives up on a request-path command after 5 seconds when Redis hangs, as unavailable', async () => {
    const redis = await open('request');
    server.pause();
    try {
      const started = Date.now();
      const error = await redis.ping().catch((e: unknown) => e);
      expect(Date.now() - started).toBeGreaterThanOrEqual(REQUEST_COMMAND_TIMEOUT_MS - 100);
      expect(isRedisUnavailable(error)).toBe(true);
    } finally {
      server.resume();
    }
    expect(await redis.ping()).toBe('PONG');
  });

  it('leaves the worker connections that BullMQ drives as they are', async () => {
    const redis = await open('worker');
    expect(await writesForBurst(redis)).toBeGreaterThan(BURST / 2);
  });

  it("works in the URL's database", async () => {
    const redis = (await connectRedis(`${server.url}/3`, 'request')) as Redis;
    try {
      await redis.set('in-db-3', '1');
      expect(await admin.get('in-db-3')).toBeNull();
    } finally {
      await redis.del('in-db-3');
      redis.disconnect();
    }
  });

  it('refuses a database the server does not have, instead of writing to database 0', async () => {
    await expect(connectRedis(`${server.url}/99999`, 'request')).rejects.toThrow(
      "REDIS_URL names database 99999, which this Redis does not have (ERR DB index is out of range): see its 'databases' setting",
    );
  });
});
