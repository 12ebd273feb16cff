// The ops API, Bull Board, health and metrics: what operators use, and what they cannot break.
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chainIdOf } from '../../../src/chains/keys.js';
import { systemClock } from '../../../src/clock.js';
import {
  MAX_STALLED_COUNT,
  QUEUE_PREFIX,
  queueNames,
  STALLED_INTERVAL_MS,
} from '../../../src/queues.js';
import { JOB_ATTEMPTS } from '../../../src/retry-policy.js';
import {
  DAY,
  leftByDeadJob,
  OPS_TOKEN,
  orderPlaced,
  type System,
  startSystem,
} from '../../helpers/system.js';

let system: System;

beforeAll(async () => {
  system = await startSystem();
  await system.send('order.placed', orderPlaced({ order: 'OPS-1', customer: 'ops-cust' }));
  await system.send(
    'order.placed',
    orderPlaced({ order: 'OPS-2', customer: 'ops-cust', startsAt: systemClock.now() - 25 * DAY }),
  );
  await system.waitForChain('OPS-1', () => true);
  await system.waitForChain('OPS-2', (c) => c.term.count === 2);
});

afterAll(async () => system.close());

async function raw(
  path: string,
  headers: Record<string, string> = {},
  method = 'GET',
  body?: string,
) {
  const res = await request(`${system.baseUrl}${path}`, { method: method as 'GET', headers, body });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, text };
}

describe('without the ops token', () => {
  it.each([
    ['GET', '/ops/chains/OPS-1'],
    ['PUT', '/ops/chains/OPS-1/auto-renew'],
    ['POST', '/ops/chains/OPS-1/cancel'],
    ['GET', '/ops/renewals'],
    ['GET', '/admin/queues'],
    ['GET', '/admin/queues/api/queues'],
  ])('%s %s answers 401 and changes nothing', async (method, path) => {
    const attempts: Record<string, string>[] = [
      {},
      { authorization: 'Bearer wrong-token' },
      { authorization: 'Basic Zm9vOmJhcg==' },
    ];
    for (const headers of attempts) {
      const res = await raw(path, headers, method);
      expect(res.status).toBe(401);
      expect(JSON.parse(res.text)).toMatchObject({ error: 'unauthorized' });
    }
    expect((await system.chain('OPS-1')).status).toBe('active');
  });
});

describe("from another site's page, with a browser's saved login", () => {
  const basic = () => `Basic ${Buffer.from(`ops:${OPS_TOKEN}`).toString('base64')}`;

  it.each(['cross-site', 'same-site'])(
    'refuses a change 403 when the browser says %s, changing nothing',
    async (site) => {
      // What a form posting to us from another site sends: text/plain, no preflight.
      const headers = {
        authorization: basic(),
        'content-type': 'text/plain',
        'sec-fetch-site': site,
      };
      for (const [method, path] of [
        ['POST', '/ops/chains/OPS-1/cancel'],
        ['PUT', '/admin/queues/api/queues/renewals/pause'],
      ] as const) {
        const res = await raw(path, headers, method, '');
        expect(res.status).toBe(403);
        expect(JSON.parse(res.text)).toMatchObject({ error: 'cross_site_request' });
      }
      expect((await system.chain('OPS-1')).status).toBe('active');
      expect(await system.queue('renewals').isPaused()).toBe(false);
    },
  );

  it.each(['http://evil.example', 'null'])(
    'refuses a change 403 over plain HTTP (no Sec-Fetch-Site) from Origin %s',
    async (origin) => {
      const headers = { authorization: basic(), 'content-type': 'text/plain', origin };
      const res = await raw('/ops/chains/OPS-1/cancel', headers, 'POST', '');
      expect(res.status).toBe(403);
      expect(JSON.parse(res.text)).toMatchObject({ error: 'cross_site_request' });
      expect((await system.chain('OPS-1')).status).toBe('active');
    },
  );

  it('lets a page of this host change over plain HTTP, also behind a proxy naming it', async () => {
    const { host } = new URL(system.baseUrl);
    const enabled = (await system.chain('OPS-1')).autoRenew;
    const put = (headers: Record<string, string>) =>
      raw(
        '/ops/chains/OPS-1/auto-renew',
        { authorization: basic(), 'content-type': 'application/json', ...headers },
        'PUT',
        JSON.stringify({ enabled }),
      );
    expect((await put({ origin: `http://${host}` })).status).toBe(200);
    const proxied = { origin: 'https://ops.example.com', 'x-forwarded-host': 'ops.example.com' };
    expect((await put(proxied)).status).toBe(200);
  });

  it('lets it read, and lets a page of this host change', async () => {
    const read = await raw('/ops/chains/OPS-1', {
      authorization: basic(),
      'sec-fetch-site': 'cross-site',
    });
    expect(read.status).toBe(200);
    const sameOrigin = await raw(
      '/ops/chains/OPS-1/auto-renew',
      {
        authorization: basic(),
        'content-type': 'application/json',
        'sec-fetch-site': 'same-origin',
      },
      'PUT',
      JSON.stringify({ enabled: (await system.chain('OPS-1')).autoRenew }),
    );
    expect(sameOrigin.status).toBe(200);
  });
});

