// Where Redis is: one server (`redis://`, `rediss://`), a master found through Redis Sentinel
// (`redis+sentinel://`), so that a failover moves every connection to the new master, or a Redis
// Cluster (`redis+cluster://`). Each has a TLS form (`rediss...`), which takes the files that a
// private certificate authority or a server that asks for client certificates needs
// (`?ca=&cert=&key=`, and `passphrase-file=` for an encrypted key).
import type { RedisOptions } from 'ioredis';

/**
 * `redis+sentinel://[[user]:password@]host:port[,host:port...]/master[/db][?sentinelPassword=...]`:
 * the sentinels to ask, the name of the master they watch, and the master's credentials. The
 * sentinels' own password, when they have one, goes in `sentinelPassword`. `rediss+sentinel://`
 * speaks TLS to the sentinels and to the master, with `ca`, `cert`, `key` for both.
 */
const SENTINEL_URL =
  /^(rediss?)\+sentinel:\/\/(?:([^:@/]*)(?::([^@/]*))?@)?([^/@?]+)\/([^/?]+)(?:\/(\d+))?(?:\?(.*))?$/;

/** Redis numbers its databases with an int. */
const MAX_DB = 2 ** 31 - 1;

/**
 * A query string's parameters, percent-decoded like the rest of the URL: a `+` stays a `+`
 * (URLSearchParams would make it a space, and generated passwords often hold one).
 */
function queryParams(query: string): Map<string, string> {
  const params = new Map<string, string>();
  for (const pair of query.split('&').filter(Boolean)) {
    const [rawKey = '', ...value] = pair.split('=');
    const key = percentDecoded(rawKey, 'a parameter name');
    params.set(key, percentDecoded(value.join('='), `parameter ${key}`));
  }
  return params;
}

/** `text` percent-decoded; the error names `what` (decodeURIComponent's says only "malformed"). */
function percentDecoded(text: string, what: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    throw new Error(`${what} is not percent-encoded correctly (write % as %25)`);
  }
}

export interface HostPort {
  host: string;
  port: number;
}

/**
 * TLS for every connection of a `rediss` form: the paths of PEM files, read when connecting.
 * `ca` replaces Node's trusted authorities (a private CA); `cert` and `key` are the client's
 * certificate, for servers that require one (`tls-auth-clients yes`). None: the server's
 * certificate is checked against Node's authorities, and no client certificate is sent.
 */
export interface TlsFiles {
  ca?: string;
  cert?: string;
  key?: string;
  /**
   * A file holding the passphrase of an encrypted `key` (its first line). A file, not the
   * passphrase itself: the URL is shown in logs and process lists, where the secret must not be.
   */
  passphraseFile?: string;
}

export type RedisTarget =
  | { kind: 'server'; url: string; tls?: TlsFiles }
  | {
      kind: 'sentinel';
      options: RedisOptions;
      sentinels: string;
      master: string;
      tls?: TlsFiles;
    }
  | { kind: 'cluster'; nodes: HostPort[]; credentials: Credentials; tls?: TlsFiles };

interface Credentials {
  username?: string;
  password?: string;
}

const URL_FORMS = 'a redis://, rediss://, redis+sentinel://, redis+cluster:// URL (or rediss+...)';

/** Whether `text` names a database (`/N` or `?db=N`); '' is database 0. */
function isDatabase(text: string): boolean {
  return text === '' || (/^\d+$/.test(text) && Number(text) <= MAX_DB);
}

/** Checks a server URL's database (`/N` or `?db=N`). */
function databaseNumber(text: string, where: string): void {
  if (!isDatabase(text)) {
    throw new Error(`${where} must be a database number (0, 1, ...), got '${text}'`);
  }
}

