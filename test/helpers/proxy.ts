// Tiny real HTTP servers for tests: a server on a free port, and a forwarding proxy that can
// lose an answer (the request reaches the service; the client never hears back).
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';

/** A node:http server on a free port; `close` also drops the connections it still holds. */
export async function listen(
  handler: http.RequestListener,
): Promise<{ url: string; close(): Promise<void> }> {
  const server = http.createServer(handler);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/provisioning`,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function deferred<T = void>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

export interface Call {
  method: string;
  params: Record<string, unknown>;
}

/**
 * A forwarding proxy in front of the real server that records every call and, once armed,
 * forwards the next call of a method and then holds its answer: until the test releases it, or
 * until the proxy closes, which is a lost answer from the client's point of view (the order
 * exists, the client never hears).
 */
export async function startProxy(targetOrigin: string) {
  const calls: Call[] = [];
  let armed: {
    method: string;
    id: string | undefined;
    forwarded: ReturnType<typeof deferred<string>>;
    released: Promise<void>;
  } | null = null;
  const closed = deferred();
  let down = false;
  const server = await listen(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const raw = Buffer.concat(chunks).toString('utf8');
    const call = JSON.parse(raw) as Call;
    calls.push(call);
    if (down) {
      // A gateway whose service is away: nothing reaches it.
      res.writeHead(503, { 'content-type': 'text/html' });
      res.end('<h1>503 Service Temporarily Unavailable</h1>');
      return;
    }
    const upstream = await request(`${targetOrigin}${req.url}`, {
      method: 'GET',
      headers: {
        'content-type': 'application/json',
        'x-api-key': String(req.headers['x-api-key']),
      },
      body: raw,
    });
    const answer = await upstream.body.text();
    const hold = armed;
    if (
      hold !== null &&
      hold.method === call.method &&
      (hold.id === undefined || hold.id === call.params?.id)
    ) {
      armed = null;
      hold.forwarded.resolve(answer);
      await Promise.race([hold.released, closed.promise]);
    }
    if (!res.destroyed) {
      res.writeHead(upstream.statusCode, { 'content-type': 'application/json; charset=utf-8' });
      res.end(answer);
    }
  });

  /** Arms the proxy for the next `method` call (for the caller id `id`, when given). */
  function hold(method: string, id?: string) {
    const forwarded = deferred<string>();
    const released = deferred();
    armed = { method, id, forwarded, released: released.promise };
    return {
      /** The answer, once the server gave it (the call reached the service). */
      answer: forwarded.promise,
      /** Lets the held answer go on to the client. */
      release: () => released.resolve(),
    };
  }

  return {
    url: server.url,
    calls,
    hold,
    /** While on, every call is answered 503 by the proxy and never forwarded (an outage). */
    outage: (on: boolean) => {
      down = on;
    },
    /** Holds the answer of the next `method` call until the proxy closes: a lost answer. */
    holdNext: (method: string, id?: string): Promise<string> => hold(method, id).answer,
    close: async () => {
      closed.resolve();
      await server.close();
    },
  };
}
