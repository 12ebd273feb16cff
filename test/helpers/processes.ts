// Looking at processes a test started, and the ones they started in turn (Linux /proc).
import type { ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';

/** Whether a process with this pid exists (signal 0 only asks). */
export function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Every process below `pid`, depth first. */
export function descendants(pid: number): number[] {
  let children: number[] = [];
  try {
    children = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8')
      .split(' ')
      .filter((id) => id !== '')
      .map(Number);
  } catch {
    return [];
  }
  return children.flatMap((child) => [child, ...descendants(child)]);
}

/** A process's command line, its arguments joined by spaces ('' once it is gone). */
export function commandLine(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
  } catch {
    return '';
  }
}

/** Resolves with the "billing service started" log line once the process printed it. */
export function serviceStarted(
  server: ChildProcess,
): Promise<{ url: string; provisioning: string }> {
  return new Promise((resolve, reject) => {
    let buffer = '';
    server.stdout?.on('data', (chunk: Buffer) => {
      buffer += chunk.toString();
      for (const line of buffer.split('\n')) {
        if (line.includes('"billing service started"')) resolve(JSON.parse(line));
      }
    });
    server.once('exit', (code) => reject(new Error(`exited early with ${code}`)));
  });
}
