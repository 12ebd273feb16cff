// A renewal job run again after its term was recorded (a stalled job), while the provider is slow.
import { describe, expect, it } from 'vitest';
import { makeRenewalProcessor, renewalJobId } from '../../../jobs/renewals.js';
import { chainIdOf } from '../../../src/chains/keys.js';
import {
  jobState,
  orderPlaced,
  renewalJobOffMs,
  slowToUnsuspend,
  useSystem,
  workerDepsOf,
} from '../../helpers/system.js';

describe('an add-on renewal job run again after its term was recorded, slow provider', () => {
  // A lead longer than a month: every term is due as soon as it starts, so the add-on renews at once.
  const system = useSystem({
    env: { SEAT_INCREASE: 'addon', PARTNER_RENEWAL_WINDOW_DAYS: '40', RENEWAL_LEAD_DAYS: '35' },
  });

  it("leaves the add-on's next renewal job at its renewal time, to the second", async () => {
    await system.send('order.placed', orderPlaced({ order: 'RX-1' }));
    await system.waitForChain('RX-1', (c) => c.term.count === 2);
    await system.send('seats.changed', { order: 'RX-1', licenses: 8 });
    await system.waitForChain('RX-1.a1', (c) => c.term.count === 2 && c.nextRenewalAt !== null);
    const addOnId = chainIdOf('RX-1.a1');
    const queue = system.queue('renewals');
    const id = renewalJobId(addOnId, 2);
    await expect.poll(() => jobState(queue, id)).toBe('completed');
    expect(await renewalJobOffMs(system, 'RX-1.a1')).toBeLessThan(1_000);

    // The worker died after the record and before it reported the job done: the stalled check
    // runs it again. The remote answers unsuspendOrder in 3 s (the timeout allows 10).
    const job = await queue.getJob(id);
    if (!job) throw new Error('no job');
    const slow = workerDepsOf(system, {
      provisioning: slowToUnsuspend(system.started.provisioning, 3_000),
    });
    expect(await makeRenewalProcessor(slow)(job)).toBe('skipped: already_renewed');

    // The next term's job still fires at the add-on's renewal time.
    expect(await renewalJobOffMs(system, 'RX-1.a1')).toBeLessThan(1_000);
  }, 30_000);
});
