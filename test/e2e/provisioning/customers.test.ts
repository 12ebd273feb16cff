// createCustomer over the real endpoint, in both variants: the Customer object, idempotent
// replays, the onboarding email, and the refusals.
import { beforeEach, describe, expect, it } from 'vitest';
import { registryKeys } from '../../../src/provisioning/keys.js';
import { T0, useTestApp } from '../../helpers/app.js';
import {
  type Customer,
  marketplaceInstance,
  newPartner,
  ok,
  type PartnerClient,
  refusal,
  sortedKeys,
  type Variant,
} from './fixtures.js';

const app = useTestApp();

const acme = {
  id: 'ACME-1',
  name: 'Acme Corporation',
  admin: { email: 'boss@acme.example', phone: '+1 555 0100', displayName: 'The Boss' },
};

/** Onboarding emails recorded in the outbox for one partner. */
async function outboxFor(partnerId: number): Promise<Record<string, string>[]> {
  const entries = await app.redis.xrange(registryKeys.outbox, '-', '+');
  return entries
    .map(([, fields]) => {
      const entry: Record<string, string> = {};
      for (let i = 0; i + 1 < fields.length; i += 2) entry[fields[i] ?? ''] = fields[i + 1] ?? '';
      return entry;
    })
    .filter((entry) => entry.partner === String(partnerId));
}

describe('createCustomer in the marketplace variant', () => {
  let client: PartnerClient;

  beforeEach(async () => {
    client = await newPartner(app, 'marketplace');
  });

  it('answers with the Customer object: string partner and id, and an onboarding url', async () => {
    const customer = ok<Customer>(await client.call('createCustomer', acme));

    expect(sortedKeys(customer)).toEqual([
      'admin',
      'createdAt',
      'id',
      'isActive',
      'name',
      'partner',
      'remoteId',
      'url',
    ]);
    expect(customer.name).toBe('Acme Corporation');
    expect(typeof customer.partner).toBe('string');
    expect(typeof customer.id).toBe('string');
    expect(customer.url).toMatch(/^http:\/\/billing\.test\/onboarding\/[^/]+$/);
  });

  it('ends the onboarding url with the instance id of the customer', async () => {
    const customer = ok<Customer>(await client.call('createCustomer', acme));
    const instance = marketplaceInstance(customer);
    expect(customer.url).toBe(`http://billing.test/onboarding/${instance}`);
    // The instance id is usable at once: createUser accepts it.
    ok(
      await client.call('createUser', {
        email: 'first@acme.example',
        password: 'long enough',
        instance,
      }),
    );
  });

  it('gives two customers different ids and different onboarding urls', async () => {
    const a = ok<Customer>(await client.call('createCustomer', acme));
    const b = ok<Customer>(await client.call('createCustomer', { ...acme, id: 'ACME-2' }));
    expect(b.id).not.toBe(a.id);
    expect(b.url).not.toBe(a.url);
    expect(b.partner).toBe(a.partner);
  });

  it('records one onboarding email to the admin', async () => {
    const customer = ok<Customer>(await client.call('createCustomer', acme));
    const emails = await outboxFor(client.partnerId);
    expect(emails).toHaveLength(1);
    expect(emails[0]).toMatchObject({
      type: 'onboarding',
      to: 'boss@acme.example',
      url: customer.url,
      customer: 'ACME-1',
    });
  });

  it('does not record a second onboarding email for a replay', async () => {
    ok(await client.call('createCustomer', acme));
    ok(await client.call('createCustomer', acme));
    expect(await outboxFor(client.partnerId)).toHaveLength(1);
  });
});

describe('createCustomer in the external variant', () => {
  let client: PartnerClient;

  beforeEach(async () => {
    client = await newPartner(app, 'external');
  });

  it('answers with the Customer object: integer partner and id, and no url', async () => {
    const customer = ok<Customer>(await client.call('createCustomer', acme));

    expect(sortedKeys(customer)).toEqual([
      'admin',
      'createdAt',
      'id',
      'isActive',
      'name',
      'partner',
      'remoteId',
    ]);
    expect(customer.name).toBe('Acme Corporation');
    expect(Number.isInteger(customer.partner)).toBe(true);
    expect(Number.isInteger(customer.id)).toBe(true);
  });

  it('gives two customers different ids', async () => {
    const a = ok<Customer>(await client.call('createCustomer', acme));
    const b = ok<Customer>(await client.call('createCustomer', { ...acme, id: 'ACME-2' }));
    expect(b.id).not.toBe(a.id);
    expect(b.partner).toBe(a.partner);
  });

  it('sends no email', async () => {
    ok(await client.call('createCustomer', acme));
    expect(await outboxFor(client.partnerId)).toEqual([]);
  });
});

