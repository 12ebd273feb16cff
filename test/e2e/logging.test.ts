// Logs are JSON lines, and API keys, passwords and tokens never appear in them.
import { connect } from 'node:net';
import { Writable } from 'node:stream';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { RefusalError } from '../../src/errors.js';
import { createLogger } from '../../src/logger.js';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { capturingLogger } from '../helpers/logger.js';
import { startTestRedis, type TestRedis } from '../helpers/redis-server.js';
import { OPS_TOKEN, startSystem } from '../helpers/system.js';

let redis: TestRedis;
let app: TestApp;
const lines: string[] = [];

beforeAll(async () => {
  redis = await startTestRedis();
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(...chunk.toString().split('\n').filter(Boolean));
      done();
    },
  });
  app = await startTestApp(redis.url, { log: createLogger('trace', sink) });
});

afterAll(async () => {
  await app.close();
  await redis.stop();
});

/** Bytes written as they are over a socket of their own: what the server answered. */
function rawRequest(text: string): Promise<string> {
  const { port } = new URL(app.baseUrl);
  return new Promise<string>((resolve) => {
    const socket = connect(Number(port), '127.0.0.1', () => socket.write(text));
    let answer = '';
    socket.on('data', (chunk) => {
      answer += chunk;
    });
    socket.on('close', () => resolve(answer));
  });
}

