// Opens what every entry point needs: Redis (configured or private), the store and the core.
import { type Settings, settingDefinitions } from '../config/settings.js';
import { type Clock, systemClock } from './clock.js';
import type { Logger } from './logger.js';
import { holdKeyHashSecret, type KeyHashSecret } from './provisioning/key-hash-guard.js';
import { makeProvisioningCore, type ProvisioningCore } from './provisioning/operations.js';
import { makePartnerDirectory, type PartnerDirectory } from './provisioning/partners.js';
import { ProvisioningStore } from './provisioning/store.js';
import { connectRedis, type RedisClient } from './redis/connection.js';
import { migrateKeyLayout } from './redis/key-layout.js';
import {
  ensurePrivateRedis,
  type PrivateRedis,
  shutdownPrivateRedis,
} from './redis/private-redis.js';
import { keptSecretIn, loadOrCreateSecret } from './secrets.js';

export interface Runtime {
  redisUrl: string;
  redis: RedisClient;
  store: ProvisioningStore;
  core: ProvisioningCore;
  partners: PartnerDirectory;
  clock: Clock;
  /**
   * The port the HTTP server listens on, once it does: a PUBLIC_URL naming port 0 (the default
   * with `PORT=0`, any free port) then points onboarding links at it.
   */
  listeningOn(port: number): void;
  /** The private Redis this process started itself (none ran for DATA_DIR), or null. */
  startedPrivateRedis: string | null;
  /**
   * Stops here when this process's KEY_HASH_SECRET is not the one this Redis's partner keys are
   * hashed with: for the processes that check keys or issue keys someone sees (the provisioning
   * API, the CLI's `partners add`), not for those that never use it.
   */
  holdKeyHashSecret(): Promise<void>;
  close(): Promise<void>;
}

/** The connection name of a process on its way out of the private Redis. */
const LEAVING = 'billing-leaving';

/**
 * How many connections besides `redis` the server has that are not leaving too: other processes
 * that go on using it. `redis` says first that it is leaving, then counts: of two processes
 * closing at once (one Ctrl-C reaching both), the one that counts last sees the other leaving
 * (or gone) and stops the server, where each would otherwise count the other and leave it
 * running for nobody. Both may stop it, which is harmless.
 */
async function otherClients(redis: RedisClient): Promise<number> {
  await redis.call('CLIENT', 'SETNAME', LEAVING);
  const [list, id] = (await Promise.all([
    redis.call('CLIENT', 'LIST'),
    redis.call('CLIENT', 'ID'),
  ])) as [string, number];
  return list
    .split('\n')
    .filter(
      (line) => line !== '' && !line.startsWith(`id=${id} `) && !line.includes(` name=${LEAVING} `),
    ).length;
}

/**
 * Connects to `REDIS_URL`, or to the private redis-server of `DATA_DIR`: the running one (as
 * `npm start` left it for the CLI), else one started here. On close, the last process using the
 * private Redis stops it.
 */
export async function openRuntime(
  settings: Settings,
  log: Logger,
  clock: Clock = systemClock,
): Promise<Runtime> {
  // Before anything is started: a kept secret that is not usable stops the start right here.
  // A missing one is generated only once a partner key is hashed or checked, so a command that
  // only reads or changes chains leaves DATA_DIR's secrets as it found them.
  const { schema } = settingDefinitions.KEY_HASH_SECRET;
  if (!settings.KEY_HASH_SECRET) await keptSecretIn(settings.DATA_DIR, 'key-hash-secret', schema);
  let secret: Promise<KeyHashSecret> | undefined;
  const keyHashSecret = () => {
    secret ??= loadOrCreateSecret(
      settings.DATA_DIR,
      'key-hash-secret',
      settings.KEY_HASH_SECRET,
      schema,
    ).then((loaded) => ({
      ...loaded,
      origin: settings.KEY_HASH_SECRET
        ? 'set in the environment'
        : `${loaded.generated ? 'generated just now in' : 'kept in'} ${settings.DATA_DIR}/secrets/key-hash-secret`,
    }));
    return secret;
  };
  let redisUrl = settings.REDIS_URL;
  // The private Redis, started here or found running; none with REDIS_URL.
  let privateRedis: PrivateRedis | null = null;
  const stopPrivate = async () => privateRedis?.stop();
  if (!redisUrl) {
    // Reuses the one running for DATA_DIR (the service's, for the CLI), else starts one.
    privateRedis = await ensurePrivateRedis({
      dataDir: settings.DATA_DIR,
      port: settings.EMBEDDED_REDIS_PORT,
      log,
    });
    redisUrl = privateRedis.url;
  }
  let redis: RedisClient | undefined;
  try {
    redis = await connectRedis(redisUrl, 'request');
    await migrateKeyLayout(redis, log);
  } catch (error) {
    redis?.disconnect();
    await stopPrivate();
    throw error;
  }
  const store = new ProvisioningStore(redis);
  let publicUrl = settings.PUBLIC_URL;
  const core = makeProvisioningCore({
    store,
    clock,
    brand: settings.PRODUCT_BRAND,
    publicUrl: () => publicUrl,
    log: log.child({ component: 'provisioning' }),
  });
  const partners = makePartnerDirectory(store, async () => (await keyHashSecret()).value);
  return {
    redisUrl,
    redis,
    store,
    core,
    partners,
    clock,
    listeningOn(port) {
      const url = new URL(settings.PUBLIC_URL);
      if (url.port !== '0') return;
      url.port = String(port);
      publicUrl = url.href.replace(/\/+$/, '');
    },
    startedPrivateRedis: privateRedis?.startedHere ? redisUrl : null,
    holdKeyHashSecret: async () => holdKeyHashSecret(store, await keyHashSecret()),
    async close() {
      const quit = () => redis.quit().catch(() => redis.disconnect());
      if (privateRedis === null) {
        await quit();
        return;
      }
      // The last process out stops the private Redis, whichever started it: processes of other
      // roles sharing DATA_DIR (an api and its workers) keep theirs when one of them restarts.
      // Unknown counts as shared: stopping a server others still use is the worse mistake.
      const others = await otherClients(redis).catch(() => 1);
      if (others > 0) {
        await quit();
        privateRedis.leave();
      } else if (privateRedis.startedHere) {
        await quit();
        await privateRedis.stop();
      } else {
        await shutdownPrivateRedis(settings.DATA_DIR, redis, log);
        redis.disconnect();
      }
    },
  };
}
