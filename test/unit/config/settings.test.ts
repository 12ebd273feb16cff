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
    ['PRODUCT_BRAND', 'Suite!'],
    ['KEY_HASH_SECRET', 'short'],
    ['PUBLIC_URL', 'not a url'],
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
