// `billing chains show` advises commands the CLI then takes (README: Reactivated).
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runScript } from '../../helpers/run-script.js';
import { orderPlaced, useSystem } from '../../helpers/system.js';

const BIN = join(import.meta.dirname, '../../../bin/billing.js');

describe('billing chains show: the action line of an add-on waiting for its reactivation (external)', () => {
  const system = useSystem({ env: { PARTNER_VARIANT: 'external', PAYMENT_GRACE_DAYS: '0' } });

  /** The command as an operator runs it beside this service (its Redis and partner). */
  const billing = (args: string[]) =>
    runScript(BIN, args, {
      ...process.env,
      REDIS_URL: system.redisUrl,
      DATA_DIR: system.settings.DATA_DIR,
      PARTNER_NAME: system.settings.PARTNER_NAME,
    });

  it('advises a command that confirms the reactivation, not one the CLI refuses', async () => {
    await system.send('order.placed', orderPlaced({ order: 'RA-1' }));
    await system.waitForChain('RA-1', () => true);
    // Two more seats: an add-on order of its own in the external variant.
    await system.send('seats.changed', { order: 'RA-1', licenses: 7 });
    await system.waitForChain('RA-1', (c) => c.addOns.length === 1);
    await system.send('payment.overdue', { order: 'RA-1' });
    await system.waitForChain('RA-1', (c) => c.status === 'suspended');
    await system.send('payment.received', { order: 'RA-1' });
    await system.waitForChain('RA-1', (c) => c.needsReactivation);

    // An operator looks at the add-on by its own order (README: any order id of the chain).
    const shown = await billing(['chains', 'show', 'RA-1.a1']);
    expect(shown.code).toBe(0);
    const action = shown.stdout.split('\n').find((line) => line.startsWith('action'));
    expect(action).toBeDefined();
    const advised = /then: billing (.+)$/.exec(action ?? '')?.[1]?.split(' ') ?? [];

    // ...and runs what the line tells them to.
    const done = await billing(advised);
    expect({ advised: advised.join(' '), code: done.code, stderr: done.stderr }).toEqual({
      advised: 'chains reactivated RA-1',
      code: 0,
      stderr: '',
    });
  }, 60_000);
});
