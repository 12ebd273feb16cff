// Webhook intake end to end: real HTTP, real Redis, real BullMQ queues, a manual clock.
import { randomBytes, randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { Queue, Worker } from 'bullmq';
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import { request } from 'undici';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { manualClock } from '../../../src/clock.js';
import type { EventType } from '../../../src/intake/events.js';
import { signWebhook } from '../../../src/intake/sign.js';
import {
  type WebhookDeps,
  webhookDedupKey,
  webhookJobId,
  webhookRoutes,
} from '../../../src/intake/webhooks.js';
import { createLogger } from '../../../src/logger.js';
import { type QueueName, queueForEvent, queueNames } from '../../../src/queues.js';
import { connectRedis, type RedisClient } from '../../../src/redis/connection.js';
import { JOB_ATTEMPTS } from '../../../src/retry-policy.js';
import { BODY_LIMIT_BYTES } from '../../../src/server.js';
import { T0 } from '../../helpers/app.js';
import { startTestRedis, type TestRedis } from '../../helpers/redis-server.js';

const SECRET = `whsec_${Buffer.from('intake-test-secret-0123456789abcdef').toString('base64')}`;
const OTHER_SECRET = `whsec_${Buffer.from('some-other-secret-0123456789abcdef').toString('base64')}`;
const PREFIX = `test-wh-${randomUUID().slice(0, 8)}`;

const samples: Record<EventType, Record<string, unknown>> = {
  'order.placed': {
    customer: { id: 'cust-1', name: 'Acme', admin: { email: 'admin@acme.test' } },
    order: { id: 'A-1', product: 'suite', licenses: 5, duration: 'yearly' },
    autoRenew: true,
  },
  'seats.changed': { order: 'A-1', licenses: 7, effectiveAt: T0 + 60 },
  'payment.overdue': { order: 'A-1', invoice: 'INV-9' },
  'payment.received': { order: 'A-1' },
  'order.cancelled': { order: 'A-1', occurredAt: T0 - 600 },
};

let server: TestRedis;
let redis: RedisClient;
let queues: Record<QueueName, Queue>;
const clock = manualClock(T0);
const logLines: string[] = [];
let baseUrl: string;
let app: FastifyInstance;
const cleanups: Array<() => Promise<void>> = [];

function makeQueue(name: string, port: number): Queue {
  const queue = new Queue(name, { connection: { host: '127.0.0.1', port }, prefix: PREFIX });
  queue.on('error', () => {});
  return queue;
}

/** The same parser setup as src/server.ts, plus a root JSON route to prove it stays untouched. */
async function startApp(deps: WebhookDeps): Promise<{ app: FastifyInstance; baseUrl: string }> {
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      logLines.push(...chunk.toString().split('\n').filter(Boolean));
      done();
    },
  });
  const instance = Fastify({
    loggerInstance: createLogger('trace', sink) as FastifyBaseLogger,
    bodyLimit: BODY_LIMIT_BYTES,
    exposeHeadRoutes: false,
  });
  const jsonParser = instance.getDefaultJsonParser('error', 'error');
  instance.addContentTypeParser(
    'application/json',
    { parseAs: 'string' },
    (request, body, done) => {
      const text = body.toString();
      if (text.trim() === '') {
        done(null, undefined);
        return;
      }
      jsonParser(request, text, done);
    },
  );
  instance.post('/echo', async (request) => ({ body: request.body ?? null }));
  await instance.register(webhookRoutes(deps));
  await instance.listen({ host: '127.0.0.1', port: 0 });
  const { port } = instance.server.address() as AddressInfo;
  return { app: instance, baseUrl: `http://127.0.0.1:${port}` };
}

interface Answer {
  status: number;
  body: Record<string, unknown>;
}

async function post(
  body: string | Uint8Array,
  headers: Record<string, string>,
  url = `${baseUrl}/webhooks/events`,
): Promise<Answer> {
  const res = await request(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body,
  });
  expect(res.headers['content-type']).toMatch(/^application\/json/);
  return { status: res.statusCode, body: (await res.body.json()) as Record<string, unknown> };
}

interface Delivery {
  id?: string;
  timestamp?: number;
  secret?: string;
  url?: string;
}

