// Assembles the HTTP server: provisioning endpoint, webhooks, ops API, Bull Board, metrics and
// health. It does not listen; main does.

import type { Socket } from 'node:net';
import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { errorHandler as boardErrorAnswer } from '@bull-board/api/dist/handlers/error.js';
import { FastifyAdapter } from '@bull-board/fastify';
import type { Queue } from 'bullmq';
import Fastify, {
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify';
import { JSON_ONLY, sendError, sendUnrecognisedError } from './http-errors.js';
import { type WebhookDeps, webhookRoutes } from './intake/webhooks.js';
import { FORBIDDEN_KEY_MESSAGE, NOT_UTF8_MESSAGE, parsesAsJson, utf8Text } from './json-body.js';
import { hideQuerySecrets, type Logger } from './logger.js';
import type { Metrics } from './metrics.js';
import { requireOpsToken } from './ops/auth.js';
import { type OpsDeps, opsRoutes } from './ops/routes.js';
import {
  answerAfterKeyCheck,
  isProvisioningPath,
  provisioningNotFound,
  provisioningRoutes,
  sendProvisioningError,
} from './provisioning/http.js';
import type { ProvisioningCore } from './provisioning/operations.js';
import type { PartnerDirectory } from './provisioning/partners.js';
import { isRedisUnavailable } from './redis/connection.js';
import { pathOf } from './request-target.js';

export const BODY_LIMIT_BYTES = 1024 * 1024;
export const BOARD_PATH = '/admin/queues';

export interface Readiness {
  redis(): Promise<boolean>;
  workers(): boolean | null;
}

/** Each part is optional, so roles and tests assemble only what they run. */
export interface AppDeps {
  log: Logger;
  provisioning?: { core: ProvisioningCore; partners: PartnerDirectory };
  webhooks?: WebhookDeps;
  ops?: OpsDeps;
  board?: { queues: readonly Queue[]; token: string };
  metrics?: Metrics;
  readiness?: Readiness;
  /** How long a request may take to arrive whole, headers and body (ms; REQUEST_TIMEOUT_MS). */
  requestTimeoutMs?: number;
}

/**
 * How long a request may take to arrive whole (ms). Fastify's default (none) would let a client
 * that stops halfway through a body hold its connection forever; 30 s carries the largest body
 * (1 MiB) over a link of 35 KB/s.
 */
export const REQUEST_TIMEOUT_MS = 30_000;
/** How often Node looks for requests past their time (ms): its default of 30 s doubles the wait. */
const MAX_TIMEOUT_CHECK_INTERVAL_MS = 5_000;

/** What Node's HTTP parser refuses before Fastify sees a request: status, reason, message. */
function unparsedAnswer(code: string | undefined): [number, string, string, string] {
  if (code === 'HPE_HEADER_OVERFLOW') {
    return [
      431,
      'Request Header Fields Too Large',
      'headers_too_large',
      'request headers too large',
    ];
  }
  if (code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    return [408, 'Request Timeout', 'request_timeout', 'the request did not arrive in time'];
  }
  return [400, 'Bad Request', 'invalid_request', 'malformed HTTP request'];
}

/** The methods counted by name in the metrics of unparsed requests; any other is `other`. */
const COUNTED_METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);

/**
 * A request Node could not parse (headers over 16 KiB, a broken request line, one that did not
 * arrive in time) gets its error in the shape of the API it was sent to, as far as its bytes
 * tell: `{error, message}` for a request line naming a path outside /provisioning, else a JSON
 * string (the spec's error bodies there). Fastify's default answers an object everywhere. No
 * route saw it, so no hook counts it: it is counted here, under the route `unparsed`.
 */
