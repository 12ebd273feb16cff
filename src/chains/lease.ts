// Keeps a lock's lease alive while its holder works, and lets the lock go after: a chain's, or
// that of a task one process runs at a time across the deployment.
import type { ChainStore } from './store.js';

/**
 * Renews the lock's lease while its holder works, so a slow provider call (up to its timeout,
 * which may exceed one lease) never lets another holder take the chain while the call is in
 * flight: a cancel could otherwise find an order "not found" that the provider makes a moment
 * later, or a suspension be overtaken by a late unsuspension. A holder that dies stops renewing,
 * and its lease lapses as before. Every holder uses it: jobs, reconcile and operators.
 */
function keepLease(renew: () => Promise<unknown>, leaseMs: number) {
  let renewing: Promise<unknown> = Promise.resolve();
  const timer = setInterval(() => {
    // A lock lost meanwhile is noticed by the holder's next save, which checks the token.
    renewing = renew().catch(() => false);
  }, leaseMs / 3);
  timer.unref();
  return {
    async stop() {
      clearInterval(timer);
      await renewing;
    },
  };
}

/**
 * Runs `work` while the lock `token` holds the chain (the lease kept alive), then releases it.
 * The work's own failure is what the holder fails with: a release that fails after it (Redis
 * dropping the unlock) must not turn a refusal into a retry; a lock not released lapses with its
 * lease.
 */
export async function whileHeld<T>(
  chains: ChainStore,
  chainId: string,
  token: string,
  work: () => Promise<T>,
): Promise<T> {
  const lease = keepLease(() => chains.renewLease(chainId, token), chains.leaseMs);
  const release = async () => {
    await lease.stop();
    await chains.unlock(chainId, token);
  };
  let result: T;
  try {
    result = await work();
  } catch (error) {
    await release().catch(() => {});
    throw error;
  }
  await release();
  return result;
}

/**
 * Runs `work` while `token` holds the lock `key` (taken with a lease of `leaseMs`, kept alive
 * while it runs, let go after), unless another holder has it: `{ ran: false }` then, and `work`
 * does not run. A lost lease (Redis away longer than it) does not stop `work`: the tasks this
 * guards are safe to run twice, only wasteful.
 */
export async function whileHeldAlone<T>(
  chains: ChainStore,
  key: string,
  token: string,
  leaseMs: number,
  work: () => Promise<T>,
): Promise<{ ran: true; value: T } | { ran: false }> {
  if ((await chains.redis.set(key, token, 'PX', leaseMs, 'NX')) === null) return { ran: false };
  const lease = keepLease(() => chains.renewLeaseOf(key, token, leaseMs), leaseMs);
  try {
    return { ran: true, value: await work() };
  } finally {
    await lease.stop();
    // Not released: the lease lapses by itself.
    await chains.releaseLock(key, token).catch(() => {});
  }
}
