// Whether a Redis the operator gave us keeps what the product writes across its own restart.
import type { Logger } from '../logger.js';
import type { RedisClient } from './connection.js';

/**
 * What a Redis with these persistence settings loses when it restarts, or null when it keeps
 * every write (append-only file). `save` is the RDB save points ('' when none).
 */
export function persistenceWarning(appendonly: string, save: string): string | null {
  if (appendonly === 'yes') return null;
  if (save.trim() === '') {
    return 'keeps nothing on disk (appendonly no, no save points): when it restarts, every chain, order, partner and scheduled renewal is lost';
  }
  return `keeps only RDB snapshots (appendonly no, save ${save}): when it restarts, what changed since the last snapshot is lost, orders made at the provider included`;
}

/**
 * What a Redis with this eviction policy may drop when it reaches `maxmemory`, or null when it
 * refuses writes instead (noeviction: requests answer 503, jobs retry).
 */
export function evictionWarning(policy: string): string | null {
  if (policy === 'noeviction') return null;
  return `evicts keys when it reaches its maxmemory (maxmemory-policy ${policy}): a chain's lock, a webhook's dedup claim, a scheduled renewal or a chain itself could vanish, and with them the guarantee of one order per renewal`;
}

/**
 * One setting of CONFIG GET (ioredis answers [name, value]), or null when the server does not
 * know it (an empty answer: a Redis-compatible server without that setting).
 */
async function configValue(redis: RedisClient, name: string): Promise<string | null> {
  const reply = (await redis.config('GET', name)) as unknown;
  return Array.isArray(reply) && typeof reply[1] === 'string' ? reply[1] : null;
}

/**
 * Warns at start when the Redis of REDIS_URL would lose the product's state on a restart, or
 * drop keys when full (its private Redis always runs with appendonly yes and noeviction). A
 * server that refuses CONFIG (managed Redis often does), or does not know a setting, is not
 * judged on it: nothing is said.
 */
export async function warnUnlessDurable(
  redis: RedisClient,
  target: string,
  log: Logger,
): Promise<void> {
  let settings: (string | null)[];
  try {
    settings = await Promise.all(
      ['appendonly', 'save', 'maxmemory-policy'].map((name) => configValue(redis, name)),
    );
  } catch (error) {
    log.debug({ err: error }, 'redis persistence not checked: CONFIG GET failed');
    return;
  }
  const [appendonly, save, policy] = settings;
  const persistence =
    appendonly == null || save == null ? null : persistenceWarning(appendonly, save);
  if (persistence !== null) {
    log.warn(
      { redis: target },
      `the Redis of REDIS_URL ${persistence}; run it with appendonly yes (README: What is kept under DATA_DIR)`,
    );
  }
  const eviction = policy == null ? null : evictionWarning(policy);
  if (eviction !== null) {
    log.warn(
      { redis: target },
      `the Redis of REDIS_URL ${eviction}; run it with maxmemory-policy noeviction (README: What is kept under DATA_DIR)`,
    );
  }
}
