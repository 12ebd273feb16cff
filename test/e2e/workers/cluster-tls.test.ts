// REDIS_URL=rediss+cluster://...?ca=&cert=&key=: the whole system on a Redis Cluster whose nodes
// speak only TLS and require a client certificate (bus and replication over TLS as well).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { systemClock } from '../../../src/clock.js';
import { connectRedis } from '../../../src/redis/connection.js';
import { startTestCluster, type TestCluster } from '../../helpers/redis-cluster.js';
import { DAY, orderPlaced, type System, startSystem } from '../../helpers/system.js';

let cluster: TestCluster;
let system: System;

beforeAll(async () => {
  cluster = await startTestCluster('tls-client-cert');
  system = await startSystem({ redisUrl: cluster.url });
}, 60_000);

afterAll(async () => {
  await system?.close();
  await cluster?.stop();
});

const dueOrder = (order: string) => orderPlaced({ order, startsAt: systemClock.now() - 25 * DAY });

describe('on a Redis Cluster over TLS', () => {
  it('places, renews and shows a chain, and is ready', async () => {
    expect(cluster.url).toMatch(/^rediss\+cluster:\/\/.*\?ca=.*&cert=.*&key=/);
    expect((await system.send('order.placed', dueOrder('TLS-1'))).status).toBe(202);
    const chain = await system.waitForChain('TLS-1', (c) => c.term.count === 2);
    expect(chain.history.map((h) => h.event)).toEqual([
      'customer.created',
      'order.placed',
      'renewal.ordered',
    ]);
    expect((await system.providerOrder('TLS-1.r2'))?.status).toBe('active');
    expect((await system.ops('GET', '/readyz')).body).toMatchObject({ status: 'ready' });
  });

  it('goes on renewing after a failover, reconnecting over TLS', async () => {
    await cluster.replicated();
    await cluster.failover();
    expect(await cluster.tagMasterPort()).toBe(cluster.replica.port);
    expect((await system.send('order.placed', dueOrder('TLS-2'))).status).toBe(202);
    await system.waitForChain('TLS-2', (c) => c.term.count === 2, 30_000);
  }, 60_000);

  it('fails the start with the reason when the nodes want a client certificate', async () => {
    const withoutClientCert = cluster.url.replace(/&cert=.*$/, '');
    await expect(connectRedis(withoutClientCert, 'request')).rejects.toThrow(
      /None of startup nodes is available.*\(TLS to 127\.0\.0\.1:\d+: .*(ECONNRESET|certificate required)/,
    );
    const withoutCa = cluster.url.replace(/\?.*$/, '');
    await expect(connectRedis(withoutCa, 'request')).rejects.toThrow(
      /\(TLS to 127\.0\.0\.1:\d+: self-signed certificate in certificate chain\)/,
    );
  }, 30_000);
});
