// /readyz on a Redis that answers but takes no writes: a master demoted to a replica by a
// failover the service's URL did not follow (a plain redis:// URL has no Sentinel to ask).
import { Redis } from 'ioredis';
import { request } from 'undici';
import { afterAll, describe, expect, it } from 'vitest';
import { startTestRedis, type TestRedis } from '../../helpers/redis-server.js';
import { useSystem } from '../../helpers/system.js';

describe('readyz on a Redis that became a replica', () => {
  const system = useSystem();
  let master: TestRedis | undefined;
  let admin: Redis | undefined;

  afterAll(async () => {
    admin?.disconnect();
    await master?.stop();
  });

  async function readyz() {
    const res = await request(`${system.baseUrl}/readyz`);
    return { status: res.statusCode, body: await res.body.json() };
  }

  it('is not ready while every write would be refused, and ready again once it is a master', async () => {
    expect(await readyz()).toMatchObject({ status: 200, body: { redis: true } });
    master = await startTestRedis();
    admin = new Redis(system.redisUrl);
    await admin.replicaof('127.0.0.1', master.port);
    // Reads still answer there: a check that only reads would call it ready.
    expect(await admin.exists('anything')).toBe(0);
    await expect(admin.set('anything', '1')).rejects.toThrow(/READONLY/);
    await expect.poll(readyz).toEqual({
      status: 503,
      body: { status: 'not ready', redis: false, workers: true },
    });

    await admin.replicaof('NO', 'ONE');
    await expect.poll(readyz).toMatchObject({ status: 200, body: { status: 'ready' } });
  });
});
