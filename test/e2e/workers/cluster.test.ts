// REDIS_URL=redis+cluster://...: the whole system on a real Redis Cluster (three masters and a
// replica). Every key carries one hash tag, so the scripts that write the core's order and the
// workers' chain together run there; after a failover the workers go on.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { systemClock } from '../../../src/clock.js';
import { connectRedis, takesWritesForKeys } from '../../../src/redis/connection.js';
import { findFreePort } from '../../../src/redis/private-redis.js';
import { startTestCluster, type TestCluster } from '../../helpers/redis-cluster.js';
import { DAY, orderPlaced, type System, startSystem } from '../../helpers/system.js';

let cluster: TestCluster;
let system: System;
let systemClosed = false;

beforeAll(async () => {
  cluster = await startTestCluster();
  system = await startSystem({ redisUrl: cluster.url });
}, 60_000);

afterAll(async () => {
  if (!systemClosed) await system?.close();
  await cluster?.stop();
});

const dueOrder = (order: string) => orderPlaced({ order, startsAt: systemClock.now() - 25 * DAY });

describe('on a Redis Cluster', () => {
  it('fails the start with the reason when no node answers', async () => {
    const port = await findFreePort();
    await expect(connectRedis(`redis+cluster://127.0.0.1:${port}`, 'worker')).rejects.toThrow(
      /None of startup nodes is available/,
    );
  });

  it('places, renews and shows a chain', async () => {
    expect((await system.send('order.placed', dueOrder('CL-1'))).status).toBe(202);
    const chain = await system.waitForChain('CL-1', (c) => c.term.count === 2);
    expect(chain.history.map((h) => h.event)).toEqual([
      'customer.created',
      'order.placed',
      'renewal.ordered',
    ]);
    expect((await system.providerOrder('CL-1.r2'))?.status).toBe('active');
    const renewals = await system.ops('GET', '/ops/renewals?within=60');
    expect(renewals.status).toBe(200);
    const ready = await system.ops('GET', '/readyz');
    expect(ready.body).toMatchObject({ status: 'ready' });
  });

  it('goes on renewing on the promoted replica after a failover, with nothing lost', async () => {
    const before = await system.chain('CL-1');
    // Redis replicates asynchronously: wait for the writes so far, as min-replicas-to-write would.
    await cluster.replicated();
    await cluster.failover();
    expect(await cluster.tagMasterPort()).toBe(cluster.replica.port);

    expect((await system.send('order.placed', dueOrder('CL-2'))).status).toBe(202);
    await system.waitForChain('CL-2', (c) => c.term.count === 2, 30_000);
    expect(await system.chain('CL-1')).toEqual(before);
    const cancelled = await system.ops('POST', '/ops/chains/CL-1/cancel');
    expect(cancelled.status).toBe(200);
    expect((await system.providerOrder('CL-1.r2'))?.status).toBe('cancelled');
  }, 60_000);

  it('is not ready while the node serving the tag is down, though other nodes answer', async () => {
    // The system goes first: it would keep reconnecting to the stopped nodes.
    await system.close();
    systemClosed = true;
    const redis = await connectRedis(cluster.url, 'request');
    try {
      expect(await takesWritesForKeys(redis)).toBe(true);
      await cluster.stopTagNodes();
      // A keyless PING goes to any node, and the others still answer it.
      await expect.poll(() => redis.ping(), { timeout: 10_000 }).toBe('PONG');
      for (let i = 0; i < 3; i += 1) expect(await takesWritesForKeys(redis)).toBe(false);
    } finally {
      redis.disconnect();
    }
  }, 30_000);
});
