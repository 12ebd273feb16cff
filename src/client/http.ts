// A remote provisioning service at `{base_url}` as a ProvisioningClient, over one undici Pool.
import { Pool } from 'undici';
import { ConfigError, MalformedAnswerError, RefusalError, TransientError } from '../errors.js';
import { parsesAsJson } from '../json-body.js';
import type { Variant } from '../provisioning/schemas.js';
import { settlesWithin } from '../settles-within.js';
import { clientOver, type Send } from './client-over.js';
import type { ProvisioningClient } from './provisioning-client.js';

export interface HttpClientOptions {
  /** `{base_url}` of the provisioning interface, e.g. `http://host:3000/provisioning`. */
  url: string;
  apiKey: string;
  /** The variant of the partner account that `apiKey` belongs to. */
  variant: Variant;
  /** Whether the `parent` and `licenses` extensions are sent; default false (a remote may lack them). */
  extensions?: boolean;
  /** Milliseconds one call may take in all: connecting, the headers and the whole body. */
  timeoutMs?: number;
  /**
   * Keep-alive connections to the origin, at most; default no limit: the calls in flight are
   * bounded by the workers' concurrency, and a call queued behind a full pool would spend its
   * deadline waiting and be reported as the provider's timeout.
   */
  connections?: number;
}

/**
 * Failures of the connection's security: the service's certificate is not trusted here. Nothing
 * a retry changes; an operator must fix the CA (NODE_EXTRA_CA_CERTS) or the URL.
 */
const TLS_CODES = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_REVOKED',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);

/**
 * Failures of the TLS handshake itself: plain HTTP answering on the URL's https port, a client
 * certificate the service requires, a TLS version or cipher it refuses. A retry meets the same.
 */
const HANDSHAKE_CODES = new Set([
  'ERR_SSL_WRONG_VERSION_NUMBER',
  'ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED',
  'ERR_SSL_TLSV1_ALERT_PROTOCOL_VERSION',
  'ERR_SSL_UNSUPPORTED_PROTOCOL',
  'ERR_SSL_NO_PROTOCOLS_AVAILABLE',
  'ERR_SSL_SSLV3_ALERT_HANDSHAKE_FAILURE',
]);

const EXCERPT_CHARS = 500;

/**
 * The shortest API key masked in quoted answers: a shorter one would be found inside ordinary
 * words and garble every message, and protects little anyway.
 */
const MIN_MASKED_KEY_CHARS = 8;

/**
 * The most of an answer read, in bytes: the interface's answers are small objects, so anything
 * larger is not one of them (a proxy's page, a stuck stream) and must not fill the worker's memory.
 */
export const MAX_ANSWER_BYTES = 1024 * 1024;

/** `text` matched in any letter case, as a regular expression (`&AMP;` is `&amp;` in HTML). */
const anyCase = (text: string) =>
  [...text]
    .map((c) => (/[a-z]/i.test(c) ? `[${c.toLowerCase()}${c.toUpperCase()}]` : escapeRegExp(c)))
    .join('');

/**
 * The ways an encoder may write character `c`, as regular expressions: as is, escaped in JSON,
 * as an HTML character reference (decimal or hexadecimal, zero-padded or not, hex digits in
 * either case: PHP writes `&#039;`, WordPress `&#038;`), or by its HTML name.
 */
function encodings(c: string): string[] {
  const forms = [escapeRegExp(c)];
  if (/[A-Za-z0-9]/.test(c)) return forms;
  const code = c.charCodeAt(0);
  const hex = code.toString(16);
  // JSON: \u0026 with hex digits in either case (Go escapes & < >), and the short escapes.
  forms.push(`\\\\u${anyCase(hex.padStart(4, '0'))}`);
  if (c === '"' || c === '\\' || c === '/') forms.push(escapeRegExp(`\\${c}`));
  forms.push(`&#0*${code};`, `&#[xX]0*${anyCase(hex)};`);
  const named: Record<string, string> = {
    '&': '&amp;',
    '<': '&lt;',
    '>': '&gt;',
    '"': '&quot;',
    "'": '&apos;',
  };
  if (named[c]) forms.push(anyCase(named[c]));
  return forms;
}

