// README Decisions, "No gap orders": licenses bought from a later date count as paid from their
// ordering; a total that counts them twice gets them now, and a dated total sets the renewal.
import { describe, expect, it } from 'vitest';
import { manualClock, systemClock } from '../../../src/clock.js';
import {
  DAY,
  familyOrdersAtProvider,
  orderPlaced,
  type System,
  useSystem,
} from '../../helpers/system.js';

/** Licenses of the family's orders at the provider that are in force at `t`. */
async function inForceAt(system: System, parent: string, t: number) {
  return (await familyOrdersAtProvider(system, parent))
    .filter((o) => o.status !== 'cancelled' && o.startsAt <= t && t < o.expiresAt)
    .reduce((n, o) => n + o.licenses, 0);
}

describe('marketplace, co-terminated partials: licenses bought from a later date', () => {
  const clock = manualClock(systemClock.now());
  const system = useSystem({ clock });

  it('count from their ordering; 13 now then 10 from the term end gets 10 now', async () => {
    const startsAt = clock.now() - 10 * DAY;
    await system.send('order.placed', orderPlaced({ order: 'GAP-1', licenses: 5, startsAt }));
    const placed = await system.waitForChain('GAP-1', () => true);
    const day10 = clock.now() + 10 * DAY;
    await system.send('seats.changed', { order: 'GAP-1', licenses: 8, effectiveAt: day10 });
    await system.waitForChain('GAP-1', (c) => c.partials.length === 1);
    clock.advance(60);
    await system.send('seats.changed', { order: 'GAP-1', licenses: 10 });
    await system.waitForChain('GAP-1', (c) => c.partials.length === 2);
    // The partial of 3 from day 10 counts as paid: 2 more from now, 7 in force until day 10.
    expect(await inForceAt(system, 'GAP-1', clock.now())).toBe(7);
    expect(await inForceAt(system, 'GAP-1', day10)).toBe(10);

    clock.advance(60);
    await system.send('seats.changed', { order: 'GAP-1', licenses: 13 });
    await system.waitForChain('GAP-1', (c) => c.partials.length === 3);
    expect(await inForceAt(system, 'GAP-1', clock.now())).toBe(10);
    expect(await inForceAt(system, 'GAP-1', day10)).toBe(13);

    clock.advance(60);
    const end = placed.term.expiresAt;
    await system.send('seats.changed', { order: 'GAP-1', licenses: 10, effectiveAt: end });
    const chain = await system.waitForChain('GAP-1', (c) => c.nextLicenses === 10);
    expect(chain.partials.map((p) => p.licenses)).toEqual([3, 2, 3]);
  });
});