async function deliver(payload: unknown, options: Delivery = {}): Promise<Answer> {
  const body =
    typeof payload === 'string' || payload instanceof Uint8Array
      ? payload
      : JSON.stringify(payload);
  const headers = signWebhook(
    options.secret ?? SECRET,
    options.id ?? randomUUID(),
    options.timestamp ?? clock.now(),
    body,
  );
  return post(body, headers, options.url);
}

async function jobCounts(): Promise<Record<QueueName, number>> {
  const counts = await Promise.all(
    queueNames.map(async (name) => {
      const byState = await queues[name].getJobCounts();
      return [name, Object.values(byState).reduce((sum, n) => sum + n, 0)] as const;
    }),
  );
  return Object.fromEntries(counts) as Record<QueueName, number>;
}

async function totalJobs(): Promise<number> {
  return Object.values(await jobCounts()).reduce((sum, n) => sum + n, 0);
}

beforeAll(async () => {
  server = await startTestRedis();
  redis = await connectRedis(server.url, 'request');
  queues = Object.fromEntries(
    queueNames.map((name) => [name, makeQueue(name, server.port)]),
  ) as Record<QueueName, Queue>;
  // A queue writes its meta keys once connected: done here, so no test's flush races them.
  await Promise.all(Object.values(queues).map((queue) => queue.waitUntilReady()));
  ({ app, baseUrl } = await startApp({ redis, queues, clock, secret: SECRET, dedupDays: 7 }));
});

beforeEach(async () => {
  await redis.flushdb();
  clock.set(T0);
});

afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

afterAll(async () => {
  await app.close();
  await Promise.all(Object.values(queues).map((queue) => queue.close()));
  await redis.quit();
  await server.stop();
});

