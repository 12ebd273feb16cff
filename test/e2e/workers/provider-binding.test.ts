// The chains of a Redis belong to the provider account their orders were made with: a start
// acting for another is refused once chains exist, and a start that never ran (or made no chain)
// speaks for nobody.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { systemClock } from '../../../src/clock.js';
import { startTestRedis, type TestRedis } from '../../helpers/redis-server.js';
import { DAY, orderPlaced, type System, startSystem } from '../../helpers/system.js';

let redis: TestRedis;

beforeAll(async () => {
  redis = await startTestRedis();
});

afterAll(async () => {
  await redis.stop();
});

const REMOTE = {
  PROVISIONING_URL: 'http://127.0.0.1:9/provisioning',
  PROVISIONING_API_KEY: 'remote-key-0123456789abcdef',
};

describe('PARTNER_NAME changed on a Redis that holds chains', () => {
  it('is refused naming the partner the chains were made with, which a failed start never changes', async () => {
    const on = (env: Record<string, string>) => startSystem({ redisUrl: redis.url, env });
    const alpha = await on({ PARTNER_NAME: 'alpha' });
    let again: System | undefined;
    try {
      // Before any chain: a start with another name that fails (alpha holds its port)...
      const port = String(new URL(alpha.baseUrl).port);
      await expect(on({ PARTNER_NAME: 'beta', PORT: port })).rejects.toThrow(/EADDRINUSE/);
      // ...and one that starts and stops again without a chain leave nothing behind.
      await (await on({ PARTNER_NAME: 'gamma', RECONCILE_INTERVAL_SECONDS: '3600' })).close();

      await alpha.send(
        'order.placed',
        orderPlaced({ order: 'PB-1', startsAt: systemClock.now() - 2 * DAY }),
      );
      await alpha.waitForChain('PB-1', () => true);

      // Another process of the same deployment joins.
      again = await on({ PARTNER_NAME: 'alpha' });
      await expect(on({ PARTNER_NAME: 'beta' })).rejects.toMatchObject({
        name: 'ConfigError',
        code: 'provider_changed',
        message: expect.stringMatching(
          /^the chains in this Redis were made with the embedded core's partner "alpha", but PARTNER_NAME=beta now: .*; set PARTNER_NAME=alpha, or use another Redis$/,
        ),
      });
      await expect(on({ PARTNER_NAME: 'alpha', ...REMOTE })).rejects.toMatchObject({
        code: 'provider_changed',
        message: expect.stringMatching(
          /but PROVISIONING_URL is set now: .*set PARTNER_NAME=alpha and unset PROVISIONING_URL/,
        ),
      });
      // The refused start made no partner: alpha's partner acts as before.
      expect((await alpha.partner()).name).toBe('alpha');
      expect((await again.providerOrder('PB-1'))?.status).toBe('active');
    } finally {
      await again?.close();
      await alpha.close();
    }
  }, 60_000);
});
