// Chooses the workers' provisioning client: the embedded core in-process, or a remote service.
import type { Settings } from '../config/settings.js';
import { httpClient } from './client/http.js';
import { inProcessClient } from './client/in-process.js';
import type { ProvisioningClient } from './client/provisioning-client.js';
import { type Clock, partnerClock } from './clock.js';
import type { Runtime } from './embedded.js';

/**
 * Embedded mode acts for one partner account, created at boot when missing, and its `clock` is
 * the one the core asks for that partner (DESIGN §2: the core and the workers ask one Clock, per
 * partner). Remote mode uses PROVISIONING_URL and PROVISIONING_API_KEY against the remote's
 * variant (PARTNER_VARIANT); the remote keeps its own time, and the workers ask the runtime's.
 */
export async function makeProvisioningClient(
  settings: Settings,
  runtime: Runtime,
): Promise<{ client: ProvisioningClient; clock: Clock }> {
  if (settings.remote) {
    const client = httpClient({
      url: settings.PROVISIONING_URL as string,
      apiKey: settings.PROVISIONING_API_KEY as string,
      variant: settings.PARTNER_VARIANT,
      extensions: settings.PROVISIONING_EXTENSIONS,
      timeoutMs: settings.PROVISIONING_TIMEOUT_MS,
    });
    return { client, clock: runtime.clock };
  }
  const partner = await runtime.partners.ensure({
    name: settings.PARTNER_NAME,
    variant: settings.PARTNER_VARIANT,
    renewalWindowDays: settings.PARTNER_RENEWAL_WINDOW_DAYS,
    now: runtime.clock.now(),
  });
  const client = inProcessClient({
    core: runtime.core,
    partner,
    extensions: settings.PROVISIONING_EXTENSIONS,
  });
  return { client, clock: partnerClock(runtime.clock, String(partner.id)) };
}

/**
 * The clock as the workers ask it, for a process that does not run them (the `billing`
 * command): in embedded mode scoped to the workers' partner when it exists (it is created by
 * the service's first start; before that there are no chains to read), else the runtime's.
 */
export async function workersClock(settings: Settings, runtime: Runtime): Promise<Clock> {
  if (settings.remote) return runtime.clock;
  const partner = (await runtime.partners.list()).find((p) => p.name === settings.PARTNER_NAME);
  return partner === undefined ? runtime.clock : partnerClock(runtime.clock, String(partner.id));
}

/**
 * The provider's variant as the workers act on it, for a process that does not run them: in
 * embedded mode the workers' partner's own (the service refuses to start with another
 * PARTNER_VARIANT), the setting before its first start and in remote mode.
 */
export async function workersVariant(
  settings: Settings,
  runtime: Runtime,
): Promise<{ variant: Settings['PARTNER_VARIANT']; fromSetting: boolean }> {
  if (settings.remote) return { variant: settings.PARTNER_VARIANT, fromSetting: true };
  const partner = (await runtime.partners.list()).find((p) => p.name === settings.PARTNER_NAME);
  return partner === undefined
    ? { variant: settings.PARTNER_VARIANT, fromSetting: true }
    : { variant: partner.variant, fromSetting: false };
}
