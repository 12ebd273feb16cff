// Secrets the embedded default generates once and keeps under DATA_DIR, unless the env sets them.
import { randomBytes } from 'node:crypto';
import { link, mkdir, readFile, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { z } from 'zod';
import { inDataDir } from './data-dir.js';
import { ConfigError } from './errors.js';

/**
 * The configured value, else the one kept in `<dataDir>/secrets/<name>`, else a new random one
 * written there (mode 0600). A kept one is only read (the folder may be read-only). Two
 * processes creating it at once agree: the file appears whole or not at all (written aside,
 * then linked to its name, which fails if it exists). A kept value must pass `schema` (the
 * setting's own): an empty or damaged file stops the start, naming it, rather than becoming a
 * token anyone could present.
 */
export async function loadOrCreateSecret(
  dataDir: string,
  name: string,
  configured: string | undefined,
  schema: z.ZodType<string | undefined>,
  generate: () => string = () => randomBytes(32).toString('base64url'),
): Promise<{ value: string; generated: boolean }> {
  if (configured) return { value: configured, generated: false };
  return inDataDir(dataDir, () => keptOrCreated(dataDir, name, schema, generate));
}

async function keptOrCreated(
  dataDir: string,
  name: string,
  schema: z.ZodType<string | undefined>,
  generate: () => string,
): Promise<{ value: string; generated: boolean }> {
  const folder = join(dataDir, 'secrets');
  const file = join(folder, name);
  const kept = await keptSecret(file, schema);
  if (kept !== null) return { value: kept, generated: false };
  await mkdir(folder, { recursive: true, mode: 0o700 });
  const value = generate();
  const aside = `${file}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
  try {
    await writeFile(aside, `${value}\n`, { flag: 'wx', mode: 0o600 });
    await link(aside, file);
    return { value, generated: true };
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    // Another process created it first: theirs.
    const theirs = await keptSecret(file, schema);
    if (theirs === null) throw error;
    return { value: theirs, generated: false };
  } finally {
    await unlink(aside).catch(() => {});
  }
}

/**
 * The secret kept in `<dataDir>/secrets/<name>`, or null when there is none yet; one that is
 * not usable throws, as in loadOrCreateSecret. Nothing is written.
 */
export function keptSecretIn(
  dataDir: string,
  name: string,
  schema: z.ZodType<string | undefined>,
): Promise<string | null> {
  return inDataDir(dataDir, () => keptSecret(join(dataDir, 'secrets', name), schema));
}

/** The secret kept in `file`, or null when there is none yet. */
async function keptSecret(
  file: string,
  schema: z.ZodType<string | undefined>,
): Promise<string | null> {
  let kept: string;
  try {
    kept = (await readFile(file, 'utf8')).trim();
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw error;
  }
  const parsed = schema.safeParse(kept);
  if (parsed.success && kept !== '') return kept;
  const reason = kept === '' ? 'it is empty' : parsed.error?.issues[0]?.message;
  throw new ConfigError(
    'invalid_secret_file',
    `the secret kept in ${file} is not usable (${reason}): delete the file to have a new one generated, or set the secret in the environment`,
    { file },
  );
}