describe('request logs', () => {
  it('are JSON and hold no API key or password, even for refused calls', async () => {
    const { apiKey } = await app.addPartner('marketplace');
    const customer = await app.call(apiKey, 'createCustomer', {
      id: 'log-1',
      name: 'Logs',
      admin: { email: 'admin@logs.test' },
    });
    const instance = (customer.body as { url: string }).url.split('/').pop();
    await app.call(apiKey, 'createUser', {
      email: 'u@logs.test',
      password: 'hunter2-very-secret',
      instance,
    });
    const refused = await app.call(apiKey, 'resetPasswordByEmail', {
      email: 'u@logs.test',
      password: 'Sh0rt!x',
    });
    expect(refused.status).toBe(400);
    expect(refused.body).toMatch(/^params\.password: must be at least 8 characters$/);
    await app.call('wrong-key-that-is-secret', 'getUserByEmail', { email: 'u@logs.test' });
    await app.call(apiKey, 'nope', {}, { headers: { authorization: 'Bearer ops-secret' } });

    // The onboarding email recorded in the outbox is logged (DESIGN §3).
    const outbox = lines.map((l) => JSON.parse(l)).find((l) => l.msg?.includes('outbox'));
    expect(outbox).toMatchObject({
      customer: 'log-1',
      to: 'admin@logs.test',
      url: (customer.body as { url: string }).url,
    });

    expect(lines.length).toBeGreaterThan(5);
    for (const line of lines) expect(() => JSON.parse(line)).not.toThrow();
    const all = lines.join('\n');
    expect(all).toContain('request completed');
    // Scrubbing leaves the request and the reply whole: createUser carried a password.
    const parsed = lines.map((line) => JSON.parse(line));
    const completed = parsed.filter((l) => l.msg === 'request completed');
    expect(completed.length).toBeGreaterThan(3);
    for (const line of completed) expect(line.res.statusCode).toEqual(expect.any(Number));
    for (const line of parsed.filter((l) => l.msg === 'incoming request')) {
      expect(line.req).toMatchObject({ method: 'GET', url: expect.any(String) });
    }
    for (const secret of [
      apiKey,
      'hunter2-very-secret',
      'wrong-key-that-is-secret',
      'ops-secret',
    ]) {
      expect(all).not.toContain(secret);
    }
  });

  it('never repeat params sent as a JSON string, which may hold a password', async () => {
    const { apiKey } = await app.addPartner('marketplace');
    lines.length = 0;
    const params = JSON.stringify({ password: 'Tr0ub4dor-secret-pw', email: 'u@logs.test' });
    const res = await app.call(apiKey, 'resetPasswordByEmail', undefined, {
      rawBody: JSON.stringify({ method: 'resetPasswordByEmail', params }),
    });
    expect(res).toMatchObject({ status: 400, body: 'params: must be an object, got a string' });
    const refused = lines.map((l) => JSON.parse(l)).filter((l) => l.msg === 'provisioning refused');
    expect(refused).toEqual([expect.objectContaining({ code: 'invalid_body' })]);
    expect(lines.join('\n')).not.toContain('Tr0ub4dor');
  });

  it.each([
    ['not JSON', '{"method": "getUserByEmail",', 'application/json', 'invalid_body'],
    ['of another type', 'method=getUserByEmail', 'text/plain', 'invalid_body'],
    ['over 1 MiB', `"${'x'.repeat(1024 * 1024)}"`, 'application/json', 'body_too_large'],
  ])(
    'log a refused body %s as "provisioning refused" with a code',
    async (_what, rawBody, type, code) => {
      const { apiKey } = await app.addPartner('marketplace');
      lines.length = 0;
      const res = await app.call(apiKey, 'getUserByEmail', undefined, {
        rawBody,
        headers: { 'content-type': type },
      });
      expect(res.status).toBeGreaterThanOrEqual(400);
      const refused = lines
        .map((l) => JSON.parse(l))
        .filter((l) => l.msg === 'provisioning refused');
      expect(refused).toEqual([expect.objectContaining({ code })]);
    },
  );

  it('hide a credential a client put in the query string, and keep the rest of the URL', async () => {
    lines.length = 0;
    const res = await fetch(
      `${app.baseUrl}/healthz?access_token=QueryTok-123&x=1&api%5Fkey=QueryKey-456&Signature=s1&pwd=Pw-7&bearer=Br-8`,
    );
    expect(res.status).toBe(200);
    const logged = lines.join('\n');
    for (const secret of ['QueryTok-123', 'QueryKey-456', 's1&', 'Pw-7', 'Br-8'])
      expect(logged).not.toContain(secret);
    const incoming = lines.map((l) => JSON.parse(l)).find((l) => l.msg === 'incoming request');
    expect(incoming.req).toMatchObject({
      method: 'GET',
      url: '/healthz?access_token=[redacted]&x=1&api%5Fkey=[redacted]&Signature=[redacted]&pwd=[redacted]&bearer=[redacted]',
      remoteAddress: expect.any(String),
    });
  });

  it('hide the user info of an absolute-form request target', async () => {
    lines.length = 0;
    const { port } = new URL(app.baseUrl);
    const password = 'AbsoluteForm-Passw0rd-123';
    const answer = await rawRequest(
      `GET http://ops:${password}@127.0.0.1:${port}/healthz?x=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`,
    );
    expect(answer).toMatch(/^HTTP\/1\.1 200/);
    await vi.waitFor(() => expect(lines.join('\n')).toContain('request completed'));
    expect(lines.join('\n')).not.toContain(password);
    const incoming = lines.map((l) => JSON.parse(l)).find((l) => l.msg === 'incoming request');
    expect(incoming.req.url).toBe(`http://[redacted]@127.0.0.1:${port}/healthz?x=1`);
  });

  it('hide a query credential from the refusal of a provisioning URL that cannot be decoded', async () => {
    const { apiKey } = await app.addPartner('marketplace');
    lines.length = 0;
    const secret = 'QueryToken-Secret-123';
    const answer = await rawRequest(
      `GET /provisioning/%zz?access_token=${secret} HTTP/1.1\r\nHost: 127.0.0.1\r\n` +
        `x-api-key: ${apiKey}\r\nConnection: close\r\n\r\n`,
    );
    expect(answer).toMatch(/^HTTP\/1\.1 400/);
    await vi.waitFor(() => expect(lines.join('\n')).toContain('request completed'));
    const refused = lines.map((l) => JSON.parse(l)).find((l) => l.msg === 'provisioning refused');
    expect(refused).toMatchObject({
      code: 'bad_url',
      refusal: expect.stringContaining('/provisioning/%zz'),
    });
    expect(lines.join('\n')).not.toContain(secret);
  });

  it('redact secrets that a caller passes to the logger by mistake', () => {
    const { log, captured } = capturingLogger();
    log.info(
      {
        req: { headers: { 'x-api-key': 'k-123', authorization: 'Bearer t-456' } },
        partner: { apiKey: 'k-789' },
        user: { password: 'p-000' },
        tls: { passphrase: 'pp-111' },
      },
      'oops',
    );
    const out = captured.join('');
    for (const secret of ['k-123', 't-456', 'k-789', 'p-000', 'pp-111'])
      expect(out).not.toContain(secret);
    expect(out).toContain('[redacted]');
  });

  it('leave out what nests too deep to be looked at, rather than log it unredacted', () => {
    const { log, captured } = capturingLogger();
    let nested: Record<string, unknown> = { password: 'p-deep', note: 'kept?' };
    for (let i = 0; i < 12; i += 1) nested = { level: nested };
    log.info({ nested, shallow: { name: 'kept' } }, 'deep');
    const out = captured.join('');
    expect(out).not.toContain('p-deep');
    expect(out).toContain('[too deep to log]');
    expect(JSON.parse(out).shallow).toEqual({ name: 'kept' });
  });

  it('redact secret fields at any depth, in arrays and in errors, and leave the rest', () => {
    const { log, captured } = capturingLogger();
    const call = { method: 'createUser', params: { user: { email: 'u@x.test', password: 'p-1' } } };
    const refusal = new RefusalError('provisioning_refused', 'too short', {
      params: { admin: { Password: 'p-2' } },
    });
    log.info({ call, users: [{ id: 'u1', apiKey: 'k-3' }], deep: { a: { b: { token: 't-4' } } } });
    const settings = {
      redis: { sentinelPassword: 's-7' },
      OPS_TOKEN: 'o-8',
      KEY_HASH_SECRET: 'h-9',
      PROVISIONING_API_KEY: 'a-10',
      PORT: 3000,
    };
    log.info({ at: { settings } }, 'settings');
    log.error({ err: refusal }, 'refused');
    // Errors an error holds: ioredis's EXECABORT keeps the commands' own errors, and a cause may
    // sit in the details.
    const auth = Object.assign(new Error('WRONGPASS'), {
      command: { name: 'auth', args: ['r-5'] },
    });
    const upstream = new RefusalError('x', 'upstream', { params: { password: 'p-6' } });
    log.error(
      {
        err: Object.assign(new Error('EXECABORT'), {
          previousErrors: [auth],
          details: { upstream },
        }),
      },
      'aborted',
    );
    const [first, withSettings, second, third] = captured.map((line) => JSON.parse(line));
    expect(withSettings.at.settings).toEqual({
      redis: { sentinelPassword: '[redacted]' },
      OPS_TOKEN: '[redacted]',
      KEY_HASH_SECRET: '[redacted]',
      PROVISIONING_API_KEY: '[redacted]',
      PORT: 3000,
    });
    for (const secret of ['r-5', 'p-6']) expect(captured[3]).not.toContain(secret);
    expect(third.err.previousErrors[0].command).toEqual({ name: 'auth', args: '[redacted]' });
    expect(first.call).toEqual({
      method: 'createUser',
      params: { user: { email: 'u@x.test', password: '[redacted]' } },
    });
    expect(first.users).toEqual([{ id: 'u1', apiKey: '[redacted]' }]);
    expect(first.deep.a.b.token).toBe('[redacted]');
    expect(second.err).toMatchObject({
      message: 'too short',
      details: { params: { admin: { Password: '[redacted]' } } },
    });
    // The caller's own objects are left as they were.
    expect(call.params.user.password).toBe('p-1');
  });
});

