// Exactly-once under a crash: a worker process is SIGKILLed while renewing hundreds of due
// chains; a new one finishes, and every chain has exactly one renewal order, none missing.
import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { chainIdOf } from '../../../src/chains/keys.js';
import { ChainStore } from '../../../src/chains/store.js';
import { systemClock } from '../../../src/clock.js';
import { partnerKeys } from '../../../src/provisioning/keys.js';
import type { Partner } from '../../../src/provisioning/records.js';
import { DAY, orderPlaced, type System, startSystem } from '../../helpers/system.js';

const CHAINS = 300;
const WORKER = join(import.meta.dirname, 'worker-main.ts');

let system: System;
let partner: Partner;
let chains: ChainStore;
const children: ChildProcess[] = [];

function spawnWorker(): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', WORKER], {
    env: {
      ...process.env,
      REDIS_URL: system.redis.url,
      DATA_DIR: system.settings.DATA_DIR,
      PARTNER_NAME: system.settings.PARTNER_NAME,
      OPS_TOKEN: system.settings.OPS_TOKEN,
      WEBHOOK_SECRET: system.settings.WEBHOOK_SECRET,
      PORT: '0',
      LOG_LEVEL: 'silent',
      WORKER_CONCURRENCY: '8',
      RECONCILE_INTERVAL_SECONDS: '3600',
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  children.push(child);
  return new Promise((resolve, reject) => {
    child.stdout?.on('data', (chunk: Buffer) => {
      if (chunk.toString().includes('worker ready')) resolve(child);
    });
    child.once('exit', (code) => reject(new Error(`worker exited early (${code})`)));
  });
}

/** Orders the provider holds for our partner: first orders and renewals. */
async function providerOrderIds(): Promise<string[]> {
  return system.started.runtime.redis.hkeys(partnerKeys(partner.id).orders);
}

beforeAll(async () => {
  // The API role only: intake, ops and the provisioning core; the workers are child processes.
  system = await startSystem({ role: 'api' });
  partner = await system.partner();
  chains = new ChainStore(system.started.runtime.redis);
});

afterAll(async () => {
  for (const child of children) child.kill('SIGKILL');
  await system.close();
});

describe('a worker killed in the middle of renewing due chains', () => {
  it('leaves every chain with exactly one renewal order once a new worker finishes', async () => {
    const startsAt = systemClock.now() - 25 * DAY;
    const orders = Array.from({ length: CHAINS }, (_, i) => `K-${i}`);
    for (const order of orders) {
      const res = await system.send('order.placed', orderPlaced({ order, startsAt }));
      expect(res.status).toBe(202);
    }

    const first = await spawnWorker();
    // Kill once some renewals were made but long before all of them.
    await vi.waitFor(
      async () => {
        const renewals = (await providerOrderIds()).filter((id) => id.endsWith('.r2')).length;
        if (renewals < 20) throw new Error(`only ${renewals} renewals so far`);
      },
      { timeout: 60_000, interval: 5 },
    );
    first.kill('SIGKILL');
    await new Promise((resolve) => first.once('exit', resolve));
    const atKill = (await providerOrderIds()).filter((id) => id.endsWith('.r2')).length;
    expect(atKill).toBeLessThan(CHAINS);

    await spawnWorker();
    await vi.waitFor(
      async () => {
        const renewed = (await chains.getMany(orders.map(chainIdOf))).filter(
          (chain) => chain.term.count === 2,
        ).length;
        if (renewed < CHAINS) throw new Error(`${renewed} of ${CHAINS} chains renewed`);
      },
      { timeout: 120_000, interval: 200 },
    );

    const ids = new Set(await providerOrderIds());
    expect(ids.size).toBe(CHAINS * 2);
    for (const order of orders) {
      expect(ids.has(order)).toBe(true);
      expect(ids.has(`${order}.r2`)).toBe(true);
      const providerChain = await system.started.runtime.store.getChain(partner, order);
      expect(providerChain?.orders).toEqual([order, `${order}.r2`]);
      const chain = await system.chain(order);
      expect(chain.history.filter((h) => h.event === 'renewal.ordered')).toHaveLength(1);
      expect(chain.history.filter((h) => h.event === 'order.placed')).toHaveLength(1);
    }
  }, 240_000);
});
