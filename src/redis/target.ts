// Where Redis is: one server (`redis://`, `rediss://`), or a master found through Redis Sentinel
// (`redis+sentinel://`), so that a failover moves every connection to the new master.
import type { RedisOptions } from 'ioredis';

/**
 * `redis+sentinel://[[user]:password@]host:port[,host:port...]/master[/db][?sentinelPassword=...]`:
 * the sentinels to ask, the name of the master they watch, and the master's credentials. The
 * sentinels' own password, when they have one, goes in `sentinelPassword`.
 */
const SENTINEL_URL =
  /^redis\+sentinel:\/\/(?:([^:@/]*)(?::([^@/]*))?@)?([^/@?]+)\/([^/?]+)(?:\/(\d+))?(?:\?(.*))?$/;

export type RedisTarget =
  | { kind: 'server'; url: string }
  | { kind: 'sentinel'; options: RedisOptions; sentinels: string; master: string };

/** Parses a Redis URL; the error says what is wrong with it, and never repeats a password. */
export function parseRedisTarget(url: string): RedisTarget {
  if (!url.startsWith('redis+sentinel:')) {
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      throw new Error('must be a redis://, rediss:// or redis+sentinel:// URL');
    }
    if (parsed.protocol !== 'redis:' && parsed.protocol !== 'rediss:') {
      throw new Error('must be a redis://, rediss:// or redis+sentinel:// URL');
    }
    return { kind: 'server', url };
  }
  const match = SENTINEL_URL.exec(url);
  if (!match) {
    throw new Error(
      'must be redis+sentinel://[[user]:password@]host:port[,host:port...]/master[/db]',
    );
  }
  const [, username, password, hostList = '', master = '', db, query] = match;
  const sentinels = hostList.split(',').map((hostPort) => {
    const at = /^([^:]+):(\d{1,5})$/.exec(hostPort);
    const port = Number(at?.[2]);
    if (!at || port < 1 || port > 65535) {
      throw new Error(`sentinel "${hostPort}" must be host:port`);
    }
    return { host: at[1] as string, port };
  });
  const params = new URLSearchParams(query ?? '');
  const unknown = [...params.keys()].filter((key) => key !== 'sentinelPassword');
  if (unknown.length > 0) {
    throw new Error(`unknown parameter ${unknown[0]} (only sentinelPassword)`);
  }
  const decode = (part: string | undefined) =>
    part === undefined || part === '' ? undefined : decodeURIComponent(part);
  const options: RedisOptions = {
    sentinels,
    name: decodeURIComponent(master),
    db: db === undefined ? 0 : Number(db),
    // Reconnects to the new master as soon as a sentinel announces a failover, instead of
    // waiting for the old master to drop the connection or refuse a write.
    failoverDetector: true,
  };
  const user = decode(username);
  const pass = decode(password);
  const sentinelPassword = params.get('sentinelPassword');
  if (user !== undefined) options.username = user;
  if (pass !== undefined) options.password = pass;
  if (sentinelPassword) options.sentinelPassword = sentinelPassword;
  return {
    kind: 'sentinel',
    options,
    sentinels: sentinels.map((s) => `${s.host}:${s.port}`).join(','),
    master: options.name as string,
  };
}

/** The target as it may be logged: no password. */
export function describeRedisTarget(url: string): string {
  const target = parseRedisTarget(url);
  if (target.kind === 'sentinel') {
    return `redis+sentinel://${target.sentinels}/${target.master}/${target.options.db ?? 0}`;
  }
  const parsed = new URL(target.url);
  if (parsed.password) parsed.password = 'redacted';
  return parsed.toString();
}