function unparsedRequestAnswerer(metrics: Metrics | undefined) {
  return (error: Error & { code?: string; rawPacket?: unknown }, socket: Socket) => {
    if (error.code === 'ECONNRESET' || socket.destroyed) return;
    const [status, reason, code, message] = unparsedAnswer(error.code);
    const raw = error.rawPacket;
    const line = Buffer.isBuffer(raw) ? raw.subarray(0, 512).toString('latin1') : '';
    // The packet holds the request line only when it came in the same read as the error;
    // without it, the JSON string (the spec's shape) is still JSON with the message for any
    // client.
    const [, method, target] = /^([A-Z]+) (?:https?:\/\/[^/\s]*)?(\/\S*) HTTP\//.exec(line) ?? [];
    const elsewhere = target !== undefined && !isProvisioningPath(target);
    const body = JSON.stringify(elsewhere ? { error: code, message } : message);
    if (socket.writable) {
      socket.write(
        `HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json; charset=utf-8\r\n` +
          `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
      );
    }
    metrics?.requests.inc({
      route: 'unparsed',
      method: method === undefined ? 'unknown' : COUNTED_METHODS.has(method) ? method : 'other',
      status: String(status),
    });
    socket.destroy(error);
  };
}

/**
 * Counts and logs, once answered, a request Fastify refused before any route: it runs no hooks
 * for it, so neither the request counter nor its `request completed` line would see it.
 */
function countedAndLoggedUnrouted(
  request: FastifyRequest,
  reply: FastifyReply,
  metrics: Metrics | undefined,
): void {
  reply.raw.once('finish', () => {
    const status = reply.raw.statusCode;
    metrics?.requests.inc({
      route: 'unparsed',
      method: COUNTED_METHODS.has(request.method) ? request.method : 'other',
      status: String(status),
    });
    // Without responseTime: Fastify starts no reply timer for these.
    request.log.info({ res: { statusCode: status } }, 'request completed');
  });
}

export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const requestTimeout = deps.requestTimeoutMs ?? REQUEST_TIMEOUT_MS;
  const app = Fastify({
    loggerInstance: deps.log as FastifyBaseLogger,
    bodyLimit: BODY_LIMIT_BYTES,
    // Past it, Node answers 408 (unparsedRequestAnswerer) and closes the connection. Node reads
    // it when the server is made (Fastify's own setting, set on the server after, is not seen).
    requestTimeout,
    http: {
      requestTimeout,
      connectionsCheckingInterval: Math.min(MAX_TIMEOUT_CHECK_INTERVAL_MS, requestTimeout),
    },
    exposeHeadRoutes: false,
    // Order and customer ids run to 128 characters, more once URL-encoded (Fastify's default
    // of 100 would answer a long id 414); the routes' own schemas bound them, and name the
    // field. As long as any request line Node takes (its 16 KiB header limit answers 431), so
    // the router never refuses a long id in words that name none.
    routerOptions: { maxParamLength: 16 * 1024 },
    // What Fastify refuses before any route (a URL it cannot decode) answers in the shape of
    // the API the path falls under, like every other error.
    frameworkErrors: (error, request, reply) => {
      countedAndLoggedUnrouted(request, reply, deps.metrics);
      // Fastify's words quote the whole target: its query may hold a credential, which the
      // refusal's log line would keep, so they quote its path alone.
      const message = error.message.split(request.url).join(pathOf(request.url));
      if (isProvisioningPath(request.url)) {
        if (!deps.provisioning) return sendProvisioningError(reply, 400, message);
        const answer = [400, 'bad_url', message] as const;
        void answerAfterKeyCheck(deps.provisioning.partners, request, reply, answer);
        return;
      }
      return sendError(reply, 400, 'invalid_request', message);
    },
    clientErrorHandler: unparsedRequestAnswerer(deps.metrics),
  });
  // The spec's calls are GETs with a JSON body; Fastify ignores GET bodies unless told.
  app.addHttpMethod('GET', { hasBody: true, overrideExisting: true });
  // Bodies are JSON only: Fastify's own text/plain parser would hand a route the raw text. An
  // empty one is "no body", as for JSON (fetch sends text/plain with an empty string).
  app.removeContentTypeParser('text/plain');
  app.addContentTypeParser('text/plain', { parseAs: 'string' }, (_request, body, done) => {
    if (body.toString().trim() === '') {
      done(null, undefined);
      return;
    }
    done(Object.assign(new Error(JSON_ONLY), { statusCode: 415 }));
  });
  // An empty body with a JSON content type is "no body", so health and ops GETs still work.
  const jsonParser = app.getDefaultJsonParser('error', 'error');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    const text = utf8Text(body as Buffer);
    if (text === undefined) {
      done(Object.assign(new Error(NOT_UTF8_MESSAGE), { statusCode: 400 }));
      return;
    }
    if (text.trim() === '') {
      done(null, undefined);
      return;
    }
    jsonParser(request, text, (error, value) => {
      // Fastify says "not valid JSON" also for valid JSON holding a key it refuses.
      done(error && parsesAsJson(text) ? forbiddenKeyError() : error, value);
    });
  });

  const { metrics } = deps;
  if (metrics) {
    app.addHook('onResponse', async (request, reply) => {
      const route = request.routeOptions.url ?? 'unmatched';
      metrics.requests.inc({ route, method: request.method, status: String(reply.statusCode) });
      metrics.latency.observe({ route }, reply.elapsedTime / 1000);
    });
    app.get('/metrics', async (_request, reply) =>
      reply.type(metrics.registry.contentType).send(await metrics.registry.metrics()),
    );
  }

  // What the routes without an error handler of their own refuse (a body of /healthz, /readyz
  // or /metrics it cannot parse) answers {error, message} too, not in Fastify's own shape.
  // Below the provisioning address, no route took the request (the interface's routes have
  // their own handler): it is the path that is wrong, answered as the interface answers it.
  app.setErrorHandler((error: FastifyError, request, reply) => {
    if (deps.provisioning && isProvisioningPath(request.url)) {
      return provisioningNotFound(deps.provisioning.partners, request, reply);
    }
    return sendUnrecognisedError(error, request, reply, 'request failed');
  });

  // HEAD too: load balancers often check health with it.
  app.get('/healthz', { exposeHeadRoute: true }, async () => ({ status: 'ok' }));
  app.get('/readyz', { exposeHeadRoute: true }, async (_request, reply) => {
    const redis = deps.readiness ? await deps.readiness.redis() : true;
    const workers = deps.readiness ? deps.readiness.workers() : null;
    const ready = redis && workers !== false;
    return reply
      .code(ready ? 200 : 503)
      .send({ status: ready ? 'ready' : 'not ready', redis, workers });
  });

  // Unknown paths answer in the shape of the API they fall under: the provisioning interface's
  // errors are JSON strings (DESIGN §3), everything else's {error, message} objects.
  app.setNotFoundHandler((request, reply) => {
    if (deps.provisioning && isProvisioningPath(request.url)) {
      return provisioningNotFound(deps.provisioning.partners, request, reply);
    }
    return sendError(
      reply,
      404,
      'not_found',
      `no such path: ${request.method} ${pathOf(request.url)}`,
    );
  });
  if (deps.provisioning) await app.register(provisioningRoutes(deps.provisioning));
  if (deps.webhooks) await app.register(webhookRoutes(deps.webhooks));
  if (deps.ops) await app.register(opsRoutes(deps.ops));
  if (deps.board) await registerBoard(app, deps.board);
  return app;
}

function forbiddenKeyError(): Error {
  return Object.assign(new Error(FORBIDDEN_KEY_MESSAGE), { statusCode: 400 });
}

/** Bull Board over every queue, behind the ops token (bearer, or basic auth with it as password). */
async function registerBoard(
  app: FastifyInstance,
  board: { queues: readonly Queue[]; token: string },
) {
  const serverAdapter = new FastifyAdapter();
  serverAdapter.setBasePath(BOARD_PATH);
  createBullBoard({
    queues: board.queues.map((queue) => new BullMQAdapter(queue, { readOnlyMode: false })),
    serverAdapter,
    options: { uiConfig: { boardTitle: 'Billing queues' } },
  });
  // Bull Board answers every failure 500; Redis away is a 503, as on every other route, for a
  // monitor to tell an outage from a fault. (Its status type lists no 503.)
  serverAdapter.setErrorHandler((error) => {
    const answer = boardErrorAnswer(error);
    if (!isRedisUnavailable(error)) return answer;
    return { ...answer, status: 503 as unknown as typeof answer.status };
  });
  await app.register(async (scope) => {
    scope.addHook('onRequest', requireOpsToken(board.token));
    // Its buttons change queues (retry, clean, obliterate): no other site may frame it and lead
    // a browser that holds its login into clicking them.
    scope.addHook('onSend', async (_request, reply) => {
      reply.header('x-frame-options', 'DENY');
      reply.header('content-security-policy', "frame-ancestors 'none'");
    });
    // Bull Board answers its failures itself (500 with the message, 503 for a Redis outage)
    // and logs nothing; an operator needs them in the log beside the rest.
    scope.addHook('onError', async (request, _reply, error) => {
      if ((error.statusCode ?? 500) < 500) return;
      const context = { err: error, url: hideQuerySecrets(request.url) };
      // A 503 (Redis away) is a warning, as on every other route; anything else a fault.
      if (isRedisUnavailable(error)) request.log.warn(context, 'Bull Board request failed for now');
      else request.log.error(context, 'Bull Board request failed');
    });
    await scope.register(serverAdapter.registerPlugin(), { prefix: BOARD_PATH });
  });
}
