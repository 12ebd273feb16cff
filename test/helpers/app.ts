// Runs the real server (real Fastify over real HTTP, real Redis) for end-to-end tests.
import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { request } from 'undici';
import { afterAll, beforeAll, beforeEach } from 'vitest';
import { type ManualClock, manualClock } from '../../src/clock.js';
import { createLogger, type Logger } from '../../src/logger.js';
import { makeProvisioningCore, type ProvisioningCore } from '../../src/provisioning/operations.js';
import { makePartnerDirectory, type PartnerDirectory } from '../../src/provisioning/partners.js';
import type { Partner } from '../../src/provisioning/records.js';
import type { Variant } from '../../src/provisioning/schemas.js';
import { ProvisioningStore } from '../../src/provisioning/store.js';
import { connectRedis, type RedisClient } from '../../src/redis/connection.js';
import { buildApp } from '../../src/server.js';
import { startTestRedis, type TestRedis } from './redis-server.js';

/** 2026-01-15T12:00:00Z: a fixed start, so term arithmetic in tests is reproducible. */
export const T0 = Date.UTC(2026, 0, 15, 12, 0, 0) / 1000;
export const DAY = 86_400;

export interface TestApp {
  baseUrl: string;
  /** `{base_url}` of the provisioning interface. */
  url: string;
  clock: ManualClock;
  /** The app's own request-path connection, and the address of its Redis. */
  redis: RedisClient;
  redisUrl: string;
  core: ProvisioningCore;
  partners: PartnerDirectory;
  /** A fresh partner with a unique name; tests never share partners, so no flush is needed. */
  addPartner(
    variant: Variant,
    renewalWindowDays?: number,
  ): Promise<{ partner: Partner; apiKey: string }>;
  /** Calls the provisioning endpoint: `{status, body}` with the body parsed as JSON. */
  call(
    apiKey: string | undefined,
    method: string,
    params?: unknown,
    options?: { httpMethod?: 'GET' | 'POST'; rawBody?: string; headers?: Record<string, string> },
  ): Promise<{ status: number; body: unknown }>;
  close(): Promise<void>;
}

export async function startTestApp(
  redisUrl: string,
  options: { brand?: string; start?: number; log?: Logger; requestTimeoutMs?: number } = {},
): Promise<TestApp> {
  const clock = manualClock(options.start ?? T0);
  const redis = await connectRedis(redisUrl, 'request');
  const store = new ProvisioningStore(redis);
  const log = options.log ?? createLogger('silent');
  const core = makeProvisioningCore({
    store,
    clock,
    brand: options.brand ?? 'suite',
    publicUrl: () => 'http://billing.test',
    log,
  });
  const partners = makePartnerDirectory(store, async () => 'test-secret-test-secret-test-secret!');
  const app: FastifyInstance = await buildApp({
    log,
    provisioning: { core, partners },
    ...(options.requestTimeoutMs !== undefined
      ? { requestTimeoutMs: options.requestTimeoutMs }
      : {}),
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const { port } = app.server.address() as AddressInfo;
  const baseUrl = `http://127.0.0.1:${port}`;
  const url = `${baseUrl}/provisioning`;

  return {
    baseUrl,
    url,
    clock,
    redis,
    redisUrl,
    core,
    partners,
    addPartner: (variant, renewalWindowDays) =>
      partners.create({
        name: `partner-${randomUUID()}`,
        variant,
        renewalWindowDays,
        now: clock.now(),
      }),
    async call(apiKey, method, params, opts = {}) {
      const headers: Record<string, string> = {
        'content-type': 'application/json',
        ...opts.headers,
      };
      if (apiKey !== undefined) headers['x-api-key'] = apiKey;
      const res = await request(url, {
        method: opts.httpMethod ?? 'GET',
        headers,
        body: opts.rawBody ?? JSON.stringify({ method, params }),
      });
      const text = await res.body.text();
      return { status: res.statusCode, body: text === '' ? undefined : JSON.parse(text) };
    },
    async close() {
      await app.close();
      await redis.quit();
    },
  };
}

/**
 * The app of one test file: a redis-server and the server start in beforeAll and stop in
 * afterAll, and the clock is back at T0 before each test. The returned object stands for the app
 * started then, so tests use it like the TestApp itself.
 */
export function useTestApp(
  options: Parameters<typeof startTestApp>[1] & { resetClock?: boolean } = {},
): TestApp {
  let current: TestApp | undefined;
  let server: TestRedis | undefined;
  beforeAll(async () => {
    server = await startTestRedis();
    current = await startTestApp(server.url, options);
  });
  afterAll(async () => {
    await current?.close();
    await server?.stop();
  });
  if (options.resetClock ?? true) beforeEach(() => current?.clock.set(options.start ?? T0));
  return new Proxy({} as TestApp, {
    get(_target, property) {
      if (!current)
        throw new Error('the test app starts in beforeAll: use it inside tests and hooks');
      return Reflect.get(current, property);
    },
  });
}