describe('a valid, signed event', () => {
  it.each(Object.keys(samples) as EventType[])(
    'of type %s is answered 202 and enqueued once, in its queue, under a hashed job id',
    async (type) => {
      const id = `evt-${randomUUID()}`;
      const data = samples[type];
      const answer = await deliver({ type, data }, { id, timestamp: T0 - 30 });

      expect(answer).toEqual({ status: 202, body: { id } });
      const queueName = queueForEvent[type];
      const counts = await jobCounts();
      for (const name of queueNames) expect(counts[name]).toBe(name === queueName ? 1 : 0);
      const job = await queues[queueName].getJob(webhookJobId(id));
      // Named for people reading Bull Board: the event and the order it is about.
      expect(job?.name).toBe(
        type === 'order.placed' ? 'order.placed A-1 for customer cust-1' : `${type} A-1`,
      );
      expect(job?.opts).toMatchObject({
        attempts: JOB_ATTEMPTS,
        backoff: { type: 'billing-retry' },
      });
      expect(job?.data).toEqual({
        webhookId: id,
        type,
        data,
        // data.occurredAt when given, else the webhook-timestamp.
        occurredAt: typeof data.occurredAt === 'number' ? data.occurredAt : T0 - 30,
        receivedAt: T0,
        sequence: expect.any(Number),
      });
      expect(await redis.ttl(webhookDedupKey(id))).toBe(7 * 86_400);
    },
  );

  it('keeps in its job only the fields the workers read, never what a producer added', async () => {
    const id = `evt-${randomUUID()}`;
    const { customer } = samples['order.placed'] as { customer: Record<string, object> };
    const data = {
      ...samples['order.placed'],
      customer: { ...customer, admin: { ...customer.admin, password: 'AdminInitialPw!42' } },
      notes: { apiKey: 'kept-nowhere' },
    };
    expect((await deliver({ type: 'order.placed', data }, { id })).status).toBe(202);

    const job = await queues.orders.getJob(webhookJobId(id));
    expect(job?.data.data).toEqual(samples['order.placed']);
  });

  it('numbers accepted events in the order intake accepted them, a repeat getting no number', async () => {
    const sequenceOf = async (id: string) =>
      (await queues['payment-signals'].getJob(webhookJobId(id)))?.data.sequence;
    const first = `evt-${randomUUID()}`;
    const second = `evt-${randomUUID()}`;
    const event = { type: 'payment.overdue', data: samples['payment.overdue'] };
    await deliver(event, { id: first, timestamp: T0 });
    await deliver(event, { id: first, timestamp: T0 });
    await deliver(event, { id: second, timestamp: T0 });
    expect(await sequenceOf(second)).toBe((await sequenceOf(first)) + 1);
  });

  it('is answered 202 again for a repeated webhook-id and enqueued only once', async () => {
    const id = 'evt-repeat';
    const first = await deliver({ type: 'payment.received', data: { order: 'A-1' } }, { id });
    clock.advance(120);
    const again = await deliver({ type: 'payment.received', data: { order: 'B-2' } }, { id });

    expect(first).toEqual({ status: 202, body: { id } });
    expect(again).toEqual({ status: 202, body: { id } });
    expect(await totalJobs()).toBe(1);
    const job = await queues['payment-signals'].getJob(webhookJobId(id));
    expect(job?.data.data).toEqual({ order: 'A-1' });
  });

  /** Delivers a payment event under `id` and has a worker finish its job; answers its job id. */
  async function deliveredAndFinished(id: string) {
    await deliver({ type: 'payment.received', data: { order: 'A-1' } }, { id });
    const queue = queues['payment-signals'];
    const worker = new Worker(queue.name, async () => 'done', {
      connection: { host: '127.0.0.1', port: server.port },
      prefix: PREFIX,
    });
    cleanups.push(() => worker.close());
    const jobId = webhookJobId(id);
    await expect.poll(async () => (await queue.getJob(jobId))?.finishedOn).toBeDefined();
    await worker.close();
    return jobId;
  }

  /** Another event under `id`: accepted, and its job waits in place of the earlier one. */
  async function expectEnqueuedAgain(id: string, jobId: string, order: string) {
    const again = await deliver({ type: 'payment.received', data: { order } }, { id });
    expect(again).toEqual({ status: 202, body: { id } });
    const job = await queues['payment-signals'].getJob(jobId);
    expect(job?.data.data).toEqual({ order });
    expect(await job?.getState()).toBe('waiting');
  }

  // The earlier event is for A-1: another event (B-2), or the same one sent again.
  it.each([
    ['another event', 'evt-forgotten', 'B-2'],
    ['the same event', 'evt-same-forgotten', 'A-1'],
  ])(
    'enqueues %s under a webhook-id that comes back after the dedup window',
    async (_what, id, order) => {
      const jobId = await deliveredAndFinished(id);
      // Eight days later (WEBHOOK_DEDUP_DAYS is 7): the id is forgotten, the job still kept.
      await redis.hset(
        `${PREFIX}:payment-signals:${jobId}`,
        'finishedOn',
        Date.now() - 8 * 86_400_000,
      );
      await redis.del(webhookDedupKey(id));
      await expectEnqueuedAgain(id, jobId, order);
    },
  );

  it('keeps the finished job of the same event sent again within the window, enqueuing nothing', async () => {
    const id = 'evt-same-lately';
    const jobId = await deliveredAndFinished(id);
    // The id's claim lapsed (its intake died before marking it done): the job is the event's.
    await redis.del(webhookDedupKey(id));
    const again = await deliver({ type: 'payment.received', data: { order: 'A-1' } }, { id });
    expect(again).toEqual({ status: 202, body: { id } });
    expect(await queues['payment-signals'].getJob(jobId).then((job) => job?.getState())).toBe(
      'completed',
    );
  });

  it('enqueues another event under an id forgotten since, also when its earlier job finished lately', async () => {
    const id = 'evt-reused-finished';
    const jobId = await deliveredAndFinished(id);
    // The id's claim lapsed (a job finishes after its claim began, so within the window).
    await redis.del(webhookDedupKey(id));
    await expectEnqueuedAgain(id, jobId, 'B-3');
  });

  it('refuses 409 an event of another queue under an id forgotten since while its earlier job runs', async () => {
    const id = 'evt-reused-elsewhere';
    await deliver({ type: 'payment.overdue', data: { order: 'A-1' } }, { id });
    await redis.del(webhookDedupKey(id));
    const jobs = await totalJobs();

    const seats = { type: 'seats.changed', data: { order: 'A-1', licenses: 9 } };
    expect((await deliver(seats, { id })).status).toBe(409);
    expect(await queues['seat-changes'].getJob(webhookJobId(id))).toBeUndefined();
    expect(await totalJobs()).toBe(jobs);
  });

  it('refuses 409 another event under an id forgotten since while its earlier job runs, changing nothing', async () => {
    const id = 'evt-reused-running';
    const first = { type: 'payment.overdue', data: { order: 'A-1' } };
    await deliver(first, { id });
    await redis.del(webhookDedupKey(id));
    const jobs = await totalJobs();

    const other = await deliver({ type: 'payment.overdue', data: { order: 'B-4' } }, { id });
    expect(other).toEqual({
      status: 409,
      body: {
        error: 'webhook_id_in_use',
        message:
          'this webhook id names an earlier event still being handled; send this event with a new webhook id',
      },
    });
    const job = await queues['payment-signals'].getJob(webhookJobId(id));
    expect(job?.data.data).toEqual({ order: 'A-1' });
    expect(await redis.exists(webhookDedupKey(id))).toBe(0);
    // The same event again is the earlier one's: accepted, nothing added.
    expect(await deliver(first, { id })).toEqual({ status: 202, body: { id } });
    expect(await totalJobs()).toBe(jobs);
  });

  it('takes any Content-Type, also one that does not parse', async () => {
    for (const [n, type] of [
      ['1', 'json'],
      ['2', 'application/json, text/plain'],
    ] as const) {
      const body = JSON.stringify({ type: 'payment.received', data: { order: 'A-1' } });
      const id = `evt-type-${n}`;
      const answer = await post(body, {
        ...signWebhook(SECRET, id, clock.now(), body),
        'content-type': type,
      });
      expect(answer).toEqual({ status: 202, body: { id } });
    }
    expect(await totalJobs()).toBe(2);
  });

  it('verifies a webhook-id that is not ASCII as its producer signed it, in UTF-8', async () => {
    const id = 'évt-1';
    const body = JSON.stringify({ type: 'payment.received', data: { order: 'A-1' } });
    const headers = signWebhook(SECRET, id, clock.now(), body);
    // The header's bytes are the UTF-8 of the id, as a producer's HTTP client sends them.
    const raw = { ...headers, 'webhook-id': Buffer.from(id, 'utf8').toString('latin1') };
    expect(await post(body, raw)).toEqual({ status: 202, body: { id } });
    expect((await queues['payment-signals'].getJob(webhookJobId(id)))?.data.webhookId).toBe(id);
  });

  it.each([
    ['holding colons', 'msg:2026:01:15'],
    ['all digits', '1234567890'],
  ])('works with a webhook-id %s, which never appears raw in the job id', async (_, id) => {
    const answer = await deliver({ type: 'order.cancelled', data: { order: 'A-1' } }, { id });

    expect(answer).toEqual({ status: 202, body: { id } });
    const job = await queues.orders.getJob(webhookJobId(id));
    expect(job?.id).toMatch(/^wh-[A-Za-z0-9_-]{43}$/);
    expect(job?.data.webhookId).toBe(id);
    expect(await redis.exists(webhookDedupKey(id))).toBe(1);
  });

  it('is accepted when any one of several space-separated signatures matches', async () => {
    const body = JSON.stringify({ type: 'payment.overdue', data: { order: 'A-1' } });
    const headers = signWebhook(SECRET, 'evt-rotated', T0, body);
    const stale = signWebhook(OTHER_SECRET, 'evt-rotated', T0, body)['webhook-signature'];
    headers['webhook-signature'] = `v2,abc ${stale} ${headers['webhook-signature']}`;

    expect((await post(body, headers)).status).toBe(202);
    expect(await totalJobs()).toBe(1);
  });

  it('is accepted when the matching signature is on the first of two header lines', async () => {
    // Node joins two header lines with ", ": the first signature then ends with the comma.
    const body = JSON.stringify({ type: 'payment.overdue', data: { order: 'A-1' } });
    const headers = signWebhook(SECRET, 'evt-two-lines', T0, body);
    const stale = signWebhook(OTHER_SECRET, 'evt-two-lines', T0, body)['webhook-signature'];
    headers['webhook-signature'] = `${headers['webhook-signature']}, ${stale}`;

    expect((await post(body, headers)).status).toBe(202);
    expect(await totalJobs()).toBe(1);
  });

  it('is accepted with a timestamp exactly 5 minutes old, by the injected clock', async () => {
    clock.advance(300);
    const answer = await deliver(
      { type: 'payment.received', data: { order: 'A-1' } },
      {
        timestamp: T0,
      },
    );
    expect(answer.status).toBe(202);
  });
});

