#!/usr/bin/env node
// Sends one signed event to the billing service's webhook intake (Standard Webhooks signing).
//
//   node examples/send-webhook.mjs <type> '<data as JSON>' [--url URL] [--id WEBHOOK_ID]
//
// URL:            --url, else $BILLING_URL, else http://127.0.0.1:3000
// Secret:         $WEBHOOK_SECRET, else the file $DATA_DIR/secrets/webhook-secret
//                 ($DATA_DIR defaults to ./data, as for the service)
// Webhook id:     --id, else a fresh random one (send the same id again to see deduplication)
//
// Prints the HTTP status and the response body. Exits 0 on 2xx, 1 otherwise, 2 on bad arguments.
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Webhook } from 'standardwebhooks';

const usage =
  "usage: node examples/send-webhook.mjs <type> '<data JSON>' [--url URL] [--id WEBHOOK_ID]";

function fail(message) {
  process.stderr.write(`${message}\n${usage}\n`);
  process.exit(2);
}

let args;
try {
  args = parseArgs({
    allowPositionals: true,
    options: { url: { type: 'string' }, id: { type: 'string' } },
  });
} catch (error) {
  fail(error.message);
}
const [type, dataText, ...extra] = args.positionals;
if (!type || !dataText || extra.length > 0) fail('expected an event type and a JSON data argument');

let data;
try {
  data = JSON.parse(dataText);
} catch (error) {
  fail(`the data argument is not JSON: ${error.message}`);
}

function webhookSecret() {
  if (process.env.WEBHOOK_SECRET) return process.env.WEBHOOK_SECRET;
  const file = join(process.env.DATA_DIR || './data', 'secrets', 'webhook-secret');
  try {
    return readFileSync(file, 'utf8').trim();
  } catch (error) {
    fail(`WEBHOOK_SECRET is not set and ${file} cannot be read (${error.code ?? error.message})`);
  }
}

function serviceUrl() {
  // An empty variable is unset, as for the service's settings and this script's others.
  const given = args.values.url ?? (process.env.BILLING_URL || 'http://127.0.0.1:3000');
  const from = args.values.url !== undefined ? '--url' : 'BILLING_URL';
  let url;
  try {
    url = new URL(given);
  } catch {
    fail(`${from} must be an http(s) URL, got ${JSON.stringify(given)}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    fail(`${from} must be an http(s) URL, got ${JSON.stringify(given)}`);
  }
  return given.replace(/\/+$/, '');
}

function webhookId() {
  const given = args.values.id;
  if (given === undefined) return `evt-${randomUUID()}`;
  if (given === '') fail('--id must not be empty');
  // A header loses them on the way, and the service checks the signature of what arrives.
  if (given.trim() !== given) fail('--id must not start or end with whitespace');
  return given;
}

function signer() {
  const secret = webhookSecret();
  // The library takes a bare base64 key, or a short one, too: the service takes only what its
  // WEBHOOK_SECRET setting does, whsec_ and at least 16 characters of well-formed base64.
  const key = secret.slice('whsec_'.length);
  const canonical = Buffer.from(key, 'base64').toString('base64');
  if (
    !/^whsec_[A-Za-z0-9+/=]{16,}$/.test(secret) ||
    (canonical !== key && canonical.replace(/=+$/, '') !== key)
  ) {
    fail(
      'WEBHOOK_SECRET is not a webhook secret: the service takes whsec_ followed by at least 16 characters of well-formed base64',
    );
  }
  try {
    return new Webhook(secret);
  } catch (error) {
    // Never the secret itself: the library's reason is enough.
    fail(`WEBHOOK_SECRET is not a webhook secret (whsec_<base64>): ${error.message}`);
  }
}

const base = serviceUrl();
const id = webhookId();
const body = JSON.stringify({ type, data });
const timestamp = new Date();
const signature = signer().sign(id, timestamp, body);

let response;
try {
  response = await fetch(`${base}/webhooks/events`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      // fetch takes header values as bytes (Latin-1 strings), and the id is signed and read as
      // UTF-8: send its UTF-8 bytes, so an id beyond Latin-1 ("evt-€-1") goes as it is signed.
      'webhook-id': Buffer.from(id, 'utf8').toString('latin1'),
      'webhook-timestamp': String(Math.floor(timestamp.getTime() / 1000)),
      'webhook-signature': signature,
    },
    body,
  });
} catch (error) {
  process.stderr.write(`could not reach ${base}: ${error.cause?.message ?? error.message}\n`);
  process.exit(1);
}
process.stdout.write(`${response.status} ${await response.text()}\n`);
process.exit(response.ok ? 0 : 1);
