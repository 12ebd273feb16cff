// Starts the product in a role: the HTTP API (provisioning core, webhooks, ops, Bull Board),
// the workers, or both (the embedded default).

import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { type Settings, serverUrl, settingDefinitions } from '../config/settings.js';
import { workerSettingsFrom } from '../jobs/deps.js';
import { checkProviderAtStart } from './chains/provider-binding.js';
import { ChainStore } from './chains/store.js';
import { instrumentClient } from './client/instrumented.js';
import type { ProvisioningClient } from './client/provisioning-client.js';
import type { Clock } from './clock.js';
import { openRuntime, type Runtime } from './embedded.js';
import type { Logger } from './logger.js';
import { createMetrics } from './metrics.js';
import { productCatalogue } from './provisioning/catalogue.js';
import { makeProvisioningClient } from './provisioning-client-factory.js';
import { queueNames } from './queues.js';
import { connectRedis, type RedisClient, takesWritesForKeys } from './redis/connection.js';
import { warnUnlessDurable } from './redis/durability.js';
import { describeRedisTarget } from './redis/target.js';
import { loadOrCreateSecret } from './secrets.js';
import { buildApp } from './server.js';
import { settlesWithin } from './settles-within.js';
import { closeQueues, openQueues, startWorkers, type Workers } from './workers.js';

type Queues = ReturnType<typeof openQueues>;

export type Role = 'api' | 'worker' | 'all';

/** How long the HTTP server may take to close after the workers (ms). */
const HTTP_CLOSE_GRACE_MS = 5_000;

/** OPS_TOKEN and WEBHOOK_SECRET: configured, or generated once and kept under DATA_DIR. */
async function loadSecrets(settings: Settings) {
  const ops = await loadOrCreateSecret(
    settings.DATA_DIR,
    'ops-token',
    settings.OPS_TOKEN,
    settingDefinitions.OPS_TOKEN.schema,
  );
  const webhook = await loadOrCreateSecret(
    settings.DATA_DIR,
    'webhook-secret',
    settings.WEBHOOK_SECRET,
    settingDefinitions.WEBHOOK_SECRET.schema,
    () => `whsec_${randomBytes(32).toString('base64')}`,
  );
  return { opsToken: ops, webhookSecret: webhook };
}

/**
 * Prints generated secrets on stderr, outside the JSON log: an operator needs them once to
 * configure producers and dashboards, and log pipelines must never carry them.
 */
function announceSecrets(settings: Settings, secrets: Awaited<ReturnType<typeof loadSecrets>>) {
  const lines: string[] = [];
  if (!settings.OPS_TOKEN) {
    lines.push(
      secrets.opsToken.generated
        ? `OPS_TOKEN was not set; generated one (kept in ${settings.DATA_DIR}/secrets/ops-token):\n  ${secrets.opsToken.value}`
        : `OPS_TOKEN: using the one kept in ${settings.DATA_DIR}/secrets/ops-token`,
    );
  }
  if (!settings.WEBHOOK_SECRET) {
    lines.push(
      secrets.webhookSecret.generated
        ? `WEBHOOK_SECRET was not set; generated one (kept in ${settings.DATA_DIR}/secrets/webhook-secret):\n  ${secrets.webhookSecret.value}`
        : `WEBHOOK_SECRET: using the one kept in ${settings.DATA_DIR}/secrets/webhook-secret`,
    );
  }
  if (lines.length > 0) process.stderr.write(`${lines.join('\n')}\n`);
}

/**
 * After a failed start, the secrets it generated: the next start finds them kept and would only
 * say so, so nobody would ever see them otherwise.
 */
function announceGenerated(
  settings: Settings,
  secrets: Awaited<ReturnType<typeof loadSecrets>> | null,
) {
  if (secrets && (secrets.opsToken.generated || secrets.webhookSecret.generated)) {
    announceSecrets(settings, secrets);
  }
}

export interface Started {
  port: number;
  runtime: Runtime;
  provisioning: ProvisioningClient;
  /** The clock the workers and the ops API ask: the core's for the workers' partner (embedded). */
  clock: Clock;
  /** The BullMQ workers of every queue (null for the api role), for inspection. */
  workers: Workers | null;
  stop(): Promise<void>;
}

/**
 * Starts every part of the role. Signal handlers are installed only when asked (the CLI asks):
 * before the "billing service started" line, so a signal sent on seeing it finds them there.
 */
