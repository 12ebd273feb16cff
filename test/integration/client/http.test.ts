// The HTTP client against the real server over real HTTP: the shared contract, the
// classification of every failure, and a lost answer retried through a proxy.
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import { createServer as createHttpsServer } from 'node:https';
import { type AddressInfo, createServer, type Socket } from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { httpClient, MAX_ANSWER_BYTES, retryAfterMs } from '../../../src/client/http.js';
import type { ProvisioningClient } from '../../../src/client/provisioning-client.js';
import {
  ConfigError,
  MalformedAnswerError,
  RefusalError,
  TransientError,
} from '../../../src/errors.js';
import { partnerKeys } from '../../../src/provisioning/keys.js';
import type { Partner } from '../../../src/provisioning/records.js';
import { DAY, T0, useTestApp } from '../../helpers/app.js';
import { listen, startProxy } from '../../helpers/proxy.js';
import { provisioningClientContract, refusalOf } from './contract.js';

const app = useTestApp({ resetClock: false });

function setupWith(extensions: boolean | undefined) {
  return async () => ({
    clock: app.clock,
    client: async (variant: 'marketplace' | 'external') => {
      const { apiKey } = await app.addPartner(variant);
      return httpClient({ url: app.url, apiKey, variant, extensions });
    },
    close: async () => {},
  });
}

provisioningClientContract('HTTP client with extensions', setupWith(true));
provisioningClientContract('HTTP client (remote default: no extensions)', setupWith(undefined));

// --- failures -----------------------------------------------------------------------------------