describe('a request that fails the signature check', () => {
  const event = { type: 'payment.received', data: { order: 'A-1' } };

  async function expectUnauthorized(answer: Answer, error: string): Promise<void> {
    expect(answer.status).toBe(401);
    expect(answer.body.error).toBe(error);
    expect(answer.body.message).toEqual(expect.any(String));
    expect(await totalJobs()).toBe(0);
    expect(await redis.dbsize()).toBe(0);
  }

  it('is refused 401 when unsigned', async () => {
    await expectUnauthorized(await post(JSON.stringify(event), {}), 'missing_headers');
  });

  it('is refused 401 when one header is missing, and says which', async () => {
    const body = JSON.stringify(event);
    const { 'webhook-timestamp': _, ...headers } = signWebhook(SECRET, 'evt-1', T0, body);
    const answer = await post(body, headers);
    await expectUnauthorized(answer, 'missing_headers');
    expect(answer.body.message).toContain('webhook-timestamp');
  });

  it('is refused 401 with a signature made with another secret', async () => {
    await expectUnauthorized(await deliver(event, { secret: OTHER_SECRET }), 'invalid_signature');
  });

  it('is refused 401 with a random signature, whatever the body', async () => {
    const headers = {
      'webhook-id': 'evt-1',
      'webhook-timestamp': String(T0),
      'webhook-signature': `v1,${randomBytes(32).toString('base64')}`,
    };
    await expectUnauthorized(await post('{not json', headers), 'invalid_signature');
  });

  it('is refused 401 when the body was changed after signing', async () => {
    const body = JSON.stringify({ type: 'seats.changed', data: { order: 'A-1', licenses: 5 } });
    const headers = signWebhook(SECRET, 'evt-1', T0, body);
    const tampered = body.replace('5', '50');
    await expectUnauthorized(await post(tampered, headers), 'invalid_signature');
  });

  it('is refused 401 when the clock is 6 minutes past the timestamp', async () => {
    const body = JSON.stringify(event);
    const headers = signWebhook(SECRET, 'evt-1', T0, body);
    clock.advance(360);
    await expectUnauthorized(await post(body, headers), 'stale_timestamp');
  });

  it('is refused 401 when the timestamp is beyond the tolerance in the future', async () => {
    await expectUnauthorized(await deliver(event, { timestamp: T0 + 301 }), 'stale_timestamp');
  });

  it('is refused 401 when the timestamp is not epoch seconds', async () => {
    const body = JSON.stringify(event);
    const headers = { ...signWebhook(SECRET, 'evt-1', T0, body), 'webhook-timestamp': 'soon' };
    await expectUnauthorized(await post(body, headers), 'invalid_signature');
  });

  it('is refused 401 saying so when the timestamp is in milliseconds', async () => {
    const body = JSON.stringify(event);
    const ms = String(T0 * 1000);
    const headers = { ...signWebhook(SECRET, 'evt-1', T0, body), 'webhook-timestamp': ms };
    const answer = await post(body, headers);
    await expectUnauthorized(answer, 'invalid_signature');
    expect(answer.body.message).toBe(
      `webhook-timestamp must be in epoch seconds; "${ms}" has 13 digits, milliseconds`,
    );
  });
});

