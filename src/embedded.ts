// Opens what every entry point needs: Redis (configured or private), the store and the core.
import { type Settings, settingDefinitions } from '../config/settings.js';
import { type Clock, systemClock } from './clock.js';
import type { Logger } from './logger.js';
import { makeProvisioningCore, type ProvisioningCore } from './provisioning/operations.js';
import { makePartnerDirectory, type PartnerDirectory } from './provisioning/partners.js';
import { ProvisioningStore } from './provisioning/store.js';
import { connectRedis, type RedisClient } from './redis/connection.js';
import { migrateKeyLayout } from './redis/key-layout.js';
import { ensurePrivateRedis, findRunningPrivateRedis } from './redis/private-redis.js';
import { loadOrCreateSecret } from './secrets.js';

export interface Runtime {
  redisUrl: string;
  redis: RedisClient;
  store: ProvisioningStore;
  core: ProvisioningCore;
  partners: PartnerDirectory;
  clock: Clock;
  close(): Promise<void>;
}

/**
 * Connects to `REDIS_URL`, or to the private redis-server of `DATA_DIR`: the running one (as
 * `npm start` left it for the CLI), else one started here and stopped again on close.
 */
export async function openRuntime(
  settings: Settings,
  log: Logger,
  clock: Clock = systemClock,
): Promise<Runtime> {
  // Before anything is started: a kept secret that is not usable stops the start right here.
  const secret = await loadOrCreateSecret(
    settings.DATA_DIR,
    'key-hash-secret',
    settings.KEY_HASH_SECRET,
    settingDefinitions.KEY_HASH_SECRET.schema,
  );
  let redisUrl = settings.REDIS_URL;
  let stopPrivate: () => Promise<void> = async () => {};
  if (!redisUrl) {
    redisUrl = (await findRunningPrivateRedis(settings.DATA_DIR)) ?? undefined;
    if (!redisUrl) {
      const started = await ensurePrivateRedis({
        dataDir: settings.DATA_DIR,
        port: settings.EMBEDDED_REDIS_PORT,
        log,
      });
      redisUrl = started.url;
      stopPrivate = started.stop;
    }
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
  const core = makeProvisioningCore({
    store,
    clock,
    brand: settings.PRODUCT_BRAND,
    publicUrl: settings.PUBLIC_URL,
    log: log.child({ component: 'provisioning' }),
  });
  const partners = makePartnerDirectory(store, secret.value);
  return {
    redisUrl,
    redis,
    store,
    core,
    partners,
    clock,
    async close() {
      await redis.quit().catch(() => redis.disconnect());
      await stopPrivate();
    },
  };
}