describe('the HTTP client when the service fails', () => {
  const stops: (() => Promise<void>)[] = [];
  afterEach(async () => {
    await Promise.all(stops.splice(0).map((stop) => stop()));
  });

  function track<T extends ProvisioningClient>(client: T): T {
    stops.push(() => client.close());
    return client;
  }

  const anOrder = { customer: 'C', id: 'A-1', product: 'suite-std', licenses: 1 };
  /** The service's answer to `anOrder`, well formed. */
  const orderOf = () => ({
    ...anOrder,
    id: 'ord-1',
    customer: 'cus-1',
    instance: null,
    duration: null,
    count: 1,
    createdAt: T0,
    startsAt: T0,
    expiresAt: T0 + DAY,
    remoteId: anOrder.id,
  });

  /** A client of a service that answers every request with `handler` (both closed after). */
  async function clientAnswering(
    handler: Parameters<typeof listen>[0],
    options: { timeoutMs?: number } = {},
  ) {
    const server = await listen(handler);
    stops.push(server.close);
    return track(httpClient({ url: server.url, apiKey: 'k', variant: 'marketplace', ...options }));
  }

  it('keeps its connection alive between calls, though each is a GET with a body', async () => {
    // undici closes a connection after a GET carrying a body unless told the server reads it:
    // every call would pay a new connection (and TLS handshake).
    const sockets = new Set<Socket>();
    const client = await clientAnswering(async (req, res) => {
      sockets.add(req.socket as Socket);
      for await (const _chunk of req);
      res.end('true');
    });
    for (let i = 0; i < 10; i += 1) await client.cancelOrder({ id: `A-${i}` });
    // The pool may open a second one for the next call while the first is being released.
    expect(sockets.size).toBeLessThanOrEqual(2);
  });

  it('answers ConfigError for a wrong API key, without the key in the error', async () => {
    const apiKey = 'wrong-key-7f3a9c1e5b2d4f6a8c0e1b3d5f7a9c1e';
    const client = track(httpClient({ url: app.url, apiKey, variant: 'marketplace' }));
    const error = await client.cancelOrder({ id: 'A-1' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConfigError);
    expect(error).toMatchObject({
      code: 'provisioning_unauthorized',
      details: { method: 'cancelOrder', status: 401 },
    });
    const text = `${(error as Error).message} ${JSON.stringify(error)} ${String((error as Error).stack)}`;
    expect(text).not.toContain(apiKey);
  });

  it('answers TransientError when the connection is refused', async () => {
    const closed = await listen(() => {});
    await closed.close();
    const client = track(httpClient({ url: closed.url, apiKey: 'k', variant: 'marketplace' }));
    const error = await client.cancelOrder({ id: 'A-1' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TransientError);
    expect(error).toMatchObject({
      code: 'provisioning_unavailable',
      details: { code: 'ECONNREFUSED' },
    });
    expect((error as Error).cause).toBeInstanceOf(Error);
  });

  it('answers TransientError for a 503, quoting the body', async () => {
    const client = await clientAnswering((_req, res) => {
      res.writeHead(503, { 'content-type': 'application/json' });
      res.end(JSON.stringify('service unavailable: storage unreachable, retry later'));
    });
    const error = await client.suspendOrder({ id: 'A-1' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TransientError);
    expect(error).toMatchObject({
      code: 'provisioning_unavailable',
      details: { method: 'suspendOrder', status: 503 },
    });
    expect((error as Error).message).toBe(
      'provisioning suspendOrder answered 503: service unavailable: storage unreachable, retry later',
    );
  });

  it.each([
    [503, 'a debug page', (key: string) => `<pre>x-api-key: ${key}\nupstream down</pre>`],
    [400, 'a refusal', (key: string) => JSON.stringify(`no partner has the key ${key}`)],
    [400, 'a gateway page', (key: string) => `<h1>bad request for key ${key}</h1>`],
    [200, 'an answer that is not JSON', (key: string) => `ok ${key}`],
    [
      200,
      'an order about the key',
      (key: string) => JSON.stringify({ ...orderOf(), remoteId: key }),
    ],
    [
      200,
      'an order with the key for a field',
      (key: string) => JSON.stringify({ ...orderOf(), licenses: key }),
    ],
  ])('never quotes its API key from an answer, a %i with %s', async (status, _what, page) => {
    const apiKey = 'echoed-key-2b4d6f8a0c1e3a5c7e9b1d3f';
    const server = await listen((req, res) => {
      res.writeHead(status, { 'content-type': 'text/plain' });
      res.end(page(String(req.headers['x-api-key'])));
    });
    stops.push(server.close);
    const client = track(httpClient({ url: server.url, apiKey, variant: 'marketplace' }));
    const error = await client.createOrder(anOrder).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Error);
    const text = `${(error as Error).message} ${JSON.stringify(error)}`;
    expect(text).toContain('[redacted]');
    expect(text).not.toContain(apiKey);
  });

  it.each([
    ['escaped in a JSON string', (key: string) => JSON.stringify(`no partner has the key ${key}`)],
    [
      'with its slashes escaped',
      (key: string) => `"no key ${JSON.stringify(key).slice(1, -1).replaceAll('/', '\\/')}"`,
    ],
    [
      'in an HTML page',
      (key: string) => `<p>key ${key.replaceAll('&', '&amp;').replaceAll('"', '&quot;')}</p>`,
    ],
    ['escaped by Go', (key: string) => JSON.stringify(`key ${key}`).replaceAll('&', '\\u0026')],
    [
      'in an HTML page by number',
      (key: string) =>
        `<p>${key.replaceAll('&', '&#38;').replaceAll('"', '&#34;').replaceAll("'", '&#x27;')}</p>`,
    ],
    [
      // PHP's htmlspecialchars (ENT_QUOTES) writes ' as &#039;, WordPress & as &#038;.
      'in an HTML page by zero-padded number',
      (key: string) =>
        `<p>${key.replaceAll('&', '&#038;').replaceAll('"', '&#034;').replaceAll("'", '&#039;')}</p>`,
    ],
    [
      'in an HTML page by hex number in mixed case',
      (key: string) =>
        `<p>${key.replaceAll('&', '&#X26;').replaceAll('"', '&#x0022;').replaceAll('/', '&#X2f;').replaceAll("'", '&#x27;')}</p>`,
    ],
    [
      'in an HTML page by upper-case names',
      (key: string) => `<p>${key.replaceAll('&', '&AMP;').replaceAll('"', '&QUOT;')}</p>`,
    ],
    [
      'escaped in JSON with upper-case hex',
      (key: string) => JSON.stringify(`key ${key}`).replaceAll('/', '\\u002F'),
    ],
  ])('never quotes a key with quotes and ampersands %s', async (_what, page) => {
    const apiKey = 'k"e&y/2b4d\'6f8a0c1e3a5c';
    const server = await listen((_req, res) => {
      res.writeHead(400, { 'content-type': 'text/plain' });
      res.end(page(apiKey));
    });
    stops.push(server.close);
    const client = track(httpClient({ url: server.url, apiKey, variant: 'marketplace' }));
    const error = await client.createOrder(anOrder).catch((e: unknown) => e);
    const text = `${(error as Error).message} ${JSON.stringify(error)}`;
    expect(text).toContain('[redacted]');
    for (const form of [apiKey, 'k\\"e', 'e&y', 'e&amp;y', 'e\\u0026y', 'e&#38;y', '6f8a0c1e'])
      expect(text).not.toContain(form);
  });

  it('carries the wait a 429 or 503 asks for, in seconds or as a date of its own clock', async () => {
    const answers: [number, Record<string, string>][] = [
      [429, { 'retry-after': '120' }],
      [
        503,
        { 'retry-after': 'Sun, 22 Nov 2026 10:00:30 GMT', date: 'Sun, 22 Nov 2026 10:00:00 GMT' },
      ],
    ];
    const client = await clientAnswering((_req, res) => {
      const [status, headers] = answers.shift() ?? [500, {}];
      res.writeHead(status, { 'content-type': 'application/json', ...headers });
      res.end(JSON.stringify('slow down'));
    });
    const first = await client.suspendOrder({ id: 'A-1' }).catch((e: unknown) => e);
    expect(first).toBeInstanceOf(TransientError);
    expect(first).toMatchObject({ details: { status: 429, retryAfterMs: 120_000 } });
    expect((first as Error).message).toBe(
      'provisioning suspendOrder answered 429, asking to retry in 120 s: slow down',
    );
    const second = await client.suspendOrder({ id: 'A-1' }).catch((e: unknown) => e);
    expect(second).toMatchObject({ details: { status: 503, retryAfterMs: 30_000 } });
  });

  it('answers TransientError when the service does not answer within timeoutMs', async () => {
    const client = await clientAnswering(
      () => {
        // Holds every request: the call's deadline must end the wait.
      },
      { timeoutMs: 200 },
    );
    const error = await client.cancelOrder({ id: 'A-1' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TransientError);
    expect(error).toMatchObject({ details: { code: 'TIMEOUT' } });
  });

  it('queues no call behind a full pool, where it would spend its deadline waiting', async () => {
    // 60 calls (3 workers' default concurrency) to a service that takes 400 ms: with a pool of
    // 16 connections, the last ones would wait 800 ms for a connection and time out.
    const client = await clientAnswering(
      (_req, res) => {
        setTimeout(() => res.end('true'), 400);
      },
      { timeoutMs: 1_000 },
    );
    const answers = await Promise.allSettled(
      Array.from({ length: 60 }, (_, i) => client.cancelOrder({ id: `A-${i}` })),
    );
    expect(answers.filter((a) => a.status === 'rejected')).toEqual([]);
  });

  it('ends a call whose answer trickles in at timeoutMs, whole call included', async () => {
    const client = await clientAnswering(
      (_req, res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        // A byte every 50 ms: no single wait is long, the whole answer is.
        const timer = setInterval(() => res.write(' '), 50);
        res.on('close', () => clearInterval(timer));
      },
      { timeoutMs: 300 },
    );
    const started = Date.now();
    const error = await client.cancelOrder({ id: 'A-1' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TransientError);
    expect(error).toMatchObject({ details: { code: 'TIMEOUT' } });
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  it('throws a plain Error naming the method for a malformed 200 answer', async () => {
    const bodies = ['{"id": "A-1"}', 'not json'];
    const client = await clientAnswering((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(bodies.shift());
    });
    for (const expected of [/answered an unexpected shape: answer\.customer/, /not JSON/]) {
      const error = await client.createOrder(anOrder).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(MalformedAnswerError);
      expect(error).not.toBeInstanceOf(RefusalError);
      expect(error).not.toBeInstanceOf(TransientError);
      expect((error as Error).message).toMatch(/^provisioning createOrder answered/);
      expect((error as Error).message).toMatch(expected);
    }
  });

  it('never takes an order answered in milliseconds or with an empty term', async () => {
    const bodies = [
      { ...orderOf(), startsAt: T0 * 1000, expiresAt: (T0 + DAY) * 1000 },
      { ...orderOf(), expiresAt: T0 },
      { ...orderOf(), licenses: -1 },
    ];
    const client = await clientAnswering((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(bodies.shift()));
    });
    for (const expected of [
      /answer\.startsAt: must be at most 253402300799/,
      new RegExp(`answer\\.expiresAt: must be after startsAt \\(${T0}\\), got ${T0}`),
      /answer\.licenses/,
    ]) {
      const error = await client.createOrder(anOrder).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(MalformedAnswerError);
      expect((error as Error).message).toMatch(expected);
    }
  });

  it('takes an order whose customer is an integer, or a partial order answered without duration', async () => {
    // The external variant's internal customer id is an integer; the spec does not show the
    // answer to a partial order, which was sent no duration.
    const partial = { ...anOrder, id: 'A-1.p1', startsAt: T0, expiresAt: T0 + 31 * DAY };
    const { duration: _none, ...withoutDuration } = {
      ...orderOf(),
      remoteId: 'A-1.p1',
      startsAt: T0,
      expiresAt: T0 + 31 * DAY,
    };
    const bodies = [
      { ...orderOf(), customer: 42, remoteId: 'A-1', startsAt: T0, expiresAt: T0 + 31 * DAY },
      withoutDuration,
    ];
    const client = await clientAnswering((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(bodies.shift()));
    });
    expect(await client.createOrder(anOrder)).toMatchObject({ customer: 42, remoteId: 'A-1' });
    expect(await client.createOrder(partial)).toMatchObject({ remoteId: 'A-1.p1', startsAt: T0 });
  });

  it('reads an answer and a refusal sent after a UTF-8 byte order mark', async () => {
    const answers: [number, unknown][] = [
      [200, { ...orderOf(), remoteId: 'A-1', startsAt: T0, expiresAt: T0 + 31 * DAY }],
      [400, 'no such product'],
    ];
    const client = await clientAnswering((_req, res) => {
      const [status, body] = answers.shift() ?? [500, 'none left'];
      res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' });
      res.end(`\uFEFF${JSON.stringify(body)}`);
    });
    expect(await client.createOrder(anOrder)).toMatchObject({ remoteId: 'A-1', startsAt: T0 });
    const refused = await client.createOrder(anOrder).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(RefusalError);
    expect((refused as Error).message).toContain('no such product');
  });

  it('takes a 200 with any JSON or none to a cancel, suspend or unsuspend for done: the spec shows no body', async () => {
    const bodies = ['{}', '', '"OK"', '{"ok":true}', 'true'];
    const client = await clientAnswering((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(bodies.shift());
    });
    expect(await client.cancelOrder({ id: 'A-1' })).toBe(true);
    expect(await client.suspendOrder({ id: 'A-1' })).toBe(true);
    expect(await client.unsuspendOrder({ id: 'A-1' })).toBe(true);
    expect(await client.cancelOrder({ id: 'A-1' })).toBe(true);
    expect(await client.suspendOrder({ id: 'A-1' })).toBe(true);
  });

  it('takes no page for a change done: a maintenance page or a catch-all at a wrong URL', async () => {
    const pages = ['<h1>Scheduled maintenance</h1>', 'OK', `"${'x'.repeat(MAX_ANSWER_BYTES)}"`];
    const client = await clientAnswering((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end(pages.shift());
    });
    for (let i = 0; i < 3; i += 1) {
      const error = await client.cancelOrder({ id: 'A-1' }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(MalformedAnswerError);
      expect((error as Error).message).toMatch(
        /^provisioning cancelOrder answered 200 with a body/,
      );
    }
  });

  it.each([
    ['a gateway page', '<h1>400 The plain HTTP request was sent to HTTPS port</h1>'],
    ['a JSON object', '{"message":"Missing Authentication Token"}'],
    ['nothing', ''],
  ])(
    'takes a 400 with %s for no refusal of the service: a configuration error, retried',
    async (_, page) => {
      const client = await clientAnswering((_req, res) => {
        res.writeHead(400, { 'content-type': 'text/html' });
        res.end(page);
      });
      const error = await client.cancelOrder({ id: 'A-1' }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ConfigError);
      expect(error).toMatchObject({
        code: 'provisioning_unexpected_answer',
        details: { method: 'cancelOrder', status: 400 },
      });
      expect((error as Error).message).toContain(
        `provisioning cancelOrder answered 400 with a body that is not the interface's (a JSON string): ${JSON.stringify(page)}`,
      );
    },
  );

  it('takes a redirect for a configuration error naming where it points, without its query', async () => {
    const client = await clientAnswering((_req, res) => {
      res.writeHead(308, { location: 'https://provisioning.example/api/?code=SECRET-1' });
      res.end();
    });
    const error = await client.cancelOrder({ id: 'A-1' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as Error).message).toBe(
      'provisioning cancelOrder answered 308, a redirect to https://provisioning.example/api/: set PROVISIONING_URL to where the service answers',
    );
  });

  it.each([
    ['in its path', (key: string) => `https://gw.example/keys/${key}/provisioning`],
    ['as its user', (key: string) => `https://${key}@gw.example/provisioning`],
    ['with a password', () => 'https://user:hunter2-pw@gw.example/provisioning'],
    ['with a password holding "@"', () => 'https://user:pw@hunter2-pw@gw.example/provisioning'],
    ['without its scheme', () => '//user:hunter2-pw@gw.example/provisioning'],
  ])('never quotes the API key or a password a redirect carries %s', async (_where, location) => {
    const apiKey = 'echoed-key-2b4d6f8a0c1e3a5c7e9b1d3f';
    const server = await listen((req, res) => {
      res.writeHead(302, { location: location(String(req.headers['x-api-key'])) });
      res.end();
    });
    stops.push(server.close);
    const client = track(httpClient({ url: server.url, apiKey, variant: 'marketplace' }));
    const error = await client.cancelOrder({ id: 'A-1' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConfigError);
    const text = `${(error as Error).message} ${JSON.stringify(error)}`;
    expect(text).toMatch(/a redirect to (https:)?\/\/gw\.example\//);
    expect(text).not.toContain(apiKey);
    expect(text).not.toContain('hunter2-pw');
  });

  it('never shows the query of PROVISIONING_URL, where a gateway may take its key', async () => {
    const server = await listen(() => {});
    await server.close();
    const client = track(
      httpClient({
        url: `${server.url}/provisioning?code=SECRET-2`,
        apiKey: 'k',
        variant: 'marketplace',
      }),
    );
    const error = await client.cancelOrder({ id: 'A-1' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TransientError);
    expect((error as Error).message).toContain(`at ${server.url}/provisioning failed`);
    expect((error as Error).message).not.toContain('SECRET-2');
  });

  it.each([
    ['A-1', '"A-1"'],
    ['A'.repeat(100_000), `"${'A'.repeat(76)}...`],
  ])(
    'throws a plain Error for an answer about another order than the one sent',
    async (remoteId, shown) => {
      const client = await clientAnswering((_req, res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        // A gateway's cached answer for the chain's first order, not the renewal asked for.
        res.end(
          JSON.stringify({
            id: 'o-1',
            customer: 'C',
            instance: null,
            product: 'suite-std',
            licenses: 1,
            duration: 'monthly',
            count: 1,
            createdAt: T0,
            startsAt: T0,
            expiresAt: T0 + 30 * DAY,
            remoteId,
          }),
        );
      });
      const renewal = { customer: 'C', id: 'A-1.r2', product: 'suite-std', licenses: 1 };
      const error = await client.createOrder(renewal).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(Error);
      expect(error).not.toBeInstanceOf(TransientError);
      // Quoted as other values are, cut short: a remote's id can be any length.
      expect((error as Error).message).toBe(
        `provisioning createOrder answered for ${shown}, not for the "A-1.r2" it was sent`,
      );
    },
  );

  /** A server that streams `bytes` of `fill` after `head`, and counts what it got to write. */
  async function streaming(status: number, head: string, bytes: number, fill = ' ') {
    let written = 0;
    const server = await listen((_req, res) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.write(head);
      const chunk = Buffer.alloc(64 * 1024, fill);
      const more = () => {
        while (written < bytes) {
          written += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', more);
        }
        res.end();
      };
      res.on('close', () => {
        bytes = 0;
      });
      more();
    });
    stops.push(server.close);
    return { url: server.url, written: () => written };
  }

  it('reads at most MAX_ANSWER_BYTES of an error page, and drops the rest unread', async () => {
    const server = await streaming(500, '<h1>Internal Server Error</h1>', 256 * 1024 * 1024);
    const client = track(httpClient({ url: server.url, apiKey: 'k', variant: 'marketplace' }));
    const error = await client.cancelOrder({ id: 'A-1' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TransientError);
    expect((error as Error).message.length).toBeLessThan(600);
    expect((error as Error).message).toContain('answered 500: <h1>Internal Server Error</h1>');
    // The connection was closed long before the 256 MiB (socket buffers hold a few MiB).
    expect(server.written()).toBeLessThan(32 * 1024 * 1024);
  });

  it('takes no 200 answer larger than MAX_ANSWER_BYTES, whatever it ends with', async () => {
    const server = await streaming(200, '', 2 * MAX_ANSWER_BYTES);
    const client = track(httpClient({ url: server.url, apiKey: 'k', variant: 'marketplace' }));
    const error = await client.createOrder(anOrder).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).message).toMatch(/answered 200 with a body larger than 1048576 bytes/);
  });

  it('keeps an excerpt of a long refusal: it goes into a job failure and a chain history', async () => {
    const client = await clientAnswering((_req, res) => {
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end(JSON.stringify(`refused: ${'x'.repeat(100_000)}`));
    });
    const refusal = await refusalOf(client.cancelOrder({ id: 'A-1' }), 'cancelOrder');
    expect(refusal.message).toMatch(/^refused: x+\.\.\.$/);
    expect(refusal.message.length).toBe(500);
  });

  it('retries an exchange broken in other ways: an answer that is not HTTP, headers too large', async () => {
    const sockets = new Set<Socket>();
    const notHttp = createServer((socket) => {
      sockets.add(socket);
      socket.on('error', () => {});
      socket.end('-ERR unknown command\r\n');
    });
    notHttp.listen(0, '127.0.0.1');
    await once(notHttp, 'listening');
    stops.push(async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => notHttp.close(() => resolve()));
    });
    const hugeHeaders = await listen((_req, res) => {
      res.writeHead(200, { 'x-padding': 'x'.repeat(64 * 1024) });
      res.end('true');
    });
    stops.push(hugeHeaders.close);
    const { port } = notHttp.address() as AddressInfo;
    for (const url of [`http://127.0.0.1:${port}/provisioning`, hugeHeaders.url]) {
      const client = track(httpClient({ url, apiKey: 'k', variant: 'marketplace' }));
      const error = await client.cancelOrder({ id: 'A-1' }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(TransientError);
      expect(error).toMatchObject({ code: 'provisioning_unavailable' });
    }
  });

  it('answers ConfigError for a certificate not trusted here, naming what to check', async () => {
    const tlsDir = new URL('../../helpers/tls/', import.meta.url);
    const server = createHttpsServer(
      {
        key: await readFile(new URL('localhost.key', tlsDir)),
        cert: await readFile(new URL('localhost.pem', tlsDir)),
      },
      (_req, res) => res.end('true'),
    );
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    stops.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const { port } = server.address() as AddressInfo;
    const url = `https://localhost:${port}/provisioning`;
    const client = track(httpClient({ url, apiKey: 'k', variant: 'marketplace' }));
    const error = await client.cancelOrder({ id: 'A-1' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConfigError);
    expect(error).toMatchObject({ code: 'provisioning_tls' });
    expect((error as Error).message).toContain('NODE_EXTRA_CA_CERTS');
  });

  it('answers ConfigError for https to a port that speaks plain HTTP, naming what to check', async () => {
    const server = await listen((_req, res) => res.end('true'));
    stops.push(server.close);
    const url = server.url.replace(/^http:/, 'https:');
    const client = track(httpClient({ url, apiKey: 'k', variant: 'marketplace' }));
    const error = await client.cancelOrder({ id: 'A-1' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConfigError);
    expect(error).toMatchObject({ code: 'provisioning_tls' });
    expect((error as Error).message).toContain('plain HTTP on an https URL');
  });

  it.each([
    [403, ConfigError],
    [404, TransientError],
    [405, TransientError],
    [409, TransientError],
    [413, TransientError],
    [425, TransientError],
  ])(
    'does not take a %i (a gateway, a deploy, a wrong path) for a refusal',
    async (status, kind) => {
      const client = await clientAnswering((_req, res) => {
        res.writeHead(status, { 'content-type': 'text/html' });
        res.end('<h1>Not the service</h1>');
      });
      const error = await client.cancelOrder({ id: 'A-1' }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(kind);
      expect(error).not.toBeInstanceOf(RefusalError);
      expect(error).toMatchObject({ details: { status } });
    },
  );
});

// --- through a proxy ----------------------------------------------------------------------------

describe('the HTTP client through a proxy', () => {
  let proxy: Awaited<ReturnType<typeof startProxy>>;
  let partner: Partner;
  let apiKey: string;
  const clients: ProvisioningClient[] = [];

  beforeEach(async () => {
    app.clock.set(T0);
    proxy = await startProxy(app.baseUrl);
  });
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((client) => client.close()));
    await proxy.close();
  });

  async function clientFor(
    variant: 'marketplace' | 'external',
    options: { extensions?: boolean; timeoutMs?: number } = {},
  ): Promise<ProvisioningClient> {
    ({ partner, apiKey } = await app.addPartner(variant));
    const client = httpClient({ url: proxy.url, apiKey, variant, ...options });
    clients.push(client);
    await client.createCustomer({ id: 'C-1', name: 'C', admin: { email: 'c@example.com' } });
    return client;
  }

  /** The caller ids of a chain's orders, as the core stores them. */
  async function chainOrders(parent: string): Promise<string[]> {
    const json = await app.redis.hget(partnerKeys(partner.id).chains, parent);
    return (JSON.parse(json ?? 'null') as { orders: string[] }).orders;
  }

  it('does not send `parent` or `licenses` when extensions are off', async () => {
    const client = await clientFor('marketplace');
    const order = { customer: 'C-1', id: 'O-1', product: 'suite-std', licenses: 2 };
    await client.createOrder({ ...order, duration: 'monthly', parent: 'O-0' });
    expect(proxy.calls.at(-1)).toEqual({
      method: 'createOrder',
      params: { ...order, duration: 'monthly' },
    });

    const external = await clientFor('external');
    await external
      .createRenewalOrder({ parent: 'E-1', id: 'E-1.r2', licenses: 5 })
      .catch(() => undefined);
    expect(proxy.calls.at(-1)).toEqual({
      method: 'createRenewalOrder',
      params: { parent: 'E-1', id: 'E-1.r2' },
    });
  });

  it('sends `parent` and `licenses` when extensions are on', async () => {
    const client = await clientFor('external', { extensions: true });
    await client
      .createRenewalOrder({ parent: 'E-1', id: 'E-1.r2', licenses: 5 })
      .catch(() => undefined);
    expect(proxy.calls.at(-1)?.params).toEqual({ parent: 'E-1', id: 'E-1.r2', licenses: 5 });
  });

  describe('when the answer to a create is lost', () => {
    it('makes one marketplace renewal: the retry gets the order the lost answer carried', async () => {
      const client = await clientFor('marketplace', { extensions: true, timeoutMs: 300 });
      const first = { customer: 'C-1', id: 'O-1', product: 'suite-std', licenses: 2 };
      const parent = await client.createOrder({ ...first, duration: 'monthly' });
      app.clock.advance(20 * DAY);
      const renewal = {
        ...first,
        duration: 'monthly' as const,
        id: 'O-1.r2',
        startsAt: parent.expiresAt,
        parent: 'O-1',
      };

      const lost = proxy.holdNext('createOrder');
      const error = await client.createOrder(renewal).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(TransientError);
      expect(error).toMatchObject({ details: { code: 'TIMEOUT' } });
      const lostOrder = JSON.parse(await lost) as { id: string };

      const retry = await client.createOrder(renewal);
      expect(retry.id).toBe(lostOrder.id);
      expect(retry.count).toBe(2);
      expect(await client.createOrder(renewal)).toEqual(retry);
      expect(await chainOrders('O-1')).toEqual(['O-1', 'O-1.r2']);
    });

    it('makes one external renewal: the retry gets the same order, another id is refused', async () => {
      const client = await clientFor('external', { timeoutMs: 300 });
      const first = { customer: 'C-1', id: 'E-1', product: 'suite-std', licenses: 3 };
      await client.createFirstOrder({ ...first, duration: 'monthly' });
      app.clock.advance(20 * DAY);

      const lost = proxy.holdNext('createRenewalOrder');
      const error = await client
        .createRenewalOrder({ parent: 'E-1', id: 'E-1.r2' })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(TransientError);
      const lostOrder = JSON.parse(await lost) as { id: string };

      const retry = await client.createRenewalOrder({ parent: 'E-1', id: 'E-1.r2' });
      expect(retry).toMatchObject({ id: lostOrder.id, count: 2 });
      expect(await client.createRenewalOrder({ parent: 'E-1', id: 'E-1.r2' })).toEqual(retry);
      // Had the lost request and the retry made two renewals, the chain would reach further.
      const other = client.createRenewalOrder({ parent: 'E-1', id: 'E-1.r2b' });
      expect((await refusalOf(other, 'createRenewalOrder')).message).toBe(
        'renewal refused: 39 days remain in the current term (window: 15 days)',
      );
      expect(await chainOrders('E-1')).toEqual(['E-1', 'E-1.r2']);
    });
  });
});

describe('retryAfterMs', () => {
  const date = 'Sun, 22 Nov 2026 10:00:00 GMT';
  it('reads seconds, or a date against the answer’s own Date header', () => {
    expect(retryAfterMs('0', undefined)).toBe(0);
    expect(retryAfterMs(' 45 ', undefined)).toBe(45_000);
    expect(retryAfterMs('Sun, 22 Nov 2026 10:05:00 GMT', date)).toBe(300_000);
    // A date already past asks for no wait.
    expect(retryAfterMs('Sun, 22 Nov 2026 09:00:00 GMT', date)).toBe(0);
    // RFC 9110's obsolete forms, the asctime one in GMT though it names no zone.
    expect(retryAfterMs('Sunday, 22-Nov-26 10:01:00 GMT', date)).toBe(60_000);
    expect(retryAfterMs('Sun Nov 22 10:02:00 2026', date)).toBe(120_000);
  });

  it('ignores what it cannot read: no header, no Date to read a date against, nonsense', () => {
    expect(retryAfterMs(undefined, date)).toBeUndefined();
    expect(retryAfterMs('', date)).toBeUndefined();
    expect(retryAfterMs('Sun, 22 Nov 2026 10:05:00 GMT', undefined)).toBeUndefined();
    expect(retryAfterMs('-5', date)).toBeUndefined();
    expect(retryAfterMs('soon', date)).toBeUndefined();
    expect(retryAfterMs('1.5', date)).toBeUndefined();
    expect(retryAfterMs('Sun 5', date)).toBeUndefined();
    expect(retryAfterMs('Sun, 22 Nov 2026 10:05:00 GMT', 'yesterday')).toBeUndefined();
  });
});
