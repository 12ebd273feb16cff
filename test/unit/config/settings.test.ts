// The settings schema: defaults, empty-as-unset, and errors that name the variable.
import { describe, expect, it } from 'vitest';
import { describeSettings, loadSettings, settingDefinitions } from '../../../config/settings.js';
import { ConfigError } from '../../../src/errors.js';

describe('loadSettings', () => {
  it('fills every default from an empty environment', () => {
    const s = loadSettings({});
    expect(s).toMatchObject({
      HOST: '127.0.0.1',
      PORT: 3000,
      PUBLIC_URL: 'http://127.0.0.1:3000',
      LOG_LEVEL: 'info',
      DATA_DIR: './data',
      PRODUCT_BRAND: 'suite',
      EMBEDDED_REDIS_PORT: 0,
    });
    expect(s.REDIS_URL).toBeUndefined();
  });

  it('treats an empty variable as unset', () => {
    expect(loadSettings({ PORT: '', REDIS_URL: '' })).toMatchObject({
      PORT: 3000,
      REDIS_URL: undefined,
    });
  });

  it('derives PUBLIC_URL from HOST and PORT unless given, without a trailing slash', () => {
    expect(loadSettings({ HOST: '0.0.0.0', PORT: '8080' }).PUBLIC_URL).toBe('http://0.0.0.0:8080');
    expect(loadSettings({ PUBLIC_URL: 'https://billing.example.com/' }).PUBLIC_URL).toBe(
      'https://billing.example.com',
    );
  });

  it.each([
    ['PORT', 'abc'],
    ['PORT', '70000'],
    ['REDIS_URL', 'http://localhost:6379'],
    ['LOG_LEVEL', 'loud'],
    ['REDIS_URL', 'redis+sentinel://127.0.0.1/mymaster'],
    ['PRODUCT_BRAND', 'Suite!'],
    ['PUBLIC_URL', 'not a url'],
    ['PUBLIC_URL', 'https://billing.example/?a=1'],
    ['PUBLIC_URL', 'https://billing.example/#top'],
    ['PUBLIC_URL', 'https://billing.example/?'],
    ['PUBLIC_URL', 'https://billing.example/#'],
    ['PARTNER_NAME', '   '],
    ['PARTNER_NAME', 'acme\tworkers'],
    ['HOST', 'not a host'],
    ['HOST', ' '],
    ['HOST', 'http://example.com'],
    ['HOST', '[::1]'],
    ['REDIS_URL', 'redis://127.0.0.1:6379/abc'],
  ])('refuses %s=%s with a message naming the variable and its value', (name, value) => {
    let error: unknown;
    try {
      loadSettings({ [name]: value });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as Error).message).toContain(`${name}=${JSON.stringify(value)}`);
  });

  it.each([
    ['KEY_HASH_SECRET', 'short-secret-1'],
    ['OPS_TOKEN', 'tok-secret'],
    ['WEBHOOK_SECRET', 'not-whsec-secret'],
  ])('refuses %s without showing the secret', (name, value) => {
    expect(() => loadSettings({ [name]: value })).toThrow(
      new RegExp(
        `^invalid settings:\\n  ${name}=\\(hidden, ${value.length} characters\\): [^\\n]+$`,
      ),
    );
  });

  it.each([
    ['a dangling character', 'whsec_YWJjZGVmZ2hpamtsbW5vc'],
    ['partial padding', 'whsec_YWJjZGVmZ2hpamtsbW5vcA='],
    ['padding inside', 'whsec_YWJjZGVmZ2hp=amtsbW5vcA=='],
    ['trailing bits set', 'whsec_YWJjZGVmZ2hpamtsbW5vcB=='],
  ])('refuses a WEBHOOK_SECRET whose base64 has %s', (_, value) => {
    expect(() => loadSettings({ WEBHOOK_SECRET: value })).toThrow(
      /WEBHOOK_SECRET=\(hidden, \d+ characters\): must be whsec_ followed by well-formed base64/,
    );
  });

  it.each([
    'whsec_YWJjZGVmZ2hpamtsbW5vcA==',
    'whsec_YWJjZGVmZ2hpamtsbW5vcA',
    'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
  ])('takes a WEBHOOK_SECRET in well-formed base64, padded or not: %s', (value) => {
    expect(loadSettings({ WEBHOOK_SECRET: value }).WEBHOOK_SECRET).toBe(value);
  });

  it('hides the password of a Redis URL it refuses', () => {
    expect(() => loadSettings({ REDIS_URL: 'redis+sentinel://app:s3cret@host/m' })).toThrow(
      'REDIS_URL="redis+sentinel://app:redacted@host/m": sentinel "host" must be host:port',
    );
    // A raw "&" cut the sentinels' password: no part of it is quoted, before or after the "&".
    const cut = 'redis+sentinel://s1:26379/billing?sentinelPassword=ab&cdTAIL9f3kQ7';
    expect(() => loadSettings({ REDIS_URL: cut })).toThrow(
      'REDIS_URL="redis+sentinel://s1:26379/billing?sentinelPassword=redacted": an unknown parameter after sentinelPassword',
    );
  });

  it.each([
    // A "#" the parser takes as part of it, and a raw "&" whose tail reads as a parameter.
    'redis+sentinel://10.0.0.1:99999/mymaster?sentinelPassword=S3nt1nel#Tail-Secret-Part',
    'redis+sentinel://10.0.0.1:26379/mymaster?sentinelPassword=Tr0ub&dor=Tail-Secret-Part',
    'redis+sentinel://10.0.0.1:99999/mymaster?sentinel%50assword=Tail-Secret-Part',
  ])('shows no part of the sentinel password in the refusal of %s', (url) => {
    expect(() => loadSettings({ REDIS_URL: url })).toThrow(/^invalid settings:\n {2}REDIS_URL=/);
    expect(() => loadSettings({ REDIS_URL: url })).not.toThrow(/Tail-Secret-Part/);
  });

  it('takes a Redis Sentinel URL', () => {
    const url = 'redis+sentinel://:pw@10.0.0.1:26379,10.0.0.2:26379/mymaster/2';
    expect(loadSettings({ REDIS_URL: url }).REDIS_URL).toBe(url);
  });

  it.each([' ', '0x10', '1e3', '80.0', '+80'])(
    'refuses PORT=%j: numbers are decimal digits',
    (port) => {
      expect(() => loadSettings({ PORT: port })).toThrow(/PORT=.*must be a whole number/);
    },
  );

  it.each([
    ['PORT', '99999', 'must be at most 65535'],
    ['WORKER_CONCURRENCY', '0', 'must be at least 1'],
    ['RENEWAL_LEAD_DAYS', '400', 'must be at most'],
  ])('says which bound %s=%s is past', (name, value, message) => {
    expect(() => loadSettings({ [name]: value })).toThrow(`${name}="${value}": ${message}`);
  });

  it('quotes no part of a Sentinel password holding a raw "/"', () => {
    const refusal = () => loadSettings({ REDIS_URL: 'redis+sentinel://:Zq7x/rest@h:26379/2' });
    expect(refusal).toThrow(/must be percent-encoded/);
    expect(refusal).not.toThrow(/Zq7x/);
  });

  it.each([
    '127.0.0.1',
    '0.0.0.0',
    '::',
    '::1',
    'localhost',
    'billing-api',
    'billing_api',
    'api.example.com.',
  ])('takes HOST=%s', (host) => {
    expect(loadSettings({ HOST: host }).HOST).toBe(host);
  });

  it('names the broken rules across settings with the invalid settings, all at once', () => {
    expect(() =>
      loadSettings({
        PORT: 'abc',
        RENEWAL_LEAD_DAYS: '20',
        PARTNER_VARIANT: 'external',
        SEAT_INCREASE: 'coterm',
      }),
    ).toThrow(
      /^invalid settings:\n {2}PORT="abc": [^\n]*\n {2}RENEWAL_LEAD_DAYS=20: must be at most PARTNER_RENEWAL_WINDOW_DAYS \(15\)[^\n]*\n {2}SEAT_INCREASE=coterm: /,
    );
  });

  it('keeps a PUBLIC_URL with a path (behind a proxy), and PARTNER_NAME as written', () => {
    expect(loadSettings({ PUBLIC_URL: 'https://example.com/billing/' }).PUBLIC_URL).toBe(
      'https://example.com/billing',
    );
    // Empty credentials are refused too (the message shows them redacted).
    expect(() => loadSettings({ PUBLIC_URL: 'https://:@billing.example' })).toThrow(/PUBLIC_URL/);
    // The partner a deployment created is found by its exact name: no trimming changes it.
    expect(loadSettings({ PARTNER_NAME: 'acme ' }).PARTNER_NAME).toBe('acme ');
  });

  it('makes the default PUBLIC_URL a URL for an IPv6 HOST', () => {
    expect(loadSettings({ HOST: '::1', PORT: '3000' }).PUBLIC_URL).toBe('http://[::1]:3000');
  });

  it('refuses an IPv6 HOST with a zone unless PUBLIC_URL says where clients reach it', () => {
    // No URL can hold a zone (`fe80::1%eth0`): the default PUBLIC_URL would be none.
    expect(() => loadSettings({ HOST: '::1%lo', PORT: '3000' })).toThrow(
      'HOST=::1%lo: a URL cannot name this address, so the default PUBLIC_URL (http://[::1%lo]:3000) is none; set PUBLIC_URL to where clients reach this service',
    );
    const given = { HOST: '::1%lo', PUBLIC_URL: 'http://billing.example' };
    expect(loadSettings(given).PUBLIC_URL).toBe('http://billing.example');
  });

  it('refuses an OPS_TOKEN with spaces: no Authorization header could carry it', () => {
    expect(() => loadSettings({ OPS_TOKEN: 'my ops token is long' })).toThrow(
      /OPS_TOKEN=\(hidden, 20 characters\): must not contain spaces/,
    );
  });

  it('refuses a PROVISIONING_API_KEY with a CR: no x-api-key header could carry it', () => {
    const env = { PROVISIONING_URL: 'http://remote:8080/provisioning' };
    expect(() => loadSettings({ ...env, PROVISIONING_API_KEY: 'key-from-crlf-file\r' })).toThrow(
      /PROVISIONING_API_KEY=\(hidden, 19 characters\): must not contain control characters/,
    );
  });

  it.each(['key’€x', ' key', 'key '])(
    'refuses a PROVISIONING_API_KEY a header would not carry as is: %j',
    (key) => {
      const env = { PROVISIONING_URL: 'http://remote:8080/provisioning' };
      expect(() => loadSettings({ ...env, PROVISIONING_API_KEY: key })).toThrow(
        /PROVISIONING_API_KEY=\(hidden, \d+ characters\): must be printable ASCII, with no space at either end$/,
      );
    },
  );

  it('takes a PROVISIONING_API_KEY of printable ASCII, inner spaces too', () => {
    const env = { PROVISIONING_URL: 'http://remote:8080/provisioning' };
    const key = 'Token abc~!{}=+/';
    expect(loadSettings({ ...env, PROVISIONING_API_KEY: key }).PROVISIONING_API_KEY).toBe(key);
  });

  it.each(['not a url', 'http://', 'http://exa mple.com'])(
    'refuses a PROVISIONING_URL that is no URL, naming it: %j',
    (url) => {
      expect(() => loadSettings({ PROVISIONING_URL: url, PROVISIONING_API_KEY: 'k' })).toThrow(
        new RegExp(`^invalid settings:\\n  PROVISIONING_URL=${JSON.stringify(url)}: [^\\n]+$`),
      );
    },
  );

  it.each([
    ['PROVISIONING_URL', 'ftp://remote/provisioning'],
    ['PROVISIONING_URL', 'http//remote'],
    ['PUBLIC_URL', 'ftp://billing.example'],
  ])('says a %s of %j must be an http(s) URL (the table says which schemes)', (name, url) => {
    expect(() => loadSettings({ [name]: url, PROVISIONING_API_KEY: 'k' })).toThrow(
      `${name}=${JSON.stringify(url)}: must be an http(s) URL`,
    );
  });

  it.each(['http:///provisioning', 'https://remote:0/provisioning'])(
    'refuses a PROVISIONING_URL of %j, which names no host or port to reach',
    (url) => {
      expect(() => loadSettings({ PROVISIONING_URL: url, PROVISIONING_API_KEY: 'k' })).toThrow(
        `PROVISIONING_URL=${JSON.stringify(url)}: must name the host (and a port other than 0)`,
      );
    },
  );

  it('refuses a PUBLIC_URL with user info, without showing it', () => {
    expect(() => loadSettings({ PUBLIC_URL: 'https://tok3n@billing.example' })).toThrow(
      'PUBLIC_URL="https://redacted@billing.example": must be an http(s) address with no query, fragment or credentials',
    );
  });

  it.each(['http:///billing', 'https://billing.example:0'])(
    'refuses a PUBLIC_URL of %j, which names no host or port to reach',
    (url) => {
      expect(() => loadSettings({ PUBLIC_URL: url })).toThrow(
        `PUBLIC_URL=${JSON.stringify(url)}: must name the host (and a port other than 0)`,
      );
    },
  );

  it.each([
    'https://app:s3cret@remote/provisioning',
    // A token put where the user goes: the user part is the secret.
    'https://ghp_UserPartToken0123456789abcdef@remote/provisioning',
    'https://sk_live_UserPartKey0123456789:@remote/provisioning',
  ])('refuses a PROVISIONING_URL of %j, hiding its whole user info', (url) => {
    expect(() => loadSettings({ PROVISIONING_URL: url, PROVISIONING_API_KEY: 'k' })).toThrow(
      'PROVISIONING_URL="https://redacted@remote/provisioning": must not carry a user or password: the service takes PROVISIONING_API_KEY',
    );
  });

  it.each([
    [
      { PROVISIONING_URL: 'http://remote:8080/provisioning' },
      'PROVISIONING_API_KEY: is required when PROVISIONING_URL is set',
    ],
    [
      { PROVISIONING_API_KEY: 'k'.repeat(32) },
      'PROVISIONING_URL: is required when PROVISIONING_API_KEY is set',
    ],
    [
      { PROVISIONING_URL: '', PROVISIONING_API_KEY: 'k'.repeat(32) },
      'PROVISIONING_URL: is required when PROVISIONING_API_KEY is set',
    ],
  ])('refuses half of remote mode: %j', (env, message) => {
    expect(() => loadSettings(env)).toThrow(message);
  });

  it('names every invalid variable at once', () => {
    expect(() => loadSettings({ PORT: '-1', LOG_LEVEL: 'x' })).toThrow(/PORT=.*\n.*LOG_LEVEL=/s);
  });
});

describe('describeSettings (billing --help)', () => {
  it('lists every variable with its description and, where it has one, its default', () => {
    const lines = describeSettings().split('\n');
    expect(lines).toHaveLength(Object.keys(settingDefinitions).length);
    expect(lines.find((l) => l.trim().startsWith('PORT '))).toMatch(/\(default: 3000\)$/);
    expect(lines.find((l) => l.trim().startsWith('AUTO_RENEW_DEFAULT '))).toMatch(
      /\(default: true\)$/,
    );
    // No default of its own: unset means the private redis-server.
    expect(lines.find((l) => l.trim().startsWith('REDIS_URL '))).not.toContain('(default:');
  });
});