describe.each<Variant>(['marketplace', 'external'])(
  'createCustomer in the %s variant',
  (variant) => {
    let client: PartnerClient;

    beforeEach(async () => {
      client = await newPartner(app, variant);
    });

    it('echoes the sent id as remoteId', async () => {
      const customer = ok<Customer>(await client.call('createCustomer', acme));
      expect(customer.remoteId).toBe('ACME-1');
    });

    it('shows the admin as an object with the email only', async () => {
      const customer = ok<Customer>(await client.call('createCustomer', acme));
      expect(customer.admin).toEqual({ email: 'boss@acme.example' });
    });

    it('creates the customer active, stamped with the current epoch second', async () => {
      app.clock.set(T0 + 987);
      const customer = ok<Customer>(await client.call('createCustomer', acme));
      expect(customer.isActive).toBe(true);
      expect(customer.createdAt).toBe(T0 + 987);
    });

    it('accepts an admin with the email only', async () => {
      const customer = ok<Customer>(
        await client.call('createCustomer', { ...acme, admin: { email: 'solo@acme.example' } }),
      );
      expect(customer.admin).toEqual({ email: 'solo@acme.example' });
    });

    describe('when the same id is sent again', () => {
      it('answers a replay with the same params with the stored customer', async () => {
        const first = ok<Customer>(await client.call('createCustomer', acme));
        app.clock.advance(3600);
        const again = ok<Customer>(await client.call('createCustomer', acme));
        expect(again).toEqual(first);
        expect(again.id).toBe(first.id);
        expect(again.createdAt).toBe(T0);
      });

      it('treats params in another key order as the same params', async () => {
        const first = ok<Customer>(await client.call('createCustomer', acme));
        const again = ok<Customer>(
          await client.call('createCustomer', {
            admin: {
              displayName: acme.admin.displayName,
              phone: acme.admin.phone,
              email: acme.admin.email,
            },
            name: acme.name,
            id: acme.id,
          }),
        );
        expect(again).toEqual(first);
      });

      it('refuses other params with 400 naming the id', async () => {
        ok(await client.call('createCustomer', acme));
        const text = refusal(
          await client.call('createCustomer', { ...acme, name: 'Acme Renamed Ltd' }),
        );
        expect(text).toContain('ACME-1');
      });

      it('refuses an admin that differs only in its phone', async () => {
        ok(await client.call('createCustomer', acme));
        refusal(
          await client.call('createCustomer', {
            ...acme,
            admin: { ...acme.admin, phone: '+1 555 0199' },
          }),
        );
      });
    });

    it('answers concurrent creations of one id with one and the same customer', async () => {
      const results = await Promise.all([1, 2, 3].map(() => client.call('createCustomer', acme)));
      const bodies = results.map((res) => ok<Customer>(res));
      expect(bodies[1]).toEqual(bodies[0]);
      expect(bodies[2]).toEqual(bodies[0]);
    });

    describe('caller ids', () => {
      it.each([
        ['with colons', 'tenant:eu:42'],
        ['of digits only', '000123'],
        ['of one character', 'x'],
        ['of 128 characters', 'c'.repeat(128)],
        ['with spaces, slashes and non-ASCII letters', 'Kunde Ä/7 #1'],
      ])('accepts an id %s and echoes it as a string', async (_label, id) => {
        const customer = ok<Customer>(await client.call('createCustomer', { ...acme, id }));
        expect(customer.remoteId).toBe(id);
      });

      it('keeps an all-digit id and its colon twin apart', async () => {
        const a = ok<Customer>(await client.call('createCustomer', { ...acme, id: '42' }));
        const b = ok<Customer>(
          await client.call('createCustomer', { ...acme, id: '4:2', name: 'Other Co' }),
        );
        expect(a.id).not.toBe(b.id);
        expect(b.name).toBe('Other Co');
      });

      it.each([
        ['empty', ''],
        ['of 129 characters', 'c'.repeat(129)],
        ['a number', 42],
        ['holding a control character', 'C\n1'],
      ])('refuses an id that is %s, naming params.id', async (_label, id) => {
        const text = refusal(await client.call('createCustomer', { ...acme, id }));
        expect(text).toContain('params.id');
      });
    });

    describe('validation', () => {
      it('refuses a missing admin.email, naming params.admin.email', async () => {
        const text = refusal(
          await client.call('createCustomer', { ...acme, admin: { phone: '+1 555 0100' } }),
        );
        expect(text).toContain('params.admin.email');
      });

      it('refuses a missing admin, naming params.admin', async () => {
        const text = refusal(await client.call('createCustomer', { id: 'A', name: 'No Admin' }));
        expect(text).toContain('params.admin');
      });

      it('refuses an invalid admin.email, naming it', async () => {
        const text = refusal(
          await client.call('createCustomer', { ...acme, admin: { email: 'not-an-email' } }),
        );
        expect(text).toContain('params.admin.email');
      });

      it('accepts a name of 200 characters', async () => {
        const customer = ok<Customer>(
          await client.call('createCustomer', { ...acme, name: 'n'.repeat(200) }),
        );
        expect(customer.name).toBe('n'.repeat(200));
      });

      it('refuses a name of 201 characters, naming params.name', async () => {
        const text = refusal(
          await client.call('createCustomer', { ...acme, name: 'n'.repeat(201) }),
        );
        expect(text).toContain('params.name');
      });

      it('refuses a missing name, naming params.name', async () => {
        const text = refusal(
          await client.call('createCustomer', { id: acme.id, admin: { email: 'a@b.example' } }),
        );
        expect(text).toContain('params.name');
      });

      it('refuses an unknown field, naming it', async () => {
        const text = refusal(await client.call('createCustomer', { ...acme, vatNumber: 'DE123' }));
        expect(text).toContain('vatNumber');
      });

      it('refuses an unknown field of admin, naming it', async () => {
        const text = refusal(
          await client.call('createCustomer', { ...acme, admin: { ...acme.admin, role: 'owner' } }),
        );
        expect(text).toContain('role');
      });
    });
  },
);
