// rediss:// against real redis-servers that speak only TLS: a private CA given by `ca`, a client
// certificate for a server that requires one, and clear errors when either is missing.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { answersForKeys, connectRedis, type RedisClient } from '../../../src/redis/connection.js';
import { startTestRedis, TEST_TLS, type TestRedis } from '../../helpers/redis-server.js';

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

/** The URL's address with other query parameters. */
const withQuery = (server: TestRedis, query: string) =>
  `rediss://127.0.0.1:${server.port}${query ? `?${query}` : ''}`;

describe('rediss:// with the files of the URL', () => {
  it('connects every role over TLS, trusting the CA named by ca', async () => {
    for (const role of ['request', 'worker', 'store'] as const) {
      const redis = await connect(tlsServer.url, role);
      await redis.set(`{bc}:tls-${role}`, 'yes');
      expect(await redis.get(`{bc}:tls-${role}`)).toBe('yes');
      expect(await answersForKeys(redis)).toBe(true);
    }
  });

  it("refuses a server whose certificate Node's authorities do not vouch for", async () => {
    await expect(connect(withQuery(tlsServer, ''))).rejects.toThrow(/self-signed certificate/);
  });

  it('sends the client certificate a server requires, and fails without it', async () => {
    const redis = await connect(clientCertServer.url);
    expect(await redis.ping()).toBe('PONG');
    const caOnly = `ca=${encodeURIComponent(TEST_TLS.ca)}`;
    // The server hangs up on a handshake without one: Node sees the connection reset.
    await expect(connect(withQuery(clientCertServer, caOnly))).rejects.toThrow(
      /Connection is closed\. \(.*ECONNRESET\)/,
    );
  });

  it('names the parameter and the file that cannot be read', async () => {
    await expect(connect(withQuery(tlsServer, 'ca=/nonexistent/ca.pem'))).rejects.toThrow(
      'the ca file /nonexistent/ca.pem cannot be read (ENOENT)',
    );
  });

  it('does not take a plain connection on a TLS-only server', async () => {
    await expect(connect(`redis://127.0.0.1:${tlsServer.port}`)).rejects.toThrow();
  });
});
