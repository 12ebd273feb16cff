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

export function createLogger(level: string, destination?: pino.DestinationStream): Logger {
  return pino(
    {
      level,
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      base: { service: 'billing' },
    },
    destination,
  );
}

export type { Logger };
