// The settings schema: every environment variable the product reads, with its default and meaning.
import { isIP } from 'node:net';
import { z } from 'zod';
import { ConfigError } from '../src/errors.js';
import { describeHost, hideUrlPasswords, parseRedisTarget } from '../src/redis/target.js';
import { decimalDigits, UNPRINTABLE } from '../src/validation.js';

/** An empty variable counts as unset (DESIGN §6), so `PORT=` falls back to the default. */
const unsetWhenEmpty = (value: unknown) => (value === '' ? undefined : value);

/** A whole number in min..max; each bound says itself (zod 4 would repeat the type's message). */
const intIn = (min: number, max: number) =>
  z.preprocess(
    decimalDigits,
    z
      .int('must be a whole number')
      .min(min, `must be at least ${min}`)
      .max(max, `must be at most ${max}`),
  );
const port = intIn(0, 65535);
/**
 * A host name: dot-separated labels of letters, digits, inner hyphens and underscores (Docker's
 * service names may hold one), with an optional final dot.
 */
const HOSTNAME = /^(?=.{1,254}$)\w([\w-]{0,61}\w)?(\.\w([\w-]{0,61}\w)?)*\.?$/;
/**
 * Base64 that every decoder reads as the same bytes: what it decodes to encodes back to it
 * (padded or not). Lenient decoders, the Standard Webhooks library among them, drop a dangling
 * character or stray padding that a producer's stricter library refuses or reads otherwise, and
 * every signature would then fail to verify with no hint why.
 */
function isCanonicalBase64(text: string): boolean {
  const encoded = Buffer.from(text, 'base64').toString('base64');
  return encoded === text || encoded.replace(/=+$/, '') === text;
}
/** true/false, 1/0, yes/no, on/off (any case). */
const flag = z
  .string()
  .toLowerCase()
  .transform((v, ctx) => {
    if (['true', '1', 'yes', 'on'].includes(v)) return true;
    if (['false', '0', 'no', 'off'].includes(v)) return false;
    ctx.addIssue({ code: 'custom', message: 'must be true or false (also 1/0, yes/no, on/off)' });
    return z.NEVER;
  });
const secret = (what: string) => z.string().min(16, `must be at least 16 characters (${what})`);
const brand = z
  .string()
  .regex(
    /^[a-z][a-z0-9]{0,15}$/,
    'must be 1..16 lowercase letters or digits, starting with a letter',
  );

/**
 * Whether an http(s) URL names its host as written, and a port other than 0. URL parsing
 * forgives a missing host (`http:///provisioning` reads as the host `provisioning`) and takes
 * port 0, which no connection reaches.
 */