describe('Bull Board', () => {
  it('opens with basic auth (the token as password) and lists every queue', async () => {
    const basic = `Basic ${Buffer.from(`ops:${OPS_TOKEN}`).toString('base64')}`;
    const page = await raw('/admin/queues', { authorization: basic });
    expect(page.status).toBe(200);
    expect(page.text).toContain('<html');
    const api = await raw('/admin/queues/api/queues', { authorization: `Bearer ${OPS_TOKEN}` });
    const names = (JSON.parse(api.text).queues as { name: string }[]).map((q) => q.name).sort();
    expect(names).toEqual(['maintenance', 'orders', 'payment-signals', 'renewals', 'seat-changes']);
  });

  it('may not be framed by another site, whose page could lead a logged-in browser to click', async () => {
    for (const path of ['/admin/queues', '/admin/queues/api/queues']) {
      const res = await raw(path, { authorization: `Bearer ${OPS_TOKEN}` });
      expect(res.headers['x-frame-options']).toBe('DENY');
      expect(res.headers['content-security-policy']).toBe("frame-ancestors 'none'");
    }
  });

  it('asks a browser for credentials', async () => {
    const res = await raw('/admin/queues');
    expect(res.headers['www-authenticate']).toMatch(/^Basic realm=/);
  });
});

