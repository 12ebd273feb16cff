// Exactly-once under a crash: a worker process is SIGKILLed while renewing hundreds of due
// chains, or buying seats for them; a new one finishes, and every chain has exactly one renewal
// (or partial) order, none missing, its next term's job (or its next count). Both paths are
// killed: embedded mode, and remote mode's intent, call, record (where a kill can fall between
// the provider's order and its record).
import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { renewalJobId } from '../../../jobs/renewals.js';
import { chainIdOf } from '../../../src/chains/keys.js';
import type { Chain } from '../../../src/chains/records.js';
import { ChainStore } from '../../../src/chains/store.js';
import { systemClock } from '../../../src/clock.js';
import { partnerKeys } from '../../../src/provisioning/keys.js';
import type { Partner } from '../../../src/provisioning/records.js';
import { startProxy } from '../../helpers/proxy.js';
import { DAY, orderPlaced, type System, startSystem } from '../../helpers/system.js';

const CHAINS = 300;
const WORKER = join(import.meta.dirname, 'worker-main.ts');
const ORDERS = Array.from({ length: CHAINS }, (_, i) => `K-${i}`);

type Mode = 'embedded' | 'remote';

/** Remote mode: the order whose answer the proxy holds, so the kill falls after it is made. */
const HELD_ORDER = 'K-100';

/**
 * The API role runs here (intake, ops and the provisioning core); the workers are child
 * processes, which in remote mode reach this same core over its HTTP API as a partner of their
 * own, through a proxy that can hold an answer.
 */
class CrashRig {
  readonly children: ChildProcess[] = [];
  /** Remote mode: the workers' settings for the provider. */
  private remoteEnv: Record<string, string> = {};
  /** Remote mode: between the workers and the provider. */
  proxy: Awaited<ReturnType<typeof startProxy>> | undefined;

  private constructor(
    readonly system: System,
    /** The partner the workers act for at the provider. */
    readonly partner: Partner,
    readonly chains: ChainStore,
  ) {}

  static async start(mode: Mode): Promise<CrashRig> {
    const system = await startSystem({ role: 'api' });
    const chains = new ChainStore(system.started.runtime.redis);
    if (mode === 'embedded') return new CrashRig(system, await system.partner(), chains);
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
    rig.remoteEnv = {
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
        ...this.remoteEnv,
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
  queue: 'renewals' | 'seat-changes';
  /** How long before now the first terms started. */
  startedAgo: number;
  /** The order id suffix of what the burst makes for each chain. */
  made: '.r2' | '.p1';
  /** Sends the events of the burst for `order` (while its queue is paused). */
  send(system: System, order: string): Promise<void>;
  /** Whether the chain shows the burst's work recorded and nothing in flight. */
  done(chain: Chain): boolean;
  /** What each chain must show afterwards, besides its orders at the provider. */
  check(rig: CrashRig, order: string, mode: Mode): Promise<void>;
}

const renewalBurst: Burst = {
  doing: 'renewing due chains',
  queue: 'renewals',
  startedAgo: 25 * DAY,
  made: '.r2',
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
  made: '.p1',
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

function killMidBurst(mode: Mode, burst: Burst) {
  describe(`a ${mode} worker killed in the middle of ${burst.doing}`, () => {
    let rig: CrashRig;
    beforeAll(async () => {
      rig = await CrashRig.start(mode);
    });
    afterAll(async () => rig.close());

    it(`leaves every chain with exactly one ${burst.made} order once a new worker finishes`, async () => {
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
      // Remote mode: the provider's answer to one order mid-burst never reaches the worker.
      const held = rig.proxy?.holdNext('createOrder', `${HELD_ORDER}${burst.made}`);
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

      // Kill once some orders were made but long before all of them; in remote mode, once the
      // provider made the held order, whose record its job waits to write (the window at risk).
      const made = (ids: Set<string>) => [...ids].filter((id) => id.endsWith(burst.made)).length;
      await vi.waitFor(
        async () => {
          const so = made(await rig.providerOrderIds());
          if (so < 20) throw new Error(`${so} orders so far`);
        },
        { timeout: 60_000, interval: 5 },
      );
      await held;
      first.kill('SIGKILL');
      await new Promise((resolve) => first.once('exit', resolve));
      expect(made(await rig.providerOrderIds())).toBeLessThan(CHAINS);
      // The kill interrupted jobs at work: they stay active until the stalled check takes them.
      const counts = await queue.getJobCounts();
      expect(counts.active, `jobs at the kill: ${JSON.stringify(counts)}`).toBeGreaterThan(0);
      if (mode === 'remote') {
        // ...one of them between its order at the provider and its record.
        const chain = await rig.chains.get(chainIdOf(HELD_ORDER));
        expect(chain?.intent?.orderId).toBe(`${HELD_ORDER}${burst.made}`);
        expect((await rig.providerOrderIds()).has(`${HELD_ORDER}${burst.made}`)).toBe(true);
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

      const ids = await rig.providerOrderIds();
      expect(ids.size).toBe(CHAINS * 2);
      for (const order of ORDERS) {
        expect(ids.has(order)).toBe(true);
        expect(ids.has(`${order}${burst.made}`)).toBe(true);
        await burst.check(rig, order, mode);
      }
    }, 240_000);
  });
}

killMidBurst('embedded', renewalBurst);
killMidBurst('remote', renewalBurst);
killMidBurst('embedded', seatBurst);
killMidBurst('remote', seatBurst);
