// Webhook intake (DESIGN §5): verify the signature, parse, claim the webhook id, enqueue, 202.
import { createHash, randomUUID, timingSafeEqual } from 'node:crypto';
import { Job, type Queue } from 'bullmq';
import type {
  FastifyError,
  FastifyInstance,
  FastifyPluginAsync,
  FastifyReply,
  FastifyRequest,
} from 'fastify';
import { eventDigest } from '../chains/event-marks.js';
import { type Clock, type EpochSeconds, queueTimeMs } from '../clock.js';
import { ConfigError } from '../errors.js';
import { sendError } from '../http-errors.js';
import { utf8Header } from '../http-headers.js';
import { FORBIDDEN_KEY_MESSAGE, NOT_UTF8_MESSAGE, parsesAsJson, utf8Text } from '../json-body.js';
import { defaultJobOptions, type QueueName, queueForEvent } from '../queues.js';
import { isRedisTimeout, isRedisUnavailable, type RedisClient } from '../redis/connection.js';
import { WORKER_KEY_ROOT } from '../redis/key-space.js';
import { describeIssues } from '../validation.js';
import {
  type EventJobData,
  type EventType,
  eventJobData,
  eventJobName,
  eventSchemas,
  type OrderPlacedData,
  webhookBody,
} from './events.js';
import { webhookKey, webhookSignature } from './sign.js';

export const WEBHOOKS_PATH = '/webhooks/events';
/** How far `webhook-timestamp` may be from the clock's now, either way (inclusive), in seconds. */
export const SIGNATURE_TOLERANCE_SECONDS = 5 * 60;
/** How far `data.occurredAt` may be ahead of now (inclusive), in seconds: producers' clocks drift. */
const OCCURRED_AHEAD_LIMIT_SECONDS = 86_400;
/**
 * BullMQ connections wait for Redis to return, so an add could hang the request; after this the
 * producer gets 503 and retries. A late add is harmless: the retry's add finds the same job id.
 */
const DEFAULT_ENQUEUE_TIMEOUT_MS = 5_000;
/** A claim's value while its event is being enqueued, and once it is. */
const CLAIM_PENDING = 'pending';
const CLAIM_DONE = 'done';
/** Deletes a claim only while it is still the one its request made. */
const RELEASE_CLAIM = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`;
/**
 * Claims a webhook id (`SET NX` with a lease) and, when claimed, numbers the event in the order
 * intake accepts events: `{1, sequence}`. When already claimed, the holder's claim: `{0, holder}`.
 */
const CLAIM_AND_NUMBER = `if redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2], 'NX') then
  return {1, redis.call('INCR', KEYS[2])}
