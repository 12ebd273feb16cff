// TLS to Redis: Node's options from the files a `rediss...` URL names, checked before any
// connection, and a probe that finds out why a handshake failed when the client cannot say.
import { readFileSync } from 'node:fs';
import { type ConnectionOptions, connect, createSecureContext } from 'node:tls';
import { Redis } from 'ioredis';
import type { HostPort, RedisTarget, TlsFiles } from './target.js';

/**
 * Node's TLS options from the URL's files, checked as Node will use them: each file readable,
 * `ca` holding at least one certificate, `cert` and `key` a matching pair. Every error names
 * the parameter and the file, which Node's own (`DECODER routines::unsupported`) do not.
 */
export function tlsOptions(files: TlsFiles): ConnectionOptions {
  const options: ConnectionOptions = {};
  for (const name of ['ca', 'cert', 'key'] as const) {
    const path = files[name];
    if (path === undefined) continue;
    try {
      options[name] = readFileSync(path);
    } catch (error) {
      const reason = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
      throw new Error(`the ${name} file ${path} cannot be read (${reason})`);
    }
  }
  if (files.ca !== undefined && !String(options.ca).includes('-----BEGIN CERTIFICATE-----')) {
    throw new Error(`the ca file ${files.ca} holds no PEM certificate`);
  }
  try {
    createSecureContext(options);
  } catch (error) {
    const named = [files.ca && `ca ${files.ca}`, files.cert && `cert ${files.cert}`]
      .concat(files.key ? [`key ${files.key}`] : [])
      .filter(Boolean)
      .join(', ');
    throw new Error(`the TLS files (${named}) cannot be used: ${(error as Error).message}`);
  }
  return options;
}

/** How long the probe waits for a server's answer after the handshake. */
const PROBE_TIMEOUT_MS = 3_000;

/**
 * Why TLS fails on the way to a Sentinel's or a Cluster's data, or undefined when it does not:
 * their clients keep the reason to themselves ("Connection is closed.", or a Cluster that
 * retries without end), so a failed start asks the first sentinel or node of the URL, and then
 * each node a Cluster announces, at the address it announces (where its clients connect).
 */
export async function tlsDiagnosis(
  target: RedisTarget,
  options: ConnectionOptions,
): Promise<string | undefined> {
  const first =
    target.kind === 'cluster'
      ? target.nodes[0]
      : target.kind === 'sentinel'
        ? (target.options.sentinels?.[0] as HostPort | undefined)
        : undefined;
  if (first === undefined) return undefined;
  const failure = await tlsFailure(first, options);
  if (failure !== undefined) return `TLS to ${hostPort(first)}: ${failure}`;
  if (target.kind !== 'cluster') return undefined;
  for (const node of await announcedNodes(first, options, target.credentials)) {
    const nodeFailure = await tlsFailure(node, options);
    if (nodeFailure !== undefined) {
      return `TLS to ${hostPort(node)}, as the cluster announces that node: ${nodeFailure}`;
    }
  }
  return undefined;
}

const hostPort = (at: HostPort) =>
  at.host.includes(':') ? `[${at.host}]:${at.port}` : `${at.host}:${at.port}`;

/** The masters and replicas `at` names in CLUSTER SLOTS; none when it cannot be asked. */
async function announcedNodes(
  at: HostPort,
  options: ConnectionOptions,
  credentials: { username?: string; password?: string },
): Promise<HostPort[]> {
  const redis = new Redis({
    ...at,
    ...credentials,
    tls: options,
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  redis.on('error', () => {});
  try {
    await redis.connect();
    const slots = (await redis.call('CLUSTER', 'SLOTS')) as [
      number,
      number,
      ...[string, number][],
    ][];
    const nodes = new Map<string, HostPort>();
    for (const [, , ...served] of slots) {
      // An empty host is "the address you asked me at" (a node that has not learned its own).
      for (const [host, port] of served) {
        const node = { host: host || at.host, port };
        nodes.set(hostPort(node), node);
      }
    }
    return [...nodes.values()];
  } catch {
    return [];
  } finally {
    redis.disconnect();
  }
}

/**
 * Why TLS to `at` fails, or undefined when it works: a handshake, then a PING, since a server
 * that requires a client certificate hangs up only after the client's side of the handshake.
 */
function tlsFailure(at: HostPort, options: ConnectionOptions): Promise<string | undefined> {
  return new Promise((resolve) => {
    const socket = connect({ ...options, host: at.host, port: at.port });
    const settle = (reason: string | undefined) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(reason);
    };
    const timer = setTimeout(() => settle(undefined), PROBE_TIMEOUT_MS);
    socket.once('secureConnect', () => socket.write('PING\r\n'));
    // Any answer (PONG, or NOAUTH without the password) means TLS itself works.
    socket.once('data', () => settle(undefined));
    socket.once('error', (error: Error) => settle(error.message));
    socket.once('close', () => settle('the server closed the connection'));
  });
}
