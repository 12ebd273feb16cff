// Starts a throwaway redis-server on a free port for one integration test file.

import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { findFreePort } from '../../src/redis/private-redis.js';

const READY_LINE = 'Ready to accept connections';
const READY_TIMEOUT_MS = 10_000;

export interface TestRedis {
  url: string;
  port: number;
  stop(): Promise<void>;
  /** Starts it again on the same port after `stop` (an empty database: no persistence). */
  restart(): Promise<void>;
}

/** A redis-server without persistence on 127.0.0.1, ready when this resolves. */
export async function startTestRedis(): Promise<TestRedis> {
  const port = await findFreePort();
  let child = await runRedisServer(port);
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = once(child, 'exit');
      child.kill('SIGKILL');
      await exited;
    },
    restart: async () => {
      child = await runRedisServer(port);
    },
  };
}

async function runRedisServer(port: number): Promise<ChildProcess> {
  const child = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  await waitForReady(child, port);
  // Nobody reads the logs after start, but a full pipe would block the server.
  child.stdout?.resume();
  child.stderr?.resume();
  return child;
}

function waitForReady(child: ChildProcess, port: number): Promise<void> {
  let output = '';
  return new Promise((resolve, reject) => {
    const settle = (error?: Error): void => {
      clearTimeout(timer);
      child.stdout?.off('data', onOutput);
      child.stderr?.off('data', onOutput);
      child.off('close', onClose);
      child.off('error', onError);
      if (error === undefined) resolve();
      else reject(error);
    };
    const onOutput = (chunk: Buffer): void => {
      output += chunk.toString('utf8');
      if (output.includes(READY_LINE)) settle();
    };
    const onClose = (code: number | null): void =>
      settle(new Error(`test redis-server on port ${port} exited with ${code}:\n${output}`));
    const onError = (error: Error): void =>
      settle(new Error(`test redis-server could not be run: ${error.message}`, { cause: error }));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      settle(new Error(`test redis-server on port ${port} not ready in ${READY_TIMEOUT_MS} ms`));
    }, READY_TIMEOUT_MS);
    child.stdout?.on('data', onOutput);
    child.stderr?.on('data', onOutput);
    child.once('close', onClose);
    child.once('error', onError);
  });
}
