// Users over the real endpoint, in both variants: create form, read form, activation, passwords,
// the unique email, and the refusals of createUser.
import { beforeEach, describe, expect, it } from 'vitest';
import { partnerKeys } from '../../../src/provisioning/keys.js';
import { verifyPassword } from '../../../src/provisioning/passwords.js';
import { T0, useTestApp } from '../../helpers/app.js';
import {
  createInstance,
  newPartner,
  ok,
  type PartnerClient,
  refusal,
  sortedKeys,
  type Variant,
} from './fixtures.js';

const app = useTestApp();

const FOLDERS = [
  'rootFiles',
  'trashFiles',
  'inbox',
  'spam',
  'sent',
  'trashEmail',
  'drafts',
  'mainCalendar',
] as const;

const CREATE_FORM_FIELDS = [
  'id',
  'email',
  'displayName',
  'settings',
  'apps',
  'values',
  'profile',
  'isAdmin',
  'createdAt',
  ...FOLDERS,
].sort();

const READ_FORM_FIELDS = [
  'id',
  'instance',
  'email',
  'displayName',
  'avatar',
  'groups',
  'settings',
  'apps',
  'values',
  'profile',
  'isActive',
  'isAdmin',
  'isSysAdmin',
  ...FOLDERS,
  'token',
  'tokenExpiresAt',
].sort();

type UserBody = Record<string, unknown>;

/** `{1,0,3}` -> [1, 0, 3] */
function parseBraces(text: unknown): number[] {
  expect(typeof text).toBe('string');
  const match = /^\{(-?\d+(?:,-?\d+)*)\}$/.exec(text as string);
  expect(match, `not a brace list of integers: ${String(text)}`).not.toBeNull();
  return (match?.[1] ?? '').split(',').map(Number);
}

function expectSpecValuesAndProfile(user: UserBody): void {
  const values = user.values as Record<string, unknown>;
  expect(sortedKeys(values)).toEqual(['editorTemplates', 'notificationReminder', 'timezone']);
  expect(Number.isInteger(values.notificationReminder)).toBe(true);
  expect(values.timezone).toBeNull();
  expect(values.editorTemplates).toBeNull();
  expect(user.profile).toEqual({
    uid: null,
    title: null,
    department: null,
    location: null,
    grade: null,
    phones: [],
  });
}

