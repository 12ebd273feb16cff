// The embedded workers' partner account: created at boot when missing, kept otherwise, with the
// renewal window the settings ask for ("changed on request"), over the real core and HTTP.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { DAY, useTestApp } from '../../helpers/app.js';

const app = useTestApp();

const uniqueName = () => `workers-${randomUUID()}`;

describe('ensuring the partner account', () => {
  it('creates it once, and later calls answer the same partner', async () => {
    const name = uniqueName();
    const input = { name, variant: 'marketplace' as const, renewalWindowDays: 15, now: 1 };
    const results = await Promise.all(Array.from({ length: 10 }, () => app.partners.ensure(input)));
    expect(new Set(results.map((p) => p.id)).size).toBe(1);
    expect(results[0]).toMatchObject({ name, variant: 'marketplace', renewalWindowDays: 15 });
    expect((await app.partners.list()).filter((p) => p.name === name)).toHaveLength(1);
    expect(await app.partners.ensure(input)).toEqual(results[0]);
  });

  it('refuses an existing partner of the other variant', async () => {
    const name = uniqueName();
    await app.partners.ensure({ name, variant: 'marketplace', renewalWindowDays: 15, now: 1 });
    await expect(
      app.partners.ensure({ name, variant: 'external', renewalWindowDays: 15, now: 1 }),
    ).rejects.toThrow(`partner ${name} exists with variant marketplace, not external`);
  });

  it('holds a partner created by a racing call to the variant and window asked for', async () => {
    const name = uniqueName();
    const [first, second] = await Promise.allSettled([
      app.partners.ensure({ name, variant: 'marketplace', renewalWindowDays: 15, now: 1 }),
      app.partners.ensure({ name, variant: 'external', renewalWindowDays: 30, now: 1 }),
    ]);
    // Whichever created it, the other call is refused rather than handed the wrong variant.
    expect([first.status, second.status].sort()).toEqual(['fulfilled', 'rejected']);

    const windows = await Promise.all(
      [15, 30, 15, 30].map((days) =>
        app.partners.ensure({
          name: `${name}-w`,
          variant: 'marketplace',
          renewalWindowDays: days,
          now: 1,
        }),
      ),
    );
    // Each call answers a partner with its own window (the last one written stays).
    expect(windows.map((p) => p.renewalWindowDays)).toEqual([15, 30, 15, 30]);
  });

  it('changes the window of an existing partner to the one asked for, and the core applies it', async () => {
    const name = uniqueName();
    const { partner, apiKey } = await app.partners.create({
      name,
      variant: 'external',
      renewalWindowDays: 15,
      now: app.clock.now(),
    });
    await app.call(apiKey, 'createCustomer', {
      id: 'win-1',
      name: 'Window',
      admin: { email: 'admin@win.test' },
    });
    const first = await app.call(apiKey, 'createFirstOrder', {
      customer: 'win-1',
      id: 'W1',
      product: 'suite-std',
      licenses: 2,
      duration: 'monthly',
    });
    expect(first.status).toBe(200);
    // About 20 days remain: outside a 15-day window, inside a 25-day one.
    app.clock.advance(10 * DAY);
    const early = await app.call(apiKey, 'createRenewalOrder', { parent: 'W1', id: 'W1.r2' });
    expect(early.status).toBe(400);
    expect(early.body).toMatch(/^renewal refused: \d+ days remain .*\(window: 15 days\)/);

    const changed = await app.partners.ensure({
      name,
      variant: 'external',
      renewalWindowDays: 25,
      now: app.clock.now(),
    });
    expect(changed).toEqual({ ...partner, renewalWindowDays: 25 });
    expect(await app.partners.authenticate(apiKey)).toEqual(changed);
    const renewed = await app.call(apiKey, 'createRenewalOrder', { parent: 'W1', id: 'W1.r2' });
    expect(renewed.status).toBe(200);
  });
});
