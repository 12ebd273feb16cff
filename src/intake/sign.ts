// Signs a webhook the Standard Webhooks way, for producers and tests that call our intake.
import { Webhook } from 'standardwebhooks';

/**
 * The three `webhook-*` headers for `body`, sent as `id` at `timestamp` (epoch seconds), signed
 * with `secret` in the `whsec_<base64>` form.
 */
export function signWebhook(
  secret: string,
  id: string,
  timestamp: number,
  body: string,
): Record<string, string> {
  return {
    'webhook-id': id,
    'webhook-timestamp': String(timestamp),
    'webhook-signature': new Webhook(secret).sign(id, new Date(timestamp * 1000), body),
  };
}