describe('Redis errors', () => {
  it('never carry the Redis password into a log line or onto stderr, when it was rotated', async () => {
    const password = 'Right-Pass-123-secret';
    const rotated = 'Other-Pass-456-secret';
    const server = await startTestRedis(['--requirepass', password]);
    const url = server.url.replace('redis://', `redis://:${password}@`);
    const logged: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _e, done) {
        logged.push(chunk.toString());
        done();
      },
    });
    const system = await startSystem({ redisUrl: url, log: createLogger('warn', sink) });
    const stderr = vi.spyOn(process.stderr, 'write');
    const consoleError = vi.spyOn(console, 'error');
    try {
      // The operator rotates the password: every connection reconnects with the old one.
      const admin = new Redis(server.port, '127.0.0.1', { password, lazyConnect: true });
      await admin.connect();
      await admin.config('SET', 'requirepass', rotated);
      await admin.call('CLIENT', 'KILL', 'TYPE', 'normal').catch(() => {});
      admin.disconnect();
      await vi.waitFor(() => expect(logged.join('')).toContain('WRONGPASS'), { timeout: 10_000 });
      const restore = new Redis(server.port, '127.0.0.1', { password: rotated });
      await restore.config('SET', 'requirepass', password);
      restore.disconnect();
    } finally {
      const printed = [...stderr.mock.calls, ...consoleError.mock.calls].map((c) => String(c[0]));
      stderr.mockRestore();
      consoleError.mockRestore();
      // Also shows that the workers stop after such an episode (they used to wait forever).
      await system.close();
      await server.stop();
      expect(printed.join('\n')).not.toContain(password);
    }
    const all = logged.join('');
    expect(all).toContain('"args":"[redacted]"');
    expect(all).not.toContain(password);
  });
});

