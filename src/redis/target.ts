// Where Redis is: one server (`redis://`, `rediss://`), a master found through Redis Sentinel
// (`redis+sentinel://`), so that a failover moves every connection to the new master, or a Redis
// Cluster (`redis+cluster://`).
import type { RedisOptions } from 'ioredis';

/**
 * `redis+sentinel://[[user]:password@]host:port[,host:port...]/master[/db][?sentinelPassword=...]`:
 * the sentinels to ask, the name of the master they watch, and the master's credentials. The
 * sentinels' own password, when they have one, goes in `sentinelPassword`.
 */
const SENTINEL_URL =
  /^redis\+sentinel:\/\/(?:([^:@/]*)(?::([^@/]*))?@)?([^/@?]+)\/([^/?]+)(?:\/(\d+))?(?:\?(.*))?$/;

/** Redis numbers its databases with an int. */
const MAX_DB = 2 ** 31 - 1;

/**
 * A query string's parameters, percent-decoded like the rest of the URL: a `+` stays a `+`
 * (URLSearchParams would make it a space, and generated passwords often hold one).
 */
function queryParams(query: string): Map<string, string> {
  const params = new Map<string, string>();
  for (const pair of query.split('&').filter(Boolean)) {
    const [key = '', ...value] = pair.split('=');
    params.set(decodeURIComponent(key), decodeURIComponent(value.join('=')));
  }
  return params;
}

export interface HostPort {
  host: string;
  port: number;
}

export type RedisTarget =
  | { kind: 'server'; url: string }
  | { kind: 'sentinel'; options: RedisOptions; sentinels: string; master: string }
  | { kind: 'cluster'; nodes: HostPort[]; credentials: Credentials };

interface Credentials {
  username?: string;
  password?: string;
}

const URL_FORMS = 'a redis://, rediss://, redis+sentinel:// or redis+cluster:// URL';

/** Parses a Redis URL; the error says what is wrong with it, and never repeats a password. */
export function parseRedisTarget(url: string): RedisTarget {
  if (url.startsWith('redis+sentinel:')) return parseSentinelUrl(url);
  if (url.startsWith('redis+cluster:')) return parseClusterUrl(url);
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new Error(`must be ${URL_FORMS}`);
  }
  if (parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:') {
    throw new Error(`must be ${URL_FORMS}`);
  }
  return { kind: 'server', url };
}

function parseSentinelUrl(url: string): RedisTarget {
  const match = SENTINEL_URL.exec(url);
  if (!match) {
    throw new Error(
      'must be redis+sentinel://[[user]:password@]host:port[,host:port...]/master[/db]',
    );
  }
  const [, username, password, hostList = '', master = '', db, query] = match;
  const sentinels = parseHostList(hostList, 'sentinel');
  const params = queryParams(query ?? '');
  const unknown = [...params.keys()].filter((key) => key !== 'sentinelPassword');
  if (unknown.length > 0) {
    throw new Error(`unknown parameter ${unknown[0]} (only sentinelPassword)`);
  }
  const dbNumber = db === undefined ? 0 : Number(db);
  if (dbNumber > MAX_DB) throw new Error(`db ${db} must be at most ${MAX_DB}`);
  const options: RedisOptions = {
    sentinels,
    name: decodeURIComponent(master),
    db: dbNumber,
    // Reconnects to the new master as soon as a sentinel announces a failover, instead of
    // waiting for the old master to drop the connection or refuse a write.
    failoverDetector: true,
    ...credentials(username, password),
  };
  const sentinelPassword = params.get('sentinelPassword');
  if (sentinelPassword) options.sentinelPassword = sentinelPassword;
  return {
    kind: 'sentinel',
    options,
    sentinels: describeHosts(sentinels),
    master: options.name as string,
  };
}

/**
 * `redis+cluster://[[user]:password@]host:port[,host:port...]`: some nodes of a Redis Cluster
 * (the client learns the rest from them), and the credentials every node takes. A cluster has
 * database 0 only.
 */
const CLUSTER_URL = /^redis\+cluster:\/\/(?:([^:@/]*)(?::([^@/]*))?@)?([^/@?]+)\/?$/;

function parseClusterUrl(url: string): RedisTarget {
  const match = CLUSTER_URL.exec(url);
  if (!match) {
    throw new Error('must be redis+cluster://[[user]:password@]host:port[,host:port...]');
  }
  const [, username, password, hostList = ''] = match;
  return {
    kind: 'cluster',
    nodes: parseHostList(hostList, 'cluster node'),
    credentials: credentials(username, password),
  };
}

/** `host:port,...` (or `[IPv6]:port`), each checked; `what` names one in the error. */
function parseHostList(list: string, what: string): HostPort[] {
  return list.split(',').map((hostPort) => {
    const at = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(hostPort);
    const port = Number(at?.[3]);
    if (!at || port < 1 || port > 65535) {
      throw new Error(`${what} "${hostPort}" must be host:port (or [IPv6]:port)`);
    }
    return { host: (at[1] ?? at[2]) as string, port };
  });
}

function describeHosts(hosts: readonly HostPort[]): string {
  return hosts
    .map((h) => (h.host.includes(':') ? `[${h.host}]:${h.port}` : `${h.host}:${h.port}`))
    .join(',');
}

/** The URL's user and password, percent-decoded; an empty one counts as none. */
function credentials(username: string | undefined, password: string | undefined): Credentials {
  const decode = (part: string | undefined) =>
    part === undefined || part === '' ? undefined : decodeURIComponent(part);
  const user = decode(username);
  const pass = decode(password);
  return {
    ...(user !== undefined ? { username: user } : {}),
    ...(pass !== undefined ? { password: pass } : {}),
  };
}

/** The target as it may be logged: no password. */
export function describeRedisTarget(url: string): string {
  const target = parseRedisTarget(url);
  if (target.kind === 'sentinel') {
    return `redis+sentinel://${target.sentinels}/${target.master}/${target.options.db ?? 0}`;
  }
  if (target.kind === 'cluster') return `redis+cluster://${describeHosts(target.nodes)}`;
  return hideUrlPasswords(target.url);
}

/**
 * Any URL-like text with its passwords hidden, valid or not: the user-info up to the last `@`
 * (a password may hold a raw `/` or `@`), and `password` or `sentinelPassword` parameters (ioredis
 * also takes the password as a parameter).
 */
export function hideUrlPasswords(text: string): string {
  return text
    .replace(/^([A-Za-z][\w+.-]*:\/\/[^:@/]*):.*@/, '$1:redacted@')
    .replace(/([?&](?:sentinelPassword|password)=)[^&#]*/gi, '$1redacted');
}
