// What operators read: counters, one per order made even when a job records it on a retry, and
// readiness while a shutdown drains.
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { connect } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import { Queue } from 'bullmq';
import { request } from 'undici';
import { describe, expect, it, vi } from 'vitest';
import { renewalJobId } from '../../../jobs/renewals.js';
import { chainIdOf } from '../../../src/chains/keys.js';
import { ChainStore } from '../../../src/chains/store.js';
import { webhookJobId } from '../../../src/intake/webhooks.js';
import { createLogger } from '../../../src/logger.js';
import { createMetrics } from '../../../src/metrics.js';
import { connectRedis } from '../../../src/redis/connection.js';
import { buildApp } from '../../../src/server.js';
import { DAY, jobState, orderPlaced, startSystem, useSystem } from '../../helpers/system.js';

const system = useSystem();

async function counters(name: RegExp): Promise<string[]> {
  const res = await request(`${system.baseUrl}/metrics`);
  return (await res.body.text()).split('\n').filter((line) => name.test(line));
}

const redisBlip = () => Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' });

describe('billing_orders_total', () => {
  it('counts a partial once when recording it failed once and its job recorded it on a retry', async () => {
    const startsAt = system.started.runtime.clock.now() - 10 * DAY;
    await system.send('order.placed', orderPlaced({ order: 'MET-P', licenses: 5, startsAt }));
    await system.waitForChain('MET-P', () => true);
    const save = ChainStore.prototype.save;
    let failed = 0;
    const spy = vi.spyOn(ChainStore.prototype, 'save').mockImplementation(async function (
      this: ChainStore,
      input,
    ) {
      if (failed === 0 && input.history?.some((h) => h.event === 'seats.partial_ordered')) {
        failed += 1;
        throw redisBlip();
      }
      return save.call(this, input);
    });
    try {
      await system.send('seats.changed', { order: 'MET-P', licenses: 8 });
      await system.waitForChain('MET-P', (c) => c.partials.length === 1, 30_000);
    } finally {
      spy.mockRestore();
    }
    expect(failed).toBe(1);
    expect(await counters(/^billing_orders_total\{kind="partial"\}/)).toEqual([
      'billing_orders_total{kind="partial"} 1',
    ]);
  });
});

describe('billing_orders_total{kind="first"}', () => {
  const firstOrders = async () => {
    const [line] = await counters(/^billing_orders_total\{kind="first"\}/);
    return Number(line?.split(' ')[1] ?? 0);
  };

  it('counts a first order once when a write after its record failed and its job was retried', async () => {
    const before = await firstOrders();
    const mark = ChainStore.prototype.markCustomerKnown;
    let failed = 0;
    // The chain and its order are recorded; only the customer's mark after it fails once.
    const spy = vi
      .spyOn(ChainStore.prototype, 'markCustomerKnown')
      .mockImplementation(async function (this: ChainStore, id) {
        if (failed++ === 0) throw redisBlip();
        return mark.call(this, id);
      });
    try {
      await system.send('order.placed', orderPlaced({ order: 'MET-F' }));
      await system.waitForChain('MET-F', () => true);
      // The retry finds the chain placed, and marks the customer known.
      await expect
        .poll(() => new ChainStore(system.started.runtime.redis).isCustomerKnown('cust-MET-F'), {
          timeout: 20_000,
        })
        .toBe(true);
    } finally {
      spy.mockRestore();
    }
    expect(await firstOrders()).toBe(before + 1);
  });
});

describe('billing_renewals_total', () => {
  it("counts a renewal made once when the next term's job failed to be added once", async () => {
    const startsAt = system.started.runtime.clock.now() - 25 * DAY;
    const add = Queue.prototype.add;
    let failed = 0;
    const next = renewalJobId(chainIdOf('MET-R'), 3);
    const spy = vi.spyOn(Queue.prototype, 'add').mockImplementation(async function (
      this: Queue,
      name,
      data,
      opts,
    ) {
      if (failed === 0 && opts?.jobId === next) {
        failed += 1;
        throw redisBlip();
      }
      return add.call(this, name, data, opts);
    });
    try {
      await system.send('order.placed', orderPlaced({ order: 'MET-R', startsAt }));
      await system.waitForChain('MET-R', (c) => c.term.count === 2, 30_000);
      // The retry finds the term recorded and adds the job the first attempt could not.
      await expect
        .poll(() => jobState(system.queue('renewals'), next), {
          timeout: 20_000,
        })
        .toBe('delayed');
    } finally {
      spy.mockRestore();
    }
    expect(failed).toBe(1);
    expect(await counters(/^billing_renewals_total/)).toEqual([
      'billing_renewals_total{variant="marketplace"} 1',
    ]);
  });
});