describe('the ops API', () => {
  it('finds a chain by any of its order ids, 404 for an unknown one', async () => {
    const byRenewal = await system.ops('GET', '/ops/chains/OPS-2.r2');
    expect(byRenewal.body).toMatchObject({ order: 'OPS-2', term: { orderId: 'OPS-2.r2' } });
    const notFound = {
      status: 404,
      body: { error: 'chain_not_found', message: 'no chain has an order NOPE' },
    };
    expect(await system.ops('GET', '/ops/chains/NOPE')).toEqual(notFound);
    expect(await system.ops('PUT', '/ops/chains/NOPE/auto-renew', { enabled: true })).toEqual(
      notFound,
    );
    expect(await system.ops('POST', '/ops/chains/NOPE/cancel')).toEqual(notFound);
  });

  it('lists the chains of a customer', async () => {
    const res = await system.ops('GET', '/ops/customers/ops-cust/chains');
    const chains = (res.body as { chains: { order: string }[] }).chains.map((c) => c.order);
    expect(chains.sort()).toEqual(['OPS-1', 'OPS-2']);
    expect(res.body).toMatchObject({ next: null });
    const first = chains[0] as string;
    const after = await system.ops('GET', `/ops/customers/ops-cust/chains?after=${first}`);
    expect((after.body as { chains: { order: string }[] }).chains.map((c) => c.order)).toEqual(
      chains.slice(1),
    );
    expect(await system.ops('GET', '/ops/customers/nobody/chains')).toEqual({
      status: 200,
      body: { chains: [], next: null },
    });
    expect(await system.ops('GET', '/ops/customers/ops-cust/chains?after=NOPE')).toEqual({
      status: 400,
      body: {
        error: 'invalid_request',
        message: 'query.after: no chain of customer ops-cust has the order "NOPE"',
      },
    });
    expect(await system.ops('GET', '/ops/customers/ops-cust/chains?limit=5')).toMatchObject({
      status: 400,
      body: { error: 'invalid_request', message: expect.stringMatching(/^query/) },
    });
  });

  it.each([
    [{ enabled: 'yes' }, 'body.enabled: must be a boolean, got "yes"'],
    [{}, 'body.enabled: is required'],
    [{ enabled: true, extra: 1 }, 'body: unknown field "extra"'],
    [undefined, 'body: is required'],
  ])(
    'refuses auto-renew body %j with a message naming the field, changing nothing',
    async (body, message) => {
      const before = await system.chain('OPS-1');
      const res = await system.ops('PUT', '/ops/chains/OPS-1/auto-renew', body);
      expect(res).toEqual({ status: 400, body: { error: 'invalid_request', message } });
      expect(await system.chain('OPS-1')).toEqual(before);
    },
  );

  it.each(['abc', '-1', '1.5', '99999', '', '0x10', '1e2'])(
    'refuses renewals?within=%s',
    async (within) => {
      const res = await system.ops('GET', `/ops/renewals?within=${within}`);
      expect(res.status).toBe(400);
      expect((res.body as { message: string }).message).toMatch(/^query\.within: /);
    },
  );

  it('lists upcoming renewals ordered by due time', async () => {
    const res = await system.ops('GET', '/ops/renewals?within=60');
    const renewals = (res.body as { renewals: { order: string; dueAt: number }[] }).renewals;
    expect(renewals.map((r) => r.order)).toEqual(['OPS-1', 'OPS-2']);
    expect(renewals[0]?.dueAt).toBeLessThanOrEqual(renewals[1]?.dueAt ?? 0);
    expect(res.body).toMatchObject({ next: null });
  });

  it("goes on from a page's end with after=<its next>", async () => {
    const all = await system.ops('GET', '/ops/renewals?within=60');
    const first = (all.body as { renewals: { order: string; dueAt: number }[] }).renewals[0];
    const chainId = chainIdOf(first?.order as string);
    const rest = await system.ops(
      'GET',
      `/ops/renewals?within=60&after=${first?.dueAt}.${chainId}`,
    );
    expect(rest.status).toBe(200);
    expect((rest.body as { renewals: { order: string }[] }).renewals.map((r) => r.order)).toEqual([
      'OPS-2',
    ]);
  });

  it.each(['', 'abc', '1797862162', '1797862162.OPS-1', `-1.${chainIdOf('OPS-1')}`])(
    'refuses renewals?after=%s, naming the field',
    async (after) => {
      const res = await system.ops('GET', `/ops/renewals?after=${encodeURIComponent(after)}`);
      expect(res).toEqual({
        status: 400,
        body: {
          error: 'invalid_request',
          message: expect.stringMatching(/^query\.after: must be the `next` of an earlier answer/),
        },
      });
    },
  );

  it.each(['cancel', 'reactivated'])(
    'refuses a body on %s (it takes none), changing nothing',
    async (action) => {
      const before = await system.chain('OPS-1');
      const res = await system.ops('POST', `/ops/chains/OPS-1/${action}`, { immediately: true });
      expect(res).toEqual({
        status: 400,
        body: { error: 'invalid_request', message: 'body: unknown field "immediately"' },
      });
      expect(await system.chain('OPS-1')).toEqual(before);
    },
  );

  it('records the operator as written, in UTF-8', async () => {
    const switchAutoRenew = async (enabled: boolean) => {
      const res = await request(`${system.baseUrl}/ops/chains/OPS-2/auto-renew`, {
        method: 'PUT',
        headers: {
          authorization: `Bearer ${OPS_TOKEN}`,
          'content-type': 'application/json',
          // The header's UTF-8 bytes, as curl sends them (undici writes each char as one byte).
          'x-operator': Buffer.from('Zoë Ødegård', 'utf8').toString('latin1'),
        },
        body: JSON.stringify({ enabled }),
      });
      return (await res.body.json()) as { history: { cause: object }[] };
    };
    const off = await switchAutoRenew(false);
    await switchAutoRenew(true);
    expect(off.history.at(-1)?.cause).toEqual({ operator: 'Zoë Ødegård' });
  });

  it('confirming a reactivation of an active chain changes nothing', async () => {
    const before = await system.chain('OPS-1');
    const res = await system.ops('POST', '/ops/chains/OPS-1/reactivated');
    expect(res.status).toBe(200);
    expect(res.body).toEqual(before);
  });

  it('cancels a chain at the provider; a repeat answers the cancelled chain', async () => {
    const res = await system.ops('POST', '/ops/chains/OPS-1/cancel');
    expect(res.body).toMatchObject({ status: 'cancelled', nextRenewalAt: null });
    const again = await system.ops('POST', '/ops/chains/OPS-1/cancel');
    expect(again.body).toEqual(res.body);
    const history = (res.body as { history: { event: string; cause: object }[] }).history;
    expect(history.at(-1)).toMatchObject({
      event: 'chain.cancelled',
      cause: { operator: 'ops-api' },
    });
  });

  it('refuses auto-renew on a cancelled chain, switched or not, changing nothing', async () => {
    const before = await system.chain('OPS-1');
    for (const enabled of [!before.autoRenew, before.autoRenew]) {
      const res = await system.ops('PUT', '/ops/chains/OPS-1/auto-renew', { enabled });
      expect(res.status).toBe(422);
      expect(res.body).toMatchObject({ error: 'chain_cancelled' });
    }
    expect(await system.chain('OPS-1')).toEqual(before);
  });

  it('takes an empty text/plain body for no body, and refuses any other text', async () => {
    const auth = { authorization: `Bearer ${system.settings.OPS_TOKEN}` };
    const empty = { ...auth, 'content-type': 'text/plain' };
    expect((await raw('/ops/chains/OPS-2', empty, 'GET', '')).status).toBe(200);
    expect((await raw('/healthz', { 'content-type': 'text/plain' }, 'GET', '')).status).toBe(200);
    const text = await raw('/ops/chains/OPS-2/auto-renew', empty, 'PUT', 'enabled=false');
    expect(text.status).toBe(400);
    expect(JSON.parse(text.text)).toEqual({
      error: 'invalid_request',
      message: 'Content-Type must be application/json',
    });
  });

  it('refuses a body over 1 MiB with 413 naming the body, changing nothing', async () => {
    const json = {
      authorization: `Bearer ${system.settings.OPS_TOKEN}`,
      'content-type': 'application/json',
    };
    const before = await system.chain('OPS-2');
    const big = JSON.stringify({ enabled: false, pad: 'x'.repeat(1024 * 1024) });
    const res = await raw('/ops/chains/OPS-2/auto-renew', json, 'PUT', big);
    expect(res.status).toBe(413);
    expect(JSON.parse(res.text)).toEqual({
      error: 'body_too_large',
      message: 'body: must be at most 1048576 bytes',
    });
    expect(await system.chain('OPS-2')).toEqual(before);
  });

  it('refuses a body that is not JSON, and a long x-operator, naming what is wrong', async () => {
    const json = {
      authorization: `Bearer ${system.settings.OPS_TOKEN}`,
      'content-type': 'application/json',
    };
    const before = await system.chain('OPS-2');
    const bad = await raw('/ops/chains/OPS-2/auto-renew', json, 'PUT', '{"enabled":');
    expect(bad.status).toBe(400);
    expect(JSON.parse(bad.text)).toEqual({
      error: 'invalid_request',
      message: 'body: must be valid JSON',
    });
    // A tab, a right-to-left override or a line separator would garble the history as
    // `billing chains show` prints it.
    const garbling = 'must not contain control or format characters';
    for (const [operator, message] of [
      ['o'.repeat(101), 'must be at most 100 characters'],
      ['ann\tlee', garbling],
      ['ann\u202Eeel', garbling],
      ['ann\u2028lee', garbling],
    ] as const) {
      const refused = await raw(
        '/ops/chains/OPS-2/auto-renew',
        { ...json, 'x-operator': Buffer.from(operator, 'utf8').toString('latin1') },
        'PUT',
        '{"enabled":false}',
      );
      expect(JSON.parse(refused.text)).toEqual({
        error: 'invalid_request',
        message: `x-operator: ${message}`,
      });
    }
    expect(await system.chain('OPS-2')).toEqual(before);
  });

  it('names the content type it reads when a form body comes in (curl -d without a header)', async () => {
    const form = {
      authorization: `Bearer ${system.settings.OPS_TOKEN}`,
      'content-type': 'application/x-www-form-urlencoded',
    };
    const before = await system.chain('OPS-2');
    const res = await raw('/ops/chains/OPS-2/auto-renew', form, 'PUT', '{"enabled":false}');
    expect(res.status).toBe(400);
    expect(JSON.parse(res.text)).toEqual({
      error: 'invalid_request',
      message: 'Content-Type must be application/json',
    });
    expect(await system.chain('OPS-2')).toEqual(before);
  });

  it('answers a path that does not decode with its {error, message} object', async () => {
    const res = await raw(
      '/ops/chains/%E0%A4%A',
      { authorization: `Bearer ${system.settings.OPS_TOKEN}` },
      'GET',
    );
    expect(res.status).toBe(400);
    expect(JSON.parse(res.text)).toMatchObject({ error: 'invalid_request' });
  });

  it('answers an unknown path with its {error, message} object', async () => {
    const res = await system.ops('GET', '/ops/chain/OPS-404');
    expect(res.status).toBe(404);
    expect(res.body).toEqual({
      error: 'not_found',
      message: 'no such path: GET /ops/chain/OPS-404',
    });
  });

  it.each([
    ['POST', 'OPS-Q1', '/cancel?dryRun=true', undefined],
    ['PUT', 'OPS-Q2', '/auto-renew?enabled=false', { enabled: true }],
    ['POST', 'OPS-Q3', '/reactivated?force=1', undefined],
    ['GET', 'OPS-Q4', '?view=full', undefined],
  ] as const)(
    'refuses a query on %s %s%s (it reads none), changing nothing',
    async (method, order, rest, body) => {
      // Each its own chain: a second order.placed of one would add an entry to its history.
      await system.send('order.placed', orderPlaced({ order, autoRenew: false }));
      const before = await system.waitForChain(order, () => true);
      const res = await system.ops(method, `/ops/chains/${order}${rest}`, body);
      expect(res).toEqual({
        status: 400,
        body: { error: 'invalid_request', message: expect.stringMatching(/^query: /) },
      });
      expect(await system.chain(order)).toEqual(before);
    },
  );

  it.each([
    ['order', (id: string) => `/ops/chains/${id}`],
    ['customer', (id: string) => `/ops/customers/${id}/chains`],
  ])('names params.%s when an id is far too long', async (field, path) => {
    const res = await system.ops('GET', path('x'.repeat(4000)));
    expect(res.status).toBe(400);
    expect((res.body as { message: string }).message).toMatch(new RegExp(`^params\\.${field}: `));
  });

  it('serves a chain whose order id is as long as intake allows', async () => {
    const order = `L-${'x'.repeat(102)}`;
    await system.send('order.placed', orderPlaced({ order, customer: `C-${'y'.repeat(126)}` }));
    await system.waitForChain(order, () => true);
    const res = await system.ops('GET', `/ops/chains/${order}`);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ order });
    const listed = await system.ops('GET', `/ops/customers/C-${'y'.repeat(126)}/chains`);
    expect((listed.body as { chains: unknown[] }).chains).toHaveLength(1);
    const tooLong = await system.ops('GET', `/ops/chains/${'z'.repeat(129)}`);
    expect(tooLong).toMatchObject({ status: 400, body: { error: 'invalid_request' } });
  });
});

