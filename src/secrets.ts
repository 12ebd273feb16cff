// Secrets the embedded default generates once and keeps under DATA_DIR, unless the env sets them.
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * The configured value, else the one kept in `<dataDir>/secrets/<name>`, else a new random one
 * written there (mode 0600). Creation is exclusive, so two processes starting at once agree.
 */
export async function loadOrCreateSecret(
  dataDir: string,
  name: string,
  configured: string | undefined,
  generate: () => string = () => randomBytes(32).toString('base64url'),
): Promise<{ value: string; generated: boolean }> {
  if (configured) return { value: configured, generated: false };
  const folder = join(dataDir, 'secrets');
  const file = join(folder, name);
  await mkdir(folder, { recursive: true, mode: 0o700 });
  try {
    const value = generate();
    await writeFile(file, `${value}\n`, { flag: 'wx', mode: 0o600 });
    return { value, generated: true };
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    return { value: (await readFile(file, 'utf8')).trim(), generated: false };
  }
}
