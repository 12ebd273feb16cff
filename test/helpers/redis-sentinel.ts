// A Redis Sentinel group for one test file: a master, one replica and one sentinel watching them,
// all real redis-server processes on free ports.
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { findFreePort } from '../../src/redis/private-redis.js';
import {
  startTestRedis,
  type TestRedis,
  type TestRedisTransport,
  testClientTls,
  tlsServerArgs,
  transportQuery,
} from './redis-server.js';
import { until } from './until.js';

export interface TestSentinelGroup {
  /**
   * `redis+sentinel://127.0.0.1:<sentinel port>/<master name>`; over TLS
   * `rediss+sentinel://...?ca=...` (and the client certificate when the servers require one).
   */
  url: string;
  master: TestRedis;
  replica: TestRedis;
  /** The port of the server the sentinel names as master now. */
  masterPort(): Promise<number>;
  /** Resolves once the replica holds every write the master has acknowledged so far. */
  replicated(): Promise<void>;
  /** Makes the sentinel promote the replica, and resolves once it names it as master. */
  failover(): Promise<void>;
  stop(): Promise<void>;
}

const MASTER_NAME = 'billing';

/**
 * The group, every server and the sentinel speaking `transport`: over TLS, replication and the
 * sentinel's own connections to the servers use TLS too.
 */
export async function startTestSentinelGroup(
  transport: TestRedisTransport = 'plain',
): Promise<TestSentinelGroup> {
  const tls = transport !== 'plain';
  const replication = tls ? ['--tls-replication', 'yes'] : [];
  const master = await startTestRedis(replication, transport);
  const replica = await startTestRedis(
    ['--replicaof', '127.0.0.1', String(master.port), ...replication],
    transport,
  );
  const dir = await mkdtemp(join(tmpdir(), 'billing-sentinel-'));
  const port = await findFreePort();
  // Sentinel rewrites its configuration file, so it gets one of its own: the servers' TLS
  // options, one per line (`--tls-port 1` becomes `tls-port 1`).
  const config = join(dir, 'sentinel.conf');
  const tlsLines: string[] = [];
  const tlsArgs = [...tlsServerArgs(port, transport), ...replication];
  for (let i = 0; i < tlsArgs.length; i += 2) {
    tlsLines.push(`${tlsArgs[i]?.slice(2)} ${tlsArgs[i + 1]}`);
  }
  await writeFile(
    config,
    [
      `port ${port}`,
      ...tlsLines,
      'bind 127.0.0.1',
      `sentinel monitor ${MASTER_NAME} 127.0.0.1 ${master.port} 1`,
      `sentinel down-after-milliseconds ${MASTER_NAME} 1000`,
      `sentinel failover-timeout ${MASTER_NAME} 10000`,
      '',
    ].join('\n'),
  );
  const sentinel: ChildProcess = spawn('redis-server', [config, '--sentinel'], {
    stdio: ['ignore', 'ignore', 'ignore'],
  });
  const adminTls = tls ? { tls: testClientTls() } : {};
  const admin = new Redis({ port, lazyConnect: true, retryStrategy: () => 100, ...adminTls });
  admin.on('error', () => {});
  const masterPort = async () => {
    const [, masterPort] = (await admin.call(
      'SENTINEL',
      'GET-MASTER-ADDR-BY-NAME',
      MASTER_NAME,
    )) as [string, string];
    return Number(masterPort);
  };
  const stop = async () => {
    admin.disconnect();
    const exited = once(sentinel, 'exit');
    sentinel.kill('SIGKILL');
    await exited;
    await replica.stop();
    await master.stop();
    await rm(dir, { recursive: true, force: true });
  };
  try {
    await until(async () => (await masterPort()) === master.port, 'the sentinel to see its master');
    // A failover needs the replica in sync and known to the sentinel.
    const replicaAdmin = new Redis({ port: replica.port, lazyConnect: true, ...adminTls });
    await until(
      async () => (await replicaAdmin.info('replication')).includes('master_link_status:up'),
      'the replica to sync',
    );
    replicaAdmin.disconnect();
    await until(async () => {
      const replicas = (await admin.call('SENTINEL', 'REPLICAS', MASTER_NAME)) as string[][];
      return replicas.some((r) => r.includes(String(replica.port)) && r.includes('slave'));
    }, 'the sentinel to see the replica');
  } catch (error) {
    // Nothing else would stop the servers of a group that never came up.
    await stop();
    throw error;
  }

  return {
    url: `${tls ? 'rediss' : 'redis'}+sentinel://127.0.0.1:${port}/${MASTER_NAME}${transportQuery(transport)}`,
    master,
    replica,
    masterPort,
    async replicated() {
      // Redis replicates asynchronously: WAIT returns once the replica has every write so far.
      const direct = new Redis({ port: await masterPort(), ...adminTls });
      try {
        await direct.call('WAIT', '1', '10000');
      } finally {
        direct.disconnect();
      }
    },
    async failover() {
      await until(async () => {
        // Refused (NOGOODSLAVE, INPROG) until the replica is ready or while one runs: ask again.
        await admin.call('SENTINEL', 'FAILOVER', MASTER_NAME).catch(() => {});
        return (await masterPort()) === replica.port;
      }, 'the failover');
    },
    stop,
  };
}
