// README (Cancelling): an add-on renewal in flight while the family's cancel ran is recorded
// and cancelled by its own job, or dropped: a cancelled family never asks a person for it.
import { describe, expect, it } from 'vitest';
import { renewalJobId } from '../../../jobs/renewals.js';
import { chainIdOf } from '../../../src/chains/keys.js';
import { systemClock } from '../../../src/clock.js';
import {
  DAY,
  familyOrdersAtProvider,
  leftByDeadJob,
  orderPlaced,
  reconcileRound,
  type System,
  useSystem,
} from '../../helpers/system.js';

/**
 * Holds the next call of `method` for order `id` on the way to the provider (the request sent,
 * not arrived yet) until `release`: the workers and the ops API share this client.
 */
function holdOnTheWay(system: System, method: 'createRecorded', id: string) {
  const client = system.started.provisioning as unknown as Record<string, unknown>;
  const original = client[method] as (...args: unknown[]) => Promise<unknown>;
  let release = () => {};
  const gate = new Promise<void>((r) => {
    release = r;
  });
  let reached = () => {};
  const entered = new Promise<void>((r) => {
    reached = r;
  });
  let armed = true;
  client[method] = async (...args: unknown[]) => {
    const params = args[1] as { id?: string };
    if (armed && params?.id === id) {
      armed = false;
      reached();
      await gate;
    }
    return original.apply(client, args);
  };
  return {
    entered,
    release: () => {
      release();
      client[method] = original;
    },
  };
}

describe('an operator cancels a family while an add-on renewal is on its way to the provider', () => {
  const system = useSystem({ env: { SEAT_INCREASE: 'addon' } });

  it('ends cancelled, with no add-on flagged for a person and no failed renewal job', async () => {
    await system.send('order.placed', orderPlaced({ order: 'OC-1', licenses: 5 }));
    await system.waitForChain('OC-1', () => true);
    await system.send('seats.changed', { order: 'OC-1', licenses: 8 });
    const family = await system.waitForChain('OC-1', (c) => c.addOns.length === 1);
    const addOn = family.addOns[0]?.order as string;
    // The add-on's renewal falls due (its term ends in 3 days) and its job decides to renew.
    const now = systemClock.now();
    const held = holdOnTheWay(system, 'createRecorded', `${addOn}.r2`);
    await leftByDeadJob(system, addOn, 'test-make-due', (chain) => ({
      term: { ...chain.term, expiresAt: now + 3 * DAY },
      nextRenewalAt: now,
    }));
    await reconcileRound(system, 'reconcile-oc-1');
    await held.entered;

    // The cancel runs while the renewal request is on its way: the main chain's lock is free.
    const cancel = await system.ops('POST', '/ops/chains/OC-1/cancel');
    expect(cancel.status).toBe(200);
    held.release();

    const job = await system.queue('renewals').getJob(renewalJobId(chainIdOf(addOn), 2));
    await expect
      .poll(async () => job?.getState(), { timeout: 10_000 })
      .toMatch(/^(completed|failed)$/);
    const orders = await familyOrdersAtProvider(system, 'OC-1');
    // No order survives the cancel (this part holds: the provider refused the late renewal).
    expect(orders.filter((o) => o.status !== 'cancelled')).toEqual([]);
    const shown = (await system.chain('OC-1')).addOns[0];
    // README (Cancelling): the in-flight add-on renewal is recorded and cancelled by its own
    // job, or dropped; a cancelled family never asks a person for a renewal.
    expect(shown?.history.map((h) => h.event)).not.toContain('renewal.flagged');
    expect(shown?.flagged).toBeNull();
    expect(shown?.history.map((h) => h.event)).toContain('renewal.dropped');
    expect(shown?.status).toBe('cancelled');
    expect(await job?.getState()).toBe('completed');
  });
});
