// The transport envelope over real HTTP: GET with a JSON body (and POST), the API key, the
// {method, params} body, the body limit, health, and the shape of every error response.
import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startTestApp, T0, type TestApp, useTestApp } from '../../helpers/app.js';
import { startTestRedis, type TestRedis } from '../../helpers/redis-server.js';
import { type CallResult, newPartner, ok, type PartnerClient, refusal } from './fixtures.js';

const app = useTestApp();

interface RawResult extends CallResult {
  contentType: string | undefined;
}

/** A request built by hand, for what `app.call` would not send. */
async function raw(
  url: string,
  options: {
    method?: 'GET' | 'POST' | 'PUT' | 'DELETE';
    headers?: Record<string, string>;
    body?: string | Buffer;
  },
): Promise<RawResult> {
  const res = await request(url, {
    method: options.method ?? 'GET',
    headers: options.headers ?? {},
    body: options.body,
  });
  const text = await res.body.text();
  const type = res.headers['content-type'];
  return {
    status: res.statusCode,
    body: text === '' ? undefined : JSON.parse(text),
    contentType: Array.isArray(type) ? type[0] : type,
  };
}

/**
 * Bytes sent over a socket of their own (`send` writes them): all the server answered, once it
 * closed the connection.
 */
async function overSocket(
  baseUrl: string,
  send: (socket: Socket) => Promise<void> | void,
): Promise<string> {
  const url = new URL(baseUrl);
  const socket = connect(Number(url.port), url.hostname);
  socket.on('error', () => {});
  await once(socket, 'connect');
  let answer = '';
  socket.on('data', (data: Buffer) => {
    answer += data.toString('latin1');
  });
  const closed = once(socket, 'close');
  await send(socket);
  await closed;
  return answer;
}

function expectJson(res: RawResult): void {
  expect(res.contentType).toMatch(/^application\/json\b/);
}

const customerParams = { id: 'C-1', name: 'Acme', admin: { email: 'boss@acme.example' } };

