// The provisioning endpoint: `{base_url}` = /provisioning, GET (or POST) with {method, params}.
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { RefusalError, TransientError } from '../errors.js';
import { JSON_ONLY } from '../http-errors.js';
import { isRedisTimeout, isRedisUnavailable } from '../redis/connection.js';
import { pathOf } from '../request-target.js';
import { describeIssues } from '../validation.js';
import type { ProvisioningCore } from './operations.js';
import type { PartnerDirectory } from './partners.js';
import type { Partner } from './records.js';

export const PROVISIONING_PATH = '/provisioning';

const envelope = z.strictObject({
  method: z.string('must be a string naming the operation').min(1, 'must not be empty'),
  params: z.record(z.string(), z.unknown(), 'must be an object').optional(),
});

/** Every error body of the provisioning interface is a JSON string (DESIGN §3). */
function sendError(reply: FastifyReply, status: number, message: string) {
  return reply.code(status).type('application/json; charset=utf-8').send(JSON.stringify(message));
}

export { sendError as sendProvisioningError };

/** The refusal of an HTTP method the address does not take. */
function methodNotAllowed(method: string): string {
  return `HTTP method ${method} is not supported here: use GET (or POST) with a JSON body`;
}

/** Whether `url` is the provisioning address (with or without its trailing slash). */
function isProvisioningAddress(url: string): boolean {
  const path = pathOf(url);
  return path === PROVISIONING_PATH || path === `${PROVISIONING_PATH}/`;
}

/** Whether `url` is the provisioning address or below it. */
export function isProvisioningPath(url: string): boolean {
  return isProvisioningAddress(url) || pathOf(url).startsWith(`${PROVISIONING_PATH}/`);
}

class Unauthorized extends Error {}

/** The caller's partner, by its key: the first check of every request (401 without one). */
async function callerOf(partners: PartnerDirectory, request: FastifyRequest): Promise<Partner> {
  const key = request.headers['x-api-key'];
  if (typeof key !== 'string' || key === '') throw new Unauthorized('missing x-api-key header');
  const partner = await partners.authenticate(key);
  if (!partner) throw new Unauthorized('invalid API key');
  return partner;
}

const STORAGE_UNREACHABLE = 'service unavailable: storage unreachable, retry later';

/**
 * Sends `answer` (status, message) for a request no route of the interface takes, once its key
 * is checked as every route's is: a caller without a valid key gets 401, not what its request
 * got wrong.
 */
export async function answerAfterKeyCheck(
  partners: PartnerDirectory,
  request: FastifyRequest,
  reply: FastifyReply,
  [status, code, message]: readonly [number, string, string],
) {
  try {
    await callerOf(partners, request);
  } catch (error) {
    if (error instanceof Unauthorized) return sendError(reply, 401, error.message);
    if (isRedisUnavailable(error)) return sendError(reply, 503, STORAGE_UNREACHABLE);
    request.log.error({ err: error }, 'provisioning failed');
    return sendError(reply, 500, 'internal error');
  }
  // A 400 is a refusal the caller caused, logged as the routes log theirs.
  if (status === 400) request.log.info({ code, refusal: message }, 'provisioning refused');
  return sendError(reply, status, message);
}

export function provisioningRoutes(deps: { core: ProvisioningCore; partners: PartnerDirectory }) {
  return async function plugin(app: FastifyInstance) {
    app.setErrorHandler((error: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
      // Every refusal of the interface is logged the same way, with a stable code.
      const refused = (code: string, status: number, message: string) => {
        request.log.info({ code, refusal: message }, 'provisioning refused');
        return sendError(reply, status, message);
      };
      if (error instanceof Unauthorized) return sendError(reply, 401, error.message);
      if (error instanceof RefusalError) return refused(error.code, 400, error.message);
      if (error instanceof TransientError) {
        request.log.warn({ code: error.code, err: error }, 'provisioning busy');
        return sendError(reply, 503, `service unavailable: ${error.message}`);
      }
      if (isRedisUnavailable(error)) {
        request.log.warn({ err: error }, 'provisioning unavailable');
        // A write that timed out may have been applied all the same: say so, since createUser
        // (unlike the creations with a caller id) cannot simply be repeated.
        return sendError(
          reply,
          503,
          isRedisTimeout(error)
            ? 'service unavailable: storage did not answer in time, and the call may have been applied; retry later (a creation with the same caller id answers the stored object; look a user up by email before creating it again)'
            : STORAGE_UNREACHABLE,
        );
      }
      const status = error.statusCode ?? 500;
      // Fastify's own refusals of the body (too large, not JSON by type or by syntax) are the
      // interface's refusals too, with a code of ours.
      if (status === 413) {
        return refused('body_too_large', 413, 'request body too large (limit: 1 MiB)');
      }
      if (status === 415) return refused('invalid_body', 400, JSON_ONLY);
      if (status >= 400 && status < 500) return refused('invalid_body', 400, error.message);
      request.log.error({ err: error }, 'provisioning failed');
      return sendError(reply, 500, 'internal error');
    });

    // The key first, before the body is read: a caller without a valid key learns nothing
    // about its request (401), however malformed the body is.
    const callers = new WeakMap<FastifyRequest, Partner>();
    app.addHook('onRequest', async (request) => {
      callers.set(request, await callerOf(deps.partners, request));
    });

    // `{base_url}` configured with a trailing slash reaches the same endpoint.
    const urls = [PROVISIONING_PATH, `${PROVISIONING_PATH}/`];
    for (const url of urls) {
      app.route({
        method: ['PUT', 'DELETE', 'PATCH', 'HEAD', 'OPTIONS'],
        url,
        handler: async (request) => {
          throw new RefusalError('method_not_allowed', methodNotAllowed(request.method));
        },
      });

      app.route({
        method: ['GET', 'POST'],
        url,
        handler: async (request, reply) => {
          const partner = callers.get(request);
          if (!partner) throw new Unauthorized('invalid API key');
          if (request.body === undefined || request.body === null) {
            throw new RefusalError(
              'invalid_body',
              'body must be a JSON object {"method", "params"}',
            );
          }
          const body = envelope.safeParse(request.body, { reportInput: true });
          if (!body.success) throw new RefusalError('invalid_body', describeIssues(body.error));

          request.log.debug({ partner: partner.id, method: body.data.method }, 'provisioning call');
          const result = await deps.core.invoke(partner, body.data.method, body.data.params ?? {});
          return reply.type('application/json; charset=utf-8').send(JSON.stringify(result));
        },
      });
    }
  };
}

/**
 * What no route of the interface takes, answered as its errors are (JSON strings), after the key
 * check: an HTTP method the address has no route for (400, as for the others), or a path below
 * it (404).
 */
export function provisioningNotFound(
  partners: PartnerDirectory,
  request: FastifyRequest,
  reply: FastifyReply,
) {
  const answer: [number, string, string] = isProvisioningAddress(request.url)
    ? [400, 'method_not_allowed', methodNotAllowed(request.method)]
    : [
        404,
        'no_such_path',
        `no such path: ${request.method} ${pathOf(request.url)} (the interface is ${PROVISIONING_PATH})`,
      ];
  return answerAfterKeyCheck(partners, request, reply, answer);
}
