// DESIGN §2: the core, the workers and the ops API ask one Clock for "now", per partner. A clock
// that answers each partner its own time (the seam for per-partner test clocks) must not split
// the workers from the core that answers their partner's calls.
import { describe, expect, it } from 'vitest';
import type { Clock } from '../../../src/clock.js';
import { DAY, orderPlaced, useSystem } from '../../helpers/system.js';

const BASE = Date.UTC(2026, 2, 1, 12) / 1000;
const AHEAD = 10 * DAY;
/** Every partner 10 days ahead of the process's own time (asked without a partner). */
const clock: Clock = { now: (scope) => (scope === undefined ? BASE : BASE + AHEAD) };

describe('a clock that answers each partner its own time', () => {
  const system = useSystem({ clock });

  it("is asked as the workers' partner by the workers and the ops API", async () => {
    // Intake checks the webhook's timestamp against the process's time.
    expect((await system.send('order.placed', orderPlaced({ order: 'CLK-1' }))).status).toBe(202);
    const chain = await system.waitForChain('CLK-1', () => true);
    const order = await system.providerOrder('CLK-1');

    expect(order?.startsAt).toBe(BASE + AHEAD);
    expect(chain.history.find((h) => h.event === 'order.placed')?.at).toBe(BASE + AHEAD);
    expect(chain.nextRenewalAt).toBe((order?.expiresAt as number) - 7 * DAY);
    // Due 24 days after the partner's now: within 30 days of it, 34 after the process's.
    const upcoming = await system.ops('GET', '/ops/renewals?within=30');
    expect(upcoming.body).toMatchObject({ renewals: [{ order: 'CLK-1' }] });
  });
});
