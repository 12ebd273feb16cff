// Bounded waits for shutdown: wait for some work, but no longer than a limit.

/**
 * Whether `work` settles within `ms` (true), or the limit came first (false). The timer is
 * cleared either way, so it keeps no process alive; a rejection of `work` in time is rethrown.
 */
export async function settlesWithin(work: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const limit = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([work.then(() => true as const), limit]);
  } finally {
    clearTimeout(timer);
  }
}
