// rediss:// against real redis-servers that speak only TLS: a private CA given by `ca`, a client
// certificate for a server that requires one, and clear errors when either is missing or a file
// is not what it should be; a TLS Cluster whose nodes cannot be verified fails with the reason.
import { rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  connectRedis,
  type RedisClient,
  takesWritesForKeys,
} from '../../../src/redis/connection.js';
import { startTestRedis, TEST_TLS, type TestRedis, tlsQuery } from '../../helpers/redis-server.js';

const servers: TestRedis[] = [];
const clients: RedisClient[] = [];
let tlsServer: TestRedis;
let clientCertServer: TestRedis;

beforeAll(async () => {
  tlsServer = await startTestRedis([], 'tls');
  servers.push(tlsServer);
  clientCertServer = await startTestRedis([], 'tls-client-cert');
  servers.push(clientCertServer);
});

afterAll(async () => {
  for (const client of clients) client.disconnect();
  for (const server of servers) await server.stop();
});

async function connect(url: string, role: 'request' | 'worker' | 'store' = 'request') {
  const client = await connectRedis(url, role);
  clients.push(client);
  return client;
}

/** The server's address with the TLS files given. */
const withFiles = (server: TestRedis, files: Parameters<typeof tlsQuery>[0]) =>
  `rediss://127.0.0.1:${server.port}${tlsQuery(files)}`;