/**
 * Holds the first save of a new chain until `hold` settles: an order.placed job in flight, to
 * shut down under. `held.count` says once it is held.
 */
function holdingFirstChainSave(hold: () => Promise<unknown>) {
  const save = ChainStore.prototype.save;
  const held = { count: 0 };
  const spy = vi.spyOn(ChainStore.prototype, 'save').mockImplementation(async function (
    this: ChainStore,
    input,
  ) {
    if (input.previous === null && held.count === 0) {
      held.count += 1;
      await hold();
    }
    return save.call(this, input);
  });
  return { held, restore: () => spy.mockRestore() };
}

describe('a shutdown with a job in flight', () => {
  it('lets that job finish and gives back one fetched during the drain, untouched', async () => {
    const draining = await startSystem({ env: { SHUTDOWN_TIMEOUT_SECONDS: '10' } });
    // The first order's first save takes 2 s: a job in flight when the signal comes.
    const { held, restore } = holdingFirstChainSave(() => delay(2_000));
    const orders = draining.queue('orders');
    try {
      expect((await draining.send('order.placed', orderPlaced({ order: 'MET-D1' }))).status).toBe(
        202,
      );
      await vi.waitFor(() => expect(held.count).toBe(1), { timeout: 10_000 });
      const stopping = draining.started.stop();
      await delay(300);
      // Accepted while the workers drain (the HTTP server still serves).
      const during = await draining.send('order.placed', orderPlaced({ order: 'MET-D2' }), {
        id: 'evt-during-drain',
      });
      expect(during.status).toBe(202);
      await stopping;
      const states = await orders.getJobCounts('completed', 'waiting', 'delayed', 'active');
      expect(states).toMatchObject({ completed: 1, active: 0 });
      // Left for another process or the next start: waiting or handed back, never run.
      const left = await orders.getJob(webhookJobId('evt-during-drain'));
      expect(['waiting', 'delayed']).toContain(await left?.getState());
      expect(left?.attemptsMade).toBe(0);
      const redis = await connectRedis(draining.redisUrl, 'request');
      try {
        expect(await new ChainStore(redis).get(chainIdOf('MET-D2'))).toBeNull();
      } finally {
        await redis.quit();
      }
    } finally {
      restore();
      await draining.close();
    }
  });
});

describe('/readyz while a shutdown waits for active jobs', () => {
  it('answers 503: the workers take no more jobs', async () => {
    const draining = await startSystem({ env: { SHUTDOWN_TIMEOUT_SECONDS: '2' } });
    // The order.placed job's first save never returns: an active job to wait for.
    const { held, restore } = holdingFirstChainSave(() => new Promise(() => {}));
    try {
      await draining.send('order.placed', orderPlaced({ order: 'MET-S' }));
      await vi.waitFor(() => expect(held.count).toBe(1), { timeout: 10_000 });
      const stopping = draining.started.stop();
      const ready = await request(`${draining.baseUrl}/readyz`);
      expect(ready.statusCode).toBe(503);
      expect(await ready.body.json()).toMatchObject({ status: 'not ready', workers: false });
      await stopping;
    } finally {
      restore();
      await draining.close();
    }
  });
});

describe('billing_http_requests_total for requests no route saw', () => {
  it('counts those Node refused (431, 408) under the route "unparsed"', async () => {
    const log = createLogger('silent');
    const app = await buildApp({ log, metrics: createMetrics(), requestTimeoutMs: 300 });
    await app.listen({ host: '127.0.0.1', port: 0 });
    try {
      const { port } = app.server.address() as AddressInfo;
      const base = `http://127.0.0.1:${port}`;
      const tooLarge = await request(`${base}/ops/chains/X`, {
        headers: { 'x-filler': 'k'.repeat(20_000) },
      });
      expect(tooLarge.statusCode).toBe(431);
      await tooLarge.body.dump();
      // Half a request's head, then nothing: Node answers 408 once the request time is up.
      const socket = connect(port, '127.0.0.1');
      socket.on('error', () => {});
      await once(socket, 'connect');
      socket.write('POST /webhooks/events HTTP/1.1\r\nHost: x\r\n');
      let answer = '';
      socket.on('data', (data: Buffer) => {
        answer += data.toString('latin1');
      });
      await once(socket, 'close');
      expect(answer).toMatch(/^HTTP\/1\.1 408 /);

      const text = await (await request(`${base}/metrics`)).body.text();
      expect(text).toContain(
        'billing_http_requests_total{route="unparsed",method="GET",status="431"} 1',
      );
      expect(text).toContain(
        'billing_http_requests_total{route="unparsed",method="unknown",status="408"} 1',
      );
    } finally {
      await app.close();
    }
  });
});
