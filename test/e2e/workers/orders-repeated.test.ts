// order.placed and order.cancelled sent again under new webhook ids for an order placed or
// cancelled already: nothing changes at the provider, and the chain's history says so, naming
// the event, as it does for every event (README, "Retries and repeats").
import { describe, expect, it } from 'vitest';
import { webhookJobId } from '../../../src/intake/webhooks.js';
import { orderPlaced, type System, useSystem } from '../../helpers/system.js';

async function finished(system: System, webhookId: string) {
  await expect
    .poll(async () => (await system.queue('orders').getJob(webhookJobId(webhookId)))?.getState(), {
      timeout: 10_000,
    })
    .toMatch(/^(completed|failed)$/);
  return system.queue('orders').getJob(webhookJobId(webhookId));
}

describe('order events repeated under new webhook ids', () => {
  const system = useSystem();

  it('records an order.placed replayed with other fields, and applies none of them', async () => {
    await system.send('order.placed', orderPlaced({ order: 'NH-1', licenses: 5 }), { id: 'nh-1' });
    const placed = await system.waitForChain('NH-1', () => true);
    const replay = orderPlaced({ order: 'NH-1', licenses: 9, customer: 'NH-other' });
    await system.send('order.placed', replay, { id: 'nh-2' });
    expect((await finished(system, 'nh-2'))?.returnvalue).toBe('already placed: NH-1');
    const chain = await system.chain('NH-1');
    expect(chain).toMatchObject({ customer: placed.customer, licenses: 5 });
    expect(chain.history.at(-1)).toMatchObject({
      event: 'order.placed.ignored',
      detail: `order NH-1 was placed already: nothing changed (this event names customer NH-other, not ${placed.customer}: not applied)`,
      cause: { webhookId: 'nh-2', orderId: 'NH-1' },
    });
  });

  it("does not take a replay's other customer for one it created: that customer's first order still creates it", async () => {
    await system.send('order.placed', orderPlaced({ order: 'RP-1', customer: 'RP-C1' }), {
      id: 'rp-1',
    });
    await system.waitForChain('RP-1', () => true);
    await system.send('order.placed', orderPlaced({ order: 'RP-1', customer: 'RP-C2' }), {
      id: 'rp-2',
    });
    await finished(system, 'rp-2');
    // Customer RP-C2's real first order.
    await system.send('order.placed', orderPlaced({ order: 'RP-2', customer: 'RP-C2' }), {
      id: 'rp-3',
    });
    const job = await finished(system, 'rp-3');
    expect(job?.failedReason ?? null).toBeNull();
    const chain = await system.chain('RP-2');
    expect(chain.customer).toBe('RP-C2');
    expect(chain.history.map((h) => h.event)).toContain('customer.created');
  });

  it('records an order.cancelled for a chain cancelled already, once', async () => {
    await system.send('order.placed', orderPlaced({ order: 'NH-2' }), { id: 'nh-3' });
    await system.waitForChain('NH-2', () => true);
    await system.send('order.cancelled', { order: 'NH-2' }, { id: 'nh-4' });
    await system.waitForChain('NH-2', (c) => c.status === 'cancelled');
    const cancelled = await system.chain('NH-2');
    await system.send('order.cancelled', { order: 'NH-2' }, { id: 'nh-5' });
    expect((await finished(system, 'nh-5'))?.returnvalue).toBe('already cancelled: NH-2');
    const chain = await system.chain('NH-2');
    expect(chain.history.slice(cancelled.history.length)).toEqual([
      expect.objectContaining({
        event: 'order.cancelled.ignored',
        detail: 'order NH-2 was cancelled already: nothing changed',
        cause: expect.objectContaining({ webhookId: 'nh-5' }),
      }),
    ]);
    expect(chain.status).toBe('cancelled');
  });
});
