// The in-process client over the real embedded core and a real Redis: the shared contract, the
// params it passes, and how it classifies the core's failures.
import { describe, expect, it } from 'vitest';
import { inProcessClient } from '../../../src/client/in-process.js';
import { MalformedAnswerError, TransientError } from '../../../src/errors.js';
import type { ProvisioningCore } from '../../../src/provisioning/operations.js';
import { isRedisUnavailable } from '../../../src/redis/connection.js';
import { startTestApp, useTestApp } from '../../helpers/app.js';
import { startTestRedis } from '../../helpers/redis-server.js';
import { provisioningClientContract } from './contract.js';

const app = useTestApp({ resetClock: false });

function setupWith(extensions: boolean | undefined) {
  return async () => ({
    clock: app.clock,
    client: async (variant: 'marketplace' | 'external') => {
      const { partner } = await app.addPartner(variant);
      return inProcessClient({ core: app.core, partner, extensions });
    },
    close: async () => {},
  });
}

provisioningClientContract('in-process client', setupWith(undefined));
provisioningClientContract('in-process client without extensions', setupWith(false));

/** The real core, with every call it receives recorded. */
function recordingCore(calls: { method: string; params: unknown }[]): ProvisioningCore {
  return {
    ...app.core,
    invoke: (partner, method, params) => {
      calls.push({ method, params });
      return app.core.invoke(partner, method, params);
    },
  };
}

describe('the params the in-process client passes', () => {
  it('drops undefined fields and, without extensions, `parent` and `licenses`', async () => {
    const calls: { method: string; params: unknown }[] = [];
    const { partner } = await app.addPartner('marketplace');
    const client = inProcessClient({ core: recordingCore(calls), partner, extensions: false });
    await client.createCustomer({
      id: 'C-1',
      name: 'C',
      admin: { email: 'c@example.com', phone: undefined },
    });
    await client.createOrder({
      customer: 'C-1',
      id: 'O-1',
      product: 'suite-std',
      licenses: 1,
      duration: 'monthly',
      startsAt: undefined,
      parent: 'O-0',
    });
    expect(calls).toEqual([
      {
        method: 'createCustomer',
        params: { id: 'C-1', name: 'C', admin: { email: 'c@example.com' } },
      },
      {
        method: 'createOrder',
        params: {
          customer: 'C-1',
          id: 'O-1',
          product: 'suite-std',
          licenses: 1,
          duration: 'monthly',
        },
      },
    ]);
    expect(Object.keys(calls[1]?.params as object)).not.toContain('startsAt');
  });

  it('passes the extensions by default', async () => {
    const calls: { method: string; params: unknown }[] = [];
    const { partner } = await app.addPartner('external');
    const client = inProcessClient({ core: recordingCore(calls), partner });
    expect(client.extensions).toBe(true);
    await client
      .createRenewalOrder({ parent: 'E-1', id: 'E-1.r2', licenses: 4 })
      .catch(() => undefined);
    expect(calls).toEqual([
      { method: 'createRenewalOrder', params: { parent: 'E-1', id: 'E-1.r2', licenses: 4 } },
    ]);
  });
});

describe('the in-process client when the core fails', () => {
  const failingCore = (error: unknown): ProvisioningCore => ({
    ...app.core,
    invoke: async () => {
      throw error;
    },
  });

  it('answers TransientError when its Redis is down, keeping the cause', async () => {
    const lost = await startTestRedis();
    const doomed = await startTestApp(lost.url);
    try {
      const { partner } = await doomed.addPartner('marketplace');
      const client = inProcessClient({ core: doomed.core, partner });
      await lost.stop();
      const error = await client
        .createCustomer({ id: 'C-1', name: 'C', admin: { email: 'c@example.com' } })
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(TransientError);
      expect(error).toMatchObject({
        code: 'provisioning_unavailable',
        details: { method: 'createCustomer' },
      });
      expect(isRedisUnavailable((error as TransientError).cause)).toBe(true);
    } finally {
      // Its Redis is gone, so closing the connection politely cannot succeed.
      await doomed.close().catch(() => doomed.redis.disconnect());
      await lost.stop();
    }
  });

  it('answers TransientError for a TransientError of the core', async () => {
    const { partner } = await app.addPartner('marketplace');
    const cause = new TransientError('chain_locked', 'chain A-1 is locked');
    const client = inProcessClient({ core: failingCore(cause), partner });
    const error = await client.cancelOrder({ id: 'A-1' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TransientError);
    expect(error).toMatchObject({ code: 'provisioning_unavailable', cause });
    expect((error as Error).message).toContain('chain A-1 is locked');
  });

  it('rethrows any other error unchanged', async () => {
    const { partner } = await app.addPartner('marketplace');
    const bug = new TypeError('undefined is not a function');
    const client = inProcessClient({ core: failingCore(bug), partner });
    await expect(client.cancelOrder({ id: 'A-1' })).rejects.toBe(bug);
  });

  it('throws a plain Error naming the method when an answer has the wrong shape', async () => {
    const { partner } = await app.addPartner('marketplace');
    const core: ProvisioningCore = { ...app.core, invoke: async () => ({ id: 'A-1' }) };
    const client = inProcessClient({ core, partner });
    const order = { customer: 'C', id: 'A-1', product: 'suite-std', licenses: 1 };
    const error = await client.createOrder(order).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(MalformedAnswerError);
    expect(error).not.toBeInstanceOf(TransientError);
    expect((error as Error).message).toMatch(
      /^provisioning createOrder answered an unexpected shape/,
    );
  });
});
