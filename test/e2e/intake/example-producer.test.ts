// The README's example producer (examples/send-webhook.mjs), run as a user runs it against the
// real service: it signs, the service accepts, deduplicates and renews; bad input is refused.
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { systemClock } from '../../../src/clock.js';
import { runScript } from '../../helpers/run-script.js';
import { DAY, useSystem } from '../../helpers/system.js';

const EXAMPLE = join(import.meta.dirname, '../../../examples/send-webhook.mjs');

const system = useSystem();

function send(args: string[], env: Record<string, string> = {}) {
  return runScript(EXAMPLE, args, {
    ...process.env,
    WEBHOOK_SECRET: system.settings.WEBHOOK_SECRET as string,
    ...env,
  });
}

describe('examples/send-webhook.mjs', () => {
  it('sends the README order.placed: accepted once, renewed, a repeat of its id deduplicated', async () => {
    const startsAt = systemClock.now() - 25 * DAY;
    const data = JSON.stringify({
      customer: { id: 'C-EX', name: 'Acme GmbH', admin: { email: 'admin@acme.example' } },
      order: { id: 'EX-1', product: 'suite-std', licenses: 5, duration: 'monthly', startsAt },
    });
    const args = ['order.placed', data, '--url', system.baseUrl, '--id', 'ex-1'];
    const first = await send(args);
    expect(first).toMatchObject({ code: 0, stdout: '202 {"id":"ex-1"}\n' });
    const chain = await system.waitForChain('EX-1', (c) => c.term.count === 2);
    expect(chain.history.filter((h) => h.event === 'order.placed')).toHaveLength(1);

    expect(await send(args)).toMatchObject({ code: 0, stdout: '202 {"id":"ex-1"}\n' });
    // Deduplicated at intake: the repeat made no second job.
    const orders = system.queue('orders');
    const jobs = await orders.getJobs(['completed', 'active', 'waiting', 'delayed', 'failed']);
    expect(jobs.filter((job) => job.data.webhookId === 'ex-1')).toHaveLength(1);
  });

  it('takes an empty BILLING_URL as unset, and --url over it', async () => {
    const args = ['seats.changed', '{"order":"EX-U","licenses":8}'];
    const unset = await send([...args, '--id', 'ex-u-1'], { BILLING_URL: '' });
    // Sent to the default address (whatever answers there, or nothing): not refused as usage.
    expect(unset.code).not.toBe(2);
    expect(unset.stderr).not.toContain('BILLING_URL must be');
    const given = await send([...args, '--url', system.baseUrl, '--id', 'ex-u-2'], {
      BILLING_URL: '',
    });
    expect(given).toMatchObject({ code: 0, stdout: '202 {"id":"ex-u-2"}\n' });
  });

  it('sends an id beyond Latin-1 as the UTF-8 it signs (README: "Any text")', async () => {
    const args = ['order.cancelled', '{"order":"EX-NONE"}', '--url', system.baseUrl];
    const sent = await send([...args, '--id', 'evt-€-1']);
    expect(sent.stderr).toBe('');
    expect(sent).toMatchObject({ code: 0, stdout: '202 {"id":"evt-€-1"}\n' });
    const jobs = await system.queue('orders').getJobs(['active', 'waiting', 'delayed', 'failed']);
    expect(jobs.map((job) => job.data.webhookId)).toContain('evt-€-1');
  });

  it('exits 1 with the service refusal for a bad event, and for a wrong secret', async () => {
    const bad = await send([
      'seats.changed',
      '{"order":"EX-1","licenses":1.5}',
      '--url',
      system.baseUrl,
    ]);
    expect(bad.code).toBe(1);
    expect(bad.stdout).toMatch(/^400 .*data\.licenses/);

    const forged = await send(['payment.received', '{"order":"EX-1"}', '--url', system.baseUrl], {
      WEBHOOK_SECRET: `whsec_${Buffer.from('not the secret').toString('base64')}`,
    });
    expect(forged.code).toBe(1);
    expect(forged.stdout).toMatch(/^401 .*invalid_signature/);
  });

  it.each([
    ['a --url that is not a URL', ['--url', 'notaurl'], {}, '--url must be an http(s) URL'],
    ['a --url of another scheme', ['--url', 'ftp://x'], {}, '--url must be an http(s) URL'],
    ['an empty --id', ['--id', ''], {}, '--id must not be empty'],
    ['an --id with a space at its end', ['--id', 'evt-1 '], {}, '--id must not start or end'],
    [
      'a WEBHOOK_SECRET that is not whsec_<base64>',
      [],
      { WEBHOOK_SECRET: 'not base64!!' },
      'WEBHOOK_SECRET is not a webhook secret',
    ],
    [
      'a WEBHOOK_SECRET without the whsec_ prefix',
      [],
      { WEBHOOK_SECRET: 'nope' },
      'WEBHOOK_SECRET is not a webhook secret',
    ],
    [
      'a bare base64 WEBHOOK_SECRET (no whsec_)',
      [],
      { WEBHOOK_SECRET: Buffer.alloc(32, 7).toString('base64') },
      'the service takes whsec_ followed by',
    ],
    [
      'a WEBHOOK_SECRET too short for the service',
      [],
      { WEBHOOK_SECRET: 'whsec_nope' },
      'at least 16 characters of well-formed base64',
    ],
  ])('exits 2 with the usage for %s, sending nothing', async (_case, args, env, reason) => {
    const sent = await send(['seats.changed', '{"order":"EX-9","licenses":8}', ...args], env);
    expect({ code: sent.code, stdout: sent.stdout }).toEqual({ code: 2, stdout: '' });
    expect(sent.stderr).toContain(reason);
    expect(sent.stderr).toContain('usage:');
    expect(sent.stderr).not.toMatch(/\n\s+at /);
    expect(sent.stderr).not.toContain('not base64!!');
  });
});
