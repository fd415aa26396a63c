// Keep-alive connections the service closed: loopback servers that close them, requests counted at the server.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { Agent } from 'undici';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { instanceFactory } from '../../test/helpers/instances.js';
import { type ClientOptions, createClient, type RequestEvent } from './client.js';
import { HttpStatusError, MalformedResponseError, NetworkError } from './errors.js';
import { HttpTransport } from './http-transport.js';
import { createServiceTransport, type ServiceTransportOptions, type Transport } from './transport.js';
import { createUndiciTransport } from './undici-transport.js';

const API_KEY = 'sk-unit-test-stale-0123456789';
const T0 = '2025-01-01T00:00:00Z';

/** One request as the server saw it: on which connection, and the how-many-th request on it. */
interface Seen {
  method: string;
  url: string;
  body: string;
  connection: number;
  nthOnConnection: number;
}
type Behaviour = (req: IncomingMessage, res: ServerResponse, seen: Seen) => void;

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function serve(
  behave: Behaviour,
  tune: (server: ReturnType<typeof createServer>) => void = () => {},
): Promise<{ url: string; seen: Seen[]; connections: () => number }> {
  const seen: Seen[] = [];
  const perSocket = new Map<Socket, { connection: number; requests: number }>();
  let connections = 0;
  const server = createServer((req, res) => {
    let entry = perSocket.get(req.socket);
    if (entry === undefined) {
      connections += 1;
      entry = { connection: connections, requests: 0 };
      perSocket.set(req.socket, entry);
    }
    entry.requests += 1;
    const chunks: Buffer[] = [];
    const at = { connection: entry.connection, nthOnConnection: entry.requests };
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const one: Seen = {
        method: req.method ?? '',
        url: req.url ?? '',
        body: Buffer.concat(chunks).toString('utf8'),
        ...at,
      };
      seen.push(one);
      behave(req, res, one);
    });
  });
  tune(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, seen, connections: () => connections };
}

function json(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': String(text.length) });
  res.end(text);
}

function device(id: string) {
  return {
    object: 'device',
    id,
    name: `name-${id}`,
    status: 'online',
    last_connected_at: T0,
    last_disconnected_at: T0,
    created_at: T0,
    updated_at: T0,
  };
}

/** A valid instance for the deploy answer. */
const configInstance = (id: string) => instanceFactory()({ id });

/**
 * Both transports production builds: node:http for a direct connection, undici (the one a proxy gets, here
 * without one) with every connection watched.
 */
const TRANSPORTS: [string, (options: ServiceTransportOptions) => Transport][] = [
  ['node:http', createServiceTransport],
  ['undici', createUndiciTransport],
  // Every request on the node:http transport's own sockets, parsed by llhttp (src/api/socket-lane.ts).
  ['own sockets', (options) => new HttpTransport({ ...options, ownSockets: 'always' })],
  ['node:http for every request', (options) => new HttpTransport({ ...options, ownSockets: 'never' })],
];
let buildTransport: (options: ServiceTransportOptions) => Transport = createServiceTransport;

/** A client on a transport production builds, destroyed after the test; no deadline is tested here. */
function client(url: string, events: RequestEvent[] = [], overrides: Partial<ClientOptions> = {}) {
  const transport = buildTransport({ timeoutMs: 15_000, maxResponseBytes: 1_000_000, baseUrl: url });
  cleanups.push(() => transport.destroy());
  return createClient({
    baseUrl: url,
    apiKey: API_KEY,
    timeoutMs: 15_000,
    maxResponseBytes: 1_000_000,
    transport,
    onRequest: (event) => events.push(event),
    ...overrides,
  });
}

async function failure(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected a failure');
}

/** Closes a connection the way a server or proxy that gave up on it does: FIN, or RST (ECONNRESET). */
const closers = {
  'closed (FIN: other side closed)': (req: IncomingMessage) => req.socket.destroy(),
  'reset (RST: ECONNRESET)': (req: IncomingMessage) => req.socket.resetAndDestroy(),
};

/**
 * Every request the server killed because it came on a reused connection, each checked to be followed at once
 * by the same request on a connection new to the server (the hidden second send).
 */
