// The root pino logger: JSON lines, with secrets redacted wherever they could appear.
import { type Logger, pino } from 'pino';

/** Paths that can carry API keys, tokens, passwords or signatures. */
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
  'apiKey',
  'password',
  'token',
  'secret',
  'params.password',
  'body.params.password',
];

const CENSOR = '[redacted]';

export function createLogger(level: string, destination?: pino.DestinationStream): Logger {
  return pino(
    {
      level,
      redact: { paths: REDACT_PATHS, censor: CENSOR },
      serializers: { err: serializeError },
      base: { service: 'billing' },
    },
    destination,
  );
}

/**
 * pino's error serializer, minus the arguments of Redis commands: ioredis attaches the failed
 * command to its reply errors (`command: {name, args}`), and the args of a refused HELLO or
 * AUTH (a rotated or mistyped password) are the password itself.
 */
export function serializeError(error: Error): unknown {
  return withoutCommandArgs(pino.stdSerializers.err(error), 0);
}

/** How deep withoutCommandArgs looks: errors nest a few levels at most (cause, errors). */
const MAX_DEPTH = 8;

function withoutCommandArgs(value: unknown, depth: number): unknown {
  if (value === null || typeof value !== 'object' || depth > MAX_DEPTH) return value;
  if (Array.isArray(value)) return value.map((item) => withoutCommandArgs(item, depth + 1));
  const copy: Record<string, unknown> = {};
  for (const [key, item] of Object.entries(value)) {
    copy[key] =
      key === 'command' && isRedisCommand(item)
        ? { ...item, args: CENSOR }
        : withoutCommandArgs(item, depth + 1);
  }
  return copy;
}

function isRedisCommand(value: unknown): value is { args: unknown } {
  return typeof value === 'object' && value !== null && 'args' in value;
}

export type { Logger };