const escapeRegExp = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * Hides `apiKey` in an answer's text wherever the service echoes it: as sent, escaped inside a
 * JSON string or in an HTML page, each character in any of the ways encoders write it. The text
 * is masked as read, before anything decodes or quotes it, so no error built from it (a
 * refusal, a shape check quoting a value, an answer about another id) can carry the key into a
 * log, a job's failure or a chain's history.
 */
export function keyMask(apiKey: string): (text: string) => string {
  if (apiKey.length < MIN_MASKED_KEY_CHARS) return (text) => text;
  const pattern = [...apiKey].map((c) => `(?:${encodings(c).join('|')})`).join('');
  const key = new RegExp(pattern, 'g');
  return (text) => text.replace(key, '[redacted]');
}

function excerpt(text: string): string {
  const trimmed = text.trim();
  return trimmed.length > EXCERPT_CHARS ? `${trimmed.slice(0, EXCERPT_CHARS - 3)}...` : trimmed;
}

/** A URL as messages show it: without its user part, query or fragment, which may carry a key. */
function shownUrl(url: string): string {
  // The user part runs to the last `@` (a password may hold a raw `/` or `@`), also in an
  // address without its scheme (`//user:pw@host/`); a path's own `@` hides the host, no more.
  return excerpt(
    url.replace(/[?#][\s\S]*$/, '').replace(/^((?:[a-z][a-z0-9+.-]*:)?\/\/)[\s\S]*@/i, '$1'),
  );
}

/** The code of a network error; a failed dual-stack connect is an AggregateError of attempts. */
function errorCode(error: unknown): string | undefined {
  if (!(error instanceof Error)) return undefined;
  const code = (error as NodeJS.ErrnoException).code;
  if (typeof code === 'string' && code !== '') return code;
  if (error instanceof AggregateError) return errorCode(error.errors[0]);
  return undefined;
}

/** The interface's error body, a JSON string, or null when the body is anything else. */
function interfaceError(body: string): string | null {
  try {
    const value: unknown = JSON.parse(body);
    return typeof value === 'string' ? value : null;
  } catch {
    return null;
  }
}

/**
 * A body read up to MAX_ANSWER_BYTES; `whole` is false when the rest was dropped unread. A UTF-8
 * byte order mark (some frameworks write one before JSON) is not part of the text.
 */
async function readAnswer(body: AsyncIterable<Buffer> & { destroy(): unknown }) {
  const text = (chunks: Buffer[]) =>
    Buffer.concat(chunks)
      .toString('utf8')
      .replace(/^\uFEFF/, '');
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    const room = MAX_ANSWER_BYTES - size;
    if (chunk.length > room) {
      chunks.push(chunk.subarray(0, room));
      // The socket is closed with the body: the rest never reaches this process.
      body.destroy();
      return { text: text(chunks), whole: false };
    }
    chunks.push(chunk);
    size += chunk.length;
  }
  return { text: text(chunks), whole: true };
}

/** RFC 9110's three forms of an HTTP-date; the third, asctime, names no zone but means GMT. */
const IMF_FIXDATE = /^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/;
const RFC_850_DATE = /^[A-Z][a-z]+day, \d{2}-[A-Z][a-z]{2}-\d{2} \d{2}:\d{2}:\d{2} GMT$/;
const ASCTIME_DATE = /^[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4}$/;

/** An HTTP-date in ms since the epoch, or NaN: Date.parse alone takes '1.5' or 'Sun 5' for dates. */
function httpDate(value: string | undefined): number {
  if (value === undefined) return Number.NaN;
  if (IMF_FIXDATE.test(value) || RFC_850_DATE.test(value)) return Date.parse(value);
  if (ASCTIME_DATE.test(value)) return Date.parse(`${value} GMT`);
  return Number.NaN;
}

/**
 * The wait an answer asks for in its Retry-After (RFC 9110 §10.2.3), in ms, or undefined: a number
 * of seconds, or a date read against the answer's own Date header (the service's clock, so that
 * neither clock's drift counts; without a Date header a date cannot be read and is ignored).
 */
export function retryAfterMs(
  retryAfter: string | undefined,
  date: string | undefined,
): number | undefined {
  const value = retryAfter?.trim();
  if (value === undefined || value === '') return undefined;
  if (/^\d+$/.test(value)) return Number(value) * 1000;
  const until = httpDate(value);
  const sent = httpDate(date?.trim());
  if (Number.isNaN(until) || Number.isNaN(sent)) return undefined;
  return Math.max(0, until - sent);
}

/** The answer's headers that classifying it reads. */
interface AnswerHeaders {
  location: string | undefined;
  retryAfter: string | undefined;
  date: string | undefined;
}

function classifyStatus(
  method: string,
  status: number,
  answer: { text: string; whole: boolean },
  headers: AnswerHeaders,
  reads: 'answer' | 'status',
): unknown {
  const { text: body, whole } = answer;
  if (status === 200) {
    // A change's answer is its success, whatever JSON it carries (or none); a page is not one
    // (a maintenance page, a catch-all at a wrong URL): nothing was changed there.
    if (reads === 'status' && whole && (body.trim() === '' || parsesAsJson(body))) return true;
    if (!whole) {
      throw new MalformedAnswerError(
        `provisioning ${method} answered 200 with a body larger than ${MAX_ANSWER_BYTES} bytes: not an answer of the interface`,
        { method },
      );
    }
    try {
      return JSON.parse(body);
    } catch {
      throw new MalformedAnswerError(
        `provisioning ${method} answered 200 with a body that is not JSON: ${JSON.stringify(excerpt(body))}`,
        { method },
      );
    }
  }
  const details = { method, status };
  // The interface refuses with 400 and nothing else (spec, Errors): only a 400 is the service's
  // "no" to this call. Another status comes from whatever stands in front of it (a gateway, a
  // deploy, a wrong path) and says nothing about the order: it is retried, never recorded as a
  // refusal that would flag a chain.
  // A 400 whose body is not the interface's JSON string is not the service's answer either (a
  // gateway refusing plain HTTP on its HTTPS port, a cloud front door's "missing token"): a
  // refusal would end the work for good, so it is a configuration to fix and is retried.
  if (status === 400) {
    const refusal = whole ? interfaceError(body) : null;
    if (refusal !== null) throw new RefusalError('provisioning_refused', excerpt(refusal), details);
    throw new ConfigError(
      'provisioning_unexpected_answer',
      `provisioning ${method} answered 400 with a body that is not the interface's (a JSON string): ${JSON.stringify(excerpt(body))}: something other than the provisioning service answered; check PROVISIONING_URL`,
      details,
    );
  }
  // undici follows no redirect, and a retry meets the same one: the URL needs fixing.
  if (status >= 300 && status < 400) {
    throw new ConfigError(
      'provisioning_redirected',
      `provisioning ${method} answered ${status}, a redirect${headers.location ? ` to ${shownUrl(headers.location)}` : ''}: set PROVISIONING_URL to where the service answers`,
      details,
    );
  }
  if (status === 401 || status === 403) {
    // The body is not quoted: nothing the service says about a key belongs in a log.
    throw new ConfigError(
      'provisioning_unauthorized',
      `the provisioning service refused the API key (${status}): check PROVISIONING_API_KEY`,
      details,
    );
  }
  // A 429 or 503 may say when to come back: the job's retry waits at least that long
  // (src/retry-policy.ts), so a service shedding load is not asked again sooner.
  const waitMs = retryAfterMs(headers.retryAfter, headers.date);
  const asking = waitMs === undefined ? '' : `, asking to retry in ${Math.ceil(waitMs / 1000)} s`;
  throw new TransientError(
    'provisioning_unavailable',
    `provisioning ${method} answered ${status}${asking}: ${excerpt(interfaceError(body) ?? body)}`,
    waitMs === undefined ? details : { ...details, retryAfterMs: waitMs },
  );
}

/** Whether a request failed because its whole-call deadline passed (AbortSignal.timeout). */
function timedOut(error: unknown): boolean {
  return error instanceof Error && (error.name === 'TimeoutError' || error.name === 'AbortError');
}

/** How long close() lets requests in flight finish before it aborts them (ms). */
const CLOSE_GRACE_MS = 1_000;

export function httpClient(opts: HttpClientOptions): ProvisioningClient {
  const target = new URL(opts.url);
  const path = `${target.pathname}${target.search}`;
  const shownTarget = shownUrl(`${target.origin}${target.pathname}`);
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const pool = new Pool(target.origin, {
    connections: opts.connections ?? null,
    connect: { timeout: timeoutMs },
  });
  let closed = false;
  // Quoted answers go into job failures, logs and a chain's history: a service (or a proxy's
  // debug page) that echoes the request's headers must not put the key there.
  const masked = keyMask(opts.apiKey);
  const maskedOrUndefined = (text: string | undefined) => text && masked(text);

  const send: Send = async (method, params, reads = 'answer') => {
    let status: number;
    let body: { text: string; whole: boolean };
    let headers: AnswerHeaders;
    try {
      const res = await pool.request({
        method: 'GET',
        path,
        headers: { 'content-type': 'application/json', 'x-api-key': opts.apiKey },
        body: JSON.stringify({ method, params }),
        // The service reads a GET's body (the interface's transport), so its connection stays
        // in the pool: undici closes one after a GET with a body unless told so.
        reset: false,
        // One deadline for the whole call: connecting (anew when every connection is busy), the
        // headers and a body that trickles in (undici's own timeouts run per step and per chunk).
        signal: AbortSignal.timeout(timeoutMs),
      });
      status = res.statusCode;
      const single = (name: string) => {
        const value = res.headers[name];
        return typeof value === 'string' ? value : undefined;
      };
      headers = {
        // Masked as the body is: a redirect may echo the key in its path or user part.
        location: maskedOrUndefined(single('location')),
        retryAfter: single('retry-after'),
        date: single('date'),
      };
      // Read every body, errors included: an unread body holds its keep-alive socket.
      body = await readAnswer(res.body);
    } catch (error) {
      if (timedOut(error)) {
        throw new TransientError(
          'provisioning_unavailable',
          `provisioning ${method} at ${shownTarget} failed: no whole answer within ${timeoutMs} ms`,
          { method, code: 'TIMEOUT' },
          { cause: error },
        );
      }
      const code = errorCode(error) ?? (error instanceof Error ? error.name : 'UNKNOWN');
      const reason = error instanceof Error && error.message !== '' ? error.message : code;
      const failed = `provisioning ${method} at ${shownTarget} failed: ${reason} (${code})`;
      if (TLS_CODES.has(code)) {
        throw new ConfigError(
          'provisioning_tls',
          `${failed}: the service's certificate is not trusted here (check PROVISIONING_URL, or add its CA with NODE_EXTRA_CA_CERTS)`,
          { method, code },
          { cause: error },
        );
      }
      if (HANDSHAKE_CODES.has(code)) {
        throw new ConfigError(
          'provisioning_tls',
          `${failed}: the TLS handshake with the service failed (plain HTTP on an https URL, a client certificate it requires, a TLS version it refuses): check PROVISIONING_URL`,
          { method, code },
          { cause: error },
        );
      }
      if (code === 'UND_ERR_INVALID_ARG') {
        // The request could not be sent as configured (a header value undici refuses).
        throw new ConfigError(
          'provisioning_request_invalid',
          failed,
          { method, code },
          { cause: error },
        );
      }
      // Anything else broke the exchange itself (refused, reset, timed out, an answer that is
      // not HTTP, headers too large): the request may or may not have reached the service, so
      // the caller retries with the same params and the service's idempotent creation answers
      // the stored object (DESIGN §3).
      throw new TransientError(
        'provisioning_unavailable',
        failed,
        { method, code },
        { cause: error },
      );
    }
    return classifyStatus(method, status, { ...body, text: masked(body.text) }, headers, reads);
  };

  return clientOver({
    variant: opts.variant,
    extensions: opts.extensions ?? false,
    send,
    close: async () => {
      if (closed) return;
      closed = true;
      // Requests still in flight at shutdown belong to jobs the workers gave up waiting for
      // (they run again elsewhere): a short grace, then abort them rather than wait out their
      // timeouts, which would outlast the shutdown limit.
      if (!(await settlesWithin(pool.close(), CLOSE_GRACE_MS))) await pool.destroy();
    },
  });
}
