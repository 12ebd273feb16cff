// The ops token guard: `Authorization: Bearer <token>`, or HTTP basic auth with it as password.
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { sendError } from '../http-errors.js';

const sha256 = (value: string) => createHash('sha256').update(value).digest();

/** Compares digests, so neither the length nor the content of the token leaks through timing. */
function sameToken(given: string, expected: string): boolean {
  return timingSafeEqual(sha256(given), sha256(expected));
}

export function presentedToken(header: string | undefined): string | null {
  if (!header) return null;
  const [scheme, value] = header.split(' ', 2);
  if (!value) return null;
  if (scheme?.toLowerCase() === 'bearer') return value.trim();
  if (scheme?.toLowerCase() === 'basic') {
    const decoded = Buffer.from(value, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    return colon === -1 ? null : decoded.slice(colon + 1);
  }
  return null;
}

/** An onRequest hook answering 401 (with a basic-auth challenge, so browsers ask) without the token. */
export function requireOpsToken(token: string) {
  return async function opsAuth(request: FastifyRequest, reply: FastifyReply) {
    const given = presentedToken(request.headers.authorization);
    if (given !== null && sameToken(given, token)) return;
    reply.header('www-authenticate', 'Basic realm="billing ops", charset="UTF-8"');
    await sendError(
      reply,
      401,
      'unauthorized',
      'missing or invalid ops token (Authorization: Bearer <OPS_TOKEN>)',
    );
  };
}
