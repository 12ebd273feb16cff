// DATA_DIR's own failures: the file system refusing what the setting names is the setting's
// fault, and is said so (exit 2, naming DATA_DIR), not as Node's bare "ENOTDIR: open ...".
import { isAbsolute, relative, resolve } from 'node:path';
import { ConfigError } from './errors.js';

/** What the file system answers about a path that is not a folder this process may use. */
const REFUSED_PATH = new Set([
  'ENOTDIR',
  'EISDIR',
  'EACCES',
  'EPERM',
  'EROFS',
  'ELOOP',
  'ENAMETOOLONG',
]);

/**
 * Runs `work` on files under `dataDir`, naming DATA_DIR when the file system refuses a path
 * under it. Other failures (a redis-server binary that cannot run, say) pass as they are.
 */
export async function inDataDir<T>(dataDir: string, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    const { code, path } = error as NodeJS.ErrnoException;
    if (!code || !REFUSED_PATH.has(code) || !path || !isWithin(path, dataDir)) throw error;
    throw new ConfigError(
      'invalid_setting',
      `DATA_DIR=${dataDir}: not a folder this process can use (${(error as Error).message})`,
      { setting: 'DATA_DIR' },
      { cause: error },
    );
  }
}

function isWithin(path: string, folder: string): boolean {
  const rest = relative(resolve(folder), resolve(path));
  return !rest.startsWith('..') && !isAbsolute(rest);
}
