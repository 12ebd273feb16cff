// Starts a throwaway redis-server on a free port for one integration test file.

import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll } from 'vitest';
import { connectRedis, type RedisClient } from '../../src/redis/connection.js';
import { findFreePort, untilRedisReady } from '../../src/redis/private-redis.js';

export interface TestRedis {
  url: string;
  port: number;
  stop(): Promise<void>;
  /** Starts it again on the same port after `stop` (an empty database: no persistence). */
  restart(): Promise<void>;
  /** Stops it answering (SIGSTOP), connections open: a Redis that hangs. */
  pause(): void;
  resume(): void;
}

/** The test-only certificates (tls/generate.sh): a CA, the servers' and a client's. */
export const TEST_TLS = {
  ca: fileURLToPath(new URL('tls/ca.pem', import.meta.url)),
  serverCert: fileURLToPath(new URL('tls/server.pem', import.meta.url)),
  serverKey: fileURLToPath(new URL('tls/server.key', import.meta.url)),
  /** For the name localhost only: a server reached by its address fails verification. */
  localhostCert: fileURLToPath(new URL('tls/localhost.pem', import.meta.url)),
  localhostKey: fileURLToPath(new URL('tls/localhost.key', import.meta.url)),
  clientCert: fileURLToPath(new URL('tls/client.pem', import.meta.url)),
  clientKey: fileURLToPath(new URL('tls/client.key', import.meta.url)),
  /** The client's key encrypted, and the file holding its passphrase. */
  clientKeyEncrypted: fileURLToPath(new URL('tls/client-encrypted.key', import.meta.url)),
  clientKeyPassphrase: fileURLToPath(new URL('tls/client-key.pass', import.meta.url)),
};

/** The helpers' own connections to TLS servers: the test CA, and the client certificate. */
export function testClientTls() {
  return {
    ca: readFileSync(TEST_TLS.ca),
    cert: readFileSync(TEST_TLS.clientCert),
    key: readFileSync(TEST_TLS.clientKey),
  };
}

/**
 * How a test server takes connections: plain, TLS only (`tls`), or TLS with a client certificate
 * required (`tls-client-cert`). A TLS server's certificate is for 127.0.0.1, from TEST_TLS.ca.
 */
export type TestRedisTransport = 'plain' | 'tls' | 'tls-client-cert';

/** `?ca=...&cert=...&key=...` naming the given files, percent-encoded; empty for none. */
export function tlsQuery(files: {
  ca?: string;
  cert?: string;
  key?: string;
  'passphrase-file'?: string;
}): string {
  const pairs = Object.entries(files).map(([name, path]) => `${name}=${encodeURIComponent(path)}`);
  return pairs.length > 0 ? `?${pairs.join('&')}` : '';
}

/** The query a client URL needs for `transport`: the test CA, and the client certificate. */
export function transportQuery(transport: TestRedisTransport): string {
  if (transport === 'plain') return '';
  const client = { cert: TEST_TLS.clientCert, key: TEST_TLS.clientKey };
  return tlsQuery({ ca: TEST_TLS.ca, ...(transport === 'tls-client-cert' ? client : {}) });
}

/** The redis-server options that make `port` a TLS port (and open no plain one). */
export function tlsServerArgs(port: number, transport: TestRedisTransport): string[] {
  if (transport === 'plain') return [];
  return [
    '--port',
    '0',
    '--tls-port',
    String(port),
    '--tls-cert-file',
    TEST_TLS.serverCert,
    '--tls-key-file',
    TEST_TLS.serverKey,
    '--tls-ca-cert-file',
    TEST_TLS.ca,
    '--tls-auth-clients',
    transport === 'tls-client-cert' ? 'yes' : 'no',
  ];
}

/**
 * A redis-server without persistence on 127.0.0.1, ready when this resolves; `args` are more
 * of its command-line options (`--replicaof HOST PORT`). `url` trusts the test CA when the
 * server speaks TLS, and sends the client certificate when it asks for one.
 */
export async function startTestRedis(
  args: readonly string[] = [],
  transport: TestRedisTransport = 'plain',
): Promise<TestRedis> {
  const port = await findFreePort();
  const serverArgs = [...tlsServerArgs(port, transport), ...args];
  let child = await runRedisServer(port, serverArgs);
  const scheme = transport === 'plain' ? 'redis' : 'rediss';
  return {
    url: `${scheme}://127.0.0.1:${port}${transportQuery(transport)}`,
    port,
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = once(child, 'exit');
      child.kill('SIGKILL');
      await exited;
    },
    restart: async () => {
      child = await runRedisServer(port, serverArgs);
    },
    pause: () => child.kill('SIGSTOP'),
    resume: () => child.kill('SIGCONT'),
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
