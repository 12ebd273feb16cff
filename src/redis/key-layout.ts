// Keys written before every key carried the product's hash tag (key-space.ts) are renamed once,
// at the first start of a version that has it, so an upgrade keeps its chains, jobs and orders.
import { Cluster, type Redis } from 'ioredis';
import { ConfigError } from '../errors.js';
import type { Logger } from '../logger.js';
import { partnerKeys, registryKeys } from '../provisioning/keys.js';
import { queueNames } from '../queues.js';
import type { RedisClient } from './connection.js';
import { CORE_KEY_ROOT, KEY_LAYOUT_KEY, WORKER_KEY_ROOT } from './key-space.js';

const TAGGED_LAYOUT = 'tagged';

/** The untagged layout's roots: BullMQ (prefix `bc`) and the workers under `bc:`, the core `pp:`. */
const OLD_QUEUE_PREFIX = 'bc';
const OLD_PATTERNS = ['bc:*', 'pp:*'];
const SCAN_BATCH = 1000;

const alternatives = (words: readonly string[]) =>
  words.map((w) => w.replace(/[.*+?^${}()|[\]\\-]/g, '\\$&')).join('|');
/** What the older version wrote under `bc:`: chains, indexes, webhook claims, and its queues. */
const OLD_WORKER_KEY = new RegExp(
  `^bc:((?:${alternatives(['chain', 'index', 'webhook', ...queueNames])}):.*)$`,
  's',
);
/** The core's keys of one partner, `pp:{p<id>}:<name>`, with today's names for the same hashes. */
const PARTNER_KEY_NAMES = Object.values(partnerKeys(0)).map((key) =>
  key.slice(`${CORE_KEY_ROOT}:p0:`.length),
);
const OLD_PARTNER_KEY = new RegExp(`^pp:\\{p(\\d+)\\}:(${alternatives(PARTNER_KEY_NAMES)})$`);
/** The core's registry, `pp:<name>`. */
const REGISTRY_KEY_NAMES = new Set(
  Object.values(registryKeys).map((key) => key.slice(`${CORE_KEY_ROOT}:`.length)),
);

/**
 * The tagged name of a key the untagged layout wrote, or null for any other key (another
 * application's `bc:` or `pp:` keys stay as they are): `bc:chain:c1` → `{bc}:chain:c1`,
 * `pp:{p7}:orders` → `{bc}:pp:p7:orders`, `pp:partners` → `{bc}:pp:partners`.
 */
export function taggedKeyName(oldKey: string): string | null {
  const worker = OLD_WORKER_KEY.exec(oldKey);
  if (worker) return `${WORKER_KEY_ROOT}:${worker[1]}`;
  const partner = OLD_PARTNER_KEY.exec(oldKey);
  if (partner) return `${CORE_KEY_ROOT}:p${partner[1]}:${partner[2]}`;
  const registry = oldKey.startsWith('pp:') ? oldKey.slice('pp:'.length) : null;
  if (registry !== null && REGISTRY_KEY_NAMES.has(registry)) return `${CORE_KEY_ROOT}:${registry}`;
  return null;
}

/**
 * Renames every key of the untagged layout to its tagged name (RENAMENX: a tagged key that exists
 * already is kept, and the old one left, with a warning). Safe to repeat and to run from several
 * processes at once: a key one of them renamed is gone for the others. Refuses while BullMQ
 * workers of an older version are connected to this database, since they would go on writing
 * the old keys (older API processes cannot be seen: stop them first).
 *
 * Redis Cluster is skipped: the untagged layout never ran there (BullMQ needs a tagged prefix).
 */
export async function migrateKeyLayout(redis: RedisClient, log: Logger): Promise<void> {
  if (redis instanceof Cluster) return;
  if ((await redis.get(KEY_LAYOUT_KEY)) === TAGGED_LAYOUT) return;
  if (await hasOldKeys(redis)) {
    await refuseWhileOldWorkersRun(redis, log);
    await renameOldKeys(redis, log);
  }
  await redis.set(KEY_LAYOUT_KEY, TAGGED_LAYOUT);
}

/** The untagged layout's keys, a SCAN batch at a time, each with its tagged name. */
async function* oldKeyBatches(redis: Redis) {
  for (const pattern of OLD_PATTERNS) {
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', SCAN_BATCH);
      cursor = next;
      const moves = keys.flatMap((key) => {
        const tagged = taggedKeyName(key);
        return tagged ? [{ from: key, to: tagged }] : [];
      });
      if (moves.length > 0) yield moves;
    } while (cursor !== '0');
  }
}

async function hasOldKeys(redis: Redis): Promise<boolean> {
  return !(await oldKeyBatches(redis).next()).done;
}

async function renameOldKeys(redis: Redis, log: Logger): Promise<void> {
  let renamed = 0;
  const kept: string[] = [];
  for await (const moves of oldKeyBatches(redis)) {
    const pipeline = redis.pipeline();
    for (const { from, to } of moves) pipeline.renamenx(from, to);
    const replies = (await pipeline.exec()) ?? [];
    replies.forEach(([error, reply], i) => {
      // "no such key": another process renamed it since the scan saw it.
      if (error) {
        if (!/no such key/i.test(error.message)) throw error;
      } else if (reply === 1) renamed += 1;
      else kept.push(moves[i]?.from ?? '');
    });
  }
  if (kept.length > 0) {
    log.warn(
      { kept: kept.length, examples: kept.slice(0, 5) },
      'key layout: old keys left where their tagged name exists already',
    );
  }
  log.info({ renamed }, 'key layout: old keys renamed to the tagged layout');
}

/**
 * BullMQ names each worker's connection `<prefix>:<base64 queue name>` (with `:w:<name>` for a
 * named worker): CLIENT LIST shows the older version's workers on this database. Where CLIENT LIST
 * is refused (managed Redis, ACLs) nothing can be seen, and the operator's word is taken.
 */
async function refuseWhileOldWorkersRun(redis: Redis, log: Logger): Promise<void> {
  let clients: string;
  try {
    clients = String(await redis.call('CLIENT', 'LIST'));
  } catch (error) {
    log.warn(
      { err: error },
      'key layout: cannot list clients to look for workers of an older version; make sure none runs',
    );
    return;
  }
  const db = String(redis.options.db ?? 0);
  const busy = queueNames.filter((queue) => {
    const name = `${OLD_QUEUE_PREFIX}:${Buffer.from(queue).toString('base64')}`;
    return clients.split('\n').some((line) => {
      // Each field is key=value; a base64 name may end in `=` itself.
      const fields = new Map(
        line.split(' ').map((f) => [f.slice(0, f.indexOf('=')), f.slice(f.indexOf('=') + 1)]),
      );
      const client = fields.get('name') ?? '';
      return fields.get('db') === db && (client === name || client.startsWith(`${name}:w:`));
    });
  });
  if (busy.length > 0) {
    throw new ConfigError(
      'old_workers_running',
      `workers of an older version are still connected to this Redis (queues: ${busy.join(', ')}); ` +
        'stop every process of the older version, then start again: the old keys are renamed ' +
        'once, at the first start with none of them running',
    );
  }
}
