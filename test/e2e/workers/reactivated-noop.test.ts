// `POST /ops/chains/:order/reactivated` on a chain that is neither suspended nor waiting is
// answered unchanged (README, Reactivated): a renewal the provider's window put off (history
// `renewal.deferred`, its job an hour later) keeps waiting, as a no-op `PUT auto-renew` leaves
// it. Only a repeat of the confirmation itself reconsiders it (payments.test.ts).
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { renewalJobId } from '../../../jobs/renewals.js';
import { chainIdOf } from '../../../src/chains/keys.js';
import { manualClock, systemClock } from '../../../src/clock.js';
import { DAY, orderPlaced, type System, startSystem } from '../../helpers/system.js';

describe('a no-op reactivation beside a renewal put off for the provider window', () => {
  const clock = manualClock(systemClock.now());
  let provider: System;
  let system: System;

  beforeAll(async () => {
    provider = await startSystem({ role: 'api', clock });
    const { runtime } = provider.started;
    // The provider's window (3 days) is shorter than the workers' lead (7 days).
    const { apiKey } = await runtime.partners.create({
      name: 'remote-workers',
      variant: 'marketplace',
      renewalWindowDays: 3,
      now: runtime.clock.now(),
    });
    system = await startSystem({
      clock,
      env: {
        PROVISIONING_URL: `${provider.baseUrl}/provisioning`,
        PROVISIONING_API_KEY: apiKey,
        PARTNER_VARIANT: 'marketplace',
        PROVISIONING_EXTENSIONS: 'true',
      },
    });
  });
  afterAll(async () => {
    await system?.close();
    await provider?.close();
  });

  const deferrals = (c: { history: readonly { event: string }[] }) =>
    c.history.filter((h) => h.event === 'renewal.deferred').length;

  it('leaves the put-off renewal waiting and the chain unchanged', async () => {
    const order = 'RN-1';
    await system.send('order.placed', orderPlaced({ order, startsAt: clock.now() - 25 * DAY }));
    await system.waitForChain(order, (c) => deferrals(c) === 1);
    const job = renewalJobId(chainIdOf(order), 2);
    await vi.waitFor(async () => {
      const waiting = await system.queue('renewals').getJob(job);
      expect(await waiting?.getState()).toBe('delayed');
      expect(waiting?.data.deferredUntil).toBe(clock.now() + 3600);
    });
    const before = await system.chain(order);
    expect(before.status).toBe('active');

    const res = await system.ops('POST', `/ops/chains/${order}/reactivated`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual(before);

    // Long enough for a job pulled forward to run and be refused again.
    await sleep(3000);
    expect(deferrals(await system.chain(order))).toBe(1);
    expect(await system.chain(order)).toEqual(before);
  });
});