function resent(seen: Seen[]): Seen[] {
  const killed = seen.filter((s) => s.nthOnConnection > 1);
  for (const dead of killed) {
    const next = seen[seen.indexOf(dead) + 1];
    const newest = Math.max(...seen.slice(0, seen.indexOf(dead) + 1).map((s) => s.connection));
    expect(next).toMatchObject({ method: dead.method, url: dead.url, body: dead.body, nthOnConnection: 1 });
    expect(next?.connection).toBeGreaterThan(newest);
  }
  return killed;
}

/**
 * Calls until one fails (at most 10 calls): undici's pool decides which call reuses a connection, the server
 * misbehaves only on reused ones. Returns the error and how many calls were made.
 */
async function firstFailure(call: () => Promise<unknown>): Promise<{ error: unknown; calls: number }> {
  for (let calls = 1; calls <= 10; calls += 1) {
    try {
      await call();
    } catch (error) {
      return { error, calls };
    }
  }
  throw new Error('no call failed');
}

describe.each(TRANSPORTS)('%s', (_name, build) => {
  beforeEach(() => {
    buildTransport = build;
  });

  describe('a request that meets a kept-alive connection the service closed', () => {
    for (const [how, close] of Object.entries(closers)) {
      it(`GET, connection ${how} as the request arrived: sent again at once on a new connection`, async () => {
        // Every connection serves one request; the next one on it finds it closed, with no response byte.
        const server = await serve((req, res, seen) => {
          if (seen.nthOnConnection > 1) return close(req);
          json(res, 200, device('dev_1'));
        });
        const events: RequestEvent[] = [];
        const c = client(server.url, events);
        const results = [];
        for (let i = 0; i < 8; i += 1) results.push(await c.getDevice('dev_1'));

        expect(results.map((d) => d.id)).toEqual(Array(8).fill('dev_1'));
        const killed = resent(server.seen);
        expect(killed.length).toBeGreaterThan(0);
        expect(server.seen).toHaveLength(8 + killed.length);
        // One verdict per call and none a failure: the second send is no attempt of anybody's retry policy.
        expect(events.map((e) => e.outcome)).toEqual(Array(8).fill('ok'));
      });
    }

    it('the status PATCH (a whole state, idempotent) is sent again, with the same body', async () => {
      const server = await serve((req, res, seen) => {
        if (seen.nthOnConnection > 1) return req.socket.destroy();
        res.writeHead(204).end();
      });
      const c = client(server.url);
      const reports = [];
      for (let i = 0; i < 8; i += 1) {
        const report = { activity_status: 'deployed', error_status: 'none', message: `report ${i}` } as const;
        reports.push(report);
        await expect(c.reportConfigInstanceStatus(`ci_${i}`, report)).resolves.toBeUndefined();
      }
      const killed = resent(server.seen);
      expect(killed.length).toBeGreaterThan(0);
      // What the service recorded, in order, is each report once.
      const answered = server.seen.filter((s) => s.nthOnConnection === 1);
      expect(answered.map((s) => [s.method, s.url])).toEqual(
        reports.map((_r, i) => ['PATCH', `/v1/config_instances/ci_${i}`]),
      );
      expect(answered.map((s) => JSON.parse(s.body) as unknown)).toEqual(reports);
    });

    it('an idle connection the server closes right after each response never fails a request', async () => {
      const server = await serve((_req, res) => {
        const socket = res.socket;
        json(res, 200, device('dev_1'));
        // The client still holds the connection as idle and may write the next request before it sees the FIN.
        res.on('finish', () => socket?.destroy());
      });
      const events: RequestEvent[] = [];
      const c = client(server.url, events);
      for (let i = 0; i < 20; i += 1) await c.getDevice('dev_1');

      expect(events.map((e) => e.outcome)).toEqual(Array(20).fill('ok'));
      expect(server.seen.map((s) => s.nthOnConnection)).toEqual(Array(20).fill(1));
    });

    it('a server whose keep-alive timeout is shorter than the agent is busy never fails a request', async () => {
      const server = await serve(
        (_req, res) => json(res, 200, device('dev_1')),
        (s) => {
          s.keepAliveTimeout = 1;
        },
      );
      const events: RequestEvent[] = [];
      const c = client(server.url, events);
      for (let i = 0; i < 5; i += 1) {
        await c.getDevice('dev_1');
        // Busy (a large page being parsed on a starved CPU): the event loop does not turn meanwhile.
        const until = performance.now() + 20;
        while (performance.now() < until);
      }
      expect(events.map((e) => e.outcome)).toEqual(Array(5).fill('ok'));
      expect(server.seen).toHaveLength(5);
    });
  });

  describe('a 408 on a kept-alive connection (the service timed it out as the request came; cit24)', () => {
    /** Node's http server answers a request it timed out this way: 408, then the connection closed. */
    const timeOut = (res: ServerResponse) => res.writeHead(408, { connection: 'close' }).end();

    it('GET: sent again at once on a new connection, no failure', async () => {
      const server = await serve((_req, res, seen) => {
        if (seen.nthOnConnection > 1) return timeOut(res);
        json(res, 200, device('dev_1'));
      });
      const events: RequestEvent[] = [];
      const c = client(server.url, events);
      for (let i = 0; i < 8; i += 1) expect((await c.getDevice('dev_1')).id).toBe('dev_1');
      const killed = resent(server.seen);
      expect(killed.length).toBeGreaterThan(0);
      expect(server.seen).toHaveLength(8 + killed.length);
      expect(events.map((e) => e.outcome)).toEqual(Array(8).fill('ok'));
    });

    it('the status PATCH: sent again with the same body; each report recorded once', async () => {
      const server = await serve((_req, res, seen) => {
        if (seen.nthOnConnection > 1) return timeOut(res);
        res.writeHead(204).end();
      });
      const c = client(server.url);
      const reports = [];
      for (let i = 0; i < 8; i += 1) {
        const report = { activity_status: 'deployed', error_status: 'none', message: `report ${i}` } as const;
        reports.push(report);
        await expect(c.reportConfigInstanceStatus(`ci_${i}`, report)).resolves.toBeUndefined();
      }
      expect(resent(server.seen).length).toBeGreaterThan(0);
      const answered = server.seen.filter((s) => s.nthOnConnection === 1);
      expect(answered.map((s) => JSON.parse(s.body) as unknown)).toEqual(reports);
    });

    it("a 408 on a new connection is the service's answer: one request, the 408 goes up", async () => {
      const server = await serve((_req, res) => timeOut(res));
      const error = await failure(client(server.url).getDevice('dev_1'));
      expect(error).toBeInstanceOf(HttpStatusError);
      expect((error as HttpStatusError).status).toBe(408);
      expect(server.seen).toHaveLength(1);
    });

    it('the deploy POST (not idempotent) met by a 408 on a reused connection is sent once: the 408 goes up', async () => {
      const server = await serve((_req, res, seen) => {
        if (seen.nthOnConnection > 1) return timeOut(res);
        json(res, 200, { deploy: configInstance('ci_1'), remove: [] });
      });
      const c = client(server.url);
      const { error, calls } = await firstFailure(() => c.deployConfigInstance('ci_1'));
      expect((error as HttpStatusError).status).toBe(408);
      expect(server.seen).toHaveLength(calls);
      expect(server.seen.at(-1)?.nthOnConnection).toBeGreaterThan(1);
    });
  });

  describe('failures that are not a stale connection are never sent again', () => {
    it('a new connection closed before any response: the error goes up after one request', async () => {
      const server = await serve((req) => req.socket.destroy());
      const events: RequestEvent[] = [];
      const error = await failure(client(server.url, events).getDevice('dev_1'));
      expect(error).toBeInstanceOf(NetworkError);
      expect(server.seen).toHaveLength(1);
      expect(events.map((e) => e.outcome)).toEqual(['network_error']);
    });

    /** The server answers a connection's first request and misbehaves with `rest` on any later one. */
    async function reusedMisbehaves(rest: Behaviour) {
      const server = await serve((req, res, seen) => {
        if (seen.nthOnConnection === 1) return json(res, 200, device('dev_1'));
        rest(req, res, seen);
      });
      const events: RequestEvent[] = [];
      const c = client(server.url, events);
      const { error, calls } = await firstFailure(() => c.getDevice('dev_1'));
      // The failed call was the last request the server saw, on a reused connection: nothing was sent again.
      expect(server.seen).toHaveLength(calls);
      expect(server.seen.at(-1)?.nthOnConnection).toBeGreaterThan(1);
      expect(events.map((e) => e.outcome).slice(0, -1)).toEqual(Array(calls - 1).fill('ok'));
      return error;
    }

    it('a reused connection closed after the response headers: the error goes up', async () => {
      const error = await reusedMisbehaves((req, res) => {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': '500' });
        res.write('{"object":"device","id":');
        // Let the headers and the first bytes leave before the connection is dropped.
        setTimeout(() => req.socket.destroy(), 20);
      });
      expect(error).toBeInstanceOf(NetworkError);
    });

    it('a reused connection closed after part of the status line: the error goes up', async () => {
      const error = await reusedMisbehaves((req) => {
        // Raw bytes of an answer that has begun but has no complete head yet.
        req.socket.write('HTTP/1.1 200 O');
        setTimeout(() => req.socket.destroy(), 20);
      });
      expect(error).toBeInstanceOf(NetworkError);
    });

    it('a reused connection reset after the response headers: the error goes up', async () => {
      const error = await reusedMisbehaves((req, res) => {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': '500' });
        res.write('{"object":"device","id":');
        setTimeout(() => req.socket.resetAndDestroy(), 20);
      });
      expect(error).toBeInstanceOf(NetworkError);
    });

    it('a close-delimited answer cut mid-body on a reused connection: malformed, not sent again', async () => {
      const error = await reusedMisbehaves((_req, res) => {
        res.writeHead(200, { 'content-type': 'application/json', connection: 'close' });
        res.write('{"object":"device","id":"dev_');
        setTimeout(() => res.end(), 20);
      });
      expect(error).toBeInstanceOf(MalformedResponseError);
    });

    it('the deploy POST (not idempotent) on a closed reused connection is sent once', async () => {
      const server = await serve((req, res, seen) => {
        if (seen.nthOnConnection > 1) return req.socket.destroy();
        json(res, 200, { deploy: configInstance('ci_1'), remove: [] });
      });
      const c = client(server.url);
      const { error, calls } = await firstFailure(() => c.deployConfigInstance('ci_1'));
      expect(error).toBeInstanceOf(NetworkError);
      expect(server.seen).toHaveLength(calls);
      expect(server.seen.at(-1)).toMatchObject({ method: 'POST' });
      expect(server.seen.at(-1)?.nthOnConnection).toBeGreaterThan(1);
    });

    it('never a loop: when the new connection fails too, the error goes up after one more request', async () => {
      let answered = 0;
      const server = await serve((req, res, seen) => {
        if (answered > 0 && seen.nthOnConnection > 1) answered = -1;
        if (answered < 0) return req.socket.destroy();
        answered += 1;
        json(res, 200, device('dev_1'));
      });
      const events: RequestEvent[] = [];
      const c = client(server.url, events);
      const { error, calls } = await firstFailure(() => c.getDevice('dev_1'));
      expect(error).toBeInstanceOf(NetworkError);
      // The calls before, the failed one on a reused connection, and once more on a new connection: no more.
      expect(server.seen).toHaveLength(calls + 1);
      expect(server.seen.at(-2)?.nthOnConnection).toBeGreaterThan(1);
      expect(server.seen.at(-1)?.nthOnConnection).toBe(1);
      expect(events.map((e) => e.outcome).at(-1)).toBe('network_error');
      expect(events).toHaveLength(calls);
    });

    it('an injected dispatcher the client did not build: its stale failure goes up', async () => {
      const server = await serve((req, res, seen) => {
        if (seen.nthOnConnection > 1) return req.socket.destroy();
        json(res, 200, device('dev_1'));
      });
      const agent = new Agent();
      cleanups.push(() => agent.destroy());
      const c = createClient({
        baseUrl: server.url,
        apiKey: API_KEY,
        timeoutMs: 15_000,
        maxResponseBytes: 1_000_000,
        dispatcher: agent,
      });
      const { error, calls } = await firstFailure(() => c.getDevice('dev_1'));
      expect(error).toBeInstanceOf(NetworkError);
      expect(server.seen).toHaveLength(calls);
    });
  });
});
