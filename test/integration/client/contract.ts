// The one behaviour every ProvisioningClient shares, run against each implementation.
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { ProvisioningClient } from '../../../src/client/provisioning-client.js';
import type { ManualClock } from '../../../src/clock.js';
import { RefusalError } from '../../../src/errors.js';
import { DAY, T0 } from '../../helpers/app.js';

export interface ContractSetup {
  /** A client for a fresh partner of `variant`, so tests never share customers or orders. */
  client(variant: 'marketplace' | 'external'): Promise<ProvisioningClient>;
  /** The clock of the core behind the clients. */
  clock: ManualClock;
  close(): Promise<void>;
}

const utc = (year: number, month: number, day: number) => Date.UTC(year, month - 1, day, 12) / 1000;
/** T0 is 2026-01-15T12:00Z: one month later, and the month after. */
const FEB_15 = utc(2026, 2, 15);
const MAR_15 = utc(2026, 3, 15);

const acme = { id: 'ACME-1', name: 'Acme Corporation', admin: { email: 'boss@acme.example' } };

/** The RefusalError a call rejects with, checked to be a provisioning refusal of `method`. */
export async function refusalOf(call: Promise<unknown>, method: string): Promise<RefusalError> {
  const error = await call.then(
    (answer) => {
      throw new Error(`expected a refusal of ${method}, got ${JSON.stringify(answer)}`);
    },
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(RefusalError);
  const refusal = error as RefusalError;
  expect(refusal.code).toBe('provisioning_refused');
  expect(refusal.details.method).toBe(method);
  return refusal;
}

export function provisioningClientContract(
  name: string,
  setup: () => Promise<ContractSetup>,
): void {
  describe(`${name} (ProvisioningClient contract)`, () => {
    let env: ContractSetup;
    const open: ProvisioningClient[] = [];

    beforeAll(async () => {
      env = await setup();
    });
    afterAll(async () => {
      await env?.close();
    });
    beforeEach(() => {
      env.clock.set(T0);
    });
    afterEach(async () => {
      await Promise.all(open.splice(0).map((client) => client.close()));
    });

    async function clientFor(variant: 'marketplace' | 'external'): Promise<ProvisioningClient> {
      const client = await env.client(variant);
      open.push(client);
      return client;
    }

    describe('in the marketplace variant', () => {
      let client: ProvisioningClient;
      const monthly = {
        customer: 'ACME-1',
        id: 'A-1',
        product: 'suite-std',
        licenses: 5,
        duration: 'monthly' as const,
      };

      beforeEach(async () => {
        client = await clientFor('marketplace');
        await client.createCustomer(acme);
      });

      it('creates a customer and answers the Customer object', async () => {
        expect(client.variant).toBe('marketplace');
        const customer = await client.createCustomer({ ...acme, id: 'ACME-2' });
        expect(customer).toMatchObject({
          name: 'Acme Corporation',
          remoteId: 'ACME-2',
          createdAt: T0,
          isActive: true,
        });
      });

      it('creates a simple order that starts now and runs one term', async () => {
        const order = await client.createOrder(monthly);
        expect(order).toMatchObject({
          remoteId: 'A-1',
          instance: null,
          product: 'suite-std',
          licenses: 5,
          duration: 'monthly',
          count: 1,
          createdAt: T0,
          startsAt: T0,
          expiresAt: FEB_15,
        });
      });

      it('creates an order with a controlled start date', async () => {
        const startsAt = T0 + 10 * DAY;
        const order = await client.createOrder({ ...monthly, duration: 'yearly', startsAt });
        expect(order).toMatchObject({ count: 1, startsAt, expiresAt: utc(2027, 1, 25) });
      });

      it('creates a partial order with its own dates and no duration', async () => {
        const partial = { ...monthly, id: 'A-1.p1', licenses: 2, duration: undefined };
        const order = await client.createOrder({
          ...partial,
          startsAt: T0 + DAY,
          expiresAt: FEB_15,
        });
        expect(order).toMatchObject({
          remoteId: 'A-1.p1',
          duration: null,
          startsAt: T0 + DAY,
          expiresAt: FEB_15,
        });
      });

      it('renews with a controlled start, linked by `parent` only when extensions are on', async () => {
        const first = await client.createOrder(monthly);
        env.clock.advance(20 * DAY);
        const renewal = await client.createOrder({
          ...monthly,
          id: 'A-1.r2',
          licenses: 7,
          startsAt: first.expiresAt,
          parent: 'A-1',
        });
        // Without the extension the service sees a plain controlled-start order: its own term 1.
        expect(renewal).toMatchObject({
          remoteId: 'A-1.r2',
          licenses: 7,
          count: client.extensions ? 2 : 1,
          startsAt: FEB_15,
          expiresAt: MAR_15,
        });
      });

      it('suspends, unsuspends and cancels an order, answering true', async () => {
        await client.createOrder(monthly);
        expect(await client.suspendOrder({ id: 'A-1' })).toBe(true);
        expect(await client.suspendOrder({ id: 'A-1' })).toBe(true);
        expect(await client.unsuspendOrder({ id: 'A-1' })).toBe(true);
        expect(await client.cancelOrder({ id: 'A-1' })).toBe(true);
        const refusal = await refusalOf(client.suspendOrder({ id: 'A-1' }), 'suspendOrder');
        expect(refusal.message).toBe('order A-1 is cancelled');
      });

      it('answers a retried create with the stored customer and order', async () => {
        const customer = await client.createCustomer({ ...acme, id: 'ACME-3' });
        const order = await client.createOrder(monthly);
        env.clock.advance(3 * DAY);
        expect(await client.createCustomer({ ...acme, id: 'ACME-3' })).toEqual(customer);
        expect(await client.createOrder(monthly)).toEqual(order);
      });

      it('refuses an unknown customer with the service message', async () => {
        const call = client.createOrder({ ...monthly, customer: 'NOPE' });
        expect((await refusalOf(call, 'createOrder')).message).toBe('customer not found: NOPE');
      });

      it('refuses an order id reused with other params', async () => {
        await client.createOrder(monthly);
        const call = client.createOrder({ ...monthly, licenses: 6 });
        expect((await refusalOf(call, 'createOrder')).message).toBe(
          'order A-1 already exists with other params',
        );
      });

      it('refuses invalid params, naming the field and the value', async () => {
        const call = client.createOrder({ ...monthly, licenses: 0 });
        expect((await refusalOf(call, 'createOrder')).message).toBe(
          'params.licenses: must be at least 1, got 0',
        );
      });

      it('refuses the external methods with the service message', async () => {
        const call = client.createFirstOrder(monthly);
        expect((await refusalOf(call, 'createFirstOrder')).message).toBe(
          'method createFirstOrder is not offered in the marketplace variant',
        );
      });
    });

    describe('in the external variant', () => {
      let client: ProvisioningClient;
      const first = {
        customer: 'ACME-1',
        id: 'E-1',
        product: 'suite-std',
        licenses: 3,
        duration: 'monthly' as const,
      };

      beforeEach(async () => {
        client = await clientFor('external');
        await client.createCustomer(acme);
      });

      it('creates a customer without an onboarding url', async () => {
        expect(client.variant).toBe('external');
        const customer = await client.createCustomer({ ...acme, id: 'ACME-2' });
        expect(customer).toMatchObject({ remoteId: 'ACME-2', createdAt: T0, isActive: true });
        expect(customer).not.toHaveProperty('url');
      });

      it('creates a first order in a new integer instance', async () => {
        const order = await client.createFirstOrder(first);
        expect(order).toMatchObject({
          remoteId: 'E-1',
          licenses: 3,
          count: 1,
          startsAt: T0,
          expiresAt: FEB_15,
        });
        expect(Number.isInteger(order.instance)).toBe(true);
      });

      it('renews inside the window, with `licenses` only when extensions are on', async () => {
        const order = await client.createFirstOrder(first);
        env.clock.advance(20 * DAY);
        const renewal = await client.createRenewalOrder({
          parent: 'E-1',
          id: 'E-1.r2',
          licenses: 8,
        });
        expect(renewal).toMatchObject({
          remoteId: 'E-1.r2',
          instance: order.instance,
          licenses: client.extensions ? 8 : 3,
          count: 2,
          startsAt: FEB_15,
          expiresAt: MAR_15,
        });
      });

      it('answers a retried renewal with the stored order, even once the window has closed', async () => {
        await client.createFirstOrder(first);
        env.clock.advance(20 * DAY);
        const renewal = await client.createRenewalOrder({ parent: 'E-1', id: 'E-1.r2' });
        env.clock.advance(DAY);
        expect(await client.createRenewalOrder({ parent: 'E-1', id: 'E-1.r2' })).toEqual(renewal);
        expect(await client.createFirstOrder(first)).toMatchObject({ remoteId: 'E-1', count: 1 });
      });

      it('refuses a renewal outside the window with the service message', async () => {
        await client.createFirstOrder(first);
        const call = client.createRenewalOrder({ parent: 'E-1', id: 'E-1.r2' });
        expect((await refusalOf(call, 'createRenewalOrder')).message).toBe(
          'renewal refused: 31 days remain in the current term (window: 15 days)',
        );
      });

      it('suspends and cancels a chain by its first order, answering true', async () => {
        await client.createFirstOrder(first);
        expect(await client.suspendOrder({ id: 'E-1' })).toBe(true);
        expect(await client.cancelOrder({ id: 'E-1' })).toBe(true);
      });

      it('refuses an unknown customer with the service message', async () => {
        const call = client.createFirstOrder({ ...first, customer: 'NOPE' });
        expect((await refusalOf(call, 'createFirstOrder')).message).toBe(
          'customer not found: NOPE',
        );
      });

      it('refuses the marketplace methods with the service message', async () => {
        await client.createFirstOrder(first);
        const call = client.unsuspendOrder({ id: 'E-1' });
        expect((await refusalOf(call, 'unsuspendOrder')).message).toBe(
          'method unsuspendOrder is not offered in the external variant',
        );
      });
    });
  });
}
