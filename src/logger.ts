// The root pino logger: JSON lines, with secrets redacted wherever they could appear.
import { type Logger, pino } from 'pino';

/**
 * Paths that can carry API keys, tokens, passwords or signatures, for pino's own redaction (the
 * top two levels). Deeper ones are found by name (scrubSecrets): pino's paths cannot say "at any
 * depth".
 */
export const REDACT_PATHS = [
  'req.headers["x-api-key"]',
  'req.headers.authorization',
  'req.headers["webhook-signature"]',
  'headers["x-api-key"]',
  'headers.authorization',
  '*.apiKey',
  '*.password',
  '*.token',
  '*.secret',
  '*.signature',
  '*.passphrase',
  'apiKey',
  'password',
  'token',
  'secret',
  'passphrase',
  'params.password',
  'body.params.password',
];

const CENSOR = '[redacted]';

export function createLogger(level: string, destination?: pino.DestinationStream): Logger {
  return pino(
    {
      level,
      redact: { paths: REDACT_PATHS, censor: CENSOR },
      serializers: { err: serializeError, req: serializeRequest },
      formatters: { log: (object) => scrubSecrets(object, 0, 'plain') as Record<string, unknown> },
      base: { service: 'billing' },
    },
    destination,
  );
}

/**
 * pino's error serializer, minus secrets: fields named as secrets at any depth (an error's
 * details may hold the params of the call it refused), and the arguments of Redis commands:
 * ioredis attaches the failed command to its reply errors (`command: {name, args}`), and the
 * args of a refused HELLO or AUTH (a rotated or mistyped password) are the password itself.
 */
export function serializeError(error: Error): unknown {
  return scrubSecrets(pino.stdSerializers.err(error), 0, 'any');
}

/** The parts of a Fastify request its log lines carry (as Fastify's own serializer). */
interface LoggedRequest {
  method: string;
  url: string;
  headers?: Record<string, unknown>;
  host?: string;
  ip?: string;
  socket?: { remotePort?: number };
}

/**
 * Fastify's request serializer, with the URL's secret-looking query values hidden: no route
 * reads a credential from the query string, but a client may put one there all the same
 * (`?access_token=`, `?api_key=`), and the URL is logged with every request.
 */
export function serializeRequest(req: LoggedRequest): unknown {
  // Anything else logged as `req` is left to the redaction of its fields.
  if (typeof req?.url !== 'string') return req;
  return {
    method: req.method,
    url: hideQuerySecrets(req.url),
    version: req.headers?.['accept-version'],
    host: req.host,
    remoteAddress: req.ip,
    remotePort: req.socket?.remotePort,
  };
}

/** Query parameter names that may carry a credential (a part of the name, in any case). */
const SECRET_PARAM = /token|key|pass|pwd|secret|sig|auth|bearer|credential|session|jwt/i;

/**
 * The user info of an absolute-form request target (`GET http://user:pw@host/path`), which HTTP
 * allows and Node passes on as written: up to the last `@` before the query.
 */
const TARGET_USER_INFO = /^([A-Za-z][\w+.-]*:\/\/)[^?#]*@/;

/**
 * `url` with any user info hidden, and the value of each query parameter whose name looks like
 * a credential's.
 */
export function hideQuerySecrets(target: string): string {
  const url = target.replace(TARGET_USER_INFO, `$1${CENSOR}@`);
  const queryAt = url.indexOf('?');
  if (queryAt === -1) return url;
  const pairs = url.slice(queryAt + 1).split('&');
  const shown = pairs.map((pair) => {
    const equals = pair.indexOf('=');
    const name = equals === -1 ? pair : pair.slice(0, equals);
    return equals !== -1 && SECRET_PARAM.test(decodedName(name)) ? `${name}=${CENSOR}` : pair;
  });
  return `${url.slice(0, queryAt)}?${shown.join('&')}`;
}

/** A parameter name as a server reads it (`access%5Ftoken` is `access_token`). */
function decodedName(name: string): string {
  try {
    return decodeURIComponent(name.replaceAll('+', ' '));
  } catch {
    return name;
  }
}

/**
 * Field names whose values are secrets wherever they appear: by how the name ends, in any case,
 * so the secret of a setting or a connection (`sentinelPassword`, `OPS_TOKEN`,
 * `KEY_HASH_SECRET`, `PROVISIONING_API_KEY`, `webhook-signature`) is hidden as `password` is.
 */
const SECRET_NAME = /(?:password|passphrase|secret|token|api[-_]?key|signature|authorization)$/i;

/**
 * How deep scrubSecrets looks: log fields and errors nest a few levels at most. What nests deeper
 * is not logged (TOO_DEEP): unlooked-at, it could hold a secret.
 */
const MAX_DEPTH = 8;
const TOO_DEEP = '[too deep to log]';

/**
 * Which objects scrubSecrets looks into. A log line's fields (`plain`): plain objects and arrays
 * only. pino formats a line before its serializers run, so the line still holds Fastify's request
 * and reply, an Error for `err`: a copy would lose what their classes give them (the reply's
 * status code, the error's message), and their graphs are large. An error's serialized form
 * (`any`): everything in it, Errors it holds too (ioredis's `previousErrors`, a cause in
 * `details`), which JSON prints by their own fields, as the copy has them.
 */
type Walk = 'plain' | 'any';

/**
 * `value` with every secret-named field censored, at any depth (what lies below MAX_DEPTH is
 * left out), in the objects `walk` names. Copies only what it changes: most log lines hold no
 * secret and pass as they are.
 */
function scrubSecrets(value: unknown, depth: number, walk: Walk): unknown {
  if (value === null || typeof value !== 'object') return value;
  if (depth > MAX_DEPTH) return Array.isArray(value) || walksInto(value, walk) ? TOO_DEEP : value;
  if (Array.isArray(value)) {
    const items = value.map((item) => scrubSecrets(item, depth + 1, walk));
    return items.some((item, i) => item !== value[i]) ? items : value;
  }
  if (!walksInto(value, walk)) return value;
  let copy: Record<string, unknown> | null = null;
  for (const [key, item] of Object.entries(value)) {
    const scrubbed = scrubField(key, item, depth, walk);
    if (scrubbed === item) continue;
    copy = copy ?? { ...value };
    copy[key] = scrubbed;
  }
  return copy ?? value;
}

function walksInto(value: object, walk: Walk): boolean {
  if (walk === 'any') return !(value instanceof Date || ArrayBuffer.isView(value));
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

function scrubField(key: string, item: unknown, depth: number, walk: Walk): unknown {
  if (SECRET_NAME.test(key)) return item === undefined ? item : CENSOR;
  if (key === 'command' && isRedisCommand(item)) return { ...item, args: CENSOR };
  return scrubSecrets(item, depth + 1, walk);
}

function isRedisCommand(value: unknown): value is { args: unknown } {
  return typeof value === 'object' && value !== null && 'args' in value;
}

export type { Logger };
