// The error body of the ops API and webhook intake: `{ "error": code, "message": text }`.
// (The provisioning endpoint answers JSON strings instead, as the interface fixes.)
import type { FastifyReply } from 'fastify';

export function sendError(reply: FastifyReply, status: number, error: string, message: string) {
  return reply.code(status).send({ error, message });
}

/** Why a body of another content type is refused: every API here reads JSON only. */
export const JSON_ONLY = 'Content-Type must be application/json';