describe('a signed request with a bad body', () => {
  async function expectInvalid(answer: Answer, error: string, names?: string): Promise<void> {
    expect(answer.status).toBe(400);
    expect(answer.body.error).toBe(error);
    if (names !== undefined) expect(answer.body.message).toContain(names);
    expect(await totalJobs()).toBe(0);
    expect(await redis.dbsize()).toBe(0);
  }

  it('is refused 413 when the body is over the limit, enqueuing nothing, and logs why', async () => {
    logLines.length = 0;
    const body = JSON.stringify({
      type: 'order.placed',
      data: { ...samples['order.placed'], padding: 'x'.repeat(BODY_LIMIT_BYTES) },
    });
    const answer = await post(body, signWebhook(SECRET, 'evt-too-large', T0, body));
    expect(answer).toEqual({
      status: 413,
      body: { error: 'body_too_large', message: `body must be at most ${BODY_LIMIT_BYTES} bytes` },
    });
    expect(await totalJobs()).toBe(0);
    expect(await redis.dbsize()).toBe(0);
    const rejected = logLines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'webhook rejected');
    expect(rejected).toMatchObject([{ level: 40, error: 'body_too_large' }]);
  });

  it('is refused 400 when the JSON is malformed', async () => {
    await expectInvalid(await deliver('{"type": "order.placed", '), 'invalid_json');
  });

  it('checks the signature over the bytes sent, and refuses 400 a body that is not UTF-8', async () => {
    // "Müller" in Latin-1, signed over its exact bytes: the signature holds, the JSON does not.
    const body = Buffer.concat([
      Buffer.from('{"type": "payment.received", "data": {"order": "M'),
      Buffer.from([0xfc]),
      Buffer.from('ller"}}'),
    ]);
    await expectInvalid(await deliver(body), 'invalid_json', 'body is not UTF-8');
  });

  it('is refused 400 when the body is empty', async () => {
    await expectInvalid(await deliver(''), 'invalid_json');
  });

  it('is refused 400 naming type when the type is unknown', async () => {
    const answer = await deliver({ type: 'order.exploded', data: { order: 'A-1' } });
    await expectInvalid(answer, 'invalid_event', 'type: must be one of');
  });

  it('is refused 400 naming data.order.id when it is missing', async () => {
    const data = structuredClone(samples['order.placed']) as { order: Record<string, unknown> };
    delete data.order.id;
    const answer = await deliver({ type: 'order.placed', data });
    await expectInvalid(answer, 'invalid_event', 'data.order.id: is required');
  });

  it('names each bad field once, in words of its own, also a missing duration', async () => {
    const data = structuredClone(samples['order.placed']) as { order: Record<string, unknown> };
    delete data.order.duration;
    data.order.product = 'p'.repeat(65);
    const placed = await deliver({ type: 'order.placed', data });
    expect(placed.body.message).toBe(
      `data.order.product: must be at most 64 characters, got "${'p'.repeat(65)}"; data.order.duration: is required`,
    );
    const empty = await deliver({ type: 'order.cancelled', data: { order: '' } });
    await expectInvalid(empty, 'invalid_event', 'data.order: must not be empty, got ""');
    expect(empty.body.message).toBe('data.order: must not be empty, got ""');
    const invoice = await deliver({
      type: 'payment.overdue',
      data: { order: 'A-1', invoice: 'i'.repeat(201) },
    });
    await expectInvalid(invoice, 'invalid_event', 'data.invoice: must be at most 200 characters');
  });

  it('is refused 400 naming data.licenses when it is 1.5', async () => {
    const answer = await deliver({ type: 'seats.changed', data: { order: 'A-1', licenses: 1.5 } });
    await expectInvalid(answer, 'invalid_event', 'data.licenses: must be an integer, got 1.5');
  });

  it('is refused 400 naming data.customer.name when it holds a lone surrogate', async () => {
    const data = structuredClone(samples['order.placed']) as { customer: Record<string, unknown> };
    data.customer.name = 'Acme \udc00';
    const answer = await deliver({ type: 'order.placed', data });
    await expectInvalid(answer, 'invalid_event', 'data.customer.name: must be well-formed Unicode');
  });

  it('is refused 400 when order.placed uses a reserved order id suffix', async () => {
    const data = structuredClone(samples['order.placed']) as { order: Record<string, unknown> };
    data.order.id = 'A-1.r2';
    const answer = await deliver({ type: 'order.placed', data });
    await expectInvalid(answer, 'invalid_event', 'data.order.id: must not end in .r<n>');
  });

  it.each([
    ['order.id', '..'],
    ['customer.id', '.'],
  ])(
    'is refused 400 when order.placed names its %s %j, a path no URL can hold',
    async (field, id) => {
      const data = structuredClone(samples['order.placed']) as Record<
        string,
        Record<string, unknown>
      >;
      const [object, key] = field.split('.') as [string, string];
      (data[object] as Record<string, unknown>)[key] = id;
      const answer = await deliver({ type: 'order.placed', data });
      await expectInvalid(answer, 'invalid_event', `data.${field}: must not be "." or ".."`);
    },
  );

  it('is refused 400 when order.placed uses an order id too long for its renewals', async () => {
    const data = structuredClone(samples['order.placed']) as { order: Record<string, unknown> };
    // 105 characters: its renewal ids (`.r2`, ...) would fit, an add-on's renewals might not.
    data.order.id = 'A'.repeat(105);
    const answer = await deliver({ type: 'order.placed', data });
    await expectInvalid(answer, 'invalid_event', 'data.order.id: must be at most 104 characters');
    data.order.id = 'A'.repeat(104);
    expect((await deliver({ type: 'order.placed', data })).status).toBe(202);
  });

  it('is refused 400 naming data.occurredAt when it is two days ahead', async () => {
    const data = { order: 'A-1', occurredAt: T0 + 2 * 86_400 };
    const answer = await deliver({ type: 'order.cancelled', data });
    await expectInvalid(answer, 'invalid_event', 'data.occurredAt');
  });

  it('is refused 400 naming occurredAt when it is sent beside data instead of in it', async () => {
    const answer = await deliver({
      type: 'seats.changed',
      occurredAt: T0 - 60,
      data: { order: 'A-1', licenses: 3 },
    });
    await expectInvalid(
      answer,
      'invalid_event',
      'occurredAt: belongs inside data (data.occurredAt), where seats.changed reads it',
    );
  });

  it.each([
    [
      'a field of its own',
      { type: 'seats.changed', timestamp: T0, data: { order: 'A-1', licenses: 3 } },
    ],
    [
      'a field this type does not read',
      { type: 'payment.received', customer: 'C-1', data: { order: 'A-1' } },
    ],
    [
      'a field data holds too',
      { type: 'seats.changed', order: 'A-1', data: { order: 'A-1', licenses: 3 } },
    ],
  ])('accepts %s beside data', async (_what, event) => {
    expect((await deliver(event)).status).toBe(202);
  });

  it('is refused 400 when the JSON carries a __proto__ key', async () => {
    const body = '{"type": "payment.received", "data": {"order": "A-1", "__proto__": {"x": 1}}}';
    await expectInvalid(
      await deliver(body),
      'invalid_json',
      'holds a "__proto__" or "constructor" key',
    );
  });
});

