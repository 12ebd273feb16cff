// The ops token guard: `Authorization: Bearer <token>`, or HTTP basic auth with it as password.
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { sendError } from '../http-errors.js';
import { utf8Header } from '../http-headers.js';

const sha256 = (value: string) => createHash('sha256').update(value).digest();

/** Compares digests, so neither the length nor the content of the token leaks through timing. */
function sameToken(given: string, expected: string): boolean {
  return timingSafeEqual(sha256(given), sha256(expected));
}

/** The token an Authorization header presents: `<scheme> <credentials>`, any spaces between. */
export function presentedToken(header: string | undefined): string | null {
  const match = /^(\S+)\s+(\S.*)$/.exec(header?.trim() ?? '');
  if (!match) return null;
  const [, scheme, value] = match as unknown as [string, string, string];
  if (scheme.toLowerCase() === 'bearer') return utf8Header(value) ?? value;
  if (scheme.toLowerCase() === 'basic') {
    const decoded = Buffer.from(value, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    return colon === -1 ? null : decoded.slice(colon + 1);
  }
  return null;
}

/**
 * Whether a browser sent this change from another site's page. A browser that has shown Bull
 * Board keeps its basic-auth login for the whole realm and sends it with any request to this
 * host, also a form that another site's page posts (`text/plain`, no preflight) to
 * `/ops/chains/<order>/cancel`. Browsers say where a request comes from in Sec-Fetch-Site, but
 * only to https and localhost addresses: over plain HTTP elsewhere, the Origin they send with
 * every change tells, against the Host (or X-Forwarded-Host, behind a proxy that rewrites the
 * Host). Other clients (curl, the CLI, scripts) send neither.
 */
function crossSiteChange(request: FastifyRequest): boolean {
  if (['GET', 'HEAD', 'OPTIONS'].includes(request.method)) return false;
  const site = request.headers['sec-fetch-site'];
  if (site !== undefined) return site === 'cross-site' || site === 'same-site';
  const origin = request.headers.origin;
  if (origin === undefined) return false;
  let from: string;
  try {
    from = new URL(origin).host.toLowerCase();
  } catch {
    return true; // `null` (a sandboxed page, a redirect across sites) or nonsense
  }
  const forwarded = request.headers['x-forwarded-host'];
  const hosts = [request.headers.host, typeof forwarded === 'string' ? forwarded : undefined];
  return !hosts.some((host) => host?.split(',')[0]?.trim().toLowerCase() === from);
}

/** An onRequest hook answering 401 (with a basic-auth challenge, so browsers ask) without the token. */
export function requireOpsToken(token: string) {
  // An empty token would let `Authorization: Basic Og==` (no user, no password) in.
  if (token === '') throw new Error('the ops token is empty');
  return async function opsAuth(request: FastifyRequest, reply: FastifyReply) {
    if (crossSiteChange(request)) {
      await sendError(
        reply,
        403,
        'cross_site_request',
        "a change sent from another site's page is refused (Sec-Fetch-Site, Origin); send it from this host",
      );
      return;
    }
    const given = presentedToken(request.headers.authorization);
    if (given !== null && given !== '' && sameToken(given, token)) return;
    reply.header('www-authenticate', 'Basic realm="billing ops", charset="UTF-8"');
    await sendError(
      reply,
      401,
      'unauthorized',
      'missing or invalid ops token (Authorization: Bearer <OPS_TOKEN>)',
    );
  };
}
