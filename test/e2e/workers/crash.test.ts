// Exactly-once under a crash: a worker process is SIGKILLed while renewing hundreds of due
// chains, buying seats for them (co-terminated partial orders or add-ons) or suspending them for
// an overdue payment; a new one finishes, and every chain has exactly one renewal (partial,
// add-on) order, none missing, with its next term's job (or its next count), or every order
// suspended and recorded once. Both paths are killed: embedded mode, and remote mode's intent,
// call, record (where a kill can fall between the provider's change and its record).
import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { renewalJobId } from '../../../jobs/renewals.js';
import { chainIdOf } from '../../../src/chains/keys.js';
import type { Chain } from '../../../src/chains/records.js';
import { ChainStore } from '../../../src/chains/store.js';
import { systemClock } from '../../../src/clock.js';
import { partnerKeys } from '../../../src/provisioning/keys.js';
import { type OrderRecord, orderRecord, type Partner } from '../../../src/provisioning/records.js';
import { startProxy } from '../../helpers/proxy.js';
import { DAY, orderPlaced, type System, startSystem } from '../../helpers/system.js';

const CHAINS = 300;
const WORKER = join(import.meta.dirname, 'worker-main.ts');
const ORDERS = Array.from({ length: CHAINS }, (_, i) => `K-${i}`);

type Mode = 'embedded' | 'remote';

/** Remote mode: the chain whose call's answer the proxy holds, so the kill falls after it. */
const HELD_ORDER = 'K-100';

/**
 * The API role runs here (intake, ops and the provisioning core); the workers are child
 * processes, which in remote mode reach this same core over its HTTP API as a partner of their
 * own, through a proxy that can hold an answer.
 */
class CrashRig {
  readonly children: ChildProcess[] = [];
  /** The burst's settings, and in remote mode the workers' settings for the provider. */
  private workerEnv: Record<string, string> = {};
  /** Remote mode: between the workers and the provider. */
  proxy: Awaited<ReturnType<typeof startProxy>> | undefined;

  private constructor(
    readonly system: System,
    /** The partner the workers act for at the provider. */
    readonly partner: Partner,
    readonly chains: ChainStore,
  ) {}

  static async start(mode: Mode, workerEnv: Record<string, string> = {}): Promise<CrashRig> {
    const system = await startSystem({ role: 'api', env: workerEnv });
    const chains = new ChainStore(system.started.runtime.redis);
    if (mode === 'embedded') {
      const rig = new CrashRig(system, await system.partner(), chains);
      rig.workerEnv = workerEnv;
      return rig;
    }
    const { runtime } = system.started;
    const { apiKey } = await runtime.partners.create({
      name: 'remote-workers',
      variant: 'marketplace',
      now: runtime.clock.now(),
    });
    const partner = (await runtime.partners.list()).find((p) => p.name === 'remote-workers');
    if (!partner) throw new Error('remote partner missing');
    const rig = new CrashRig(system, partner, chains);
    rig.proxy = await startProxy(system.baseUrl);
    rig.workerEnv = {
      ...workerEnv,
      PROVISIONING_URL: rig.proxy.url,
      PROVISIONING_API_KEY: apiKey,
      PARTNER_VARIANT: 'marketplace',
    };
    return rig;
  }

