// An order the provider makes after its chain was cancelled: a request that timed out (the job
// retrying) is committed by the remote after the cancel heard "not found" for it.
import { describe, expect, it } from 'vitest';
import {
  LATE_ORDER_CHECK_AFTER,
  lateOrderCheckJobId,
  settleLateOrderCheck,
} from '../../../jobs/late-orders.js';
import { chainIdOf } from '../../../src/chains/keys.js';
import type { CreateOrderInput } from '../../../src/client/provisioning-client.js';
import { systemClock } from '../../../src/clock.js';
import {
  leftByDeadJob,
  orderPlaced,
  runAgain,
  type System,
  useSystem,
} from '../../helpers/system.js';

const now = () => systemClock.now();

/**
 * Places `order` and leaves it as a seat purchase whose createOrder timed out left it: the
 * partial order's intent on the chain, the order not made (yet). Answers the request the remote
 * is still working on.
 */
async function purchaseTimedOut(system: System, order: string): Promise<CreateOrderInput> {
  await system.send('order.placed', orderPlaced({ order }));
  const placed = await system.waitForChain(order, () => true);
  const orderId = `${order}.p1`;
  const params = {
    customer: placed.customer,
    id: orderId,
    product: placed.product,
    licenses: 2,
    startsAt: now(),
    expiresAt: placed.term.expiresAt,
  };
  const event = { webhookId: 'seats-1', occurredAt: now(), total: placed.licenses + 2 };
  await leftByDeadJob(system, order, 'timed-out-purchase', () => ({
    intent: { kind: 'partial', method: 'createOrder', orderId, params, jobId: 'timed-out', event },
  }));
  return params;
}

/** What a cancel of `order` that died before its save left: the check of its `.p1`. */
function checkLeftByDeadCancel(system: System, order: string): Promise<void> {
  return settleLateOrderCheck(system.queue('orders'), systemClock, {
    chainId: chainIdOf(order),
    orderId: `${order}.p1`,
    made: false,
  });
}

async function checkState(system: System, orderId: string) {
  const job = await system.queue('orders').getJob(lateOrderCheckJobId(orderId));
  return job?.getState();
}

describe('a cancel that found an in-flight order missing', () => {
  const system = useSystem();

  it('cancels the order the remote makes afterwards, and says so in the history', async () => {
    const params = await purchaseTimedOut(system, 'LATE-1');
    await system.send('order.cancelled', { order: 'LATE-1' });
    const cancelled = await system.waitForChain('LATE-1', (c) => c.status === 'cancelled');
    expect(cancelled.history.at(-1)?.detail).not.toContain('LATE-1.p1');
    expect(await checkState(system, 'LATE-1.p1')).toBe('delayed');

    // The remote commits the request that had timed out.
    await system.started.provisioning.createOrder(params);
    expect((await system.providerOrder('LATE-1.p1'))?.status).not.toBe('cancelled');

    await system.promote('orders', lateOrderCheckJobId('LATE-1.p1'));
    const chain = await system.waitForChain(
      'LATE-1',
      (c) => c.history.at(-1)?.event === 'order.late',
    );
    expect(chain.history.at(-1)).toMatchObject({
      detail: expect.stringContaining('LATE-1.p1 was made after its chain was cancelled'),
      cause: { orderId: 'LATE-1.p1' },
    });
    expect((await system.providerOrder('LATE-1.p1'))?.status).toBe('cancelled');
    expect(await checkState(system, 'LATE-1.p1')).toBe('completed');

    // Its worker died before BullMQ recorded it completed: the stalled check runs it again, and
    // the provider answers the second cancel as it did the first.
    await runAgain(system.queue('orders'), lateOrderCheckJobId('LATE-1.p1'));
    const again = await system.chain('LATE-1');
    expect(again.history.filter((h) => h.event === 'order.late')).toHaveLength(1);
  });

  it('looks again at each check time, then stops when the order never came', async () => {
    await purchaseTimedOut(system, 'LATE-2');
    const asked = now();
    const answer = await system.ops('POST', '/ops/chains/LATE-2/cancel');
    expect(answer.status).toBe(200);
    const queue = system.queue('orders');
    const id = lateOrderCheckJobId('LATE-2.p1');
    for (const [i, after] of LATE_ORDER_CHECK_AFTER.entries()) {
      const job = await queue.getJob(id);
      expect(job?.data).toMatchObject({ orderId: 'LATE-2.p1', check: i });
      // Each check is timed from the cancel, to the second.
      const firesAt = (job?.timestamp ?? 0) + (job?.delay ?? 0);
      expect(Math.abs(firesAt - (asked + after) * 1000)).toBeLessThan(2_000);
      await system.promote('orders', id);
      await expect
        .poll(async () => (await queue.getJob(id))?.data.check ?? -1, { timeout: 10_000 })
        .toBe(i === LATE_ORDER_CHECK_AFTER.length - 1 ? i : i + 1);
      if (i < LATE_ORDER_CHECK_AFTER.length - 1) {
        await expect.poll(() => checkState(system, 'LATE-2.p1')).toBe('delayed');
      }
    }
    await expect.poll(() => checkState(system, 'LATE-2.p1')).toBe('completed');
    expect((await queue.getJob(id))?.returnvalue).toBe('no late order: LATE-2.p1');
    expect((await system.chain('LATE-2')).history.map((h) => h.event)).not.toContain('order.late');
  });

  it('leaves a chain the cancel never recorded alone (it died before its save)', async () => {
    const params = await purchaseTimedOut(system, 'LATE-3');
    await system.started.provisioning.createOrder(params);
    // What the dead cancel left: its check, the chain not cancelled.
    await checkLeftByDeadCancel(system, 'LATE-3');
    await system.promote('orders', lateOrderCheckJobId('LATE-3.p1'));
    await expect.poll(() => checkState(system, 'LATE-3.p1')).toBe('completed');
    const job = await system.queue('orders').getJob(lateOrderCheckJobId('LATE-3.p1'));
    expect(job?.returnvalue).toBe('skipped: chain not cancelled');
    expect((await system.providerOrder('LATE-3.p1'))?.status).not.toBe('cancelled');

    // The cancel's retry finds the order made and cancels it itself: no check is left to
    // report it late.
    await checkLeftByDeadCancel(system, 'LATE-3');
    await system.send('order.cancelled', { order: 'LATE-3' });
    const chain = await system.waitForChain('LATE-3', (c) => c.status === 'cancelled');
    expect(chain.history.at(-1)?.detail).toContain('LATE-3.p1');
    expect((await system.providerOrder('LATE-3.p1'))?.status).toBe('cancelled');
    expect(await checkState(system, 'LATE-3.p1')).toBeUndefined();
  });

  it('checks again for a cancel retried after its dead attempt’s check had run', async () => {
    const params = await purchaseTimedOut(system, 'LATE-4');
    await checkLeftByDeadCancel(system, 'LATE-4');
    await system.promote('orders', lateOrderCheckJobId('LATE-4.p1'));
    await expect.poll(() => checkState(system, 'LATE-4.p1')).toBe('completed');

    await system.send('order.cancelled', { order: 'LATE-4' });
    await system.waitForChain('LATE-4', (c) => c.status === 'cancelled');
    expect(await checkState(system, 'LATE-4.p1')).toBe('delayed');
    await system.started.provisioning.createOrder(params);
    await system.promote('orders', lateOrderCheckJobId('LATE-4.p1'));
    await system.waitForChain('LATE-4', (c) => c.history.at(-1)?.event === 'order.late');
    expect((await system.providerOrder('LATE-4.p1'))?.status).toBe('cancelled');
  });
});