describe('signed webhooks only', () => {
  it('an unsigned event is refused (401) and creates nothing', async () => {
    const body = JSON.stringify({
      type: 'order.placed',
      data: orderPlaced({ order: 'UNSIGNED-1' }),
    });
    const res = await raw('/webhooks/events', { 'content-type': 'application/json' }, 'POST', body);
    expect(res.status).toBe(401);
    expect((await system.ops('GET', '/ops/chains/UNSIGNED-1')).status).toBe(404);
  });

  it('a replayed webhook id is answered 202 and applied once', async () => {
    const data = orderPlaced({ order: 'REPLAY-1' });
    const first = await system.send('order.placed', data, { id: 'replay-1' });
    const second = await system.send('order.placed', data, { id: 'replay-1' });
    expect([first.status, second.status]).toEqual([202, 202]);
    const chain = await system.waitForChain('REPLAY-1', () => true);
    expect(chain.history.filter((h) => h.event === 'order.placed')).toHaveLength(1);
  });
});

describe('health and metrics', () => {
  it("runs reconcile on a schedule, and keeps jobs for a bounded time, retrying by the workers' policy", async () => {
    const schedulers = await system.queue('maintenance').getJobSchedulers();
    expect(schedulers).toEqual([
      expect.objectContaining({ key: 'reconcile', name: 'reconcile renewals', every: 3_600_000 }),
    ]);
    const renewal = await system.queue('renewals').getJob(`renew-${chainIdOf('OPS-2')}-3`);
    expect(renewal?.opts).toMatchObject({
      attempts: JOB_ATTEMPTS,
      backoff: { type: 'billing-retry' },
      removeOnComplete: { age: 7 * DAY, count: 100_000 },
      removeOnFail: { age: 90 * DAY },
    });
  });

  it('runs one worker per queue, every one with the same stalled-job check', async () => {
    const workers = system.started.workers?.workers ?? [];
    expect(workers.map((w) => w.name).sort()).toEqual([...queueNames].sort());
    for (const worker of workers) {
      expect(worker.opts).toMatchObject({
        stalledInterval: STALLED_INTERVAL_MS,
        maxStalledCount: MAX_STALLED_COUNT,
      });
    }
    // Each worker ran its check on start: BullMQ marks it in Redis for the check's interval.
    const redis = new Redis(system.redisUrl);
    try {
      for (const name of queueNames) {
        const ttl = await redis.pttl(`${QUEUE_PREFIX}:${name}:stalled-check`);
        expect(ttl, name).toBeGreaterThan(0);
        expect(ttl, name).toBeLessThanOrEqual(STALLED_INTERVAL_MS);
      }
    } finally {
      await redis.quit();
    }
  });

  it('readyz reports Redis and workers', async () => {
    const res = await raw('/readyz');
    expect(res.status).toBe(200);
    expect(JSON.parse(res.text)).toEqual({ status: 'ready', redis: true, workers: true });
  });

  it.each(['/healthz', '/readyz'])('answers HEAD %s, as load balancers check', async (path) => {
    const res = await raw(path, {}, 'HEAD');
    expect(res).toMatchObject({ status: 200, text: '' });
  });

  it('metrics count jobs by queue and outcome, and renewals made', async () => {
    const res = await raw('/metrics');
    expect(res.text).toMatch(/billing_jobs_total\{queue="orders",outcome="completed"\} \d+/);
    expect(res.text).toMatch(/billing_renewals_total\{variant="marketplace"\} [1-9]/);
    expect(res.text).toMatch(/billing_http_requests_total\{route="\/webhooks\/events"/);
    expect(res.text).toMatch(
      /billing_provisioning_calls_total\{method="createOrder",status="ok"\} [1-9]/,
    );
  });
});

describe('the CLI', () => {
  const run = promisify(execFile);
  const BIN = join(import.meta.dirname, '../../../bin/billing.js');
  const env = () => ({
    ...process.env,
    REDIS_URL: system.redisUrl,
    DATA_DIR: system.settings.DATA_DIR,
    PARTNER_NAME: system.settings.PARTNER_NAME,
  });

  it('shows a chain, switches auto-renew and lists upcoming renewals', async () => {
    const shown = await run(process.execPath, [BIN, 'chains', 'show', 'OPS-2', '--json'], {
      env: env(),
    });
    expect(JSON.parse(shown.stdout)).toMatchObject({ order: 'OPS-2', term: { count: 2 } });
    const table = await run(process.execPath, [BIN, 'chains', 'show', 'OPS-2'], { env: env() });
    expect(table.stdout).toMatch(/^chain {5}OPS-2 \(customer ops-cust\)/);
    expect(table.stdout).toMatch(/^licenses {2}\d+ in OPS-2\.r2, \d+ at the next renewal$/m);
    expect(table.stdout).toContain('renewal.ordered');

    const off = await run(
      process.execPath,
      [BIN, 'chains', 'auto-renew', 'OPS-2', 'off', '--json'],
      { env: env() },
    );
    const chain = JSON.parse(off.stdout);
    expect(chain).toMatchObject({ autoRenew: false, nextRenewalAt: null });
    expect(chain.history.at(-1).cause.operator).toMatch(/^cli:/);

    await run(process.execPath, [BIN, 'chains', 'auto-renew', 'OPS-2', 'on'], { env: env() });
    const upcoming = await run(
      process.execPath,
      [BIN, 'renewals', 'upcoming', '--within', '60', '--json'],
      {
        env: env(),
      },
    );
    expect(JSON.parse(upcoming.stdout).renewals.map((r: { order: string }) => r.order)).toContain(
      'OPS-2',
    );
  });

  it('refuses an unknown chain and a bad state with a clear message', async () => {
    const unknown = await run(process.execPath, [BIN, 'chains', 'show', 'NOPE'], {
      env: env(),
    }).catch((e) => e);
    expect(unknown.code).not.toBe(0);
    expect(unknown.stderr).toContain('no chain has an order NOPE');
    const bad = await run(process.execPath, [BIN, 'chains', 'auto-renew', 'OPS-2', 'maybe'], {
      env: env(),
    }).catch((e) => e);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain("value 'maybe' is invalid for argument 'state'");
  });

  /** `order` placed, then left by a job that died as `left` says. */
  async function placedAndLeft(order: string, left: Parameters<typeof leftByDeadJob>[3]) {
    await system.send('order.placed', orderPlaced({ order }));
    await system.waitForChain(order, () => true);
    await leftByDeadJob(system, order, 'dead-job', left);
  }

  /** `billing chains reactivated ORDER` run with `settings` over the service's: its refusal. */
  const reactivatedReading = (order: string, settings: Record<string, string>) =>
    run(process.execPath, [BIN, 'chains', 'reactivated', order], {
      env: { ...env(), ...settings },
    }).catch((e) => e);

  it("acts on the service's variant, its partner's, whatever its own PARTNER_VARIANT says", async () => {
    // As an external service's chain awaiting its reactivation would look to this marketplace one.
    await placedAndLeft('OPS-X', () => ({ status: 'suspended', needsReactivation: true }));
    const refused = await reactivatedReading('OPS-X', { PARTNER_VARIANT: 'external' });
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('chain OPS-X is a marketplace chain');
    expect(refused.stderr).not.toContain('PARTNER_VARIANT');
    expect((await system.chain('OPS-X')).needsReactivation).toBe(true);

    // Run with another PARTNER_NAME, it has only its setting to go by, and says so.
    const elsewhere = await reactivatedReading('OPS-X', {
      PARTNER_NAME: 'nobody-here',
      PARTNER_VARIANT: 'marketplace',
    });
    expect(elsewhere.code).toBe(2);
    expect(elsewhere.stderr).toContain(
      "(this command read PARTNER_VARIANT=marketplace, as no partner is named PARTNER_NAME=nobody-here here: run it with the service's settings)",
    );
  });

  it('never reactivates by hand a chain a marketplace payment is unsuspending, whatever it read', async () => {
    // A payment.received job began the unsuspension at the provider and is retrying it.
    await placedAndLeft('OPS-U', () => ({ status: 'suspended', unsuspending: true }));
    // With only its own setting to go by (no partner of its PARTNER_NAME here): external.
    const refused = await reactivatedReading('OPS-U', {
      PARTNER_NAME: 'nobody-here',
      PARTNER_VARIANT: 'external',
    });
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('chain OPS-U is a marketplace chain');
    expect(refused.stderr).toContain('this command read PARTNER_VARIANT=external');
    const chain = await system.chain('OPS-U');
    expect(chain.status).toBe('suspended');
    expect(chain.history.at(-1)?.event).not.toBe('chain.reactivated');
  });
});