end
return {0, redis.call('GET', KEYS[1])}`;
/** Longer than any enqueue takes (bounded by the enqueue timeout), short enough for a retry. */
const PENDING_CLAIM_SECONDS = 60;

export interface WebhookDeps {
  /** A request-path connection (fails fast while Redis is down). */
  redis: RedisClient;
  /** Read at request time, one BullMQ Queue per name. */
  queues: Record<QueueName, Queue>;
  clock: Clock;
  /** `WEBHOOK_SECRET`, `whsec_<base64>`. */
  secret: string;
  /** How long a webhook id stays claimed, in days. */
  dedupDays: number;
  enqueueTimeoutMs?: number;
  /**
   * The products the provider sells, when this service knows them (embedded mode: the core's
   * catalogue): an `order.placed` for another is refused here, before its job would create the
   * customer (and send the onboarding email) for a first order the provider then refuses.
   * Remote mode leaves it out: the remote provider is the only judge of its catalogue.
   */
  products?: readonly string[];
}

type Rejection = { kind: 'rejected'; status: 400 | 401; error: string; message: string };
type Verified = { kind: 'verified'; id: string; timestamp: EpochSeconds };
type ParsedEvent = {
  kind: 'parsed';
  type: EventType;
  data: Record<string, unknown>;
  occurredAt: EpochSeconds;
};

// Producers' ids may hold ':' or be all digits; BullMQ rejects both in custom job ids and a raw id
// could collide with other keys, so keys and job ids carry a hash of it instead.
function hashWebhookId(webhookId: string): string {
  return createHash('sha256').update(webhookId, 'utf8').digest('base64url');
}

/** The Redis key that claims a webhook id (`SET NX` with a TTL of the dedup window). */
export function webhookDedupKey(webhookId: string): string {
  return `${WORKER_KEY_ROOT}:webhook:${hashWebhookId(webhookId)}`;
}

/** The counter that numbers accepted events, in the order intake accepted them. */
const EVENT_SEQUENCE_KEY = `${WORKER_KEY_ROOT}:webhook:sequence`;

/** The BullMQ job id of a webhook's event, the same for every delivery of that webhook id. */
export function webhookJobId(webhookId: string): string {
  return `wh-${hashWebhookId(webhookId)}`;
}

function rejected(status: 400 | 401, error: string, message: string): Rejection {
  return { kind: 'rejected', status, error, message };
}

function headerValue(request: FastifyRequest, name: string): string | undefined {
  const value = request.headers[name];
  return typeof value === 'string' && value !== '' ? value : undefined;
}

function quote(value: string): string {
  return JSON.stringify(value.length > 40 ? `${value.slice(0, 37)}...` : value);
}

// standardwebhooks' verify() reads Date.now for the tolerance (only the injected Clock may say
// what now is) and signs the body decoded as text: the window is checked here, and the
// signature computed again over the exact bytes received (DESIGN §5: before any parsing).
function verifySignature(
  key: Buffer,
  request: FastifyRequest,
  body: Buffer,
  now: EpochSeconds,
): Verified | Rejection {
  const id = utf8Header(headerValue(request, 'webhook-id'));
  const timestampText = headerValue(request, 'webhook-timestamp');
  const signatures = headerValue(request, 'webhook-signature');
  if (id === undefined || timestampText === undefined || signatures === undefined) {
    const missing = [
      ['webhook-id', id],
      ['webhook-timestamp', timestampText],
      ['webhook-signature', signatures],
    ].flatMap(([name, value]) => (value === undefined ? [name] : []));
    return rejected(401, 'missing_headers', `missing header(s): ${missing.join(', ')}`);
  }
  if (/^\d{13}$/.test(timestampText)) {
    return rejected(
      401,
      'invalid_signature',
      `webhook-timestamp must be in epoch seconds; ${quote(timestampText)} has 13 digits, milliseconds`,
    );
  }
  if (!/^\d{1,12}$/.test(timestampText)) {
    return rejected(
      401,
      'invalid_signature',
      `webhook-timestamp must be an integer (epoch seconds), got ${quote(timestampText)}`,
    );
  }
  const timestamp = Number(timestampText);
  if (Math.abs(now - timestamp) > SIGNATURE_TOLERANCE_SECONDS) {
    return rejected(
      401,
      'stale_timestamp',
      `webhook-timestamp ${timestamp} is ${Math.abs(now - timestamp)} s ` +
        `${timestamp < now ? 'before' : 'after'} now (${now}); the tolerance is ` +
        `${SIGNATURE_TOLERANCE_SECONDS} s`,
    );
  }
  const expected = Buffer.from(webhookSignature(key, id, timestamp, body));
  // Space-separated, as the spec writes them; two header lines arrive joined by ", " (Node), so
  // a signature's trailing comma is the join's, not its own (base64 has no comma).
  const candidates = signatures.split(' ').map((candidate) => candidate.replace(/,$/, ''));
  const matches = candidates.some((candidate) => {
    const given = Buffer.from(candidate);
    return given.length === expected.length && timingSafeEqual(given, expected);
  });
  if (!matches) {
    return rejected(401, 'invalid_signature', 'no v1 signature in webhook-signature matches');
  }
  return { kind: 'verified', id, timestamp };
}

function parseEvent(
  json: unknown,
  timestamp: EpochSeconds,
  now: EpochSeconds,
  products: readonly string[] | undefined,
) {
  const envelope = webhookBody.safeParse(json, { reportInput: true });
  if (!envelope.success) {
    return rejected(400, 'invalid_event', describeIssues(envelope.error));
  }
  const { type } = envelope.data;
  const data = eventSchemas[type].safeParse(envelope.data.data, { reportInput: true });
  if (!data.success) return rejected(400, 'invalid_event', describeIssues(data.error, 'data'));
  const unsold = products === undefined ? undefined : unsoldProduct(type, data.data, products);
  if (unsold !== undefined) {
    return rejected(
      400,
      'invalid_event',
      `data.order.product: must be one of ${products?.join(', ')} (the provider's catalogue), got ${JSON.stringify(unsold)}`,
    );
  }
  const occurredAt = data.data.occurredAt ?? timestamp;
  if (occurredAt - now > OCCURRED_AHEAD_LIMIT_SECONDS) {
    return rejected(
      400,
      'invalid_event',
      `data.occurredAt: must be at most ${OCCURRED_AHEAD_LIMIT_SECONDS} s after now (${now}), ` +
        `got ${occurredAt}`,
    );
  }
  const parsed: ParsedEvent = { kind: 'parsed', type, data: data.data, occurredAt };
  return parsed;
}