export async function start(
  settings: Settings,
  log: Logger,
  role: Role = 'all',
  options: {
    clock?: Clock;
    stalledIntervalMs?: number;
    lockLeaseMs?: number;
    jobLockMs?: number;
    /** Stop on SIGINT/SIGTERM/SIGHUP (stopOnSignals), with this hard limit on the shutdown (s). */
    stopOnSignalsWithin?: number;
  } = {},
): Promise<Started> {
  const serveApi = role !== 'worker';
  // Only the roles that serve the ops API and the webhooks need their secrets.
  const secrets = serveApi ? await loadSecrets(settings) : null;
  const runtime = await openRuntime(settings, log, options.clock).catch((error: unknown) => {
    announceGenerated(settings, secrets);
    throw error;
  });
  const metrics = createMetrics();
  // What a start that fails halfway (a port in use, Redis gone) has opened is closed again,
  // a private Redis included, so the process can exit with the reason.
  let workerRedis: RedisClient | undefined;
  let storeRedis: RedisClient | undefined;
  let provisioning: ProvisioningClient | undefined;
  let workerQueues: Queues | undefined;
  let apiQueues: Queues | undefined;
  let workers: Workers | null = null;
  let app: FastifyInstance | undefined;
  let port = settings.PORT;
  let clock: Clock = runtime.clock;
  let stopping: Promise<void> | undefined;
  const stop = () => {
    stopping ??= (async () => {
      // Workers first, bounded: an active job either finishes or is retried after a restart.
      await workers?.close(settings.SHUTDOWN_TIMEOUT_SECONDS * 1000);
      if (app) await settlesWithin(app.close(), HTTP_CLOSE_GRACE_MS);
      if (apiQueues) await closeQueues(apiQueues);
      if (workerQueues) await closeQueues(workerQueues);
      await provisioning?.close();
      for (const redis of [workerRedis, storeRedis]) {
        await redis?.quit().catch(() => redis.disconnect());
      }
      await runtime.close();
    })();
    return stopping;
  };

  try {
    // The provisioning API checks partner keys: against the secret they were hashed with.
    if (serveApi && !settings.remote) await runtime.holdKeyHashSecret();
    if (settings.REDIS_URL) {
      await warnUnlessDurable(runtime.redis, describeRedisTarget(runtime.redisUrl), log);
    }
    workerRedis = await connectRedis(runtime.redisUrl, 'worker');
    storeRedis = await connectRedis(runtime.redisUrl, 'store');
    // Before the partner is made: another PARTNER_NAME would act for an account without the
    // chains' orders (and create it for nothing).
    await checkProviderAtStart(runtime.redis, settings);
    const made = await makeProvisioningClient(settings, runtime);
    provisioning = instrumentClient(made.client, metrics);
    // The workers and the ops API act for the workers' partner: they ask the clock as it does.
    // Intake checks a webhook's timestamp against the process's own clock: it is the transport's
    // freshness, the same for every producer.
    clock = made.clock;
    workerQueues = openQueues(storeRedis, log);
    const api = openQueues(runtime.redis, log);
    apiQueues = api;
    const chains = new ChainStore(runtime.redis, { leaseMs: options.lockLeaseMs });

    app = await buildApp({
      log,
      metrics,
      readiness: {
        redis: () => takesWritesForKeys(runtime.redis),
        // Not ready until they run: they start once the port is bound (below).
        workers: () => (role === 'api' ? null : (workers?.isRunning() ?? false)),
      },
      ...(serveApi && !settings.remote
        ? { provisioning: { core: runtime.core, partners: runtime.partners } }
        : {}),
      ...(secrets
        ? {
            webhooks: {
              redis: runtime.redis,
              queues: api,
              clock: runtime.clock,
              secret: secrets.webhookSecret.value,
              dedupDays: settings.WEBHOOK_DEDUP_DAYS,
              ...(settings.remote ? {} : { products: productCatalogue(settings.PRODUCT_BRAND) }),
            },
            ops: {
              chains,
              renewals: api.renewals,
              paymentSignals: api['payment-signals'],
              orders: api.orders,
              provisioning,
              clock,
              token: secrets.opsToken.value,
              leadDays: settings.RENEWAL_LEAD_DAYS,
              variant: provisioning.variant,
            },
            board: {
              queues: queueNames.map((name) => api[name]),
              token: secrets.opsToken.value,
            },
          }
        : {}),
    });
    await app.listen({ host: settings.HOST, port: settings.PORT }).catch((error: unknown) => {
      // Node's reason (EADDRINUSE, ENOTFOUND...) without the settings that chose the address.
      const reason = error instanceof Error ? error.message : String(error);
      throw new Error(`cannot listen on HOST=${settings.HOST} PORT=${settings.PORT}: ${reason}`, {
        cause: error,
      });
    });
    // The port is known now (PORT=0 picks one): onboarding links a worker makes point there.
    port = listeningPort(app, settings.PORT);
    runtime.listeningOn(port);
    await made.applyWindow();
    // Workers start last: a start that fails before (a port in use) leaves the deployment's
    // queues as they were, the reconcile schedule of the processes already running included.
    if (role !== 'api') {
      workers = await startWorkers({
        deps: {
          chains: new ChainStore(storeRedis, { leaseMs: options.lockLeaseMs }),
          provisioning,
          clock,
          log,
          metrics,
          queues: workerQueues,
          settings: workerSettingsFrom(settings),
        },
        connection: workerRedis,
        concurrency: settings.WORKER_CONCURRENCY,
        reconcileEverySeconds: settings.RECONCILE_INTERVAL_SECONDS,
        stalledIntervalMs: options.stalledIntervalMs,
        jobLockMs: options.jobLockMs,
      });
    }
  } catch (error) {
    await stop().catch((failure: unknown) =>
      log.warn({ err: failure }, 'closing after a failed start failed'),
    );
    announceGenerated(settings, secrets);
    throw error;
  }
  const started: Started = { stop, port, runtime, provisioning, workers, clock };
  if (options.stopOnSignalsWithin !== undefined) {
    stopOnSignals(started, log, options.stopOnSignalsWithin);
  }
  if (secrets) announceSecrets(settings, secrets);
  log.info(
    {
      role,
      mode: settings.remote ? 'remote' : 'embedded',
      variant: provisioning.variant,
      url: serverUrl(settings.HOST, port),
      ...(serveApi && !settings.remote
        ? { provisioning: `${serverUrl(settings.HOST, port)}/provisioning` }
        : {}),
      redis: describeRedisTarget(runtime.redisUrl),
    },
    'billing service started',
  );
  if (!settings.remote && isWildcardAddress(new URL(settings.PUBLIC_URL).hostname)) {
    log.warn(
      { PUBLIC_URL: settings.PUBLIC_URL },
      'PUBLIC_URL names no address a client can reach (HOST binds every address): onboarding links in createCustomer answers point there; set PUBLIC_URL to where clients reach this service',
    );
  }
  return started;
}

