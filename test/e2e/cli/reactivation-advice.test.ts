// `billing chains show` advises commands the CLI then takes, and `billing orders reactivate` does
// by hand what the embedded provider's staff would (README: Reactivated).
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runScript } from '../../helpers/run-script.js';
import { orderPlaced, paidAwaitingReactivation, useSystem } from '../../helpers/system.js';

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

  /** An external chain with an add-on of its own (two more seats), suspended for non-payment. */
  async function suspendedWithAddOn(order: string): Promise<void> {
    await system.send('order.placed', orderPlaced({ order }));
    await system.waitForChain(order, () => true);
    await system.send('seats.changed', { order, licenses: 7 });
    await system.waitForChain(order, (c) => c.addOns.length === 1);
    await system.send('payment.overdue', { order });
    await system.waitForChain(order, (c) => c.status === 'suspended');
  }

  it('advises a command that confirms the reactivation, not one the CLI refuses', async () => {
    await suspendedWithAddOn('RA-1');
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

  it('advises no reactivation for a chain cancelled while it waited for one', async () => {
    await system.send('order.placed', orderPlaced({ order: 'CR-1' }));
    await system.waitForChain('CR-1', () => true);
    await paidAwaitingReactivation(system, 'CR-1');
    // Bought by mistake after all: cancelled, at the provider too (README: Cancelling).
    expect((await system.ops('POST', '/ops/chains/CR-1/cancel')).status).toBe(200);

    expect(await system.chain('CR-1')).toMatchObject({
      status: 'cancelled',
      needsReactivation: false,
    });
    const shown = await billing(['chains', 'show', 'CR-1']);
    expect(shown.code).toBe(0);
    expect(shown.stdout).not.toMatch(/^action/m);
  });

  it('reactivates at the embedded provider the orders a payment asks for, each a whole chain', async () => {
    await suspendedWithAddOn('RA-2');
    await system.send('payment.received', { order: 'RA-2' });
    const paid = await system.waitForChain('RA-2', (c) => c.needsReactivation);
    const asked = /reactivate (.+) by hand/.exec(paid.history.at(-1)?.detail ?? '')?.[1];
    expect(asked).toBe('RA-2, RA-2.a1');

    const done = await billing(['orders', 'reactivate', ...(asked ?? '').split(', ')]);
    expect({ code: done.code, stdout: done.stdout, stderr: done.stderr }).toEqual({
      code: 0,
      stdout:
        `Order RA-2 of ${system.settings.PARTNER_NAME} is active, with every order of its chain.\n` +
        `Order RA-2.a1 of ${system.settings.PARTNER_NAME} is active, with every order of its chain.\n`,
      stderr: '',
    });
    expect((await system.providerOrder('RA-2'))?.status).toBe('active');
    expect((await system.providerOrder('RA-2.a1'))?.status).toBe('active');
    // Safe to repeat; --json prints each order as the interface shows it, with its status.
    const again = await billing(['orders', 'reactivate', 'RA-2', '--json']);
    expect(again.code).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({ remoteId: 'RA-2', status: 'active' });

    const confirmed = await billing(['chains', 'reactivated', 'RA-2', '--json']);
    expect(JSON.parse(confirmed.stdout)).toMatchObject({
      status: 'active',
      needsReactivation: false,
    });
  }, 60_000);

  it('lists no add-on cancelled while the family was suspended: the listed orders reactivate', async () => {
    await suspendedWithAddOn('RA-3');
    // The add-on, bought by mistake, is cancelled by itself (README: Cancelling).
    await system.send('order.cancelled', { order: 'RA-3.a1' });
    await system.waitForChain('RA-3.a1', (c) => c.history.at(-1)?.event === 'chain.cancelled');

    await system.send('payment.received', { order: 'RA-3' });
    const paid = await system.waitForChain('RA-3', (c) => c.needsReactivation);
    const asked = /reactivate (.+) by hand/.exec(paid.history.at(-1)?.detail ?? '')?.[1] ?? '';
    const done = await billing(['orders', 'reactivate', ...asked.split(', ')]);
    expect({ asked, code: done.code, stderr: done.stderr }).toEqual({
      asked: 'RA-3',
      code: 0,
      stderr: '',
    });
  }, 60_000);

  it.each([
    [['RA-404'], /^billing: order not found: RA-404\n$/],
    [['RA-1', '--partner', 'nobody'], /^billing: no partner named nobody\n$/],
  ])('refuses %j with the reason and status 2', async (args, reason) => {
    const refused = await billing(['orders', 'reactivate', ...args]);
    expect({ code: refused.code, stdout: refused.stdout }).toEqual({ code: 2, stdout: '' });
    expect(refused.stderr).toMatch(reason);
  });

  it('refuses a renewal order: the external variant names a chain by its first order', async () => {
    const refused = await billing(['orders', 'reactivate', 'RA-1.r2']);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(
      /^billing: order (not found: RA-1\.r2|RA-1\.r2 is not a first order)/,
    );
  });

  it("refuses a marketplace partner's order: the interface unsuspends those", async () => {
    const added = await billing([
      'partners',
      'add',
      '--name',
      'ra-market',
      '--variant',
      'marketplace',
    ]);
    expect(added.code).toBe(0);
    const refused = await billing(['orders', 'reactivate', 'M-1', '--partner', 'ra-market']);
    expect({ code: refused.code, stdout: refused.stdout }).toEqual({ code: 2, stdout: '' });
    expect(refused.stderr).toBe(
      'billing: ra-market is a marketplace partner: its orders are unsuspended through the interface (unsuspendOrder), as the workers do when its payment arrives\n',
    );
  });

  it('refuses in remote mode: that provider has tools of its own', async () => {
    const refused = await runScript(BIN, ['orders', 'reactivate', 'RA-1'], {
      ...process.env,
      REDIS_URL: system.redisUrl,
      DATA_DIR: system.settings.DATA_DIR,
      PROVISIONING_URL: 'http://127.0.0.1:9/provisioning',
      PROVISIONING_API_KEY: 'k'.repeat(32),
      PARTNER_VARIANT: 'external',
    });
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('billing: PROVISIONING_URL is set');
  });
});