function namesHostAndPort(url: string): boolean {
  if (!URL.canParse(url)) return true; // refused as not a URL
  return /^https?:\/\/[^/?#\\]/i.test(url) && new URL(url).port !== '0';
}
const NAMES_HOST_AND_PORT =
  'must name the host (and a port other than 0): http(s)://host[:port]/path';

/** Each setting: its schema (with default) and the one-line description `billing --help` prints. */
export const settingDefinitions = {
  REDIS_URL: {
    schema: z
      .string()
      .check((ctx) => {
        try {
          parseRedisTarget(ctx.value);
        } catch (error) {
          ctx.issues.push({ code: 'custom', message: (error as Error).message, input: ctx.value });
        }
      })
      .optional(),
    describe:
      'Redis to use (redis://, redis+sentinel://host:port,.../master, or redis+cluster://host:port,...; rediss... for TLS, with ?ca=&cert=&key=); unset: start a private redis-server under DATA_DIR',
  },
  EMBEDDED_REDIS_PORT: {
    schema: port.default(0),
    describe: 'port of the private redis-server when REDIS_URL is unset (0: any free port)',
  },
  HOST: {
    schema: z
      .string()
      .refine(
        (host) => isIP(host) !== 0 || HOSTNAME.test(host),
        'must be an IP address or a host name (127.0.0.1, 0.0.0.0, ::, localhost)',
      )
      .default('127.0.0.1'),
    describe: 'address the HTTP server binds',
  },
  PORT: { schema: port.default(3000), describe: 'port the HTTP server listens on' },
  PUBLIC_URL: {
    // Onboarding links are this address followed by a path: a query or a fragment would end
    // up before it, and credentials in every link.
    schema: z
      .url({ protocol: /^https?$/, error: 'must be an http(s) URL' })
      .refine((url) => {
        if (!URL.canParse(url)) return true; // refused above, as not a URL
        // As written: an empty query or fragment (`/?`, `/#`) or credentials (`:@`) parse empty.
        const authority = url.slice(url.indexOf('//') + 2).split('/')[0] ?? '';
        return !/[?#]/.test(url) && !authority.includes('@');
      }, 'must be an http(s) address with no query, fragment or credentials')
      // Every onboarding link would point nowhere.
      .refine(namesHostAndPort, NAMES_HOST_AND_PORT)
      .optional(),
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
  OPS_TOKEN: {
    schema: secret('a bearer token')
      .regex(/^\S+$/, 'must not contain spaces (a bearer token)')
      .optional(),
    describe: 'bearer token of the ops API and Bull Board (default: generated once under DATA_DIR)',
  },
  WEBHOOK_SECRET: {
    schema: z
      .string()
      .regex(/^whsec_[A-Za-z0-9+/=]{16,}$/, {
        message: 'must be whsec_ followed by base64 (Standard Webhooks)',
        abort: true,
      })
      .refine(
        (secret) => isCanonicalBase64(secret.slice('whsec_'.length)),
        'must be whsec_ followed by well-formed base64: no stray padding or trailing bits',
      )
      .optional(),
    describe:
      'Standard Webhooks signing secret, whsec_<base64> (default: generated under DATA_DIR)',
  },
  WEBHOOK_DEDUP_DAYS: {
    schema: intIn(1, 90).default(7),
    describe: 'how long a webhook-id is remembered to drop repeats (days)',
  },
  PARTNER_NAME: {
    // Taken as written (a deployment's partner is found by its exact name), but never blank.
    schema: z
      .string()
      .min(1)
      .max(200)
      .refine((name) => name.trim() !== '', 'must not be blank')
      .refine((name) => !UNPRINTABLE.test(name), 'must not contain control or format characters')
      .default('default'),
    describe: 'embedded mode: the partner account the workers act for (created at boot)',
  },
  PARTNER_VARIANT: {
    schema: z.enum(['marketplace', 'external']).default('marketplace'),
    describe: 'variant of the provisioning interface the workers drive (embedded or remote)',
  },
  PARTNER_RENEWAL_WINDOW_DAYS: {
    schema: intIn(1, 365).default(15),
    describe: 'the partner renewal window in days (renewals are refused earlier than this)',
  },
  PROVISIONING_URL: {
    schema: z
      .url({ protocol: /^https?$/, abort: true, error: 'must be an http(s) URL' })
      // The client would drop them unsaid, and the service's 401 would blame the API key.
      .refine((url) => {
        const { username, password } = new URL(url);
        return username === '' && password === '';
      }, 'must not carry a user or password: the service takes PROVISIONING_API_KEY')
      // Every call would fail as an outage for months instead of the start stopping here.
      .refine(namesHostAndPort, NAMES_HOST_AND_PORT)
      .optional(),
    describe: 'remote mode: {base_url} of a remote provisioning service (unset: embedded core)',
  },
  PROVISIONING_API_KEY: {
    // A header value: a key copied with its line's CR (an env file with CRLF endings) would be
    // refused by every request, not at start.
    schema: z
      .string()
      .min(1)
      .refine((key) => ![...key].some((c) => c < ' ' || c === '\x7f'), {
        message: 'must not contain control characters (a CR or LF copied with it?)',
        abort: true,
      })
      // What a header carries as is: a typographic quote pasted into it fails every request.
      .regex(/^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$/, {
        message: 'must be printable ASCII, with no space at either end',
      })
      .optional(),
    describe: 'remote mode: the x-api-key for PROVISIONING_URL',
  },
  PROVISIONING_EXTENSIONS: {
    schema: flag.optional(),
    describe: 'send the parent/licenses extensions (default: on embedded, off remote)',
  },
  PROVISIONING_TIMEOUT_MS: {
    schema: intIn(100, 120_000).default(10_000),
    describe: 'remote mode: timeout of one provisioning request (ms)',
  },
  RENEWAL_LEAD_DAYS: {
    schema: intIn(1, 365).default(7),
    describe: 'renew this many days before a term ends (1..the partner window)',
  },
  PAYMENT_GRACE_DAYS: {
    schema: intIn(0, 365).default(3),
    describe: 'days after payment.overdue before the chain is suspended (0: at once)',
  },
  AUTO_RENEW_DEFAULT: {
    schema: flag.default(true),
    describe: 'auto-renew of a chain whose order.placed does not say',
  },
  SEAT_INCREASE: {
    schema: z.enum(['coterm', 'addon']).optional(),
    describe: 'seat increases as co-terminated partials or add-on orders (default by variant)',
  },
  WORKER_CONCURRENCY: {
    schema: intIn(1, 1000).default(20),
    describe: 'jobs each worker runs at once, per queue',
  },
  RECONCILE_INTERVAL_SECONDS: {
    schema: intIn(5, 86_400).default(300),
    describe: 'how often the maintenance job restores missing jobs and marks expired chains',
  },
  SHUTDOWN_TIMEOUT_SECONDS: {
    schema: intIn(1, 600).default(20),
    describe: 'on SIGTERM, how long active jobs may finish before workers are closed anyway',
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

type Parsed = z.infer<typeof settingsSchema>;
export type Settings = Omit<Parsed, 'PUBLIC_URL' | 'PROVISIONING_EXTENSIONS' | 'SEAT_INCREASE'> & {
  PUBLIC_URL: string;
  PROVISIONING_EXTENSIONS: boolean;
  SEAT_INCREASE: 'coterm' | 'addon';
  /** Whether the workers drive a remote provisioning service (PROVISIONING_URL is set). */
  remote: boolean;
};

/** The server's own address as a URL (`http://[::1]:3000` for an IPv6 host). */
export function serverUrl(host: string, port: number): string {
  return `http://${describeHost({ host, port })}`;
}

/** Settings whose value is a secret: an error names them but never shows the value. */
const SECRET_SETTINGS = new Set([
  'KEY_HASH_SECRET',
  'OPS_TOKEN',
  'WEBHOOK_SECRET',
  'PROVISIONING_API_KEY',
]);

/**
 * URL settings that take no user info: one there is a credential put in the wrong place (a
 * token as the user, `https://ghp_...@host`), hidden whole, user part included.
 */
const NO_USER_INFO_SETTINGS = new Set(['PROVISIONING_URL', 'PUBLIC_URL']);
/** Everything from `//` up to the last `@` (a password may hold a raw `/` or `@`). */
const USER_INFO = /^([A-Za-z][\w+.-]*:\/\/).*@/s;

/** A value as an error may show it: secrets hidden, and a URL's passwords too. */
function shownValue(name: string, value: string): string {
  if (SECRET_SETTINGS.has(name)) return `(hidden, ${value.length} characters)`;
  const shown = NO_USER_INFO_SETTINGS.has(name) ? value.replace(USER_INFO, '$1redacted@') : value;
  return JSON.stringify(hideUrlPasswords(shown, 'known'));
}

/**
 * Parses the environment once, at start. An invalid value throws a ConfigError whose message
 * names each bad variable and the value it had (secrets and passwords hidden), so the operator
 * can fix it without reading code.
 */
export function loadSettings(env: Readonly<Record<string, string | undefined>>): Settings {
  const relevant = Object.fromEntries(Object.keys(settingDefinitions).map((k) => [k, env[k]]));
  const parsed = settingsSchema.safeParse(relevant);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((issue) => {
      const name = String(issue.path[0]);
      return `${name}=${shownValue(name, env[name] ?? '')}: ${issue.message}`;
    });
    // The rules across settings whose variables are valid are broken or not all the same:
    // every broken rule is named at once, not one start after another.
    const invalid = new Set(parsed.error.issues.map((issue) => String(issue.path[0])));
    // Each valid setting as parsed alone (with its default), the invalid ones left out.
    const valid = Object.fromEntries(
      Object.entries(settingsSchema.shape)
        .filter(([name]) => !invalid.has(name))
        .map(([name, schema]) => [name, schema.parse(relevant[name])]),
    ) as Partial<Parsed>;
    const problems = [...lines, ...acrossSettings(valid, invalid)];
    throw new ConfigError('invalid_settings', `invalid settings:\n  ${problems.join('\n  ')}`, {
      variables: problems.map((p) => p.split(/[=:]/)[0]),
    });
  }
  return resolveDependentSettings(parsed.data);
}

/** The rules across settings that `s` breaks, but those about an `invalid` setting. */
function acrossSettings(s: Partial<Parsed>, invalid: ReadonlySet<string> = new Set()): string[] {
  const problems: string[] = [];
  if (
    s.PROVISIONING_URL !== undefined &&
    !invalid.has('PROVISIONING_API_KEY') &&
    !s.PROVISIONING_API_KEY
  ) {
    problems.push('PROVISIONING_API_KEY: is required when PROVISIONING_URL is set');
  }
  // A key without its URL is a remote deployment that lost its URL (an empty variable counts as
  // unset): running the embedded core instead would order in a provider nobody reads.
  if (
    s.PROVISIONING_API_KEY !== undefined &&
    s.PROVISIONING_URL === undefined &&
    !invalid.has('PROVISIONING_URL')
  ) {
    problems.push(
      'PROVISIONING_URL: is required when PROVISIONING_API_KEY is set (without it the embedded core would take the orders meant for the remote service)',
    );
  }
  if (
    s.RENEWAL_LEAD_DAYS !== undefined &&
    s.PARTNER_RENEWAL_WINDOW_DAYS !== undefined &&
    s.RENEWAL_LEAD_DAYS > s.PARTNER_RENEWAL_WINDOW_DAYS
  ) {
    problems.push(
      `RENEWAL_LEAD_DAYS=${s.RENEWAL_LEAD_DAYS}: must be at most PARTNER_RENEWAL_WINDOW_DAYS (${s.PARTNER_RENEWAL_WINDOW_DAYS}), or renewals would fire before the window opens`,
    );
  }
  // The default PUBLIC_URL is built from HOST: an address a URL cannot hold (an IPv6 zone,
  // `fe80::1%eth0`) would stop the service after it started listening.
  const defaultPublicUrl =
    s.HOST !== undefined && s.PUBLIC_URL === undefined && !invalid.has('PUBLIC_URL')
      ? serverUrl(s.HOST, s.PORT ?? 0)
      : null;
  if (defaultPublicUrl !== null && !URL.canParse(defaultPublicUrl)) {
    problems.push(
      `HOST=${s.HOST}: a URL cannot name this address, so the default PUBLIC_URL (${defaultPublicUrl}) is none; set PUBLIC_URL to where clients reach this service`,
    );
  }
  if (s.SEAT_INCREASE === 'coterm' && s.PARTNER_VARIANT === 'external') {
    problems.push(
      'SEAT_INCREASE=coterm: the external variant has no partial orders; use addon (the default there)',
    );
  }
  return problems;
}

/** Defaults that depend on other settings, and rules across settings. */
function resolveDependentSettings(s: Parsed): Settings {
  const problems = acrossSettings(s);
  const remote = s.PROVISIONING_URL !== undefined;
  const seatIncrease = s.SEAT_INCREASE ?? (s.PARTNER_VARIANT === 'external' ? 'addon' : 'coterm');
  if (problems.length > 0) {
    throw new ConfigError('invalid_settings', `invalid settings:\n  ${problems.join('\n  ')}`, {
      variables: problems.map((p) => p.split(/[=:]/)[0]),
    });
  }
  return {
    ...s,
    PUBLIC_URL: (s.PUBLIC_URL ?? serverUrl(s.HOST, s.PORT)).replace(/\/+$/, ''),
    PROVISIONING_EXTENSIONS: s.PROVISIONING_EXTENSIONS ?? !remote,
    SEAT_INCREASE: seatIncrease,
    remote,
  };
}

/** Lines for `billing --help`: each variable with its description and default (DESIGN §6). */
export function describeSettings(): string {
  const entries = Object.entries(settingDefinitions);
  const width = Math.max(...entries.map(([name]) => name.length));
  return entries
    .map(([name, def]) => {
      // What the schema makes of an unset variable: its default, if it has one.
      const unset = def.schema.safeParse(undefined);
      const fallback = unset.success && unset.data !== undefined ? ` (default: ${unset.data})` : '';
      return `  ${name.padEnd(width)}  ${def.describe}${fallback}`;
    })
    .join('\n');
}