/** Parses a Redis URL; the error says what is wrong with it, and never repeats a password. */
export function parseRedisTarget(url: string): RedisTarget {
  if (url.startsWith('redis+sentinel:') || url.startsWith('rediss+sentinel:')) {
    return parseSentinelUrl(url);
  }
  if (url.startsWith('redis+cluster:') || url.startsWith('rediss+cluster:')) {
    return parseClusterUrl(url);
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new Error(`must be ${URL_FORMS}`);
  }
  if (parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:') {
    throw new Error(`must be ${URL_FORMS}`);
  }
  // ioredis decodes them when it connects, where a stray % would fail without saying where.
  credentials(parsed.username, parsed.password);
  // ioredis would send SELECT NaN for a path that is not a number (it reads the path as it is,
  // %32 included), and fail the start with it.
  const path = parsed.pathname.slice(1);
  if (parsed.username === '' && parsed.password === '' && url.includes('@') && !isDatabase(path)) {
    // A raw `/` in the password ended the credentials early: what reads as the host and the path
    // is the password's two halves, so nothing of it is quoted.
    throw new Error(
      'the path must be a database number; a "/", "?" or "#" in the password must be percent-encoded (%2F, %3F, %23)',
    );
  }
  databaseNumber(path, 'the path');
  const dbParam = parsed.searchParams.get('db');
  if (dbParam !== null) databaseNumber(dbParam, 'db');
  // ioredis takes the URL's other parameters as its options (they win over the options the
  // client passes); the TLS files are ours, and TLS itself follows the scheme alone. ioredis
  // only sees a lower-case `rediss://`, so TLS is set here for any spelling of it.
  const secure = parsed.protocol === 'rediss:';
  const queryAt = url.indexOf('?');
  const pairs = queryAt === -1 ? [] : url.slice(queryAt + 1).split('&');
  const name = (pair: string) => percentDecoded(pair.split('=')[0] ?? '', 'a parameter name');
  if (pairs.some((pair) => name(pair) === 'tls')) {
    throw new Error('tls is not a parameter: TLS follows the scheme (rediss://)');
  }
  const isTlsFile = (pair: string) => TLS_FILE_PARAMS.has(name(pair));
  const tls = tlsFiles(queryParams(pairs.filter(isTlsFile).join('&')), secure);
  const rest = pairs.filter((pair) => pair !== '' && !isTlsFile(pair));
  const names = rest.map(name);
  const unknown = names.findIndex((key) => !SERVER_PARAMS.has(key));
  if (unknown !== -1) {
    const known = [...SERVER_PARAMS, ...(secure ? TLS_FILE_PARAMS : [])].join(', ');
    // A raw `?` in the user-info password makes the rest of it, up to the host, the query.
    if (rest.some((pair) => pair.includes('@'))) {
      throw new Error('an unknown parameter; a "?" in the password must be percent-encoded (%3F)');
    }
    // After the password, an unknown "parameter" may be the rest of it, cut at a raw `&`.
    if (names.slice(0, unknown).includes('password')) {
      throw new Error(
        `an unknown parameter after password (${known}); a "&" in the password must be percent-encoded (%26)`,
      );
    }
    throw new Error(`unknown parameter ${names[unknown]} (${known})`);
  }
  const base = queryAt === -1 ? url : url.slice(0, queryAt);
  return {
    kind: 'server',
    url: base + (rest.length > 0 ? `?${rest.join('&')}` : ''),
    ...(tls ? { tls } : {}),
  };
}

/**
 * The parameters of a one-server URL that ioredis takes as its options: those that say how to
 * reach and log in to the server. Any other option would win over the ones each connection
 * needs (`enableOfflineQueue`, `maxRetriesPerRequest`, `commandTimeout`: how a request fails
 * fast, or a worker waits) or move every key (`keyPrefix`), and a misspelt one would do
 * nothing without a word.
 */
const SERVER_PARAMS: ReadonlySet<string> = new Set([
  'db',
  'username',
  'password',
  'family',
  'connectionName',
]);

/** The URL parameters that name TLS files, in the order Node's options take them. */
export const TLS_FILE_NAMES = ['ca', 'cert', 'key'] as const satisfies readonly (keyof TlsFiles)[];
const PASSPHRASE_FILE_PARAM = 'passphrase-file';
const TLS_FILE_PARAMS: ReadonlySet<string> = new Set([...TLS_FILE_NAMES, PASSPHRASE_FILE_PARAM]);
/** The TLS parameters, as an unknown parameter's error lists them. */
const TLS_PARAM_LIST = [...TLS_FILE_PARAMS].join(', ');

