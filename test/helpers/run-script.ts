// Runs a Node script as a user would, in a process of its own, and keeps how it ended.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface ScriptOutcome {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `script` with `args` under this Node; a non-zero exit is an outcome, not a throw. */
export async function runScript(
  script: string,
  args: readonly string[],
  env: NodeJS.ProcessEnv,
): Promise<ScriptOutcome> {
  try {
    const { stdout, stderr } = await run(process.execPath, [script, ...args], { env });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as ScriptOutcome;
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}
