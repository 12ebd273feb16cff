// Signs a webhook the Standard Webhooks way: for producers and tests that call our intake, and
// for the intake itself, which checks a signature by computing it again over the bytes received.
import { createHmac } from 'node:crypto';
import { Webhook } from 'standardwebhooks';

const SECRET_PREFIX = 'whsec_';

/**
 * The signing key of a `whsec_<base64>` secret. The package validates the secret (strict
 * base64, not empty) and throws with its reason; Node then decodes the same base64.
 */
export function webhookKey(secret: string): Buffer {
  new Webhook(secret);
  return Buffer.from(
    secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret,
    'base64',
  );
}

/**
 * The `v1,<base64>` signature of `body` sent as `id` at `timestamp` (epoch seconds): an
 * HMAC-SHA256 of `id.timestamp.` and the body's exact bytes (a string counts as its UTF-8).
 * The package's own sign() takes text, so a body that is not UTF-8 could not be signed as sent.
 */
export function webhookSignature(
  key: Buffer,
  id: string,
  timestamp: number,
  body: string | Uint8Array,
): string {
  const mac = createHmac('sha256', key).update(`${id}.${timestamp}.`, 'utf8').update(body);
  return `v1,${mac.digest('base64')}`;
}

/**
 * The three `webhook-*` headers for `body`, sent as `id` at `timestamp` (epoch seconds), signed
 * with `secret` in the `whsec_<base64>` form.
 */
export function signWebhook(
  secret: string,
  id: string,
  timestamp: number,
  body: string | Uint8Array,
): Record<string, string> {
  return {
    'webhook-id': id,
    'webhook-timestamp': String(timestamp),
    'webhook-signature': webhookSignature(webhookKey(secret), id, timestamp, body),
  };
}
