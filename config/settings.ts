// The settings schema: every environment variable the product reads, with its default and meaning.
import { z } from 'zod';
import { ConfigError } from '../src/errors.js';

/** An empty variable counts as unset (DESIGN §6), so `PORT=` falls back to the default. */
const unsetWhenEmpty = (value: unknown) => (value === '' ? undefined : value);

const port = z.coerce.number().int().min(0).max(65535);
const brand = z
  .string()
  .regex(
    /^[a-z][a-z0-9]{0,15}$/,
    'must be 1..16 lowercase letters or digits, starting with a letter',
  );

/** Each setting: its schema (with default) and the one-line description `billing --help` prints. */
export const settingDefinitions = {
  REDIS_URL: {
    schema: z.url({ protocol: /^rediss?$/ }).optional(),
    describe:
      'Redis to use (redis:// or rediss://); unset: start a private redis-server under DATA_DIR',
  },
  EMBEDDED_REDIS_PORT: {
    schema: port.default(0),
    describe: 'port of the private redis-server when REDIS_URL is unset (0: any free port)',
  },
  HOST: {
    schema: z.string().min(1).default('127.0.0.1'),
    describe: 'address the HTTP server binds',
  },
  PORT: { schema: port.default(3000), describe: 'port the HTTP server listens on' },
  PUBLIC_URL: {
    schema: z.url({ protocol: /^https?$/ }).optional(),
    describe:
      'address clients reach this server at (default http://HOST:PORT); used in onboarding links',
  },
  LOG_LEVEL: {
    schema: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
    describe: 'pino log level',
  },
  DATA_DIR: {
    schema: z.string().min(1).default('./data'),
    describe: 'where the private Redis keeps its append-only file and generated secrets live',
  },
  PRODUCT_BRAND: {
    schema: brand.default('suite'),
    describe: 'the <brand> of the product catalogue: <brand>-lite, <brand>-std, <brand>-ent',
  },
  KEY_HASH_SECRET: {
    schema: z.string().min(32, 'must be at least 32 characters').optional(),
    describe: 'HMAC secret for stored API-key hashes (default: generated once under DATA_DIR)',
  },
} as const;

type Definitions = typeof settingDefinitions;
export type SettingName = keyof Definitions;

const settingsSchema = z.object(
  Object.fromEntries(
    Object.entries(settingDefinitions).map(([name, def]) => [
      name,
      z.preprocess(unsetWhenEmpty, def.schema),
    ]),
  ) as { [K in SettingName]: z.ZodPipe<z.ZodTransform, Definitions[K]['schema']> },
);

export type Settings = z.infer<typeof settingsSchema> & { PUBLIC_URL: string };

/**
 * Parses the environment once, at start. An invalid value throws a ConfigError whose message
 * names each bad variable and the value it had, so the operator can fix it without reading code.
 */
export function loadSettings(env: Readonly<Record<string, string | undefined>>): Settings {
  const relevant = Object.fromEntries(Object.keys(settingDefinitions).map((k) => [k, env[k]]));
  const parsed = settingsSchema.safeParse(relevant);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((issue) => {
      const name = String(issue.path[0]);
      return `${name}=${JSON.stringify(env[name] ?? '')}: ${issue.message}`;
    });
    throw new ConfigError('invalid_settings', `invalid settings:\n  ${lines.join('\n  ')}`, {
      variables: parsed.error.issues.map((i) => String(i.path[0])),
    });
  }
  const s = parsed.data;
  return { ...s, PUBLIC_URL: (s.PUBLIC_URL ?? `http://${s.HOST}:${s.PORT}`).replace(/\/+$/, '') };
}

/** Lines for `billing --help`: each variable with its description. */
export function describeSettings(): string {
  return Object.entries(settingDefinitions)
    .map(([name, def]) => `  ${name.padEnd(22)} ${def.describe}`)
    .join('\n');
}