describe('Bull Board failures', () => {
  it('are logged at error level, not only answered', async () => {
    const server = await startTestRedis();
    const logged: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _e, done) {
        logged.push(chunk.toString());
        done();
      },
    });
    const system = await startSystem({ redisUrl: server.url, log: createLogger('warn', sink) });
    try {
      // A key of the wrong type: Redis answers the board's reads with an error, as in an outage.
      const admin = new Redis(server.port, '127.0.0.1');
      await admin.set('{bc}:renewals:meta', 'not a hash');
      admin.disconnect();
      const res = await fetch(`${system.baseUrl}/admin/queues/api/queues`, {
        headers: { authorization: `Bearer ${OPS_TOKEN}` },
      });
      expect(res.status).toBe(500);
      await vi.waitFor(() => expect(logged.join('')).toContain('Bull Board request failed'));
      const line = JSON.parse(
        logged
          .join('')
          .split('\n')
          .find((l) => l.includes('Bull Board request failed')) ?? '{}',
      );
      expect(line).toMatchObject({ level: 50, url: '/admin/queues/api/queues' });
      expect(line.err.message).toMatch(/WRONGTYPE/);
    } finally {
      await system.close();
      await server.stop();
    }
  });

  it('answer 503 while Redis is away, logged at warn, as every other route and the workers do', async () => {
    const server = await startTestRedis();
    const logged: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _e, done) {
        logged.push(...chunk.toString().split('\n').filter(Boolean));
        done();
      },
    });
    const system = await startSystem({ redisUrl: server.url, log: createLogger('warn', sink) });
    try {
      await server.stop();
      const res = await fetch(`${system.baseUrl}/admin/queues/api/queues`, {
        headers: { authorization: `Bearer ${OPS_TOKEN}` },
      });
      expect(res.status).toBe(503);
      const lines = () =>
        logged
          .map((l) => JSON.parse(l) as { level: number; msg: string; url?: string })
          .filter((l) => l.url === '/admin/queues/api/queues')
          .map(({ level, msg }) => ({ level, msg }));
      await vi.waitFor(() => expect(lines()).not.toEqual([]));
      expect(lines()).toEqual([{ level: 40, msg: 'Bull Board request failed for now' }]);
      // The workers' connections meet the outage too: a warning, as the queues', not an error.
      const outageLines = () =>
        logged
          .map((l) => JSON.parse(l) as { level: number; msg: string; err?: { code?: string } })
          .filter((l) => l.err?.code === 'ECONNREFUSED');
      await vi.waitFor(
        () => expect(outageLines().some((l) => l.msg === 'worker error')).toBe(true),
        {
          timeout: 5_000,
        },
      );
      expect(outageLines().filter((l) => l.level >= 50)).toEqual([]);
    } finally {
      // Back, for the system to close its connections.
      await server.restart();
      await system.close();
      await server.stop();
    }
  });
});
