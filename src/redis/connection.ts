// Redis connections: request-path clients fail fast, worker clients wait for Redis to return.
import type { Socket } from 'node:net';
import { Redis, type RedisOptions } from 'ioredis';
import { parseRedisTarget } from './target.js';

/**
 * - request: the HTTP request path; fails fast while Redis is down.
 * - worker: BullMQ workers (they require `maxRetriesPerRequest: null`).
 * - store: the workers' own reads and writes (chain store, producer queues); waits for Redis
 *   like a worker, on a connection of its own so BullMQ's traffic does not queue behind it.
 */
export type ConnectionRole = 'request' | 'worker' | 'store';

/**
 * Opens a connection to `url` (one server, or the master behind Redis Sentinel: target.ts) and
 * waits until it is ready. A request-path connection has no offline queue
 * and one retry, so a request fails in milliseconds with 503 while Redis is down instead of
 * hanging; BullMQ workers require `maxRetriesPerRequest: null` and ride out outages. A connection
 * whose first connect fails is closed, so it does not keep reconnecting in the background.
 */
export async function connectRedis(url: string, role: ConnectionRole): Promise<Redis> {
  const options: RedisOptions = {
    request: { lazyConnect: true, maxRetriesPerRequest: 1, enableOfflineQueue: false },
    worker: { lazyConnect: true, maxRetriesPerRequest: null },
    store: { lazyConnect: true, maxRetriesPerRequest: null },
  }[role];
  const target = parseRedisTarget(url);
  let connected = false;
  const redis =
    target.kind === 'sentinel'
      ? new Redis({
          ...target.options,
          ...options,
          sentinelRetryStrategy: sentinelRetry(() => connected),
        })
      : new Redis(target.url, options);
  // BullMQ's own connections stay as BullMQ expects them (and as the benchmark's baseline uses).
  if (role !== 'worker') coalesceWrites(redis);
  // Without a listener, ioredis prints every reconnection error; the callers observe failures
  // through the commands that fail.
  redis.on('error', () => {});
  try {
    await redis.connect();
    connected = true;
  } catch (error) {
    redis.disconnect();
    throw error;
  }
  return redis;
}

/** How many times the sentinels are asked for the master before the first connect fails. */
const SENTINEL_TRIES_AT_START = 3;

/**
 * When to ask the sentinels again (ms), or null to give up. At start a few times only, so a
 * wrong URL or master name fails the start with the reason instead of hanging; once connected,
 * for as long as it takes, as a failover or a restart of the sentinels may.
 */
function sentinelRetry(connected: () => boolean) {
  return (times: number): number | null =>
    connected() || times <= SENTINEL_TRIES_AT_START ? Math.min(times * 200, 2000) : null;
}

const UNAVAILABLE =
  /Connection is closed|Stream isn't writeable|ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE|max retries per request|LOADING|READONLY|CLUSTERDOWN|MISCONF|NOREPLICAS/i;

/** Whether an error means "Redis cannot be reached or cannot write now" (retry later: 503). */
export function isRedisUnavailable(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as NodeJS.ErrnoException).code ?? '';
  return error.name === 'MaxRetriesPerRequestError' || UNAVAILABLE.test(`${code} ${error.message}`);
}

/**
 * Commands sent in the same burst of promise callbacks (many jobs going on at once) leave in one
 * socket write instead of one write system call each: the socket is corked at the first write
 * and uncorked once the burst's callbacks ran (process.nextTick runs after them). Unlike
 * ioredis' auto-pipelining, which costs more CPU than it saves here, nothing else changes:
 * each command keeps its own reply and error.
 */
function coalesceWrites(redis: Redis): void {
  redis.on('connect', () => {
    // A new socket on every (re)connect, so each one is wrapped as it comes.
    const socket = redis.stream as Socket;
    const write = socket.write.bind(socket) as (...args: unknown[]) => boolean;
    socket.write = ((...args: unknown[]) => {
      if (socket.writableCorked === 0) {
        socket.cork();
        process.nextTick(() => socket.uncork());
      }
      return write(...args);
    }) as typeof socket.write;
  });
}