describe('rediss:// with the files of the URL', () => {
  it('connects every role over TLS, trusting the CA named by ca', async () => {
    for (const role of ['request', 'worker', 'store'] as const) {
      const redis = await connect(tlsServer.url, role);
      await redis.set(`{bc}:tls-${role}`, 'yes');
      expect(await redis.get(`{bc}:tls-${role}`)).toBe('yes');
      expect(await takesWritesForKeys(redis)).toBe(true);
    }
  });

  it("refuses a server whose certificate Node's authorities do not vouch for", async () => {
    await expect(connect(withFiles(tlsServer, {}))).rejects.toThrow(/self-signed certificate/);
  });

  it('sends the client certificate a server requires, and fails without it', async () => {
    const redis = await connect(clientCertServer.url);
    expect(await redis.ping()).toBe('PONG');
    // The server hangs up on a handshake without one: Node sees the connection reset, or reads
    // the server's alert first.
    await expect(connect(withFiles(clientCertServer, { ca: TEST_TLS.ca }))).rejects.toThrow(
      /Connection is closed\. \(.*(ECONNRESET|certificate required)/,
    );
  });

  it('names the parameter and the file that cannot be read', async () => {
    await expect(connect(withFiles(tlsServer, { ca: '/nonexistent/ca.pem' }))).rejects.toThrow(
      'the ca file /nonexistent/ca.pem cannot be read (ENOENT)',
    );
  });

  it('names the file that is not a certificate, or a certificate and key that do not match', async () => {
    await expect(connect(withFiles(tlsServer, { ca: TEST_TLS.clientKey }))).rejects.toThrow(
      `the ca file ${TEST_TLS.clientKey} holds no PEM certificate`,
    );
    const { ca, clientCert } = TEST_TLS;
    const mismatched = { ca, cert: clientCert, key: TEST_TLS.serverKey };
    await expect(connect(withFiles(tlsServer, mismatched))).rejects.toThrow(
      /the TLS files \(ca .*, cert .*client\.pem, key .*server\.key\) cannot be used: .*key values mismatch/,
    );
    const keyNotPem = { ca, cert: clientCert, key: ca };
    await expect(connect(withFiles(tlsServer, keyNotPem))).rejects.toThrow(
      /the TLS files \(.*key .*ca\.pem\) cannot be used/,
    );
  });

  it('opens an encrypted client key with the passphrase its file holds', async () => {
    const { ca, clientCert: cert, clientKeyEncrypted: key } = TEST_TLS;
    const passphraseFile = TEST_TLS.clientKeyPassphrase;
    const redis = await connect(
      withFiles(clientCertServer, { ca, cert, key, 'passphrase-file': passphraseFile }),
    );
    expect(await redis.ping()).toBe('PONG');

    await expect(connect(withFiles(clientCertServer, { ca, cert, key }))).rejects.toThrow(
      `the key file ${key} is encrypted: name a file holding its passphrase with passphrase-file`,
    );
    const wrong = join(tmpdir(), `billing-wrong-passphrase-${process.pid}`);
    await writeFile(wrong, 'not the passphrase\n');
    try {
      await expect(
        connect(withFiles(clientCertServer, { ca, cert, key, 'passphrase-file': wrong })),
      ).rejects.toThrow(`the passphrase in ${wrong} does not decrypt the key file ${key}`);
    } finally {
      await rm(wrong, { force: true });
    }
    await expect(
      connect(withFiles(clientCertServer, { ca, cert, key, 'passphrase-file': '/nonexistent/p' })),
    ).rejects.toThrow('the passphrase-file /nonexistent/p cannot be read (ENOENT)');
  });

  it('does not take a plain connection on a TLS-only server', async () => {
    await expect(connect(`redis://127.0.0.1:${tlsServer.port}`)).rejects.toThrow();
  });

  it('speaks TLS for REDISS:// too (ioredis alone would not)', async () => {
    const upper = tlsServer.url.replace('rediss://', 'REDISS://');
    const redis = await connect(upper);
    expect(await redis.ping()).toBe('PONG');
  });
});

/**
 * A TLS cluster of one node, announcing 127.0.0.1 as a node of a real cluster does once its
 * peers have met it; `slots` says whether it serves every slot yet (the cluster is not ready
 * before). `certificate` is the one it presents.
 */
async function oneNodeCluster(certificate: 'server' | 'localhost') {
  const configFile = `billing-tls-${process.pid}-${Date.now()}.conf`;
  const [cert, key] =
    certificate === 'server'
      ? [TEST_TLS.serverCert, TEST_TLS.serverKey]
      : [TEST_TLS.localhostCert, TEST_TLS.localhostKey];
  const node = await startTestRedis(
    [
      '--cluster-enabled',
      'yes',
      '--cluster-config-file',
      configFile,
      '--tls-cluster',
      'yes',
      '--cluster-announce-ip',
      '127.0.0.1',
      '--tls-cert-file',
      cert,
      '--tls-key-file',
      key,
    ],
    'tls',
  );
  servers.push({
    ...node,
    stop: async () => {
      await node.stop();
      await rm(join(tmpdir(), configFile), { force: true });
    },
  });
  const admin = await connect(node.url.replace('127.0.0.1', 'localhost'));
  return {
    port: node.port,
    serveEverySlot: () => admin.call('CLUSTER', 'ADDSLOTSRANGE', '0', '16383'),
  };
}

const trustTestCa = tlsQuery({ ca: TEST_TLS.ca });

describe('rediss+cluster:// at start', () => {
  it('fails with the reason when the nodes cannot be verified, instead of waiting forever', async () => {
    // Its certificate is for the name localhost only: the client learns the slots through
    // localhost, then meets the node at the address it announces.
    const node = await oneNodeCluster('localhost');
    await node.serveEverySlot();
    await expect(
      connect(`rediss+cluster://localhost:${node.port}${trustTestCa}`, 'worker'),
    ).rejects.toThrow(
      new RegExp(
        `not ready after 1\\d s \\(TLS to 127\\.0\\.0\\.1:${node.port}, as the cluster announces that node: .*does not match certificate's altnames`,
      ),
    );
  }, 60_000);

  it('waits for a cluster that is not ready yet, as without TLS', async () => {
    const node = await oneNodeCluster('server');
    const connecting = connect(`rediss+cluster://127.0.0.1:${node.port}${trustTestCa}`, 'worker');
    // Longer than a TLS check's interval: the check finds TLS working and the start waits on.
    await new Promise((resolve) => setTimeout(resolve, 12_000));
    await node.serveEverySlot();
    const redis = await connecting;
    expect(await redis.set('{bc}:tls-late', '1')).toBe('OK');
  }, 60_000);
});
