// A Redis Cluster for one test file: three masters sharing the slots and a replica of the master
// that serves the product's hash tag, all real redis-server processes on free ports.
import { randomUUID } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { KEY_TAG } from '../../src/redis/key-space.js';
import { findFreePort } from '../../src/redis/private-redis.js';
import {
  startTestRedis,
  type TestRedis,
  type TestRedisTransport,
  testClientTls,
  transportQuery,
} from './redis-server.js';
import { until } from './until.js';

export interface TestCluster {
  /**
   * `redis+cluster://127.0.0.1:<port>,...` naming every master; over TLS,
   * `rediss+cluster://...?ca=...` (and the client certificate when the nodes require one).
   */
  url: string;
  /** The port of the node serving the product's keys now. */
  tagMasterPort(): Promise<number>;
  /** The replica of that node (the master after a failover). */
  replica: TestRedis;
  /** Resolves once the replica holds every write its master has acknowledged so far. */
  replicated(): Promise<void>;
  /** Promotes the replica (CLUSTER FAILOVER), and resolves once the cluster agrees. */
  failover(): Promise<void>;
  /** Stops the tag's master and its replica: the other masters still answer, that slot not. */
  stopTagNodes(): Promise<void>;
  stop(): Promise<void>;
}

const SLOTS = 16_384;
const MASTERS = 3;

interface Node {
  server: TestRedis;
  admin: Redis;
  id: string;
  busPort: number;
  configFile: string;
}

/**
 * A cluster node: cluster mode on, its bus on a free port of its own (not port + 10000). Over
 * TLS, the bus and replication use TLS as well, and clients connect on the TLS port only.
 */
async function startNode(transport: TestRedisTransport): Promise<Node> {
  // Cluster nodes write their state file to the working directory (the temp dir).
  const configFile = `billing-cluster-${randomUUID()}.conf`;
  const busPort = await findFreePort();
  const server = await startTestRedis(
    [
      '--cluster-enabled',
      'yes',
      '--cluster-config-file',
      configFile,
      '--cluster-port',
      String(busPort),
      '--cluster-node-timeout',
      '2000',
      ...(transport === 'plain' ? [] : ['--tls-cluster', 'yes', '--tls-replication', 'yes']),
    ],
    transport,
  );
  const admin = new Redis({
    port: server.port,
    lazyConnect: true,
    retryStrategy: () => 100,
    ...(transport === 'plain' ? {} : { tls: testClientTls() }),
  });
  admin.on('error', () => {});
  const id = (await admin.call('CLUSTER', 'MYID')) as string;
  return { server, admin, id, busPort, configFile };
}

export async function startTestCluster(
  transport: TestRedisTransport = 'plain',
): Promise<TestCluster> {
  const masters = await Promise.all(Array.from({ length: MASTERS }, () => startNode(transport)));
  const replicaNode = await startNode(transport);
  const nodes = [...masters, replicaNode];
  let formed: { tagSlot: number; tagMaster: Node };
  try {
    formed = await formCluster(masters, replicaNode);
  } catch (error) {
    // Nothing else would stop the servers of a cluster that never formed.
    await stopNodes(nodes);
    throw error;
  }
  const { tagSlot, tagMaster } = formed;
  const [first] = masters as [Node];
  /** The port of the master serving the tag's slot, as `node` sees the cluster. */
  const tagMasterPort = async (node: Node = first) => {
    const slots = (await node.admin.call('CLUSTER', 'SLOTS')) as [
      number,
      number,
      [string, number],
    ][];
    const owner = slots.find(([from, to]) => from <= tagSlot && tagSlot <= to);
    return owner?.[2][1] ?? 0;
  };
  const hosts = masters.map((m) => `127.0.0.1:${m.server.port}`).join(',');
  return {
    url: `${transport === 'plain' ? 'redis' : 'rediss'}+cluster://${hosts}${transportQuery(transport)}`,
    tagMasterPort: () => tagMasterPort(),
    replica: replicaNode.server,
    async replicated() {
      await tagMaster.admin.call('WAIT', '1', '10000');
    },
    async failover() {
      await replicaNode.admin.call('CLUSTER', 'FAILOVER');
      // Every node must agree, or a client may be sent back to the old master.
      for (const node of nodes) {
        await until(
          async () => (await tagMasterPort(node)) === replicaNode.server.port,
          `node ${node.server.port} to see the failover`,
        );
      }
    },
    async stopTagNodes() {
      await tagMaster.server.stop();
      await replicaNode.server.stop();
    },
    async stop() {
      await stopNodes(nodes);
    },
  };
}

/**
 * Shares the slots among the masters, joins every node, and makes the replica follow the master
 * of the tag's slot; resolves once the cluster is ok and the replica in sync.
 */
async function formCluster(masters: Node[], replicaNode: Node) {
  const nodes = [...masters, replicaNode];
  const per = Math.ceil(SLOTS / MASTERS);
  await Promise.all(
    masters.map((m, i) =>
      m.admin.call('CLUSTER', 'ADDSLOTSRANGE', i * per, Math.min(SLOTS, (i + 1) * per) - 1),
    ),
  );
  const [first] = masters as [Node];
  for (const node of nodes.slice(1)) {
    await first.admin.call('CLUSTER', 'MEET', '127.0.0.1', node.server.port, node.busPort);
  }
  const tagSlot = (await first.admin.call('CLUSTER', 'KEYSLOT', KEY_TAG)) as number;
  const tagMaster = masters[Math.floor(tagSlot / per)] as Node;
  // A replica may only follow a master it knows.
  await until(
    async () => String(await replicaNode.admin.call('CLUSTER', 'NODES')).includes(tagMaster.id),
    'the replica to learn of its master',
  );
  await replicaNode.admin.call('CLUSTER', 'REPLICATE', tagMaster.id);
  for (const node of nodes) {
    await until(
      async () => String(await node.admin.call('CLUSTER', 'INFO')).includes('cluster_state:ok'),
      `node ${node.server.port} to see the cluster ok`,
    );
  }
  await until(
    async () => (await replicaNode.admin.info('replication')).includes('master_link_status:up'),
    'the replica to sync',
  );
  return { tagSlot, tagMaster };
}

async function stopNodes(nodes: readonly Node[]): Promise<void> {
  for (const node of nodes) {
    node.admin.disconnect();
    await node.server.stop();
    await rm(join(tmpdir(), node.configFile), { force: true });
  }
}
