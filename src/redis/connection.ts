// Redis connections: request-path clients fail fast, worker clients wait for Redis to return.
import type { Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ConnectionOptions } from 'node:tls';
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import { READINESS_KEY } from './key-space.js';
import { parseRedisTarget, type RedisTarget } from './target.js';
import { tlsDiagnosis, tlsOptions } from './tls.js';

/** A connection to one server (directly or through Sentinel) or to a Redis Cluster. */
export type RedisClient = Redis | Cluster;

/**
 * - request: the HTTP request path; fails fast while Redis is down.
 * - worker: BullMQ workers (they require `maxRetriesPerRequest: null`).
 * - store: the workers' own reads and writes (chain store, producer queues); waits for Redis
 *   like a worker, on a connection of its own so BullMQ's traffic does not queue behind it.
 */
export type ConnectionRole = 'request' | 'worker' | 'store';

/**
 * Opens a connection to `url` (one server, the master behind Redis Sentinel, or a Redis Cluster:
 * target.ts) and waits until it is ready. A request-path connection has no offline queue
 * and one retry, so a request fails in milliseconds with 503 while Redis is down instead of
 * hanging; BullMQ workers require `maxRetriesPerRequest: null` and ride out outages. A connection
 * whose first connect fails is closed, so it does not keep reconnecting in the background.
 */
export async function connectRedis(url: string, role: ConnectionRole): Promise<RedisClient> {
  const target = parseRedisTarget(url);
  // Sentinels and cluster nodes get a few tries, so a wrong URL or master name fails the start
  // with the reason instead of hanging, while a moment's unavailability does not; one server
  // fails at once.
  const tries = target.kind === 'server' ? 1 : TRIES_AT_START;
  // Read once: a missing file is not worth another try.
  const tls = target.tls ? tlsOptions(target.tls) : undefined;
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await connectOnce(target, tls, role);
    } catch (error) {
      // TLS that does not work now will not work on the next try.
      if (error instanceof TlsNotWorking) throw error;
      if (attempt < tries) {
        await sleep(retryDelayMs(attempt));
        continue;
      }
      const failure = tls === undefined ? undefined : await tlsDiagnosis(target, tls);
      throw withReason(error, failure);
    }
  }
}

/**
 * How often a TLS Cluster's first connect, while it waits, asks whether TLS is what stops it: a
 * client that learned the slots but cannot verify the nodes they name (a certificate for another
 * name) would otherwise retry forever without a word. A cluster that is only not ready yet
 * (slots not covered, a failover) is waited for, as without TLS.
 */
const TLS_CHECK_INTERVAL_MS = 10_000;

async function connectOnce(
  target: RedisTarget,
  tls: ConnectionOptions | undefined,
  role: ConnectionRole,
): Promise<RedisClient> {
  let connected = false;
  const redis = openClient(target, tls, role, () => connected);
  // BullMQ's own connections stay as BullMQ expects them (and as the benchmark's baseline uses).
  if (role !== 'worker' && redis instanceof Redis) coalesceWrites(redis);
  // Without a listener, ioredis prints every reconnection error; the callers observe failures
  // through the commands that fail. Before the first connect, the last one is the reason.
  let reason: Error | undefined;
  redis.on('error', (error: Error) => {
    if (!connected) reason = error;
  });
  const waiting = new AbortController();
  try {
    await Promise.race([
      redis.connect(),
      ...(tls && redis instanceof Cluster ? [failOnTls(target, tls, waiting.signal)] : []),
    ]);
    connected = true;
  } catch (error) {
    redis.disconnect();
    throw withReason(error, reason);
  } finally {
    waiting.abort();
  }
  await requireDatabase(redis);
  return redis;
}

/**
 * Fails unless the connection is on the database its URL names. ioredis selects it after
 * connecting and, when the server has no such database, reports the refusal as an error event
 * and goes on in database 0: every key would land beside another deployment's.
 */
async function requireDatabase(redis: RedisClient): Promise<void> {
  if (!(redis instanceof Redis)) return;
  const db = Number(redis.options.db ?? 0);
  if (db === 0) return;
  try {
    await redis.select(db);
  } catch (error) {
    redis.disconnect();
    const reason = error instanceof Error ? error.message : String(error);
    throw new Error(
      `REDIS_URL names database ${db}, which this Redis does not have (${reason}): see its 'databases' setting`,
    );
  }
}

/** Rejects once a TLS check finds the reason a Cluster's first connect waits; never otherwise. */
async function failOnTls(
  target: RedisTarget,
  tls: ConnectionOptions,
  signal: AbortSignal,
): Promise<never> {
  const started = Date.now();
  for (;;) {
    await sleep(TLS_CHECK_INTERVAL_MS, undefined, { signal }).catch(() => {});
    if (signal.aborted) return new Promise<never>(() => {});
    const failure = await tlsDiagnosis(target, tls);
    if (failure !== undefined && !signal.aborted) {
      const seconds = Math.round((Date.now() - started) / 1000);
      throw new TlsNotWorking(`the cluster was not ready after ${seconds} s`, failure);
    }
  }
}

