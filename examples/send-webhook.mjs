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
// Prints the HTTP status and the response body. Exits 0 on 2xx, 1 otherwise.
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

const base = (args.values.url || process.env.BILLING_URL || 'http://127.0.0.1:3000').replace(
  /\/+$/,
  '',
);
const id = args.values.id || `evt-${randomUUID()}`;
const body = JSON.stringify({ type, data });
const timestamp = new Date();
const signature = new Webhook(webhookSecret()).sign(id, timestamp, body);

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