/**
 * The TLS files among `params` (which it removes), or undefined when not `secure`; the error
 * names a file given to a form without TLS, and a certificate without its key or the reverse.
 */
function tlsFiles(params: Map<string, string>, secure: boolean): TlsFiles | undefined {
  const files: TlsFiles = {};
  /** The TLS parameters the URL gives, in the order read. */
  const given: string[] = [];
  /** Takes the file parameter `name` off `params`: its path, or undefined when not given. */
  const take = (name: string, holding: string): string | undefined => {
    const path = params.get(name);
    if (path === undefined) return undefined;
    params.delete(name);
    given.push(name);
    if (path === '') throw new Error(`${name} must be the path of ${holding}`);
    return path;
  };
  for (const name of TLS_FILE_NAMES) {
    const path = take(name, 'a PEM file');
    if (path !== undefined) files[name] = path;
  }
  const passphraseFile = take(PASSPHRASE_FILE_PARAM, 'a file holding the passphrase');
  if (passphraseFile !== undefined) files.passphraseFile = passphraseFile;
  if (!secure) {
    if (given[0] !== undefined)
      throw new Error(
        `${given[0]} is for TLS: use rediss://, rediss+sentinel:// or rediss+cluster://`,
      );
    return undefined;
  }
  if ((files.cert === undefined) !== (files.key === undefined)) {
    throw new Error('cert and key go together: the client certificate and its private key');
  }
  if (files.passphraseFile !== undefined && files.key === undefined) {
    throw new Error(`${PASSPHRASE_FILE_PARAM} is the passphrase of key: name the key too`);
  }
  return files;
}

function parseSentinelUrl(url: string): RedisTarget {
  const match = SENTINEL_URL.exec(url);
  if (!match) {
    throw new Error(
      'must be redis+sentinel://[[user]:password@]host:port[,host:port...]/master[/db]',
    );
  }
  const [, scheme, username, password, hostList = '', master = '', db, query] = match;
  if (master.includes('@')) {
    // A raw `/` in the password ended the credentials early: what reads as the sentinels is
    // part of the password, so nothing of it is quoted.
    throw new Error('a "/" or "@" in the password must be percent-encoded (%2F, %40)');
  }
  const sentinels = parseHostList(hostList, 'sentinel');
  const params = queryParams(query ?? '');
  const tls = tlsFiles(params, scheme === 'rediss');
  const keys = [...params.keys()];
  const unknown = keys.find((key) => key !== 'sentinelPassword');
  if (unknown !== undefined) {
    const known = tls ? `sentinelPassword, ${TLS_PARAM_LIST}` : 'only sentinelPassword';
    // After the password, an unknown "parameter" may be the rest of it, cut at a raw `&`.
    const password = keys.indexOf('sentinelPassword');
    if (password !== -1 && keys.indexOf(unknown) > password) {
      throw new Error(
        `an unknown parameter after sentinelPassword (${known}); a "&" in the password must be percent-encoded (%26)`,
      );
    }
    throw new Error(`unknown parameter ${unknown} (${known})`);
  }
  const dbNumber = db === undefined ? 0 : Number(db);
  if (dbNumber > MAX_DB) throw new Error(`db ${db} must be at most ${MAX_DB}`);
  const options: RedisOptions = {
    sentinels,
    name: percentDecoded(master, 'the master name'),
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
    ...(tls ? { tls } : {}),
  };
}

/**
 * `redis+cluster://[[user]:password@]host:port[,host:port...]`: some nodes of a Redis Cluster
 * (the client learns the rest from them), and the credentials every node takes. A cluster has
 * database 0 only. `rediss+cluster://` speaks TLS to every node, with `?ca=&cert=&key=` (and
 * `passphrase-file`).
 */
const CLUSTER_URL = /^(rediss?)\+cluster:\/\/(?:([^:@/]*)(?::([^@/]*))?@)?([^/@?]+)\/?(?:\?(.*))?$/;