/** An address to bind to, not to connect to: "every address" (IPv4 or IPv6). */
function isWildcardAddress(hostname: string): boolean {
  return hostname === '0.0.0.0' || hostname === '[::]' || hostname === '::';
}

/**
 * Stops on SIGINT/SIGTERM/SIGHUP, with a hard limit in case shutdown itself hangs. SIGHUP (its
 * terminal closed) would otherwise end the process on the spot, active jobs and all. A second
 * signal of any kind exits at once (status 1): active jobs are retried after a restart, and a
 * private Redis left running is reused by the next start.
 */
function stopOnSignals(started: Started, log: Logger, limitSeconds: number): void {
  let shuttingDown = false;
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.on(signal, () => {
      if (shuttingDown) {
        log.warn({ signal }, 'second signal: exiting now, without waiting for the shutdown');
        process.exit(1);
      }
      shuttingDown = true;
      log.info({ signal }, 'shutting down');
      setTimeout(() => {
        log.error(
          { limitSeconds },
          'shutdown did not finish in time: exiting (active jobs are retried after a restart)',
        );
        process.exit(1);
      }, limitSeconds * 1000).unref();
      started.stop().then(
        () => process.exit(0),
        (error: unknown) => {
          log.error({ err: error }, 'shutdown failed');
          process.exit(1);
        },
      );
    });
  }
}

/** The port `app` listens on: the one the system chose for PORT=0. */
function listeningPort(app: FastifyInstance, configured: number): number {
  const address = app.server.address();
  return typeof address === 'object' && address ? address.port : configured;
}
