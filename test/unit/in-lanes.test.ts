import { setTimeout as delay } from 'node:timers/promises';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { inLanes } from '../../src/in-lanes.js';

describe('inLanes', () => {
  it('runs each item once, a lane in its order, never two of a lane or more than the limit at once', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.record({ lane: fc.constantFrom('a', 'b', 'c', 'd', 'e'), ms: fc.nat(3) }), {
          maxLength: 40,
        }),
        fc.integer({ min: 1, max: 6 }),
        async (specs, limit) => {
          const items = specs.map((spec, i) => ({ ...spec, i }));
          const done: number[] = [];
          const runningLanes = new Set<string>();
          let running = 0;
          let most = 0;
          await inLanes(
            items,
            (item) => item.lane,
            limit,
            async (item) => {
              expect(runningLanes.has(item.lane)).toBe(false);
              runningLanes.add(item.lane);
              running += 1;
              most = Math.max(most, running);
              await delay(item.ms);
              running -= 1;
              runningLanes.delete(item.lane);
              done.push(item.i);
            },
          );
          expect([...done].sort((x, y) => x - y)).toEqual(items.map((item) => item.i));
          expect(most).toBeLessThanOrEqual(limit);
          for (const lane of new Set(items.map((item) => item.lane))) {
            const order = done.filter((i) => items[i]?.lane === lane);
            expect(order).toEqual([...order].sort((x, y) => x - y));
          }
        },
      ),
      { numRuns: 60 },
    );
  });

  it('lets started items finish, starts no lane after a failure, and throws that failure', async () => {
    const finished: string[] = [];
    const run = inLanes(
      ['slow', 'bad', 'later-1', 'later-2'],
      (item) => item,
      2,
      async (item) => {
        if (item === 'bad') throw new Error('bad item');
        await delay(item === 'slow' ? 30 : 0);
        finished.push(item);
      },
    );
    await expect(run).rejects.toThrow('bad item');
    expect(finished).toEqual(['slow']);
  });
});
