// TLS to Redis: Node's options from the files a `rediss...` URL names, checked before any
// connection, and a probe that finds out why a handshake failed when the client cannot say.
import { readFileSync } from 'node:fs';
import { type ConnectionOptions, connect, createSecureContext } from 'node:tls';
import { Redis } from 'ioredis';
import {
  describeHost,
  type HostPort,
  type RedisTarget,
  TLS_FILE_NAMES,
  type TlsFiles,
} from './target.js';

/**
 * Node's TLS options from the URL's files, checked as Node will use them: each file readable,
 * `ca` holding at least one certificate, `cert` and `key` a matching pair. Every error names
 * the parameter and the file, which Node's own (`DECODER routines::unsupported`) do not.
 */
export function tlsOptions(files: TlsFiles): ConnectionOptions {
  const options: ConnectionOptions = {};
  for (const name of TLS_FILE_NAMES) {
    const path = files[name];
    if (path === undefined) continue;
    options[name] = readNamedFile(`${name} file`, path);
  }
  if (
    files.ca !== undefined &&
    !/-----BEGIN (TRUSTED )?CERTIFICATE-----/.test(String(options.ca))
  ) {
    throw new Error(`the ca file ${files.ca} holds no PEM certificate`);
  }
  if (files.passphraseFile !== undefined) {
    options.passphrase = passphraseIn(files.passphraseFile);
  } else if (ENCRYPTED_KEY.test(String(options.key ?? ''))) {
    throw new Error(
      `the key file ${files.key} is encrypted: name a file holding its passphrase with passphrase-file`,
    );
  }
  try {
    createSecureContext(options);
  } catch (error) {
    if (files.passphraseFile !== undefined && /bad decrypt/i.test((error as Error).message)) {
      throw new Error(
        `the passphrase in ${files.passphraseFile} does not decrypt the key file ${files.key}`,
      );
    }
    const named = TLS_FILE_NAMES.filter((name) => files[name] !== undefined)
      .map((name) => `${name} ${files[name]}`)
      .join(', ');
    throw new Error(`the TLS files (${named}) cannot be used: ${(error as Error).message}`);
  }
  return options;
}

/** A PEM key that needs a passphrase: PKCS#8 encrypted, or the older OpenSSL form. */
const ENCRYPTED_KEY = /-----BEGIN ENCRYPTED PRIVATE KEY-----|Proc-Type: 4,ENCRYPTED/;

/** A file the URL names, or an error naming its parameter (`what`) and why it cannot be read. */
function readNamedFile(what: string, path: string): Buffer {
  try {
    return readFileSync(path);
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
    throw new Error(`the ${what} ${path} cannot be read (${reason})`);
  }
}

/** The passphrase a file holds: its first line, without the line break an editor adds. */
function passphraseIn(path: string): string {
  const text = readNamedFile('passphrase-file', path).toString('utf8');
  const passphrase = text.split(/\r?\n/)[0] ?? '';
  if (passphrase === '') throw new Error(`the passphrase-file ${path} is empty`);
  return passphrase;
}

/** How long each step of a probe (connect, handshake, answer) may take. */
const PROBE_TIMEOUT_MS = 3_000;

/**
 * Why TLS fails on the way to a Sentinel's or a Cluster's data, or undefined when it does not:
 * their clients keep the reason to themselves ("Connection is closed.", or a Cluster that
 * retries without end), so a failed start asks the first sentinel or node of the URL, and then
 * each node a Cluster announces, at the address it announces (where its clients connect). Every
 * step is bounded, and the announced nodes are asked at once.
 */
export async function tlsDiagnosis(
  target: RedisTarget,
  options: ConnectionOptions,
): Promise<Error | undefined> {
  const first = firstHost(target);
  if (first === undefined) return undefined;
  const failure = await tlsFailure(first, options, '');
  if (failure !== undefined || target.kind !== 'cluster') return failure;
  const nodes = await announcedNodes(first, options, target.credentials);
  const failures = await Promise.all(
    nodes.map((node) => tlsFailure(node, options, ', as the cluster announces that node')),
  );
  return failures.find((found) => found !== undefined);
}

/** The first sentinel or cluster node of the URL (one server's client says why itself). */
function firstHost(target: RedisTarget): HostPort | undefined {
  if (target.kind === 'cluster') return target.nodes[0];
  if (target.kind === 'sentinel') return target.options.sentinels?.[0] as HostPort | undefined;
  return undefined;
}

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
    enableReadyCheck: false,
    connectTimeout: PROBE_TIMEOUT_MS,
    commandTimeout: PROBE_TIMEOUT_MS,
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
        nodes.set(describeHost(node), node);
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
 * The error says whether the address could not be reached at all or TLS failed there, and
 * keeps Node's error (with its code) as its cause.
 */
function tlsFailure(
  at: HostPort,
  options: ConnectionOptions,
  as: string,
): Promise<Error | undefined> {
  return new Promise((resolve) => {
    const where = describeHost(at) + as;
    let stage: 'connecting' | 'handshake' | 'answer' = 'connecting';
    const socket = connect({ ...options, host: at.host, port: at.port });
    let timer: NodeJS.Timeout;
    const wait = () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        // Silence after a handshake is a server that is busy, not a TLS failure.
        if (stage === 'answer') settle(undefined);
        else
          settle(
            new Error(`${describe(stage, where)}: no answer within ${PROBE_TIMEOUT_MS / 1000} s`),
          );
      }, PROBE_TIMEOUT_MS);
    };
    const settle = (failure: Error | undefined) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(failure);
    };
    wait();
    socket.once('connect', () => {
      stage = 'handshake';
      wait();
    });
    socket.once('secureConnect', () => {
      stage = 'answer';
      wait();
      socket.write('PING\r\n');
    });
    // Any answer (PONG, or NOAUTH without the password) means TLS itself works.
    socket.once('data', () => settle(undefined));
    socket.once('error', (error: Error) =>
      settle(new Error(`${describe(stage, where)}: ${error.message}`, { cause: error })),
    );
    socket.once('close', () =>
      settle(new Error(`${describe(stage, where)}: the server closed the connection`)),
    );
  });
}

/** Where a probe stopped, as the reason's prefix. */
function describe(stage: 'connecting' | 'handshake' | 'answer', where: string): string {
  return stage === 'connecting' ? `connecting to ${where}` : `TLS to ${where}`;
}
