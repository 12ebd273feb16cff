// A task one process runs at a time across a deployment: a key taken with a lease, the lease kept
// alive while the task runs, the key let go after. A holder that dies stops renewing, and its
// lease lapses.
import type { RedisClient } from './connection.js';

// Only the holder's token renews or releases the key: a lease that lapsed and was taken by
// another holder stays theirs. Inline (EVAL): they run once per renewal, not per job.
const RENEW = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0`;
const RELEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`;

/**
 * Runs `work` while `token` holds `key`, unless another holder has it: `{ ran: false }` then,
 * and `work` does not run. A lost lease (Redis away longer than it) does not stop `work`: the
 * tasks this guards are safe to run twice, only wasteful.
 */
export async function whileHeldAlone<T>(
  redis: RedisClient,
  key: string,
  token: string,
  leaseMs: number,
  work: () => Promise<T>,
): Promise<{ ran: true; value: T } | { ran: false }> {
  if ((await redis.set(key, token, 'PX', leaseMs, 'NX')) === null) return { ran: false };
  let renewing: Promise<unknown> = Promise.resolve();
  const timer = setInterval(() => {
    renewing = redis.eval(RENEW, 1, key, token, leaseMs).catch(() => 0);
  }, leaseMs / 3);
  timer.unref();
  try {
    return { ran: true, value: await work() };
  } finally {
    clearInterval(timer);
    await renewing;
    // Not released: the lease lapses by itself.
    await redis.eval(RELEASE, 1, key, token).catch(() => 0);
  }
}