describe('when Redis or the queue fails', () => {
  /** An intake whose orders queue talks to no Redis: its enqueue times out after 200 ms. */
  async function appWithDeadOrdersQueue() {
    const deadQueue = makeQueue('orders', 1);
    const other = await startApp({
      redis,
      queues: { ...queues, orders: deadQueue },
      clock,
      secret: SECRET,
      dedupDays: 7,
      enqueueTimeoutMs: 200,
    });
    cleanups.push(async () => {
      await other.app.close();
      await deadQueue.close();
    });
    return other;
  }

  it('answers 503 if the enqueue fails, removes the claim, and lets the retry through', async () => {
    const broken = makeQueue('orders', server.port);
    await broken.close();
    const working = queues.orders;
    queues.orders = broken;
    const event = { type: 'order.cancelled', data: { order: 'A-1' } };
    let answer: Answer;
    try {
      answer = await deliver(event, { id: 'evt-retry' });
    } finally {
      queues.orders = working;
    }

    expect(answer).toEqual({
      status: 503,
      body: { error: 'unavailable', message: expect.any(String) },
    });
    expect(await redis.exists(webhookDedupKey('evt-retry'))).toBe(0);
    expect(await totalJobs()).toBe(0);

    const retry = await deliver(event, { id: 'evt-retry' });
    expect(retry).toEqual({ status: 202, body: { id: 'evt-retry' } });
    expect(await queues.orders.getJob(webhookJobId('evt-retry'))).toBeDefined();
    expect(await totalJobs()).toBe(1);
  });

  it('answers 503 if the queue Redis is unreachable, after the enqueue timeout', async () => {
    const other = await appWithDeadOrdersQueue();

    const url = `${other.baseUrl}/webhooks/events`;
    const event = { type: 'order.cancelled', data: { order: 'A-1' } };
    const answer = await deliver(event, { id: 'evt-dead', url });
    expect(answer.status).toBe(503);
    expect(answer.body.error).toBe('unavailable');
    expect(await redis.exists(webhookDedupKey('evt-dead'))).toBe(0);
  });

  it('warns, as for every 503, when an outage also keeps it from releasing the claim', async () => {
    const other = await appWithDeadOrdersQueue();
    // The claim is taken; by the time its release is sent, Redis is gone as well.
    const evaluate = redis.eval.bind(redis);
    let calls = 0;
    const spy = vi.spyOn(redis, 'eval').mockImplementation(((
      ...args: Parameters<typeof evaluate>
    ) => {
      calls += 1;
      return calls === 1 ? evaluate(...args) : Promise.reject(new Error('Connection is closed.'));
    }) as typeof redis.eval);
    cleanups.push(async () => spy.mockRestore());

    const url = `${other.baseUrl}/webhooks/events`;
    const event = { type: 'order.cancelled', data: { order: 'A-1' } };
    const answer = await deliver(event, { id: 'evt-dead-release', url });
    expect(answer.status).toBe(503);
    const line = logLines
      .map((l) => JSON.parse(l))
      .find((l) => String(l.msg).startsWith('webhook id stays claimed'));
    expect(line).toMatchObject({ level: 40 });
  });

  it('answers 503 while Redis refuses writes for want of memory (noeviction)', async () => {
    await redis.config('SET', 'maxmemory', '1');
    let answer: Answer;
    try {
      answer = await deliver({ type: 'payment.received', data: { order: 'A-1' } });
    } finally {
      await redis.config('SET', 'maxmemory', '0');
    }
    expect(answer).toMatchObject({ status: 503, body: { error: 'unavailable' } });
    expect(await totalJobs()).toBe(0);
  });

  it('answers 503 if Redis is unreachable when claiming the webhook id', async () => {
    const downRedis = await connectRedis(server.url, 'request');
    downRedis.disconnect();
    const other = await startApp({ redis: downRedis, queues, clock, secret: SECRET, dedupDays: 7 });
    cleanups.push(() => other.app.close());

    const url = `${other.baseUrl}/webhooks/events`;
    const answer = await deliver({ type: 'payment.received', data: { order: 'A-1' } }, { url });
    expect(answer.status).toBe(503);
    expect(answer.body.error).toBe('unavailable');
    expect(await totalJobs()).toBe(0);
  });
});

