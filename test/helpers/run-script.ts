// Runs a Node script as a user would, in a process of its own, and keeps how it ended.
import { type ExecFileOptions, execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface ScriptOutcome {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the program `file` with `args`; a non-zero exit is an outcome, not a throw. */
export async function runCommand(
  file: string,
  args: readonly string[],
  options: ExecFileOptions,
): Promise<ScriptOutcome> {
  try {
    const { stdout, stderr } = await run(file, args, { ...options, encoding: 'utf8' });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as ScriptOutcome;
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

/** Runs `script` with `args` under this Node; a non-zero exit is an outcome, not a throw. */
export function runScript(
  script: string,
  args: readonly string[],
  env: NodeJS.ProcessEnv,
): Promise<ScriptOutcome> {
  return runCommand(process.execPath, [script, ...args], { env });
}

/**
 * Runs `script` with `args` whose output's reader has left before it writes (`| head` that
 * stopped): how it ended and what it said on stderr.
 */
export async function runScriptReaderGone(
  script: string,
  args: readonly string[],
  env: NodeJS.ProcessEnv,
): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, [script, ...args], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout.destroy();
  let stderr = '';
  child.stderr.on('data', (chunk) => {
    stderr += chunk;
  });
  const [code] = (await once(child, 'exit')) as [number | null];
  return { code, stderr };
}
