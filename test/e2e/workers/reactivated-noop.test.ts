// `POST /ops/chains/:order/reactivated` on a chain that is neither suspended nor waiting is
// answered unchanged (README, Reactivated): a renewal the provider's window put off (history
// `renewal.deferred`, its job an hour later) keeps waiting, as a no-op `PUT auto-renew` leaves
// it; so does one of an add-on, put off after a confirmation. Only a repeat of the confirmation
// itself, nothing having happened since, reconsiders them (payments.test.ts).
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { renewalJobId } from '../../../jobs/renewals.js';
import { chainIdOf } from '../../../src/chains/keys.js';
import { ChainStore } from '../../../src/chains/store.js';
import { manualClock, systemClock } from '../../../src/clock.js';
import {
  DAY,
  orderPlaced,
  paidAwaitingReactivation,
  type System,
  startSystem,
  useSystem,
} from '../../helpers/system.js';

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
      expect(waiting?.data).toMatchObject({
        deferredUntil: clock.now() + 3600,
        deferredFor: 'provider_window',
      });
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

describe('a no-op reactivation after an add-on renewal was put off by the provider window', () => {
  const system = useSystem({ env: { PARTNER_VARIANT: 'external', PAYMENT_GRACE_DAYS: '0' } });

  it('leaves the add-on renewal waiting, as a no-op auto-renew does', async () => {
    const order = 'RV-1';
    await system.send('order.placed', orderPlaced({ order }));
    await system.waitForChain(order, () => true);
    await system.send('seats.changed', { order, licenses: 7 });
    const bought = await system.waitForChain(order, (c) => c.addOns.length === 1);
    const addOnOrder = bought.addOns[0]?.order as string;
    await paidAwaitingReactivation(system, order);
    // The confirmation, done in full.
    expect((await system.ops('POST', `/ops/chains/${order}/reactivated`)).status).toBe(200);

    // Later the add-on's renewal is refused for the provider's window: as handleRefusal leaves
    // it, an entry in the add-on's history and its job put off an hour (deferredUntil, and why).
    const chains = new ChainStore(system.started.runtime.redis);
    const addOnId = chainIdOf(addOnOrder);
    const addOn = await chains.get(addOnId);
    if (!addOn) throw new Error('no add-on');
    const queue = system.queue('renewals');
    const job = await queue.getJob(renewalJobId(addOnId, addOn.term.count + 1));
    if (!job) throw new Error('no add-on renewal job');
    expect(await job.getState()).toBe('delayed');
    const deferredUntil = system.started.runtime.clock.now() + 3600;
    await job.updateData({ ...job.data, deferredUntil, deferredFor: 'provider_window' });
    await job.changeDelay(3600_000);
    const token = 'window-refusal';
    const held = await chains.lock(addOnId, token);
    if (held.kind !== 'held' || !held.chain) throw new Error('add-on held');
    await chains.recordEntry(
      { chain: held.chain, token },
      {
        at: system.started.runtime.clock.now(),
        event: 'renewal.deferred',
        detail: 'the provider refused (outside the renewal window); trying again later',
        cause: { jobId: job.id ?? '' },
      },
    );
    await chains.unlock(addOnId, token);

    // A no-op switch leaves it waiting (the README's rule for requests that change nothing)...
    const on = await system.ops('PUT', `/ops/chains/${order}/auto-renew`, { enabled: true });
    expect(on.status).toBe(200);
    expect((await queue.getJob(job.id as string))?.data.deferredUntil).toBe(deferredUntil);

    // ...and so must a no-op reactivation, which is no repeat "right after" the confirmation.
    const again = await system.ops('POST', `/ops/chains/${order}/reactivated`);
    expect(again.status).toBe(200);
    expect((await queue.getJob(job.id as string))?.data.deferredUntil).toBe(deferredUntil);
  });
});