/** The product of an `order.placed` that the provider does not sell, if it is one. */
function unsoldProduct(
  type: EventType,
  data: Record<string, unknown>,
  products: readonly string[],
): string | undefined {
  if (type !== 'order.placed') return undefined;
  const { product } = (data as OrderPlacedData).order;
  return products.includes(product) ? undefined : product;
}

function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** The queues events go to, each once. */
const EVENT_QUEUES: readonly QueueName[] = [...new Set(Object.values(queueForEvent))];

/** A webhook id sent again after the dedup window while its earlier event is still handled. */
class WebhookIdInUse extends Error {}

/** Whether a kept job carries this event, as a chain tells events apart (eventDigest). */
function carriesEvent(job: Job, event: Pick<EventJobData, 'type' | 'data'>): boolean {
  const kept = eventJobData.safeParse(job.data);
  return kept.success && eventDigest(kept.data) === eventDigest(event);
}

/**
 * Adds the event's job, whose id is the webhook id's. A job of that id may be kept already:
 * - this same event, enqueued by a delivery whose intake died or timed out before it marked the
 *   id done: it stays, and the add is a no-op (BullMQ keeps the first job of an id);
 * - an earlier event of an id sent again after the dedup window: finished, it goes, so that this
 *   new event is added (its effects stay in the chains' history); still unfinished, it cannot
 *   give up its id, and the new event is refused (WebhookIdInUse) rather than silently dropped;
 *   so it is when the earlier event still runs in another queue (another type's). A chain takes
 *   the new event for a new one, also under an id it remembers applied: it remembers events by
 *   id and content (src/chains/event-marks.ts).
 * A finished job of this same event that ended before the window began goes too: the id is
 * forgotten, and the event is processed again (and applied once: its chain remembers its latest
 * events, and an older event is stale).
 */
async function enqueueOnce(
  queue: Queue,
  /** The other queues of events: an earlier event of the id may run in one of them. */
  otherQueues: readonly Queue[],
  jobId: string,
  event: Pick<EventJobData, 'type' | 'data'>,
  dedupSeconds: number,
  add: () => Promise<unknown>,
): Promise<void> {
  const [earlier, ...elsewhere] = await Promise.all(
    [queue, ...otherQueues].map((q) => Job.fromId(q, jobId)),
  );
  if (elsewhere.some((job) => job !== undefined && job.finishedOn === undefined)) {
    throw new WebhookIdInUse(`job ${jobId} of another queue still handles an earlier event`);
  }
  if (earlier) {
    const same = carriesEvent(earlier, event);
    if (earlier.finishedOn === undefined) {
      if (!same) throw new WebhookIdInUse(`job ${jobId} still handles an earlier event`);
    } else if (!same || earlier.finishedOn < queueTimeMs() - dedupSeconds * 1000) {
      await earlier.remove();
    }
  }
  await add();
}