  spawnWorker(): Promise<ChildProcess> {
    const { settings, redisUrl } = this.system;
    const child = spawn(process.execPath, ['--import', 'tsx', WORKER], {
      env: {
        ...process.env,
        REDIS_URL: redisUrl,
        DATA_DIR: settings.DATA_DIR,
        PARTNER_NAME: settings.PARTNER_NAME,
        OPS_TOKEN: settings.OPS_TOKEN,
        WEBHOOK_SECRET: settings.WEBHOOK_SECRET,
        PORT: '0',
        LOG_LEVEL: 'silent',
        WORKER_CONCURRENCY: '8',
        RECONCILE_INTERVAL_SECONDS: '3600',
        ...this.workerEnv,
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    this.children.push(child);
    return new Promise((resolve, reject) => {
      child.stdout?.on('data', (chunk: Buffer) => {
        if (chunk.toString().includes('worker ready')) resolve(child);
      });
      child.once('exit', (code) => reject(new Error(`worker exited early (${code})`)));
    });
  }

  /** Orders the provider holds for the workers' partner: first orders and the burst's. */
  async providerOrderIds(): Promise<Set<string>> {
    const orders = partnerKeys(this.partner.id).orders;
    return new Set(await this.system.started.runtime.redis.hkeys(orders));
  }

  /** The provider's records of those orders (`id` is its own id, `remoteId` the caller's). */
  async providerOrders(): Promise<OrderRecord[]> {
    const orders = partnerKeys(this.partner.id).orders;
    const records = await this.system.started.runtime.redis.hvals(orders);
    return records.map((json) => orderRecord.parse(JSON.parse(json)));
  }

  allChains(): Promise<Chain[]> {
    return this.chains.getMany(ORDERS.map(chainIdOf));
  }

  async close(): Promise<void> {
    for (const child of this.children) child.kill('SIGKILL');
    await this.proxy?.close();
    await this.system.close();
  }
}

/** A burst of work the workers are killed in the middle of, and what it must leave. */
interface Burst {
  /** `renewing due chains`, ... */
  doing: string;
  queue: 'renewals' | 'seat-changes' | 'payment-signals';
  /** Settings the burst needs, for both sides. */
  env?: Record<string, string>;
  /** How long before now the first terms started. */
  startedAgo: number;
  /** What the burst does at the provider for each chain, as the test names it. */
  does: string;
  /** Remote mode: the call of HELD_ORDER's chain whose answer the proxy holds. */
  held: { method: string; id: string };
  /** Sends the events of the burst for `order` (while its queue is paused). */
  send(system: System, order: string): Promise<void>;
  /** For how many chains the provider shows the burst's work (made or not recorded yet). */
  doneAtProvider(rig: CrashRig): Promise<number>;
  /** Remote mode: whether the held chain shows its call begun and not recorded. */
  inFlight(chain: Chain): boolean;
  /** Whether the chain shows the burst's work recorded and nothing in flight. */
  done(chain: Chain): boolean;
  /** The provider's orders for `order` afterwards (each exactly once, no other). */
  ordersAfter(order: string): string[];
  /** What each chain must show afterwards, besides its orders at the provider. */
  check(rig: CrashRig, order: string, mode: Mode): Promise<void>;
}

/** What follows from the id alone for a burst that makes one order `{order}{suffix}` per chain. */
function makingOne(suffix: '.r2' | '.p1' | '.a1') {
  return {
    held: { method: 'createOrder', id: `${HELD_ORDER}${suffix}` },
    doneAtProvider: async (rig: CrashRig) =>
      [...(await rig.providerOrderIds())].filter((id) => id.endsWith(suffix)).length,
    inFlight: (chain: Chain) => chain.intent?.orderId === `${HELD_ORDER}${suffix}`,
    ordersAfter: (order: string) => [order, `${order}${suffix}`],
  } satisfies Partial<Burst>;
}

const renewalBurst: Burst = {
  doing: 'renewing due chains',
  queue: 'renewals',
  startedAgo: 25 * DAY,
  does: 'exactly one .r2 order',
  ...makingOne('.r2'),
  // Placing a due chain schedules its renewal at once.
  send: async () => {},
  done: (chain) => chain.term.count === 2 && chain.intent === null,
  async check(rig, order, mode) {
    const chain = await rig.system.chain(order);
    expect(chain.history.filter((h) => h.event === 'renewal.ordered')).toHaveLength(1);
    expect(chain.history.filter((h) => h.event === 'order.placed')).toHaveLength(1);
    const next = await rig.system.queue('renewals').getJob(renewalJobId(chainIdOf(order), 3));
    expect(await next?.getState(), `the term-3 job of ${order}`).toBe('delayed');
    if (mode === 'embedded') {
      // Embedded renewals are the core's own (controlled start, chained to the first order).
      const providerChain = await rig.system.started.runtime.store.getChain(rig.partner, order);
      expect(providerChain?.orders).toEqual([order, `${order}.r2`]);
    }
  },
};

const seatBurst: Burst = {
  doing: 'buying co-terminated seats for chains',
  queue: 'seat-changes',
  startedAgo: 5 * DAY,
  does: 'exactly one .p1 order',
  ...makingOne('.p1'),
  async send(system, order) {
    const res = await system.send('seats.changed', { order, licenses: 8 });
    expect(res.status).toBe(202);
  },
  done: (chain) => chain.partials.length === 1 && chain.intent === null,
  async check(rig, order) {
    const chain = await rig.system.chain(order);
    expect(chain.history.filter((h) => h.event === 'seats.partial_ordered')).toHaveLength(1);
    expect(chain.partials).toEqual([
      expect.objectContaining({
        orderId: `${order}.p1`,
        licenses: 3,
        expiresAt: chain.term.expiresAt,
      }),
    ]);
    expect(chain.nextLicenses).toBe(8);
  },
};

const addOnBurst: Burst = {
  doing: 'buying add-ons for chains',
  queue: 'seat-changes',
  env: { SEAT_INCREASE: 'addon' },
  startedAgo: 5 * DAY,
  does: 'exactly one .a1 add-on',
  ...makingOne('.a1'),
  send: seatBurst.send,
  done: (chain) => chain.addOns.length === 1 && chain.intent === null,
  async check(rig, order) {
    const chain = await rig.system.chain(order);
    expect(chain.history.filter((h) => h.event === 'seats.addon_ordered')).toHaveLength(1);
    expect(chain.partials).toEqual([]);
    expect(chain.nextLicenses).toBe(5);
    expect(chain.addOns).toEqual([
      expect.objectContaining({ order: `${order}.a1`, licenses: 3, nextLicenses: 3 }),
    ]);
    const [addOn] = chain.addOns;
    expect(addOn?.history.filter((h) => h.event === 'addon.ordered')).toHaveLength(1);
    // Its own renewal is scheduled, for its own term 2.
    const next = await rig.system
      .queue('renewals')
      .getJob(renewalJobId(chainIdOf(`${order}.a1`), 2));
    expect(await next?.getState(), `the term-2 job of ${order}.a1`).toBe('delayed');
  },
};

const suspensionBurst: Burst = {
  doing: 'suspending chains whose payment is overdue',
  queue: 'payment-signals',
  env: { PAYMENT_GRACE_DAYS: '0' },
  startedAgo: 5 * DAY,
  does: 'its order suspended',
  held: { method: 'suspendOrder', id: HELD_ORDER },
  async send(system, order) {
    const res = await system.send('payment.overdue', { order, invoice: `INV-${order}` });
    expect(res.status).toBe(202);
  },
  async doneAtProvider(rig) {
    return (await rig.providerOrders()).filter((order) => order.status === 'suspended').length;
  },
  inFlight: (chain) => chain.suspending !== null && chain.status === 'active',
  done: (chain) => chain.status === 'suspended' && chain.suspending === null,
  ordersAfter: (order) => [order],
  async check(rig, order) {
    const chain = await rig.system.chain(order);
    expect(chain.payment).toBe('overdue');
    expect(chain.history.filter((h) => h.event === 'payment.overdue')).toHaveLength(1);
    expect(chain.history.filter((h) => h.event === 'chain.suspended')).toHaveLength(1);
    const [record] = (await rig.providerOrders()).filter((o) => o.remoteId === order);
    expect(record?.status, `${order} at the provider`).toBe('suspended');
  },
};

function killMidBurst(mode: Mode, burst: Burst) {
  describe(`a ${mode} worker killed in the middle of ${burst.doing}`, () => {
    let rig: CrashRig;
    beforeAll(async () => {
      rig = await CrashRig.start(mode, burst.env);
    });
    afterAll(async () => rig.close());

    it(`leaves every chain with ${burst.does} once a new worker finishes`, async () => {
      const { system } = rig;
      const startsAt = systemClock.now() - burst.startedAgo;
      // The burst's jobs wait until every chain is placed, so the kill falls in the burst
      // (placing first orders is the slower part, in remote mode above all).
      const queue = system.queue(burst.queue);
      await queue.pause();
      for (const order of ORDERS) {
        const res = await system.send('order.placed', orderPlaced({ order, startsAt }));
        expect(res.status).toBe(202);
      }
      // Remote mode: the provider's answer to one call mid-burst never reaches the worker.
      const held = rig.proxy?.holdNext(burst.held.method, burst.held.id);
      const first = await rig.spawnWorker();
      await vi.waitFor(
        async () => {
          const placed = (await rig.allChains()).length;
          if (placed < CHAINS) throw new Error(`${placed} of ${CHAINS} chains placed`);
        },
        { timeout: 60_000, interval: 50 },
      );
      for (const order of ORDERS) await burst.send(system, order);
      await queue.resume();

      // Kill once some chains were done but long before all of them; in remote mode, once the
      // provider made the held change, whose record its job waits to write (the window at risk).
      await vi.waitFor(
        async () => {
          const so = await burst.doneAtProvider(rig);
          if (so < 20) throw new Error(`${so} chains so far`);
        },
        { timeout: 60_000, interval: 5 },
      );
      await held;
      first.kill('SIGKILL');
      await new Promise((resolve) => first.once('exit', resolve));
      expect(await burst.doneAtProvider(rig)).toBeLessThan(CHAINS);
      // The kill interrupted jobs at work: they stay active until the stalled check takes them.
      const counts = await queue.getJobCounts();
      expect(counts.active, `jobs at the kill: ${JSON.stringify(counts)}`).toBeGreaterThan(0);
      if (mode === 'remote') {
        // ...one of them between its order at the provider and its record.
        const chain = await rig.chains.get(chainIdOf(HELD_ORDER));
        expect(chain && burst.inFlight(chain), `${HELD_ORDER} in flight`).toBe(true);
      }

      await rig.spawnWorker();
      await vi.waitFor(
        async () => {
          const finished = (await rig.allChains()).filter(burst.done).length;
          if (finished < CHAINS) throw new Error(`${finished} of ${CHAINS} chains done`);
          // A job killed after its commit runs again once the stalled check gives it back.
          const left = await queue.getJobCounts('active', 'wait', 'prioritized');
          if (Object.values(left).some((n) => n > 0)) {
            throw new Error(`jobs left: ${JSON.stringify(left)}`);
          }
        },
        { timeout: 120_000, interval: 200 },
      );

      const ids = [...(await rig.providerOrderIds())].sort();
      expect(ids).toEqual(ORDERS.flatMap(burst.ordersAfter).sort());
      for (const order of ORDERS) await burst.check(rig, order, mode);
    }, 240_000);
  });
}

killMidBurst('embedded', renewalBurst);
killMidBurst('remote', renewalBurst);
killMidBurst('embedded', seatBurst);
killMidBurst('remote', seatBurst);
killMidBurst('embedded', addOnBurst);
killMidBurst('remote', addOnBurst);
killMidBurst('embedded', suspensionBurst);
killMidBurst('remote', suspensionBurst);