describe.each<Variant>(['marketplace', 'external'])('users in the %s variant', (variant) => {
  let client: PartnerClient;
  let instance: string | number;
  let counter = 0;
  const freshEmail = () => {
    counter += 1;
    return `user${counter}-${variant}@example.com`;
  };

  beforeEach(async () => {
    client = await newPartner(app, variant);
    ({ instance } = await createInstance(client, 'CUST-1'));
  });

  const createUser = (params: Record<string, unknown>) =>
    client.call('createUser', { password: 'correct horse', instance, ...params });

  describe('createUser', () => {
    it('answers with exactly the fields of the create form, typed as the spec says', async () => {
      const email = freshEmail();
      const user = ok<UserBody>(await createUser({ email, displayName: 'Ada Lovelace' }));

      expect(sortedKeys(user)).toEqual(CREATE_FORM_FIELDS);
      expect(Number.isInteger(user.id)).toBe(true);
      expect(user.email).toBe(email);
      expect(user.displayName).toBe('Ada Lovelace');
      expect(parseBraces(user.settings)).toHaveLength(4);
      expect(parseBraces(user.apps)).toHaveLength(3);
      expectSpecValuesAndProfile(user);
      expect(typeof user.isAdmin).toBe('boolean');
      for (const folder of FOLDERS) expect(Number.isInteger(user[folder]), folder).toBe(true);
    });

    it('stamps createdAt with the current time in integer epoch seconds', async () => {
      app.clock.set(T0 + 4321);
      const user = ok<UserBody>(await createUser({ email: freshEmail(), displayName: 'Bob' }));
      expect(user.createdAt).toBe(T0 + 4321);
    });

    it('leaves instance, isActive, token and the password out of the create form', async () => {
      const user = ok<UserBody>(await createUser({ email: freshEmail(), displayName: 'Cy' }));
      for (const field of [
        'instance',
        'isActive',
        'isSysAdmin',
        'token',
        'tokenExpiresAt',
        'avatar',
        'groups',
        'password',
      ]) {
        expect(user, field).not.toHaveProperty(field);
      }
    });

    it('accepts a user without displayName', async () => {
      const user = ok<UserBody>(await createUser({ email: freshEmail() }));
      expect(typeof user.displayName).toBe('string');
    });

    it('gives every user its own id', async () => {
      const a = ok<UserBody>(await createUser({ email: freshEmail(), displayName: 'A' }));
      const b = ok<UserBody>(await createUser({ email: freshEmail(), displayName: 'B' }));
      expect(a.id).not.toBe(b.id);
    });
  });

  describe('getUserByEmail', () => {
    it('answers with exactly the fields of the read form, typed as the spec says', async () => {
      const email = freshEmail();
      const created = ok<UserBody>(await createUser({ email, displayName: 'Grace Hopper' }));
      const user = ok<UserBody>(await client.call('getUserByEmail', { email }));

      expect(sortedKeys(user)).toEqual(READ_FORM_FIELDS);
      expect(user.id).toBe(created.id);
      expect(user.email).toBe(email);
      expect(user.displayName).toBe('Grace Hopper');
      expect(user.avatar).toBe('');
      expect(user.groups).toEqual([]);
      expect(user.settings).toEqual(parseBraces(created.settings));
      expect(user.apps).toEqual(parseBraces(created.apps));
      expect(user.values).toEqual(created.values);
      expectSpecValuesAndProfile(user);
      expect(user.isAdmin).toBe(created.isAdmin);
      expect(typeof user.isSysAdmin).toBe('boolean');
      for (const folder of FOLDERS) expect(user[folder], folder).toBe(created[folder]);
      expect(user.token).toBe('');
      expect(user.tokenExpiresAt).toBe(0);
      expect(user).not.toHaveProperty('createdAt');
      expect(user).not.toHaveProperty('password');
    });

    it(`names the user's instance as ${variant === 'marketplace' ? 'a string' : 'an integer'}`, async () => {
      const email = freshEmail();
      ok(await createUser({ email, displayName: 'Dee' }));
      const user = ok<UserBody>(await client.call('getUserByEmail', { email }));
      expect(typeof user.instance).toBe(variant === 'marketplace' ? 'string' : 'number');
      if (variant === 'external') expect(Number.isInteger(user.instance)).toBe(true);
      expect(user.instance).toBe(instance);
    });

    it('shows a new user as active', async () => {
      const email = freshEmail();
      ok(await createUser({ email, displayName: 'Eve' }));
      const user = ok<UserBody>(await client.call('getUserByEmail', { email }));
      expect(user.isActive).toBe(true);
    });

    it('finds the user whatever the case of the email', async () => {
      const email = freshEmail();
      const created = ok<UserBody>(await createUser({ email, displayName: 'Fay' }));
      const user = ok<UserBody>(
        await client.call('getUserByEmail', { email: email.toUpperCase() }),
      );
      expect(user.id).toBe(created.id);
    });

    it.each(['a!b@example.com', 'a#b@example.com', 'ü@bücher.de', 'ops@localhost'])(
      'takes any address mail systems take: %s',
      async (address) => {
        const email = address.replace('@', `.${freshEmail().split('@')[0]}@`);
        ok(await createUser({ email, displayName: 'Ida' }));
        const user = ok<UserBody>(await client.call('getUserByEmail', { email }));
        expect(user.email).toBe(email);
      },
    );

    it.each([
      ['no-at-sign', 'must be an email address'],
      ['a b@example.com', 'must be an email address'],
      ['a@b@example.com', 'must be an email address'],
      ['a\u0001b@example.com', 'must not contain control characters'],
    ])('refuses %j naming the field', async (email, message) => {
      const text = refusal(await client.call('getUserByEmail', { email }));
      expect(text).toContain(`params.email: ${message}`);
    });

    it('refuses an unknown email with 400 naming it', async () => {
      const text = refusal(await client.call('getUserByEmail', { email: 'nobody@example.com' }));
      expect(text).toContain('nobody@example.com');
    });
  });

  describe('updateUserByEmail', () => {
    it('deactivates a user, answering true, and the read form shows it', async () => {
      const email = freshEmail();
      ok(await createUser({ email, displayName: 'Gil' }));

      expect(ok(await client.call('updateUserByEmail', { email, isActive: false }))).toBe(true);
      const user = ok<UserBody>(await client.call('getUserByEmail', { email }));
      expect(user.isActive).toBe(false);
    });

    it('activates a deactivated user again, answering true', async () => {
      const email = freshEmail();
      ok(await createUser({ email, displayName: 'Hal' }));
      ok(await client.call('updateUserByEmail', { email, isActive: false }));

      expect(ok(await client.call('updateUserByEmail', { email, isActive: true }))).toBe(true);
      const user = ok<UserBody>(await client.call('getUserByEmail', { email }));
      expect(user.isActive).toBe(true);
    });

    it('accepts a repeat of the same change', async () => {
      const email = freshEmail();
      ok(await createUser({ email, displayName: 'Ian' }));
      ok(await client.call('updateUserByEmail', { email, isActive: false }));
      expect(ok(await client.call('updateUserByEmail', { email, isActive: false }))).toBe(true);
    });

    it('refuses an unknown email with 400 naming it', async () => {
      const text = refusal(
        await client.call('updateUserByEmail', { email: 'ghost@example.com', isActive: false }),
      );
      expect(text).toContain('ghost@example.com');
    });

    it('refuses an isActive that is not a boolean, naming params.isActive', async () => {
      const email = freshEmail();
      ok(await createUser({ email, displayName: 'Jo' }));
      const text = refusal(await client.call('updateUserByEmail', { email, isActive: 'false' }));
      expect(text).toContain('params.isActive');
    });
  });

  describe('resetPasswordByEmail', () => {
    it('answers true and stores the new password in place of the old one', async () => {
      const email = freshEmail();
      ok(await createUser({ email, displayName: 'Kim' }));

      expect(
        ok(await client.call('resetPasswordByEmail', { email, password: 'a new secret' })),
      ).toBe(true);

      const stored = await app.redis.hget(
        partnerKeys(client.partnerId).usersPassword,
        email.toLowerCase(),
      );
      expect(stored).not.toBeNull();
      expect(await verifyPassword('a new secret', stored ?? '')).toBe(true);
      expect(await verifyPassword('correct horse', stored ?? '')).toBe(false);
    });

    it('refuses an unknown email with 400 naming it', async () => {
      const text = refusal(
        await client.call('resetPasswordByEmail', {
          email: 'ghost@example.com',
          password: 'long enough',
        }),
      );
      expect(text).toContain('ghost@example.com');
    });

    it('refuses a short password, naming params.password', async () => {
      const email = freshEmail();
      ok(await createUser({ email, displayName: 'Lu' }));
      const text = refusal(await client.call('resetPasswordByEmail', { email, password: 'short' }));
      expect(text).toContain('params.password');
    });
  });

  describe('when the email already exists', () => {
    it('refuses a second user with the database message of the spec', async () => {
      const email = freshEmail();
      ok(await createUser({ email, displayName: 'Mo' }));
      const res = await createUser({ email, displayName: 'Mo again' });
      expect(res.status).toBe(400);
      expect(res.body).toBe('duplicate key value violates unique constraint "users_email"');
    });

    it('refuses the same email written in another case', async () => {
      const email = freshEmail();
      ok(await createUser({ email, displayName: 'Ned' }));
      const res = await createUser({ email: email.toUpperCase(), displayName: 'NED' });
      expect(res.status).toBe(400);
      expect(res.body).toBe('duplicate key value violates unique constraint "users_email"');
    });

    it('refuses the same email in another instance of the same partner', async () => {
      const email = freshEmail();
      ok(await createUser({ email, displayName: 'Oz' }));
      const other = await createInstance(client, 'CUST-2');
      const res = await client.call('createUser', {
        email,
        password: 'correct horse',
        instance: other.instance,
        displayName: 'Oz two',
      });
      expect(res.status).toBe(400);
      expect(res.body).toBe('duplicate key value violates unique constraint "users_email"');
    });
  });

  describe('createUser refusals', () => {
    it('refuses an unknown instance with 400 naming it', async () => {
      const unknown = variant === 'marketplace' ? 'inst-999999' : 999_999;
      const text = refusal(
        await createUser({ email: freshEmail(), displayName: 'P', instance: unknown }),
      );
      expect(text).toContain(String(unknown));
    });

    it("refuses another partner's instance", async () => {
      const other = await newPartner(app, variant);
      // The other partner's instances are numbered after this partner's, so ids cannot coincide.
      await createInstance(other, 'OTHER-1');
      const { instance: theirs } = await createInstance(other, 'OTHER-2');
      const text = refusal(
        await createUser({ email: freshEmail(), displayName: 'Q', instance: theirs }),
      );
      expect(text).toContain(String(theirs));
    });

    it(`refuses an instance of the other variant's type, naming params.instance`, async () => {
      const wrong = variant === 'marketplace' ? 1 : String(instance);
      const text = refusal(
        await createUser({ email: freshEmail(), displayName: 'R', instance: wrong }),
      );
      expect(text).toContain('params.instance');
    });

    it('refuses an instance out of range with what is wrong with it', async () => {
      const [bad, message] =
        variant === 'marketplace' ? ['', 'must not be empty'] : [0, 'must be at least 1'];
      const text = refusal(
        await createUser({ email: freshEmail(), displayName: 'R2', instance: bad }),
      );
      expect(text).toContain(`params.instance: ${message}`);
    });

    it('refuses a missing instance, naming params.instance', async () => {
      const text = refusal(
        await client.call('createUser', {
          email: freshEmail(),
          password: 'correct horse',
          displayName: 'S',
        }),
      );
      expect(text).toContain('params.instance');
    });

    it('refuses a password shorter than 8 characters, naming params.password', async () => {
      const text = refusal(
        await createUser({ email: freshEmail(), displayName: 'T', password: 'seven77' }),
      );
      expect(text).toContain('params.password');
    });

    it.each([
      ['without @', 'not-an-email'],
      ['empty', ''],
      ['without domain', 'user@'],
    ])('refuses an email %s, naming params.email', async (_label, email) => {
      const text = refusal(await createUser({ email, displayName: 'U' }));
      expect(text).toContain('params.email');
    });

    it('refuses an unknown field, naming it', async () => {
      const text = refusal(
        await createUser({ email: freshEmail(), displayName: 'V', isAdmin: true }),
      );
      expect(text).toContain('isAdmin');
    });

    it('accepts an email of 254 characters and refuses one of 255, naming params.email', async () => {
      const ofLength = (n: number) =>
        `${'a'.repeat(64)}@${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(n - 197)}.com`;
      expect(ofLength(254)).toHaveLength(254);
      ok(await createUser({ email: ofLength(254), displayName: 'W' }));
      const text = refusal(await createUser({ email: ofLength(255), displayName: 'W' }));
      expect(text).toContain('params.email');
    });

    it('accepts a password of 128 characters and refuses one of 129', async () => {
      ok(await createUser({ email: freshEmail(), password: 'p'.repeat(128) }));
      const text = refusal(await createUser({ email: freshEmail(), password: 'p'.repeat(129) }));
      expect(text).toContain('params.password');
    });

    it('refuses a password with a lone surrogate, which would hash as any other one', async () => {
      // Hashed as UTF-8, every lone surrogate becomes U+FFFD: two such passwords would match.
      const text = refusal(await createUser({ email: freshEmail(), password: 'secret-\ud800-pw' }));
      expect(text).toBe('params.password: must be well-formed Unicode (no lone surrogates)');
    });

    it('refuses a displayName of 201 characters, naming params.displayName', async () => {
      const text = refusal(await createUser({ email: freshEmail(), displayName: 'd'.repeat(201) }));
      expect(text).toContain('params.displayName');
    });

    it('creates only one of several concurrent users with the same email', async () => {
      const email = freshEmail();
      const results = await Promise.all(
        [1, 2, 3, 4].map((n) => createUser({ email, displayName: `Racer ${n}` })),
      );
      expect(results.map((r) => r.status).sort()).toEqual([200, 400, 400, 400]);
      for (const res of results.filter((r) => r.status === 400)) {
        expect(res.body).toBe('duplicate key value violates unique constraint "users_email"');
      }
    });
  });
});
