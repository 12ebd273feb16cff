// REDIS_URL forms: one server, a master found through Redis Sentinel, or a Redis Cluster; errors
// never show a password.
import { describe, expect, it } from 'vitest';
import {
  describeRedisTarget,
  hideUrlPasswords,
  parseRedisTarget,
} from '../../../src/redis/target.js';

describe('parseRedisTarget', () => {
  it('passes a redis:// or rediss:// URL on as it is', () => {
    expect(parseRedisTarget('redis://:pw@10.0.0.5:6380/2')).toEqual({
      kind: 'server',
      url: 'redis://:pw@10.0.0.5:6380/2',
    });
    expect(parseRedisTarget('rediss://cache.example:6380').kind).toBe('server');
  });

  it('reads the sentinels, the master name, its credentials and db', () => {
    const target = parseRedisTarget(
      'redis+sentinel://app:p%40ss@10.0.0.1:26379,10.0.0.2:26380/my%20master/3?sentinelPassword=s3',
    );
    expect(target).toEqual({
      kind: 'sentinel',
      sentinels: '10.0.0.1:26379,10.0.0.2:26380',
      master: 'my master',
      options: {
        sentinels: [
          { host: '10.0.0.1', port: 26379 },
          { host: '10.0.0.2', port: 26380 },
        ],
        name: 'my master',
        db: 3,
        failoverDetector: true,
        username: 'app',
        password: 'p@ss',
        sentinelPassword: 's3',
      },
    });
  });

  it('takes a sentinel URL without credentials or db', () => {
    expect(parseRedisTarget('redis+sentinel://s1:26379/billing')).toMatchObject({
      options: { name: 'billing', db: 0 },
    });
  });

  it('takes IPv6 sentinels, and keeps a + in the sentinels password', () => {
    expect(
      parseRedisTarget(
        'redis+sentinel://[::1]:26379,[fd00::2]:26380/billing?sentinelPassword=a+b%2Fc',
      ),
    ).toMatchObject({
      sentinels: '[::1]:26379,[fd00::2]:26380',
      options: {
        sentinels: [
          { host: '::1', port: 26379 },
          { host: 'fd00::2', port: 26380 },
        ],
        sentinelPassword: 'a+b/c',
      },
    });
  });

  it('reads the cluster nodes and the credentials every node takes', () => {
    expect(parseRedisTarget('redis+cluster://app:p%40ss@10.0.0.1:7000,[fd00::2]:7001/')).toEqual({
      kind: 'cluster',
      nodes: [
        { host: '10.0.0.1', port: 7000 },
        { host: 'fd00::2', port: 7001 },
      ],
      credentials: { username: 'app', password: 'p@ss' },
    });
    expect(parseRedisTarget('redis+cluster://n1:7000')).toEqual({
      kind: 'cluster',
      nodes: [{ host: 'n1', port: 7000 }],
      credentials: {},
    });
  });

  it('takes the TLS files of a rediss:// URL and leaves ioredis its own parameters', () => {
    expect(
      parseRedisTarget('rediss://:pw@h:6380/1?family=6&ca=%2Fetc%2Fca.pem&cert=c.pem&key=k.pem'),
    ).toEqual({
      kind: 'server',
      url: 'rediss://:pw@h:6380/1?family=6',
      tls: { ca: '/etc/ca.pem', cert: 'c.pem', key: 'k.pem' },
    });
    expect(
      parseRedisTarget('rediss://h:6380?cert=c.pem&key=k.pem&passphrase-file=%2Frun%2Fk.pass'),
    ).toEqual({
      kind: 'server',
      url: 'rediss://h:6380',
      tls: { cert: 'c.pem', key: 'k.pem', passphraseFile: '/run/k.pass' },
    });
    expect(parseRedisTarget('rediss://h:6380?ca=ca.pem')).toEqual({
      kind: 'server',
      url: 'rediss://h:6380',
      tls: { ca: 'ca.pem' },
    });
    expect(parseRedisTarget('redis://h:6379?db=2')).toEqual({
      kind: 'server',
      url: 'redis://h:6379?db=2',
    });
  });

  it('speaks TLS for rediss:// in any case (ioredis sees only the lower-case one)', () => {
    expect(parseRedisTarget('REDISS://h:6380')).toEqual({
      kind: 'server',
      url: 'REDISS://h:6380',
      tls: {},
    });
    expect(parseRedisTarget('rediss://h:6380')).toMatchObject({ tls: {} });
  });

  it('speaks TLS to the sentinels and the master of a rediss+sentinel:// URL', () => {
    const target = parseRedisTarget(
      'rediss+sentinel://:pw@s1:26379/billing?sentinelPassword=s&ca=%2Fca.pem&cert=c&key=k',
    );
    expect(target).toMatchObject({
      kind: 'sentinel',
      master: 'billing',
      options: { password: 'pw', sentinelPassword: 's' },
      tls: { ca: '/ca.pem', cert: 'c', key: 'k' },
    });
    expect(parseRedisTarget('rediss+sentinel://s1:26379/billing')).toMatchObject({ tls: {} });
    expect(parseRedisTarget('redis+sentinel://s1:26379/billing')).not.toHaveProperty('tls');
  });

  it('speaks TLS to every cluster node of a rediss+cluster:// URL', () => {
    expect(parseRedisTarget('rediss+cluster://:pw@n1:7000,n2:7000')).toEqual({
      kind: 'cluster',
      nodes: [
        { host: 'n1', port: 7000 },
        { host: 'n2', port: 7000 },
      ],
      credentials: { password: 'pw' },
      tls: {},
    });
    expect(parseRedisTarget('rediss+cluster://n1:7000/?ca=%2Fca.pem&cert=c&key=k')).toMatchObject({
      tls: { ca: '/ca.pem', cert: 'c', key: 'k' },
    });
    expect(
      parseRedisTarget('rediss+sentinel://s1:26379/m?cert=c&key=k&passphrase-file=p'),
    ).toMatchObject({ tls: { cert: 'c', key: 'k', passphraseFile: 'p' } });
    expect(
      parseRedisTarget('rediss+cluster://n1:7000?cert=c&key=k&passphrase-file=p'),
    ).toMatchObject({ tls: { cert: 'c', key: 'k', passphraseFile: 'p' } });
  });

  it.each([
    [
      'http://localhost:6379',
      'must be a redis://, rediss://, redis+sentinel://, redis+cluster:// URL (or rediss+...)',
    ],
    [
      'not a url',
      'must be a redis://, rediss://, redis+sentinel://, redis+cluster:// URL (or rediss+...)',
    ],
    ['redis://h:6379?ca=ca.pem', 'ca is for TLS: use rediss://, rediss+sentinel:// or rediss+'],
    ['redis+sentinel://s1:26379/m?cert=c', 'cert is for TLS'],
    [
      'rediss+sentinel://s1:26379/m?db=1',
      'unknown parameter db (sentinelPassword, ca, cert, key, passphrase-file)',
    ],
    ['rediss://h:6379?ca=a&passphrase-file=p', 'passphrase-file is the passphrase of key: name'],
    ['rediss://h:6379?cert=c&key=k&passphrase-file=', 'passphrase-file must be the path of a'],
    ['redis://h:6379?passphrase-file=p', 'passphrase-file is for TLS: use rediss://'],
    ['rediss://h:6379?cert=c.pem', 'cert and key go together'],
    ['rediss://h:6379?ca=', 'ca must be the path of a PEM file'],
    ['redis+cluster://n1:7000?key=k.pem', 'key is for TLS'],
    [
      'rediss+cluster://n1:7000?ca=a&tls=1',
      'unknown parameter tls (only ca, cert, key, passphrase-file)',
    ],
    ['rediss://h:6380?ca=a.pem&tls=RedisCloudFixed', 'tls is not a parameter'],
    ['rediss://h:6380?ca=%ZZ', 'parameter ca is not percent-encoded correctly (write % as %25)'],
    ['redis://h:6379?%E0=1', 'a parameter name is not percent-encoded correctly'],
    ['redis+sentinel://s1:26379/m?sentinelPassword=%', 'parameter sentinelPassword is not'],
    ['redis+cluster://:ab%zz@n1:7000', 'the user or password is not percent-encoded correctly'],
    ['redis+sentinel://:ab%zz@s1:26379/m', 'the user or password is not percent-encoded'],
    ['redis+sentinel://s1:26379/m%zz', 'the master name is not percent-encoded correctly'],
    ['redis://:ab%zz@h:6379', 'the user or password is not percent-encoded correctly'],
    ['redis+sentinel://s1:26379', 'must be redis+sentinel://'],
    ['redis+sentinel://s1/billing', 'sentinel "s1" must be host:port'],
    ['redis+sentinel://s1:99999/billing', 'sentinel "s1:99999" must be host:port'],
    ['redis+sentinel://s1:26379/billing?db=2', 'unknown parameter db (only sentinelPassword)'],
    ['redis+sentinel://s1:26379/billing/99999999999', 'db 99999999999 must be at most 2147483647'],
    ['redis://h:6379/abc', "the path must be a database number (0, 1, ...), got 'abc'"],
    ['redis://h:6379/1/2', "the path must be a database number (0, 1, ...), got '1/2'"],
    ['redis://h:6379/-1', "the path must be a database number (0, 1, ...), got '-1'"],
    ['redis://h:6379?db=x', "db must be a database number (0, 1, ...), got 'x'"],
    [
      'redis://h:6379?maxRetriesPerRequest=3',
      'unknown parameter maxRetriesPerRequest (db, username, password, family, connectionName)',
    ],
    [
      'rediss://h:6379?ca=c.pem&keyPrefix=x',
      'unknown parameter keyPrefix (db, username, password, family, connectionName, ca, cert, key, passphrase-file)',
    ],
    ['redis://h:6379/0?famliy=6', 'unknown parameter famliy ('],
    ['redis://h:6379/%32', "the path must be a database number (0, 1, ...), got '%32'"],
    // A raw "/" in the password: its second half and the host read as the path, never quoted.
    ['redis://default:2024/Spring-Rain@redis.internal:6379', 'must be percent-encoded (%2F'],
    ['redis://user:/Secret@host', 'must be percent-encoded (%2F'],
    ['redis://u:12/ab?cd@host:6379', 'the path must be a database number; a "/", "?" or "#"'],
    ['redis://h:6379/99999999999', "got '99999999999'"],
    ['redis+cluster://', 'must be redis+cluster://[[user]:password@]host:port[,host:port...]'],
    ['redis+cluster://n1:7000/3', 'must be redis+cluster://'],
    ['redis+cluster://n1:7000?password=x', 'unknown parameter password (none)'],
    ['redis+cluster://n1:7000,n2', 'cluster node "n2" must be host:port'],
  ])('refuses %s', (url, message) => {
    expect(() => parseRedisTarget(url)).toThrow(message);
  });

  it('quotes no part of a sentinelPassword whose raw "&" cut it short', () => {
    const url = 'redis+sentinel://s1:26379/billing?sentinelPassword=ab&cdTAIL9f3kQ7';
    expect(() => parseRedisTarget(url)).toThrow(
      'an unknown parameter after sentinelPassword (only sentinelPassword); a "&" in the password must be percent-encoded (%26)',
    );
  });

  it('quotes no part of a password whose raw "?" made its tail the query', () => {
    for (const url of [
      'redis://default:2024?Spring-Rain@redis.internal:6379',
      'redis://default:2024?Spring&Rain@redis.internal:6379',
    ]) {
      expect(() => parseRedisTarget(url)).toThrow(
        'an unknown parameter; a "?" in the password must be percent-encoded (%3F)',
      );
    }
  });

  it('quotes no part of a password parameter whose raw "&" cut it short', () => {
    expect(() => parseRedisTarget('redis://h:6379?password=ab&cdTAIL9f3kQ7')).toThrow(
      'an unknown parameter after password (db, username, password, family, connectionName); a "&" in the password must be percent-encoded (%26)',
    );
  });

  it('quotes no part of a password whose raw "/" ended the credentials early', () => {
    for (const url of ['redis://default:2024/Spring-Rain@h:6379', 'redis://u:12/Rain?x@h:6379']) {
      expect(() => parseRedisTarget(url)).toThrow(/^(?!.*Rain).*$/s);
    }
  });
});

