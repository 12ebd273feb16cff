// The error body of the ops API and webhook intake: `{ "error": code, "message": text }`.
// (The provisioning endpoint answers JSON strings instead, as the interface fixes.)
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';

export function sendError(reply: FastifyReply, status: number, error: string, message: string) {
  return reply.code(status).send({ error, message });
}

/** Why a body of another content type is refused: every API here reads JSON only. */
export const JSON_ONLY = 'Content-Type must be application/json';

/**
 * Answers what an API's own error handler does not recognise: a refusal of Fastify's (a body it
 * cannot parse) as `invalid_request`, its 415 (a form body: curl's default) saying what it takes
 * instead of only "Unsupported Media Type", and anything else as a 500 whose details go to the
 * log as `failed`.
 */
export function sendUnrecognisedError(
  error: FastifyError,
  request: FastifyRequest,
  reply: FastifyReply,
  failed: string,
) {
  const status = error.statusCode ?? 500;
  if (status === 415) return sendError(reply, 400, 'invalid_request', JSON_ONLY);
  // Fastify's own words name no field: say it as every other refusal of a body does.
  if (error.code === 'FST_ERR_CTP_INVALID_JSON_BODY') {
    return sendError(reply, 400, 'invalid_request', 'body: must be valid JSON');
  }
  if (error.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
    const limit = request.routeOptions.bodyLimit;
    return sendError(reply, 413, 'body_too_large', `body: must be at most ${limit} bytes`);
  }
  if (status < 500) return sendError(reply, status, 'invalid_request', error.message);
  request.log.error({ err: error }, failed);
  return sendError(reply, 500, 'internal', 'internal error');
}