describe('a claim that timed out', () => {
  it('does not hold the retry once Redis answers again', async () => {
    const id = 'evt-stalled-claim';
    const payload = { type: 'payment.received', data: { order: 'A-1' } };
    await server.pause();
    let answer: Answer;
    try {
      answer = await deliver(payload, { id });
    } finally {
      await server.resume();
    }
    expect(answer).toMatchObject({ status: 503, body: { error: 'unavailable' } });
    const retry = await deliver(payload, { id });
    expect(retry).toEqual({ status: 202, body: { id } });
    expect(await totalJobs()).toBe(1);
  }, 20_000);
});

describe('a claim left pending by an intake that died before enqueueing', () => {
  it('answers 503 while the claim is pending and enqueues the retry once it lapsed', async () => {
    const id = 'evt-crashed';
    const event = { type: 'order.cancelled', data: { order: 'A-1' } };
    // What a process that died between claiming and enqueueing leaves behind.
    await redis.set(webhookDedupKey(id), 'pending', 'EX', 60);

    logLines.length = 0;
    const during = await deliver(event, { id });
    expect(during).toEqual({
      status: 503,
      body: { error: 'in_progress', message: 'this webhook id is being enqueued; retry shortly' },
    });
    expect(await totalJobs()).toBe(0);
    // Logged at warn, as every 503 is (README, Logs).
    const lines = logLines.map((l) => JSON.parse(l)).filter((l) => l.webhookId === id);
    expect(lines).toContainEqual(
      expect.objectContaining({ level: 40, msg: 'webhook id being enqueued by another request' }),
    );

    await redis.del(webhookDedupKey(id)); // the lease ran out
    const after = await deliver(event, { id });
    expect(after).toEqual({ status: 202, body: { id } });
    expect(await totalJobs()).toBe(1);
    expect(await redis.get(webhookDedupKey(id))).toBe('done');
    expect(await redis.ttl(webhookDedupKey(id))).toBeGreaterThan(6 * 86_400);
  });
});

describe('the plugin', () => {
  it('leaves the root JSON parser of the app alone', async () => {
    const res = await request(`${baseUrl}/echo`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"a": 1}',
    });
    expect(await res.body.json()).toEqual({ body: { a: 1 } });
  });

  it('logs webhook ids but neither bodies nor signatures', async () => {
    logLines.length = 0;
    const body = JSON.stringify({
      type: 'order.placed',
      data: { ...samples['order.placed'], marker: 'body-marker-7f3a' },
    });
    const headers = signWebhook(SECRET, 'evt-logged', T0, body);
    expect((await post(body, headers)).status).toBe(202);
    await post(body, { ...headers, 'webhook-signature': 'v1,bm90LXRoZS1zaWduYXR1cmU=' });

    const all = logLines.join('\n');
    expect(all).toContain('"webhookId":"evt-logged"');
    for (const secret of ['body-marker-7f3a', headers['webhook-signature'], 'bm90LXRoZS1zaWdu']) {
      expect(all).not.toContain(secret);
    }
  });
});