describe('hideUrlPasswords', () => {
  it.each([
    ['redis://:ab/cd@host:6379', 'redis://:redacted@host:6379'],
    ['redis+sentinel://:p@ss@h:1/m', 'redis+sentinel://:redacted@h:1/m'],
    ['https://user:p/w@host x', 'https://user:redacted@host x'],
    [
      'redis+sentinel://h:99999/m?sentinelPassword=S3CRET',
      'redis+sentinel://h:99999/m?sentinelPassword=redacted',
    ],
    ['redis://h:6379?password=x&db=1', 'redis://h:6379?password=redacted&db=1'],
    ['redis+cluster://:pw@n1:7000,n2:7000', 'redis+cluster://:redacted@n1:7000,n2:7000'],
    // An ACL user whose name holds an "@".
    ['redis://svc@billing:Pw-9f3k@h:6379', 'redis://svc@billing:redacted@h:6379'],
    ['redis+cluster://svc@b:Pw-9f3k@n1:7000', 'redis+cluster://svc@b:redacted@n1:7000'],
    // A raw "&" in a sentinelPassword: its tail is hidden too, the parameters after it not.
    [
      'redis+sentinel://s1:26379/m?sentinelPassword=ab&cdTAIL9f3kQ7&ca=ca.pem',
      'redis+sentinel://s1:26379/m?sentinelPassword=redacted&ca=ca.pem',
    ],
    // No password: a user before a later "@" in the query leaves the rest as it is.
    ['https://ops@billing.example:8443/x?ref=a@b', 'https://ops@billing.example:8443/x?ref=a@b'],
  ])('hides the passwords in %s', (text, shown) => {
    expect(hideUrlPasswords(text)).toBe(shown);
  });
});

