// What an operator sees of requests the service refuses before (or beside) its routes: counted in
// billing_http_requests_total (route="unparsed"), logged `request completed`, and a provisioning
// call refused 400 after its key check logged `provisioning refused` as the routes' refusals are.
import { setTimeout as delay } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/metrics.js';
import { buildApp } from '../../src/server.js';
import { startTestApp, type TestApp } from '../helpers/app.js';
import { capturingLogger } from '../helpers/logger.js';
import { startTestRedis, type TestRedis } from '../helpers/redis-server.js';

describe('a request whose path Fastify cannot decode (answered 400 by frameworkErrors)', () => {
  async function refusedBadPath() {
    const metrics = createMetrics();
    const { log, captured } = capturingLogger();
    const app = await buildApp({ log, metrics });
    await app.listen({ host: '127.0.0.1', port: 0 });
    try {
      const { port } = app.server.address() as { port: number };
      const res = await fetch(`http://127.0.0.1:${port}/ops/chains/%E0%A4%A`);
      expect(res.status).toBe(400);
      await res.text();
      await delay(50);
      const text = await metrics.registry.metrics();
      const lines = captured
        .join('')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l));
      return { text, lines };
    } finally {
      await app.close();
    }
  }

  it('is counted in billing_http_requests_total (README: "HTTP requests")', async () => {
    const { text } = await refusedBadPath();
    const counted = text
      .split('\n')
      .filter(
        (l) =>
          l.startsWith('billing_http_requests_total{route="unparsed"') &&
          l.includes('status="400"'),
      );
    expect(counted).toHaveLength(1);
  });

  it('is logged "request completed" as well as "incoming request" (README, Logs)', async () => {
    const { lines } = await refusedBadPath();
    const incoming = lines.filter((l) => l.msg === 'incoming request');
    expect(incoming).toHaveLength(1);
    const completed = lines.filter((l) => l.msg === 'request completed');
    expect(completed).toEqual([
      expect.objectContaining({ reqId: incoming[0].reqId, res: { statusCode: 400 } }),
    ]);
  });
});

describe('a provisioning call refused 400 for a URL that cannot be decoded (valid key)', () => {
  let redis: TestRedis;
  let app: TestApp;
  const { log, captured } = capturingLogger();
  beforeAll(async () => {
    redis = await startTestRedis();
    app = await startTestApp(redis.url, { log });
  });
  afterAll(async () => {
    await app.close();
    await redis.stop();
  });

  it('is logged as "provisioning refused" with a code, as every refusal is (README, Logs)', async () => {
    const { apiKey } = await app.addPartner('marketplace');
    captured.length = 0;
    const res = await fetch(`${app.url}/%E0%A4%A`, {
      method: 'POST',
      headers: { 'x-api-key': apiKey, 'content-type': 'application/json' },
      body: JSON.stringify({ method: 'getUserByEmail', params: { email: 'u@x.test' } }),
    });
    // README, Status codes: 400 is "every refusal that the caller caused".
    expect(res.status).toBe(400);
    await res.text();
    await delay(50);
    const lines = captured
      .join('')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l));
    expect(lines.filter((l) => l.msg === 'provisioning refused')).toEqual([
      expect.objectContaining({ code: expect.any(String) }),
    ]);
  });
});
