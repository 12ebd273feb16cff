// The embedded core as a ProvisioningClient: calls `core.invoke` in process, with the same
// params, answers and error kinds as the HTTP client.
import { RefusalError, TransientError } from '../errors.js';
import type { ProvisioningCore } from '../provisioning/operations.js';
import type { Partner } from '../provisioning/records.js';
import { isRedisUnavailable } from '../redis/connection.js';
import { clientOver, parseAnswer, type Send } from './client-over.js';
import { orderResponse, type ProvisioningClient } from './provisioning-client.js';

/**
 * The embedded core, called in the same process as the partner `partner`. Failures are
 * classified exactly as the HTTP client classifies the endpoint's statuses (400 refusal, 503
 * transient), so workers behave the same in embedded and remote mode.
 */
export function inProcessClient(opts: {
  core: ProvisioningCore;
  /** The partner, or how to read it: the service's start sets its window once it runs. */
  partner: Partner | (() => Partner);
  /** Whether the `parent` and `licenses` extensions are sent; default true (the core has them). */
  extensions?: boolean;
}): ProvisioningClient {
  const { core } = opts;
  const partner = typeof opts.partner === 'function' ? opts.partner : () => opts.partner as Partner;
  const send: Send = (method, params) =>
    classified(method, () => core.invoke(partner(), method, params));
  const client = clientOver({
    variant: partner().variant,
    extensions: opts.extensions ?? true,
    send,
    // The core and its Redis connection belong to whoever built them.
    close: async () => {},
  });
  return {
    ...client,
    async createRecorded(method, params, companion) {
      const outcome = await classified(method, () =>
        core.createRecorded(partner(), method, params, companion),
      );
      if (outcome.kind !== 'exists') return outcome;
      return { kind: 'unrecorded', order: parseAnswer(orderResponse, method, outcome.order) };
    },
  };
}

/**
 * Failures classified exactly as the HTTP client classifies the endpoint's statuses (400
 * refusal, 503 transient).
 */
async function classified<T>(method: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (error) {
    if (error instanceof RefusalError) {
      throw new RefusalError('provisioning_refused', error.message, { method }, { cause: error });
    }
    if (error instanceof TransientError || isRedisUnavailable(error)) {
      const reason = error instanceof Error ? error.message : String(error);
      throw new TransientError(
        'provisioning_unavailable',
        `provisioning ${method} unavailable: ${reason}`,
        { method },
        { cause: error },
      );
    }
    throw error;
  }
}