describe('the provisioning address', () => {
  let marketplace: PartnerClient;
  let external: PartnerClient;

  beforeEach(async () => {
    marketplace = await newPartner(app, 'marketplace');
    external = await newPartner(app, 'external');
  });

  const send = (
    apiKey: string | undefined,
    body: string | Buffer,
    extra: { method?: 'GET' | 'POST' | 'PUT' | 'DELETE'; headers?: Record<string, string> } = {},
  ) =>
    raw(app.url, {
      method: extra.method ?? 'GET',
      headers: {
        'content-type': 'application/json',
        ...(apiKey === undefined ? {} : { 'x-api-key': apiKey }),
        ...extra.headers,
      },
      body,
    });

  describe('its path', () => {
    it('is also reached with a trailing slash', async () => {
      const res = await raw(`${app.url}/`, {
        headers: { 'content-type': 'application/json', 'x-api-key': marketplace.apiKey },
        body: JSON.stringify({ method: 'createCustomer', params: customerParams }),
      });
      expect(ok<{ id: string }>(res).id).toEqual(expect.any(String));
    });

    it('refuses an HTTP method it has no route for with 400 and a JSON string body', async () => {
      const res = await request(app.url, {
        method: 'PROPFIND',
        headers: { 'x-api-key': marketplace.apiKey },
      });
      expect(res.statusCode).toBe(400);
      expect(await res.body.json()).toBe(
        'HTTP method PROPFIND is not supported here: use GET (or POST) with a JSON body',
      );
    });

    it.each([
      ['an HTTP method it has no route for', 'PROPFIND', ''],
      ['an unknown path below it', 'GET', '/v2'],
      ['a path it cannot decode', 'GET', '/%E0%A4%A'],
    ])('checks the key before it answers %s (401)', async (_label, method, path) => {
      for (const [headers, message] of [
        [{}, 'missing x-api-key header'],
        [{ 'x-api-key': 'not-a-key' }, 'invalid API key'],
      ] as const) {
        const res = await request(`${app.url}${path}`, { method, headers });
        expect(res.statusCode).toBe(401);
        expect(await res.body.json()).toBe(message);
      }
    });

    it.each([
      ['an unknown path below it', '/provisioning/nope'],
      ['a path it cannot decode', '/provisioning/%zz'],
    ])('checks the key first also in an absolute-form request (%s)', async (_label, path) => {
      const { host } = new URL(app.baseUrl);
      const answer = await overSocket(app.baseUrl, (socket) => {
        socket.write(
          `GET http://user:pw@${host}${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`,
        );
      });
      const [head, body] = answer.split('\r\n\r\n');
      expect(head).toMatch(/^HTTP\/1\.1 401/);
      expect(JSON.parse(body ?? '')).toBe('missing x-api-key header');
    });

    it('answers an unknown path in an absolute-form request naming its path alone', async () => {
      const { host } = new URL(app.baseUrl);
      const answer = await overSocket(app.baseUrl, (socket) => {
        socket.write(
          `GET http://user:pw@${host}/provisioning/nope HTTP/1.1\r\nHost: ${host}\r\n` +
            `x-api-key: ${marketplace.apiKey}\r\nConnection: close\r\n\r\n`,
        );
      });
      const [head, body] = answer.split('\r\n\r\n');
      expect(head).toMatch(/^HTTP\/1\.1 404/);
      expect(JSON.parse(body ?? '')).toBe(
        'no such path: GET /provisioning/nope (the interface is /provisioning)',
      );
      // Elsewhere too: the user info sent is not echoed back.
      const elsewhere = await overSocket(app.baseUrl, (socket) => {
        socket.write(
          `GET http://user:pw@${host}/nope?q=1 HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`,
        );
      });
      expect(JSON.parse(elsewhere.split('\r\n\r\n')[1] ?? '')).toEqual({
        error: 'not_found',
        message: 'no such path: GET /nope',
      });
    });

    it('answers a path it cannot decode with 400 and a JSON string body', async () => {
      const res = await request(`${app.url}/%E0%A4%A`, {
        headers: { 'x-api-key': marketplace.apiKey },
      });
      expect(res.statusCode).toBe(400);
      expect(await res.body.json()).toEqual(expect.stringContaining('%E0%A4%A'));
    });

    it('answers an unknown path below it with 404 and a JSON string body', async () => {
      const res = await raw(`${app.url}/v2`, {
        headers: { 'content-type': 'application/json', 'x-api-key': marketplace.apiKey },
        body: JSON.stringify({ method: 'createCustomer', params: customerParams }),
      });
      expect(res.status).toBe(404);
      expect(res.body).toBe('no such path: GET /provisioning/v2 (the interface is /provisioning)');
      expectJson(res);
    });

    it('answers an unknown path below it with 404 and a JSON string also when its body is no JSON', async () => {
      const headers = { 'content-type': 'application/json', 'x-api-key': marketplace.apiKey };
      const res = await raw(`${app.url}/v2`, {
        method: 'POST',
        headers,
        body: '{"method": "createCustomer", ',
      });
      expect(res.status).toBe(404);
      expect(res.body).toBe('no such path: POST /provisioning/v2 (the interface is /provisioning)');
      expectJson(res);
      const unkeyed = await raw(`${app.url}/v2`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{',
      });
      expect(unkeyed).toMatchObject({ status: 401, body: 'missing x-api-key header' });
    });
  });

  describe('requests that succeed', () => {
    it('answers a GET with a JSON body with 200 and a JSON response', async () => {
      const res = await send(
        marketplace.apiKey,
        JSON.stringify({ method: 'createCustomer', params: customerParams }),
      );
      expect(res.status).toBe(200);
      expectJson(res);
      expect(res.body).toMatchObject({ remoteId: 'C-1', name: 'Acme' });
    });

    it('answers a POST with the same JSON body the same way', async () => {
      const res = await send(
        marketplace.apiKey,
        JSON.stringify({ method: 'createCustomer', params: customerParams }),
        { method: 'POST' },
      );
      expect(res.status).toBe(200);
      expectJson(res);
      expect(res.body).toMatchObject({ remoteId: 'C-1', name: 'Acme' });
    });

    it('serves the same object to a GET and a POST of the same call', async () => {
      const body = JSON.stringify({ method: 'createCustomer', params: customerParams });
      const viaGet = await send(marketplace.apiKey, body);
      const viaPost = await send(marketplace.apiKey, body, { method: 'POST' });
      expect(viaPost.body).toEqual(viaGet.body);
    });

    it('accepts a content type with a charset', async () => {
      const res = await send(
        marketplace.apiKey,
        JSON.stringify({ method: 'createCustomer', params: customerParams }),
        { headers: { 'content-type': 'application/json; charset=utf-8' } },
      );
      expect(res.status).toBe(200);
    });

    it('answers true as a JSON body for operations that return true', async () => {
      ok(await marketplace.call('createCustomer', customerParams));
      ok(
        await marketplace.call('createOrder', {
          customer: 'C-1',
          id: 'O-1',
          product: 'suite-std',
          licenses: 1,
          duration: 'monthly',
        }),
      );
      const res = await send(
        marketplace.apiKey,
        JSON.stringify({ method: 'suspendOrder', params: { id: 'O-1' } }),
      );
      expect(res.status).toBe(200);
      expectJson(res);
      expect(res.body).toBe(true);
    });
  });

  describe('the API key', () => {
    it('refuses a request without x-api-key with 401 and a JSON string body', async () => {
      const res = await send(
        undefined,
        JSON.stringify({ method: 'createCustomer', params: customerParams }),
      );
      expect(refusal(res, 401)).not.toBe('');
      expectJson(res);
    });

    it('refuses an empty x-api-key with 401', async () => {
      const res = await send('', JSON.stringify({ method: 'createCustomer', params: {} }));
      refusal(res, 401);
    });

    it('refuses an unknown key with 401 and a JSON string body', async () => {
      const res = await send(
        `${marketplace.apiKey}x`,
        JSON.stringify({ method: 'createCustomer', params: customerParams }),
      );
      refusal(res, 401);
      expectJson(res);
    });

    it('refuses a key before looking at the method', async () => {
      const res = await send('no-such-key', JSON.stringify({ method: 'nonsense', params: {} }));
      refusal(res, 401);
    });

    it('refuses a key before reading the body: malformed JSON, another type, a large body', async () => {
      expect(refusal(await send('no-such-key', '{oops'), 401)).toBe('invalid API key');
      const text = await send(undefined, 'hello', { headers: { 'content-type': 'text/plain' } });
      expect(refusal(text, 401)).toBe('missing x-api-key header');
      const large = await send('no-such-key', Buffer.alloc(2 * 1024 * 1024, 'x'));
      expect(refusal(large, 401)).toBe('invalid API key');
    });

    it('stores nothing for a refused key', async () => {
      await send(
        'no-such-key',
        JSON.stringify({ method: 'createCustomer', params: customerParams }),
      );
      // Had the refused call stored the customer, this call would answer it, made at T0.
      app.clock.advance(60);
      const made = ok<{ createdAt: number }>(
        await marketplace.call('createCustomer', customerParams),
      );
      expect(made.createdAt).toBe(T0 + 60);
    });
  });

  describe('the method', () => {
    it('refuses an unknown method with 400 naming it', async () => {
      const text = refusal(await marketplace.call('deleteEverything', {}));
      expect(text).toContain('deleteEverything');
    });

    it('refuses a method inherited by every object', async () => {
      refusal(await marketplace.call('toString', {}));
      refusal(await marketplace.call('constructor', {}));
      refusal(await marketplace.call('__proto__', {}));
    });

    it.each([
      ['createFirstOrder', 'marketplace'],
      ['createRenewalOrder', 'marketplace'],
    ] as const)('refuses %s for a %s partner as a method of the other variant', async (m, v) => {
      expect(refusal(await marketplace.call(m, {}))).toBe(
        `method ${m} is not offered in the ${v} variant`,
      );
    });

    it.each([
      ['createOrder', 'external'],
      ['unsuspendOrder', 'external'],
    ] as const)('refuses %s for an %s partner as a method of the other variant', async (m, v) => {
      expect(refusal(await external.call(m, {}))).toBe(
        `method ${m} is not offered in the ${v} variant`,
      );
    });
  });

  describe('the body', () => {
    it.each([
      ['an array', '[{"method":"createCustomer"}]'],
      ['a string', '"createCustomer"'],
      ['a number', '42'],
      ['true', 'true'],
      ['null', 'null'],
    ])('refuses a body that is %s with 400 and a JSON string body', async (_label, body) => {
      const res = await send(marketplace.apiKey, body);
      refusal(res);
      expectJson(res);
    });

    it('refuses text with a lone surrogate, naming the field, and stores nothing', async () => {
      // JSON.stringify would store it as \udXXX, which the Lua scripts cannot decode later.
      const lone = (field: 'id' | 'name') =>
        `{"method":"createCustomer","params":{"id":${field === 'id' ? '"C-\\ud800"' : '"C-lone"'},"name":${field === 'name' ? '"Acme \\udc00"' : '"Acme"'},"admin":{"email":"boss@acme.example"}}}`;
      for (const field of ['id', 'name'] as const) {
        const res = await send(marketplace.apiKey, lone(field));
        expect(refusal(res)).toContain(`params.${field}: must be well-formed Unicode`);
      }
      const missing = await marketplace.call('createCustomer', { ...customerParams, id: 'C-lone' });
      expect(missing.status).toBe(200);
    });

    it('refuses a body whose bytes are not UTF-8, saying so, and stores nothing', async () => {
      // Decoded leniently, the name would be stored as two U+FFFD.
      const body = Buffer.concat([
        Buffer.from(
          '{"method":"createCustomer","params":{"id":"C-bytes","admin":{"email":"boss@acme.example"},"name":"',
        ),
        Buffer.from([0xff, 0xfe]),
        Buffer.from('"}}'),
      ]);
      const res = await send(marketplace.apiKey, body);
      expect(refusal(res)).toBe(
        'body is not UTF-8: send the JSON in UTF-8 (JSON text is UTF-8, RFC 8259)',
      );
      expectJson(res);
      // Nothing stored under the id: the same id with other params is created, not refused.
      const created = await marketplace.call('createCustomer', {
        ...customerParams,
        id: 'C-bytes',
      });
      expect(created.status).toBe(200);
    });

    it('refuses a body without method, naming method', async () => {
      const res = await send(marketplace.apiKey, JSON.stringify({ params: customerParams }));
      expect(refusal(res)).toContain('method');
    });

    it('refuses a method that is not a string', async () => {
      const res = await send(marketplace.apiKey, JSON.stringify({ method: 7, params: {} }));
      expect(refusal(res)).toContain('method');
    });

    it.each([
      ['an array', []],
      ['a string', 'C-1'],
      ['a number', 1],
      ['null', null],
    ])('refuses params that are %s, naming params', async (_label, params) => {
      const res = await send(
        marketplace.apiKey,
        JSON.stringify({ method: 'createCustomer', params }),
      );
      expect(refusal(res)).toContain('params');
    });

    it('refuses an extra top-level field, naming it', async () => {
      const res = await send(
        marketplace.apiKey,
        JSON.stringify({ method: 'createCustomer', params: customerParams, id: 'C-1' }),
      );
      expect(refusal(res)).toContain('id');
    });

    it('refuses invalid JSON with 400 and a JSON string body', async () => {
      const res = await send(marketplace.apiKey, '{"method": "createCustomer", ');
      refusal(res);
      expectJson(res);
    });

    it('refuses a "__proto__" key saying so, not that the JSON is invalid', async () => {
      const body = '{"method": "createCustomer", "params": {"id": "C-9", "__proto__": {}}}';
      const res = await send(marketplace.apiKey, body);
      expect(refusal(res)).toMatch(/holds a "__proto__" or "constructor" key/);
      expectJson(res);
    });

    it('refuses an empty body with 400 and a JSON string body', async () => {
      const res = await send(marketplace.apiKey, '');
      refusal(res);
      expectJson(res);
    });

    it('refuses a body without content-type with 400 and a JSON string body', async () => {
      const res = await raw(app.url, {
        headers: { 'x-api-key': marketplace.apiKey },
        body: JSON.stringify({ method: 'createCustomer', params: customerParams }),
      });
      refusal(res);
      expectJson(res);
    });

    it('refuses a body that is not JSON by content-type with 400, repeating none of it', async () => {
      const params = { email: 'a@b.example', password: 'hunter2-secret', instance: 'i-1' };
      const res = await send(marketplace.apiKey, JSON.stringify({ method: 'createUser', params }), {
        headers: { 'content-type': 'text/plain' },
      });
      expect(refusal(res)).toBe('Content-Type must be application/json');
      expectJson(res);
    });

    it('repeats no whole body in a refusal: it may hold a secret under any name', async () => {
      const body = JSON.stringify(JSON.stringify({ params: { password: 'hunter2-secret' } }));
      const res = await send(marketplace.apiKey, body);
      expect(refusal(res)).not.toContain('hunter2');
    });

    it('refuses a body over 1 MiB with 413 and a JSON string body', async () => {
      const padding = 'x'.repeat(2 * 1024 * 1024);
      const res = await send(
        marketplace.apiKey,
        JSON.stringify({ method: 'createCustomer', params: { ...customerParams, padding } }),
      );
      refusal(res, 413);
      expectJson(res);
    });

    it('refuses headers over 16 KiB with 431 and a JSON string body, elsewhere an object', async () => {
      const headers = { 'x-api-key': 'k'.repeat(20_000), 'content-type': 'application/json' };
      const provisioning = await request(app.url, { method: 'GET', headers, body: '{}' });
      expect(provisioning.statusCode).toBe(431);
      expect(provisioning.headers['content-type']).toMatch(/^application\/json/);
      expect(await provisioning.body.json()).toBe('request headers too large');
      const ops = await request(`${app.baseUrl}/ops/chains/X`, { headers });
      expect(ops.statusCode).toBe(431);
      expect(await ops.body.json()).toEqual({
        error: 'headers_too_large',
        message: 'request headers too large',
      });
    });

    it('answers headers that overflow in a later read than the request line with a JSON string', async () => {
      const answer = await overSocket(app.baseUrl, async (socket) => {
        socket.write('GET /provisioning HTTP/1.1\r\nHost: x\r\n');
        await sleep(50);
        socket.write(`x-api-key: ${'k'.repeat(20_000)}\r\n\r\n`);
      });
      expect(answer).toMatch(/^HTTP\/1\.1 431 /);
      expect(answer.split('\r\n\r\n')[1]).toBe('"request headers too large"');
    });

    it('accepts a body just under 1 MiB up to validation', async () => {
      const name = 'n'.repeat(1024 * 1024 - 200);
      const res = await send(
        marketplace.apiKey,
        JSON.stringify({ method: 'createCustomer', params: { ...customerParams, name } }),
      );
      // Past the body limit, the params rules answer: the name is too long.
      expect(refusal(res)).toContain('params.name');
    });
  });

  describe('every response', () => {
    it('carries application/json, for successes and for every kind of error', async () => {
      const responses = [
        await send(
          marketplace.apiKey,
          JSON.stringify({ method: 'createCustomer', params: customerParams }),
        ),
        await send(undefined, JSON.stringify({ method: 'createCustomer', params: {} })),
        await send(marketplace.apiKey, JSON.stringify({ method: 'nope', params: {} })),
        await send(marketplace.apiKey, JSON.stringify({ method: 'getUserByEmail', params: {} })),
        await send(marketplace.apiKey, '{oops'),
      ];
      for (const res of responses) expectJson(res);
      expect(responses.map((r) => r.status)).toEqual([200, 401, 400, 400, 400]);
      for (const res of responses.slice(1)) expect(typeof res.body).toBe('string');
    });

    it('answers an unknown user, customer and order with JSON string bodies', async () => {
      const bodies = [
        await marketplace.call('getUserByEmail', { email: 'nobody@example.com' }),
        await marketplace.call('createOrder', {
          customer: 'NOBODY',
          id: 'O-1',
          product: 'suite-std',
          licenses: 1,
          duration: 'monthly',
        }),
        await external.call('createRenewalOrder', { parent: 'NOPE', id: 'R-1' }),
      ];
      for (const res of bodies) refusal(res);
    });

    it('refuses other HTTP methods on the address with a JSON string body', async () => {
      const res = await send(
        marketplace.apiKey,
        JSON.stringify({ method: 'createCustomer', params: customerParams }),
        { method: 'PUT' },
      );
      refusal(res);
      expectJson(res);
    });
  });
});