/** A first connect that waits because TLS fails, with the reason. */
class TlsNotWorking extends Error {
  constructor(waited: string, reason: Error) {
    super(`${waited} (${reason.message})`, { cause: reason });
  }
}

/**
 * A failed first connect with the reason behind it: a TLS handshake that fails (an unknown
 * authority, a missing client certificate) only rejects with "Connection is closed.". The
 * reason becomes the cause, with its code (`SELF_SIGNED_CERT_IN_CHAIN`).
 */
function withReason(error: unknown, reason: Error | undefined): unknown {
  if (!(error instanceof Error) || !reason || error.message.includes(reason.message)) return error;
  return new Error(`${error.message} (${reason.message})`, { cause: reason });
}

/**
 * Whether Redis takes writes where the product's keys live. On a Cluster a keyless PING goes to
 * any node, so this names a key: the node serving the tag's slot answers. It deletes a key
 * never written, a write that changes nothing (not even the replication stream or the AOF): a
 * replica refuses it (READONLY) as it would every job's, where a read would pass, as on a
 * master demoted by a failover that a plain URL does not follow.
 */
export async function takesWritesForKeys(redis: RedisClient): Promise<boolean> {
  try {
    await redis.del(READINESS_KEY);
    return true;
  } catch {
    return false;
  }
}

function openClient(
  target: RedisTarget,
  tls: ConnectionOptions | undefined,
  role: ConnectionRole,
  connected: () => boolean,
): RedisClient {
  const failFast = role === 'request';
  // A Redis that accepts connections but does not answer (stopped, swapping, a long script)
  // would hold a request for as long as the client waits: it gets 503 after this instead.
  const options: RedisOptions = failFast
    ? {
        lazyConnect: true,
        maxRetriesPerRequest: 1,
        enableOfflineQueue: false,
        commandTimeout: REQUEST_COMMAND_TIMEOUT_MS,
      }
    : { lazyConnect: true, maxRetriesPerRequest: null };
  switch (target.kind) {
    case 'server':
      return new Redis(target.url, tls ? { ...options, tls } : options);
    case 'sentinel':
      return new Redis({
        ...target.options,
        ...options,
        sentinelRetryStrategy: onceConnectedRetryForever(connected),
        // The same TLS to the sentinels and to the master they name.
        ...(tls ? { tls, sentinelTLS: tls, enableTLSForSentinelMode: true } : {}),
      });
    case 'cluster':
      return new Cluster(target.nodes, {
        lazyConnect: true,
        enableOfflineQueue: !failFast,
        // Once connected, reconnect for as long as it takes (connectRedis retries the first).
        clusterRetryStrategy: retryDelayMs,
        // With TLS, a node's certificate names the host the cluster announces: connect to that
        // name, not to an address looked up for it, so the name is what gets verified.
        ...(tls ? { dnsLookup: (host, found) => found(null, host) } : {}),
        redisOptions: {
          ...target.credentials,
          maxRetriesPerRequest: options.maxRetriesPerRequest ?? null,
          ...(options.commandTimeout ? { commandTimeout: options.commandTimeout } : {}),
          ...(tls ? { tls } : {}),
        },
      });
  }
}

/** How many times the sentinels or cluster nodes are tried before the first connect fails. */
const TRIES_AT_START = 3;

function retryDelayMs(times: number): number {
  return Math.min(times * 200, 2000);
}

/**
 * When to ask the sentinels again (ms), or null to give up: at once before the first connect
 * (connectRedis tries again), for as long as it takes after it, as a failover or a restart of
 * the sentinels may.
 */
function onceConnectedRetryForever(connected: () => boolean) {
  return (times: number): number | null => (connected() ? retryDelayMs(times) : null);
}

/** How long a request-path command may wait for Redis's answer (ms). */
export const REQUEST_COMMAND_TIMEOUT_MS = 5_000;

/**
 * How ioredis and Redis word "cannot be reached or cannot write now" (out of memory too), at
 * the start of the message: anchored, so an error that only quotes such a word (a provider's
 * page saying "Loading...") is not taken for one.
 */
const UNAVAILABLE =
  /^(Connection is closed|Stream isn't writeable|(connect |read |write )?(ECONNREFUSED|ECONNRESET|ETIMEDOUT|EPIPE)\b|Reached the max retries per request|LOADING |READONLY |CLUSTERDOWN |TRYAGAIN |MASTERDOWN |Cluster isn't ready|Cluster is ended|Too many Cluster redirections|None of startup nodes|Failed to refresh slots|MISCONF |NOREPLICAS |OOM |BUSY )/;
/** A socket's own failure (a Node system error's code), whatever its message. */
const UNAVAILABLE_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE']);

/** Whether a command gave up waiting for Redis's answer: Redis may have run it all the same. */
export function isRedisTimeout(error: unknown): boolean {
  return error instanceof Error && /^Command timed out/.test(error.message);
}

/** Whether an error means "Redis cannot be reached or cannot write now" (retry later: 503). */
export function isRedisUnavailable(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as NodeJS.ErrnoException).code ?? '';
  return (
    error.name === 'MaxRetriesPerRequestError' ||
    isRedisTimeout(error) ||
    UNAVAILABLE_CODES.has(code) ||
    UNAVAILABLE.test(error.message)
  );
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
