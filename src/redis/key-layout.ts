// Keys written before every key carried the product's hash tag (key-space.ts) are renamed once,
// at the first start of a version that has it, so an upgrade keeps its chains, jobs and orders.
import { Queue } from 'bullmq';
import { Cluster } from 'ioredis';
import { ConfigError } from '../errors.js';
import type { Logger } from '../logger.js';
import type { RedisClient } from './connection.js';
import { CORE_KEY_ROOT, KEY_TAG, WORKER_KEY_ROOT } from './key-space.js';

/** Present once this database holds only tagged keys: later starts skip the scan. */
export const KEY_LAYOUT_KEY = `${KEY_TAG}:key-layout`;
const TAGGED_LAYOUT = 'tagged';

/** The roots of the untagged layout: BullMQ and the workers under `bc:`, the core under `pp:`. */
const OLD_WORKER_ROOT = 'bc:';
const OLD_CORE_ROOT = 'pp:';
const OLD_PARTNER_SCOPE = /^pp:\{p(\d+)\}:/;
const SCAN_BATCH = 1000;

/**
 * The tagged name of a key of the untagged layout, or null for a key that is not ours:
 * `bc:x` → `{bc}:x`, `pp:{p7}:x` → `{bc}:pp:p7:x`, `pp:x` → `{bc}:pp:x`.
 */
export function taggedKeyName(oldKey: string): string | null {
  if (oldKey.startsWith(OLD_WORKER_ROOT)) {
    return `${WORKER_KEY_ROOT}:${oldKey.slice(OLD_WORKER_ROOT.length)}`;
  }
  const partner = OLD_PARTNER_SCOPE.exec(oldKey);
  if (partner) return `${CORE_KEY_ROOT}:p${partner[1]}:${oldKey.slice(partner[0].length)}`;
  if (oldKey.startsWith(OLD_CORE_ROOT)) {
    return `${CORE_KEY_ROOT}:${oldKey.slice(OLD_CORE_ROOT.length)}`;
  }
  return null;
}

/**
 * Renames every key of the untagged layout to its tagged name (RENAMENX: a tagged key that exists
 * already is kept, and the old one left, with a warning). Safe to repeat and to run from several
 * processes at once: a key one of them renamed is gone for the others. Refuses while workers of
 * an older version are connected, since they would go on writing the old keys.
 *
 * Redis Cluster is skipped: the untagged layout never ran there (BullMQ needs a tagged prefix).
 */
export async function migrateKeyLayout(
  redis: RedisClient,
  queueNames: readonly string[],
  log: Logger,
): Promise<void> {
  if (redis instanceof Cluster) return;
  if ((await redis.get(KEY_LAYOUT_KEY)) === TAGGED_LAYOUT) return;
  await refuseWhileOldWorkersRun(redis, queueNames);
  let renamed = 0;
  const kept: string[] = [];
  for (const pattern of [`${OLD_WORKER_ROOT}*`, `${OLD_CORE_ROOT}*`]) {
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', SCAN_BATCH);
      cursor = next;
      const moves = keys.flatMap((key) => {
        const tagged = taggedKeyName(key);
        return tagged ? [[key, tagged] as const] : [];
      });
      if (moves.length === 0) continue;
      const pipeline = redis.pipeline();
      for (const [from, to] of moves) pipeline.renamenx(from, to);
      const replies = (await pipeline.exec()) ?? [];
      replies.forEach(([error, reply], i) => {
        // "no such key": another process renamed it since the scan saw it.
        if (error) {
          if (!/no such key/i.test(error.message)) throw error;
        } else if (reply === 1) renamed += 1;
        else kept.push(moves[i]?.[0] ?? '');
      });
    } while (cursor !== '0');
  }
  if (kept.length > 0) {
    log.warn(
      { kept: kept.length, examples: kept.slice(0, 5) },
      'key layout: old keys left where their tagged name exists already',
    );
  }
  await redis.set(KEY_LAYOUT_KEY, TAGGED_LAYOUT);
  if (renamed > 0) log.info({ renamed }, 'key layout: old keys renamed to the tagged layout');
}

async function refuseWhileOldWorkersRun(redis: RedisClient, queueNames: readonly string[]) {
  const busy: string[] = [];
  for (const name of queueNames) {
    const queue = new Queue(name, { connection: redis, prefix: OLD_WORKER_ROOT.slice(0, -1) });
    try {
      if ((await queue.getWorkersCount()) > 0) busy.push(name);
    } finally {
      await queue.close();
    }
  }
  if (busy.length > 0) {
    throw new ConfigError(
      'old_workers_running',
      `workers of an older version are still connected to this Redis (queues: ${busy.join(', ')}); ` +
        'stop every process of the older version, then start again: the old keys are renamed ' +
        'once, at the first start with none of them running',
    );
  }
}