describe('GET /healthz', () => {
  it('answers 200 with {status: "ok"}', async () => {
    const res = await raw(`${app.baseUrl}/healthz`, {});
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ status: 'ok' });
    expectJson(res);
  });

  it('answers a GET with content-type application/json and an empty body', async () => {
    const res = await raw(`${app.baseUrl}/healthz`, {
      headers: { 'content-type': 'application/json' },
    });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ status: 'ok' });
  });

  it('answers a GET with content-type application/json and an explicit empty body', async () => {
    const res = await raw(`${app.baseUrl}/healthz`, {
      headers: { 'content-type': 'application/json', 'content-length': '0' },
      body: '',
    });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ status: 'ok' });
  });

  it('needs no API key', async () => {
    const res = await raw(`${app.baseUrl}/healthz`, { headers: { 'x-api-key': 'wrong' } });
    expect(res.status).toBe(200);
  });

  it('refuses a body it cannot parse as the service answers errors, {error, message}', async () => {
    const res = await raw(`${app.baseUrl}/healthz`, {
      headers: { 'content-type': 'application/json' },
      body: '{bad',
    });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: 'invalid_request', message: expect.any(String) });
  });
});

describe('a request that stops arriving', () => {
  let redis: TestRedis;
  let slowApp: TestApp;

  beforeAll(async () => {
    redis = await startTestRedis();
    slowApp = await startTestApp(redis.url, { requestTimeoutMs: 500 });
  });

  afterAll(async () => {
    await slowApp?.close();
    await redis?.stop();
  });

  /** Sends a request's head and part of its body, then nothing: the answer, once closed. */
  function halfSent(path: string, apiKey: string): Promise<string> {
    return overSocket(slowApp.baseUrl, (socket) => {
      socket.write(
        `POST ${path} HTTP/1.1\r\nHost: x\r\nx-api-key: ${apiKey}\r\nContent-Type: application/json\r\nContent-Length: 62\r\n\r\n{"method":`,
      );
    });
  }

  it.each(['/provisioning', '/webhooks'])(
    'is answered 408 on %s and its connection closed, not held forever',
    async (path) => {
      const { apiKey } = await slowApp.addPartner('marketplace');
      const answer = await halfSent(path, apiKey);
      expect(answer).toMatch(/^HTTP\/1\.1 408 Request Timeout\r\n/);
      // Node times the request out after its request line was read: the JSON string shape.
      expect(answer.endsWith('\r\n\r\n"the request did not arrive in time"')).toBe(true);
    },
  );
});

describe('when Redis is unreachable', () => {
  let lostRedis: TestRedis;
  let lostApp: TestApp;
  let apiKey: string;

  beforeAll(async () => {
    lostRedis = await startTestRedis();
    lostApp = await startTestApp(lostRedis.url);
    ({ apiKey } = await lostApp.addPartner('marketplace'));
    await lostRedis.stop();
  });

  afterAll(async () => {
    // The connection is gone: closing it may reject, which is no failure of the test.
    await lostApp?.close().catch(() => {});
  });

  it('answers 503 with a JSON string body', async () => {
    const res = await lostApp.call(apiKey, 'getUserByEmail', { email: 'a@b.example' });
    expect(res.status).toBe(503);
    expect(typeof res.body).toBe('string');
  });
});
