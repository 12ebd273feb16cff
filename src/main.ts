// Starts the product: the embedded provisioning core over HTTP (workers join in a later issue).
import type { Settings } from '../config/settings.js';
import { openRuntime } from './embedded.js';
import type { Logger } from './logger.js';
import { buildApp } from './server.js';

export type Role = 'api' | 'worker' | 'all';

/** How long shutdown may take before the process exits anyway. */
const SHUTDOWN_GRACE_MS = 10_000;

export async function start(settings: Settings, log: Logger): Promise<{ stop(): Promise<void> }> {
  const runtime = await openRuntime(settings, log);
  const app = await buildApp({ log, core: runtime.core, partners: runtime.partners });
  await app.listen({ host: settings.HOST, port: settings.PORT });
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : settings.PORT;
  log.info(
    {
      provisioning: `http://${settings.HOST}:${port}/provisioning`,
      redis: redactUrl(runtime.redisUrl),
    },
    'billing service started',
  );

  let stopping: Promise<void> | undefined;
  const stop = () => {
    stopping ??= (async () => {
      await app.close();
      await runtime.close();
    })();
    return stopping;
  };
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      log.info({ signal }, 'shutting down');
      const timer = setTimeout(() => process.exit(1), SHUTDOWN_GRACE_MS);
      timer.unref();
      stop().then(
        () => process.exit(0),
        (error: unknown) => {
          log.error({ err: error }, 'shutdown failed');
          process.exit(1);
        },
      );
    });
  }
  return { stop };
}

/** Hides a password in a Redis URL before it is logged. */
export function redactUrl(url: string): string {
  const parsed = new URL(url);
  if (parsed.password) parsed.password = 'redacted';
  return parsed.toString();
}
