// Chooses the workers' provisioning client: the embedded core in-process, or a remote service.
import type { Settings } from '../config/settings.js';
import { httpClient } from './client/http.js';
import { inProcessClient } from './client/in-process.js';
import type { ProvisioningClient } from './client/provisioning-client.js';
import { type Clock, partnerClock } from './clock.js';
import type { Runtime } from './embedded.js';
import { ConfigError, RefusalError } from './errors.js';

/**
 * Embedded mode acts for one partner account, created at boot when missing, and its `clock` is
 * the one the core asks for that partner (DESIGN §2: the core and the workers ask one Clock, per
 * partner). Remote mode uses PROVISIONING_URL and PROVISIONING_API_KEY against the remote's
 * variant (PARTNER_VARIANT); the remote keeps its own time, and the workers ask the runtime's.
 */
export async function makeProvisioningClient(
  settings: Settings,
  runtime: Runtime,
): Promise<{
  client: ProvisioningClient;
  clock: Clock;
  /**
   * Sets the partner's renewal window to PARTNER_RENEWAL_WINDOW_DAYS, for the client too: called
   * once the service runs, so a start that fails (a port in use) leaves the window that the
   * processes already running use.
   */
  applyWindow: () => Promise<void>;
}> {
  if (settings.remote) {
    const client = httpClient({
      url: settings.PROVISIONING_URL as string,
      apiKey: settings.PROVISIONING_API_KEY as string,
      variant: settings.PARTNER_VARIANT,
      extensions: settings.PROVISIONING_EXTENSIONS,
      timeoutMs: settings.PROVISIONING_TIMEOUT_MS,
    });
    return { client, clock: runtime.clock, applyWindow: async () => {} };
  }
  const asked = {
    name: settings.PARTNER_NAME,
    variant: settings.PARTNER_VARIANT,
    renewalWindowDays: settings.PARTNER_RENEWAL_WINDOW_DAYS,
  };
  let partner = await runtime.partners
    .ensure({ ...asked, now: runtime.clock.now(), keepWindow: true })
    .catch((error: unknown) => {
      throw variantSettingError(error, settings);
    });
  const client = inProcessClient({
    core: runtime.core,
    partner: () => partner,
    extensions: settings.PROVISIONING_EXTENSIONS,
  });
  return {
    client,
    clock: partnerClock(runtime.clock, String(partner.id)),
    applyWindow: async () => {
      partner = await runtime.partners.ensure({ ...asked, now: runtime.clock.now() });
    },
  };
}

/**
 * The workers as a process that does not run them (the `billing` command) acts for them. In
 * embedded mode, from the workers' partner when it exists (created by the service's first
 * start; before that there are no chains to read): its clock, and its variant (the service
 * refuses to start with another PARTNER_VARIANT). Otherwise the runtime's clock and the
 * PARTNER_VARIANT setting (`fromSetting`).
 */
export async function workersSide(
  settings: Settings,
  runtime: Runtime,
): Promise<{ clock: Clock; variant: Settings['PARTNER_VARIANT']; fromSetting: boolean }> {
  const partner = settings.remote
    ? undefined
    : (await runtime.partners.list()).find((p) => p.name === settings.PARTNER_NAME);
  if (partner === undefined) {
    return { clock: runtime.clock, variant: settings.PARTNER_VARIANT, fromSetting: true };
  }
  return {
    clock: partnerClock(runtime.clock, String(partner.id)),
    variant: partner.variant,
    fromSetting: false,
  };
}

/**
 * A partner's variant is fixed when it is created: a start with another PARTNER_VARIANT is a
 * setting to change (or another PARTNER_NAME to use), said in those settings' names.
 */
function variantSettingError(error: unknown, settings: Settings): unknown {
  if (!(error instanceof RefusalError) || error.code !== 'partner_variant_mismatch') return error;
  return new ConfigError(
    'partner_variant_mismatch',
    `PARTNER_VARIANT=${settings.PARTNER_VARIANT}: the partner PARTNER_NAME=${settings.PARTNER_NAME} exists here with variant ${error.details.existing}, which cannot change; set PARTNER_VARIANT=${error.details.existing}, or another PARTNER_NAME for a new partner`,
    { setting: 'PARTNER_VARIANT' },
  );
}
