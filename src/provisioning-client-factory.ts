// Chooses the workers' provisioning client: the embedded core in-process, or a remote service.
import type { Settings } from '../config/settings.js';
import { httpClient } from './client/http.js';
import { inProcessClient } from './client/in-process.js';
import type { ProvisioningClient } from './client/provisioning-client.js';
import type { Runtime } from './embedded.js';

/**
 * Embedded mode acts for one partner account, created at boot when missing. Remote mode uses
 * PROVISIONING_URL and PROVISIONING_API_KEY against the remote's variant (PARTNER_VARIANT).
 */
export async function makeProvisioningClient(
  settings: Settings,
  runtime: Runtime,
): Promise<ProvisioningClient> {
  if (settings.remote) {
    return httpClient({
      url: settings.PROVISIONING_URL as string,
      apiKey: settings.PROVISIONING_API_KEY as string,
      variant: settings.PARTNER_VARIANT,
      extensions: settings.PROVISIONING_EXTENSIONS,
      timeoutMs: settings.PROVISIONING_TIMEOUT_MS,
    });
  }
  const partner = await runtime.partners.ensure({
    name: settings.PARTNER_NAME,
    variant: settings.PARTNER_VARIANT,
    renewalWindowDays: settings.PARTNER_RENEWAL_WINDOW_DAYS,
    now: runtime.clock.now(),
  });
  return inProcessClient({
    core: runtime.core,
    partner,
    extensions: settings.PROVISIONING_EXTENSIONS,
  });
}
