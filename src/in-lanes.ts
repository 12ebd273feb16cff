// Bounded concurrency that keeps related items in order: a batch of independent I/O steps.

/**
 * Runs `work` on every item, at most `limit` at a time, the items of one lane (same `laneOf`)
 * one after another in their order, so work on one lane never overlaps. Every started item runs
 * to its end; the first rejection, if any, is thrown once all have settled, and no lane starts
 * after it.
 */
export async function inLanes<T>(
  items: readonly T[],
  laneOf: (item: T) => string,
  limit: number,
  work: (item: T) => Promise<void>,
): Promise<void> {
  const lanes = new Map<string, T[]>();
  for (const item of items) {
    const key = laneOf(item);
    const lane = lanes.get(key);
    if (lane) lane.push(item);
    else lanes.set(key, [item]);
  }
  const pending = [...lanes.values()];
  let failure: { error: unknown } | undefined;
  const runLanes = async () => {
    for (let lane = pending.shift(); lane && !failure; lane = pending.shift()) {
      for (const item of lane) {
        try {
          await work(item);
        } catch (error) {
          failure ??= { error };
          return;
        }
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, pending.length)) }, runLanes));
  if (failure) throw failure.error;
}
