// REDIS_URL=redis+sentinel://...: every connection role finds the master through Redis Sentinel,
// and BullMQ jobs and chain writes carry on on the new master after a failover. The same again
// with rediss+sentinel://, every server and the sentinel speaking only TLS and requiring a
// client certificate.
import { Queue, Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ConnectionRole, connectRedis } from '../../../src/redis/connection.js';
import { findFreePort } from '../../../src/redis/private-redis.js';
import { startTestSentinelGroup, type TestSentinelGroup } from '../../helpers/redis-sentinel.js';
import type { TestRedisTransport } from '../../helpers/redis-server.js';

describe.each<TestRedisTransport>(['plain', 'tls-client-cert'])('over %s', (transport) => {
  const queueName = `sentinel-test-${transport}`;
  let group: TestSentinelGroup;
  const clients: Redis[] = [];
  let queue: Queue;
  let worker: Worker;
  const processed: string[] = [];

  beforeAll(async () => {
    group = await startTestSentinelGroup(transport);
    const [workerRedis, storeRedis] = await Promise.all([
      connectSentinel('worker'),
      connectSentinel('store'),
    ]);
    clients.push(workerRedis, storeRedis);
    queue = new Queue(queueName, { connection: storeRedis });
    worker = new Worker(
      queueName,
      async (job) => {
        processed.push(job.name);
      },
      { connection: workerRedis },
    );
  }, 60_000);

  afterAll(async () => {
    await worker?.close();
    await queue?.close();
    for (const client of clients) client.disconnect();
    await group?.stop();
  });

  /** Through Sentinel the client is a Redis (not a Cluster), whose socket the tests look into. */
  async function connectSentinel(role: ConnectionRole): Promise<Redis> {
    return (await connectRedis(group.url, role)) as Redis;
  }

  async function processedSoon(name: string) {
    await expect.poll(() => processed.includes(name), { timeout: 20_000 }).toBe(true);
  }

  describe(`a Redis behind Sentinel (${transport})`, () => {
    it('fails the start with the reason when no sentinel answers, or none knows the master', async () => {
      const port = await findFreePort();
      await expect(
        connectRedis(`redis+sentinel://127.0.0.1:${port}/billing`, 'worker'),
      ).rejects.toThrow(/All sentinels are unreachable/);
      const wrongName = group.url.replace('/billing', '/no-such-master');
      await expect(connectRedis(wrongName, 'request')).rejects.toThrow(
        /No such master with that name/,
      );
    });

    // Only over TLS (a plain group has nothing to say about it).
    if (transport !== 'plain') {
      it('says why TLS failed, which the sentinel client does not', async () => {
        const withoutCa = group.url.replace(/\?.*$/, '');
        await expect(connectRedis(withoutCa, 'request')).rejects.toThrow(
          /All sentinels are unreachable.*\(TLS to 127\.0\.0\.1:\d+: self-signed certificate in certificate chain\)/,
        );
      });
    }

    it('serves every connection role from the master the sentinel names', async () => {
      const request = await connectSentinel('request');
      clients.push(request);
      await request.set('billing:sentinel-test', 'before');
      expect(request.stream.remotePort).toBe(group.master.port);
      await queue.add('before failover', {});
      await processedSoon('before failover');
    });

    it('moves every connection to the new master after a failover, and jobs go on', async () => {
      // Writes the old master acknowledged but had not replicated would be lost (Redis replicates
      // asynchronously): the test waits for them, as min-replicas-to-write would in production.
      await group.replicated();
      await group.failover();
      // Each connection follows the sentinel's announcement to the new master.
      await expect
        .poll(() => clients.map((c) => c.stream?.remotePort), { timeout: 20_000 })
        .toEqual(clients.map(() => group.replica.port));

      await queue.add('after failover', {});
      await processedSoon('after failover');
      const request = clients.at(-1) as Redis;
      await request.set('billing:sentinel-test', 'after');
      expect(await request.get('billing:sentinel-test')).toBe('after');
      // The job completed before the failover is on the new master, and the new one beside it.
      await expect
        .poll(() => queue.getJobCounts('completed', 'active', 'wait', 'failed'), {
          timeout: 20_000,
        })
        .toEqual({ completed: 2, active: 0, wait: 0, failed: 0 });
    }, 60_000);
  });
});