function parseClusterUrl(url: string): RedisTarget {
  const match = CLUSTER_URL.exec(url);
  if (!match) {
    throw new Error('must be redis+cluster://[[user]:password@]host:port[,host:port...]');
  }
  const [, scheme, username, password, hostList = '', query] = match;
  const params = queryParams(query ?? '');
  const tls = tlsFiles(params, scheme === 'rediss');
  const unknown = [...params.keys()][0];
  if (unknown !== undefined) {
    throw new Error(`unknown parameter ${unknown} (${tls ? `only ${TLS_PARAM_LIST}` : 'none'})`);
  }
  return {
    kind: 'cluster',
    nodes: parseHostList(hostList, 'cluster node'),
    credentials: credentials(username, password),
    ...(tls ? { tls } : {}),
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

/** `host:port`, or `[IPv6]:port`. */
export function describeHost({ host, port }: HostPort): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

function describeHosts(hosts: readonly HostPort[]): string {
  return hosts.map(describeHost).join(',');
}

/** The URL's user and password, percent-decoded; an empty one counts as none. */
function credentials(username: string | undefined, password: string | undefined): Credentials {
  const decode = (part: string | undefined) =>
    part === undefined || part === '' ? undefined : percentDecoded(part, 'the user or password');
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
    const scheme = target.tls ? 'rediss' : 'redis';
    return `${scheme}+sentinel://${target.sentinels}/${target.master}/${target.options.db ?? 0}`;
  }
  if (target.kind === 'cluster') {
    return `${target.tls ? 'rediss' : 'redis'}+cluster://${describeHosts(target.nodes)}`;
  }
  return hideUrlPasswords(target.url);
}

/** A user with a password, the password up to the last `@` (it may hold a raw `/` or `@`). */
const USER_AND_PASSWORD = /^([A-Za-z][\w+.-]*:\/\/[^:@/]*):.*@/;
/** The same for a user name holding an `@` (`svc@billing:pw@host`), before any query. */
const AT_USER_AND_PASSWORD = /^([A-Za-z][\w+.-]*:\/\/[^:/?#]*@[^:/?#]*):[^?#]*@/;
/** `name` as a pattern matching any spelling of it a URL may hold: each character may be %XX. */
function anyEncoding(name: string): string {
  return [...name]
    .map((char) => `(?:${char.replace(/[.-]/g, '\\$&')}|%${char.charCodeAt(0).toString(16)})`)
    .join('');
}
/**
 * The parameters that end a password parameter's value in a refused URL: the passwords, db and
 * the TLS files. The other SERVER_PARAMS do not, so a refused URL's password hides past them:
 * more hidden, never less.
 */
const KNOWN_PARAM = ['sentinelPassword', 'password', 'db', ...TLS_FILE_PARAMS]
  .map(anyEncoding)
  .join('|');
const PASSWORD_NAME = `[?&](?:${anyEncoding('sentinelPassword')}|${anyEncoding('password')})=`;
/**
 * A password parameter's value: up to the next parameter (`&name=`), a raw `#` included.
 * `known`: up to the next parameter of KNOWN_PARAM, for a URL being refused: a raw `&` in the
 * password (`Tr0ub&dor=...`) reads as a parameter, and the refusal must not show its tail.
 */
const PASSWORD_PARAM = {
  any: new RegExp(`(${PASSWORD_NAME})(?:[^&]|&(?![\\w.%-]+=))*`, 'gi'),
  known: new RegExp(`(${PASSWORD_NAME})(?:[^&]|&(?!(?:${KNOWN_PARAM})=))*`, 'gi'),
};

/**
 * Any URL-like text with its passwords hidden, valid or not: the user-info's password, and
 * `password` or `sentinelPassword` parameters (ioredis also takes the password as a parameter).
 * A password parameter's value runs up to the next parameter of any name (a URL that works,
 * whose other parameters are ioredis options), or only of one our forms know (`known`: a URL
 * refused, maybe for a raw `&` in the password).
 */
export function hideUrlPasswords(text: string, parameters: 'any' | 'known' = 'any'): string {
  const user = USER_AND_PASSWORD.test(text) ? USER_AND_PASSWORD : AT_USER_AND_PASSWORD;
  return text.replace(user, '$1:redacted@').replace(PASSWORD_PARAM[parameters], '$1redacted');
}