describe('describeRedisTarget', () => {
  it.each([
    ['redis://h:6379?password=pw&family=6', 'redis://h:6379?password=redacted&family=6'],
    [
      'redis://h:6379/0?password=pw&connectionName=billing',
      'redis://h:6379/0?password=redacted&connectionName=billing',
    ],
    // A raw "#" in the password (a fragment to a URL parser) is hidden with it.
    ['redis://h:6379?password=a#Tail', 'redis://h:6379?password=redacted'],
  ])('keeps the ioredis options after a password parameter, not its tail: %s', (url, shown) => {
    expect(describeRedisTarget(url)).toBe(shown);
  });

  it('hides passwords', () => {
    expect(describeRedisTarget('redis://h:6379/0?password=pw')).toBe(
      'redis://h:6379/0?password=redacted',
    );
    expect(describeRedisTarget('redis://:pw@h:6379/0')).toBe('redis://:redacted@h:6379/0');
    expect(describeRedisTarget('redis+sentinel://app:pw@s1:26379,s2:26379/billing/1')).toBe(
      'redis+sentinel://s1:26379,s2:26379/billing/1',
    );
    expect(describeRedisTarget('redis+cluster://app:pw@n1:7000,[::1]:7001')).toBe(
      'redis+cluster://n1:7000,[::1]:7001',
    );
    expect(describeRedisTarget('rediss+cluster://:pw@n1:7000?ca=ca.pem')).toBe(
      'rediss+cluster://n1:7000',
    );
    expect(describeRedisTarget('rediss+sentinel://:pw@s1:26379/billing?ca=ca.pem')).toBe(
      'rediss+sentinel://s1:26379/billing/0',
    );
  });
});
