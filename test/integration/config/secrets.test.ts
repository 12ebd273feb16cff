// Generated secrets: one value however many processes start at once, and never an empty one.
import { mkdtemp, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { settingDefinitions } from '../../../config/settings.js';
import { ConfigError } from '../../../src/errors.js';
import { loadOrCreateSecret } from '../../../src/secrets.js';

const schema = settingDefinitions.OPS_TOKEN.schema;
let dataDir: string;

beforeEach(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'billing-secrets-'));
});

afterEach(async () => {
  await rm(dataDir, { recursive: true, force: true });
});

describe('loadOrCreateSecret', () => {
  it('gives every caller starting at once the same whole value', async () => {
    for (let round = 0; round < 20; round += 1) {
      const name = `ops-token-${round}`;
      const results = await Promise.all(
        Array.from({ length: 16 }, () => loadOrCreateSecret(dataDir, name, undefined, schema)),
      );
      const values = new Set(results.map((r) => r.value));
      expect(values.size).toBe(1);
      expect([...values][0]).toMatch(/^\S{16,}$/);
      expect(results.filter((r) => r.generated)).toHaveLength(1);
    }
  });

  it('keeps what it generated for the next start', async () => {
    const first = await loadOrCreateSecret(dataDir, 'ops-token', undefined, schema);
    const again = await loadOrCreateSecret(dataDir, 'ops-token', undefined, schema);
    expect(again).toEqual({ value: first.value, generated: false });
  });

  it('only reads a kept secret: its folder may be read-only', async () => {
    const first = await loadOrCreateSecret(dataDir, 'ops-token', undefined, schema);
    const folder = join(dataDir, 'secrets');
    const before = await stat(folder);
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(await loadOrCreateSecret(dataDir, 'ops-token', undefined, schema)).toEqual({
      value: first.value,
      generated: false,
    });
    expect((await stat(folder)).mtimeMs).toBe(before.mtimeMs);
    expect(await readdir(folder)).toEqual(['ops-token']);
  });

  it.each([
    ['empty', '', /it is empty/],
    ['too short', 'short\n', /must be at least 16 characters/],
  ])('stops at a kept file that is %s, naming it', async (_what, content, reason) => {
    const file = join(dataDir, 'secrets', 'ops-token');
    await loadOrCreateSecret(dataDir, 'other', undefined, schema); // creates the folder
    await writeFile(file, content);
    const loading = loadOrCreateSecret(dataDir, 'ops-token', undefined, schema);
    await expect(loading).rejects.toBeInstanceOf(ConfigError);
    await expect(loading).rejects.toThrow(reason);
    await expect(loading).rejects.toThrow(file);
  });

  it('prefers the configured value and writes nothing', async () => {
    const configured = 'configured-token-0123456789';
    expect(await loadOrCreateSecret(dataDir, 'ops-token', configured, schema)).toEqual({
      value: configured,
      generated: false,
    });
    await expect(stat(join(dataDir, 'secrets', 'ops-token'))).rejects.toMatchObject({
      code: 'ENOENT',
    });
  });
});