/** `POST /webhooks/events`, an encapsulated plugin with its own raw-body parser. */
export function webhookRoutes(deps: WebhookDeps): FastifyPluginAsync {
  let signingKey: Buffer;
  try {
    signingKey = webhookKey(deps.secret);
  } catch (error) {
    throw new ConfigError(
      'invalid_webhook_secret',
      `WEBHOOK_SECRET must be whsec_<base64> of a non-empty key: ${(error as Error).message}`,
      {},
      { cause: error },
    );
  }
  const ttlSeconds = Math.round(deps.dedupDays * 86_400);
  if (!(ttlSeconds > 0)) {
    throw new ConfigError(
      'invalid_dedup_days',
      `WEBHOOK_DEDUP_DAYS must be positive, got ${deps.dedupDays}`,
    );
  }
  const enqueueTimeoutMs = deps.enqueueTimeoutMs ?? DEFAULT_ENQUEUE_TIMEOUT_MS;
  const otherEventQueues = (name: QueueName) =>
    EVENT_QUEUES.filter((other) => other !== name).map((other) => deps.queues[other]);

  return async function plugin(app: FastifyInstance) {
    // The signature covers the exact bytes sent, so this plugin keeps every body as those bytes
    // and decodes and parses it itself after verifying. Removing the inherited parsers here only
    // affects this encapsulated context; the root JSON parser stays as it is.
    const parseJson = app.getDefaultJsonParser('error', 'error');
    app.removeAllContentTypeParsers();
    app.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => {
      done(null, body);
    });
    // Any Content-Type is accepted (the body is read as the bytes signed), also one Fastify
    // cannot parse (`json`, a list): it would answer 415 before this plugin saw the request.
    app.addHook('onRequest', async (request) => {
      if (request.headers['content-type'] !== undefined) {
        request.headers['content-type'] = 'application/octet-stream';
      }
    });

    app.setErrorHandler((error: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
      const status = error.statusCode ?? 500;
      if (status === 413) {
        // Not read, so not verified: no webhook id of its own is logged (as for a bad signature).
        request.log.warn({ error: 'body_too_large' }, 'webhook rejected');
        return sendError(
          reply,
          413,
          'body_too_large',
          `body must be at most ${request.routeOptions.bodyLimit} bytes`,
        );
      }
      if (status >= 400 && status < 500) {
        request.log.warn({ error: 'invalid_request', reason: error.message }, 'webhook rejected');
        return sendError(reply, status, 'invalid_request', error.message);
      }
      request.log.error({ err: error }, 'webhook intake failed');
      return sendError(reply, 500, 'internal', 'internal error');
    });

    app.post(WEBHOOKS_PATH, async (request, reply) => {
      const body = Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0);
      const now = deps.clock.now();
      const verified = verifySignature(signingKey, request, body, now);
      if (verified.kind === 'rejected') {
        request.log.warn({ error: verified.error }, 'webhook rejected');
        return sendError(reply, verified.status, verified.error, verified.message);
      }
      const webhookId = verified.id;
      const log = request.log.child({ webhookId });

      // Fastify's own JSON parser (synchronous) refuses __proto__ and constructor keys; a body
      // that is not UTF-8 is no JSON either.
      let json: { value: unknown } | undefined;
      const text = utf8Text(body);
      if (text !== undefined) {
        parseJson(request, text, (error, value) => {
          if (error === null) json = { value };
        });
      }
      if (json === undefined) {
        log.warn({ error: 'invalid_json' }, 'webhook rejected');
        const message =
          text === undefined
            ? NOT_UTF8_MESSAGE
            : parsesAsJson(text)
              ? FORBIDDEN_KEY_MESSAGE
              : 'body must be a JSON object {"type", "data"}';
        return sendError(reply, 400, 'invalid_json', message);
      }
      const event = parseEvent(json.value, verified.timestamp, now, deps.products);
      if (event.kind === 'rejected') {
        log.warn({ error: event.error }, 'webhook rejected');
        return sendError(reply, event.status, event.error, event.message);
      }

      const key = webhookDedupKey(webhookId);
      // This request's own claim: only it may release it.
      const claim = `${CLAIM_PENDING}:${randomUUID()}`;
      const release = () => deps.redis.eval(RELEASE_CLAIM, 1, key, claim);
      let sequence: number | null = null;
      let holder: string | null = null;
      try {
        // Claimed as "pending" for a short lease first: if this process dies before the job is
        // enqueued, the claim lapses and the producer's retry gets through instead of being
        // taken for a duplicate of an event that was never enqueued.
        const [claimed, value] = (await deps.redis.eval(
          CLAIM_AND_NUMBER,
          2,
          key,
          EVENT_SEQUENCE_KEY,
          claim,
          PENDING_CLAIM_SECONDS,
        )) as [0 | 1, number | string | null];
        if (claimed === 1) sequence = Number(value);
        else holder = value === null ? null : String(value);
      } catch (error) {
        if (!isRedisUnavailable(error)) throw error;
        // A claim that timed out may still be made once Redis answers: the release, sent on
        // the same connection, runs after it, so retries are not held for the whole lease.
        if (isRedisTimeout(error)) release().catch(() => {});
        log.warn({ err: error }, 'webhook intake unavailable: redis');
        return sendError(reply, 503, 'unavailable', 'storage unreachable, retry later');
      }
      if (sequence === null && holder === CLAIM_DONE) {
        log.info({ type: event.type }, 'webhook duplicate ignored');
        return reply.code(202).send({ id: webhookId });
      }
      if (sequence === null) {
        log.warn({ type: event.type }, 'webhook id being enqueued by another request');
        return sendError(
          reply,
          503,
          'in_progress',
          'this webhook id is being enqueued; retry shortly',
        );
      }

      const jobId = webhookJobId(webhookId);
      const jobData: EventJobData = {
        webhookId,
        type: event.type,
        data: event.data,
        occurredAt: event.occurredAt,
        receivedAt: now,
        sequence,
      };
      const queueName = queueForEvent[event.type];
      const queue = deps.queues[queueName];
      try {
        await withTimeout(
          enqueueOnce(queue, otherEventQueues(queueName), jobId, jobData, ttlSeconds, () =>
            queue.add(eventJobName(event.type, event.data), jobData, {
              ...defaultJobOptions,
              jobId,
            }),
          ),
          enqueueTimeoutMs,
          `enqueue to ${queueName}`,
        );
      } catch (error) {
        // Release the claim so the producer's retry is enqueued rather than taken as a duplicate.
        await release().catch((delError: unknown) => {
          // In an outage (the request answered 503) a warning, as every 503 is: it heals itself.
          const level = isRedisUnavailable(delError) ? 'warn' : 'error';
          log[level](
            { err: delError, key },
            `webhook id stays claimed after a failed enqueue: retries get in once the claim lapses (${PENDING_CLAIM_SECONDS} s)`,
          );
        });
        if (error instanceof WebhookIdInUse) {
          log.warn({ type: event.type, jobId }, 'webhook id reused while its earlier event runs');
          return sendError(
            reply,
            409,
            'webhook_id_in_use',
            'this webhook id names an earlier event still being handled; send this event with a new webhook id',
          );
        }
        log.warn({ err: error, queue: queueName }, 'webhook intake unavailable: enqueue');
        return sendError(reply, 503, 'unavailable', 'could not enqueue the event, retry later');
      }
      await deps.redis.set(key, CLAIM_DONE, 'EX', ttlSeconds).catch((error: unknown) => {
        // The job is enqueued; the pending claim lapses and a repeat finds the same job id.
        log.warn({ err: error, key }, 'could not mark the webhook id done');
      });
      log.info({ type: event.type, queue: queueName, jobId }, 'webhook accepted');
      return reply.code(202).send({ id: webhookId });
    });
  };
}
