// The client against hostile loopback stand-ins: redirects elsewhere, compressed or HTML bodies, header floods.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { type AddressInfo, createServer as createTcpServer, type Socket } from 'node:net';
import { gzipSync } from 'node:zlib';
import { afterEach, describe, expect, it } from 'vitest';
import { createClient } from './client.js';
import {
  deliveryVerdict,
  HttpStatusError,
  MalformedResponseError,
  NetworkError,
  ResponseTooLargeError,
  TimeoutError,
} from './errors.js';
import { HttpTransport } from './http-transport.js';
import { createServiceTransport, type ServiceTransportOptions, type Transport } from './transport.js';
import { createUndiciTransport } from './undici-transport.js';

const API_KEY = 'sk-hostile-test-0123456789abcdef';
/**
 * The request deadline of every case that does not test the deadline itself: past the test's own timeout (adv30).
 * Connect, accept and the stand-in's answer all run in this one process, so on a loaded machine a deadline of a
 * few seconds could win the race and turn the failure under test into a TimeoutError (the 101 case's 300 ms did);
 * a request the client leaves unsettled then fails as the test's timeout instead.
 */
const NO_DEADLINE = 3_600_000;

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

interface Seen {
  method: string;
  url: string;
  key: string | undefined;
}

async function serve(
  handler: (req: IncomingMessage, res: ServerResponse) => void,
): Promise<{ url: string; seen: Seen[] }> {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const key = req.headers['x-api-key'];
      seen.push({ method: req.method ?? '', url: req.url ?? '', key: Array.isArray(key) ? key[0] : key });
      handler(req, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

function client(baseUrl: string) {
  return createClient({ baseUrl, apiKey: API_KEY, timeoutMs: NO_DEADLINE, maxResponseBytes: 1 << 20 });
}

const deployed = { activity_status: 'deployed', error_status: 'none' } as const;

describe('a redirect to another host or scheme', () => {
  it.each([301, 302, 303, 307, 308])(
    '%i is never followed: the key never reaches the Location',
    async (status) => {
      const elsewhere = await serve((_req, res) => res.end('{}'));
      const service = await serve((req, res) => {
        res.writeHead(status, { location: `${elsewhere.url}${req.url ?? '/'}?key=${API_KEY}` }).end();
      });
      const api = client(service.url);

      const list = await api
        .listConfigInstancePage({ device_id: 'dvc_1' }, { limit: 10 })
        .catch((e: unknown) => e);
      const report = await api.reportConfigInstanceStatus('cfg_a', deployed).catch((e: unknown) => e);

      expect(list).toBeInstanceOf(HttpStatusError);
      expect(report).toBeInstanceOf(HttpStatusError);
      expect((list as HttpStatusError).status).toBe(status);
      expect(String(list)).not.toContain(API_KEY);
      expect(service.seen.map((s) => s.method)).toEqual(['GET', 'PATCH']);
      expect(elsewhere.seen).toEqual([]);
    },
  );
});

describe('bodies the client did not ask for', () => {
  it('a gzip body (Content-Encoding the client never offered) is malformed, retryable, not decoded', async () => {
    const body = gzipSync(
      JSON.stringify({ object: 'list', total_count: -1, limit: 10, offset: 0, has_more: false, data: [] }),
    );
    const service = await serve((_req, res) =>
      res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip' }).end(body),
    );
    const error = await client(service.url)
      .listConfigInstancePage({ device_id: 'dvc_1' }, { limit: 10 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(MalformedResponseError);
    expect(service.seen[0]?.url).toBeDefined();
  });

  it('a 200 with an HTML page (a captive portal, a proxy login) is malformed, never a listing', async () => {
    const service = await serve((_req, res) =>
      res.writeHead(200, { 'content-type': 'text/html' }).end('<html><body>Sign in</body></html>'),
    );
    const error = await client(service.url)
      .listConfigInstancePage({ device_id: 'dvc_1' }, { limit: 10 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(MalformedResponseError);
  });

  it('a flood of headers (over 16 KiB) fails the request as a network error, bounded', async () => {
    const service = await serve((_req, res) => {
      for (let i = 0; i < 200; i++) res.setHeader(`x-junk-${i}`, 'j'.repeat(1_000));
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
    const error = await client(service.url)
      .listConfigInstancePage({ device_id: 'dvc_1' }, { limit: 10 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(NetworkError);
  });
});

describe('a report answered 2xx by something that is not the service', () => {
  it('an HTML page (a captive portal, a proxy login page) does not settle it: it stays queued', async () => {
    const portal = await serve((_req, res) =>
      res
        .writeHead(200, { 'content-type': 'text/html; charset=utf-8' })
        .end('<!doctype html><title>Log in</title>'),
    );
    const untyped = await serve((_req, res) =>
      res.writeHead(200).end('\n  <html><body>Welcome</body></html>'),
    );
    for (const stand_in of [portal, untyped]) {
      const error = await client(stand_in.url)
        .reportConfigInstanceStatus('cfg_a', deployed)
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(MalformedResponseError);
      // No report gets through such a page now: delivery stops, every report stays queued as it was.
      expect(deliveryVerdict(error)).toBe('stop');
    }
  });

  it('an empty 200, a 204 and a JSON body still settle it', async () => {
    const answers = [
      (res: ServerResponse) => res.writeHead(200, { 'content-type': 'text/html' }).end(),
      (res: ServerResponse) => res.writeHead(204).end(),
      (res: ServerResponse) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}'),
      (res: ServerResponse) => res.writeHead(200, { 'content-type': 'text/plain' }).end('OK'),
    ];
    for (const answer of answers) {
      const service = await serve((_req, res) => answer(res));
      await expect(
        client(service.url).reportConfigInstanceStatus('cfg_a', deployed),
      ).resolves.toBeUndefined();
    }
  });
});

describe('a report answered 4xx by a page that is not the service', () => {
  it("an HTML error page (nginx's 405 for a PATCH, a proxy's 404, a portal's 400) keeps it: sent again later", async () => {
    const pages = [
      (res: ServerResponse) =>
        res
          .writeHead(405, { 'content-type': 'text/html' })
          .end('<html><head><title>405 Not Allowed</title></head><body>nginx</body></html>'),
      (res: ServerResponse) => res.writeHead(404).end('\r\n<!DOCTYPE html><h1>Not Found</h1>'),
      (res: ServerResponse) => res.writeHead(400, { 'content-type': 'text/html; charset=utf-8' }).end('Bad'),
      (res: ServerResponse) => res.writeHead(413, { 'content-type': 'text/html' }).end('<h1>Too Large</h1>'),
    ];
    for (const page of pages) {
      const proxy = await serve((_req, res) => page(res));
      const error = await client(proxy.url)
        .reportConfigInstanceStatus('cfg_a', deployed)
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(HttpStatusError);
      expect(deliveryVerdict(error)).toBe('skip');
    }
  });

  it("the service's own refusal (its JSON error, or no body) still drops it", async () => {
    const answers = [
      (res: ServerResponse) =>
        res
          .writeHead(404, { 'content-type': 'application/json' })
          .end('{"error":{"code":"not_found","message":"no such config instance"}}'),
      (res: ServerResponse) => res.writeHead(405).end(),
      (res: ServerResponse) => res.writeHead(422, { 'content-type': 'text/plain' }).end('bad status'),
    ];
    for (const answer of answers) {
      const service = await serve((_req, res) => answer(res));
      const error = await client(service.url)
        .reportConfigInstanceStatus('cfg_a', deployed)
        .catch((e: unknown) => e);
      expect(deliveryVerdict(error)).toBe('drop');
    }
  });
});

/**
 * A raw TCP stand-in: each request's head is read, then `answer` writes whatever bytes it likes on the socket.
 * Connections are destroyed at cleanup, so an endless answer stops there.
 */
async function serveRaw(
  answer: (socket: Socket, nth: number) => void,
): Promise<{ url: string; requests: () => number }> {
  let requests = 0;
  const sockets = new Set<Socket>();
  const server = createTcpServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    let head = '';
    socket.on('data', (chunk: Buffer) => {
      head += chunk.toString('latin1');
      // Requests here have no body but the PATCH's, which is small and arrives with its head.
      if (!head.includes('\r\n\r\n')) return;
      head = '';
      requests += 1;
      answer(socket, requests);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, requests: () => requests };
}

const PAGE = JSON.stringify({
  object: 'list',
  total_count: 0,
  limit: 10,
  offset: 0,
  has_more: false,
  data: [],
});

/** Both transports production builds: node:http (direct) and undici (what a proxy gets, here without one). */
const TRANSPORTS: [string, (options: ServiceTransportOptions) => Transport][] = [
  ['node:http', createServiceTransport],
  ['undici', createUndiciTransport],
  // Every request on the node:http transport's own sockets, parsed by llhttp (src/api/socket-lane.ts).
  ['own sockets', (options) => new HttpTransport({ ...options, ownSockets: 'always' })],
  ['node:http for every request', (options) => new HttpTransport({ ...options, ownSockets: 'never' })],
];

describe.each(TRANSPORTS)('malformed HTTP on the wire, through %s', (_name, build) => {
  function clientOn(baseUrl: string, overrides: { timeoutMs?: number; maxResponseBytes?: number } = {}) {
    const options = { baseUrl, timeoutMs: NO_DEADLINE, maxResponseBytes: 64 * 1024, ...overrides };
    const transport = build(options);
    cleanups.push(() => transport.destroy());
    return createClient({ ...options, apiKey: API_KEY, transport });
  }
  const listPage = (baseUrl: string, overrides?: { timeoutMs?: number; maxResponseBytes?: number }) =>
    clientOn(baseUrl, overrides)
      .listConfigInstancePage({ device_id: 'dvc_1' }, { limit: 10 })
      .catch((e: unknown) => e);

  function expectFailure(error: unknown, type: abstract new (...args: never[]) => Error, retryable: boolean) {
    expect(error).toBeInstanceOf(type);
    expect((error as { retryable: boolean }).retryable).toBe(retryable);
    expect(String(error)).not.toContain(API_KEY);
    expect(JSON.stringify(error)).not.toContain(API_KEY);
  }

  it('a storm of 1xx answers that never ends: the total deadline stops it', async () => {
    const service = await serveRaw((socket) => {
      const storm = setInterval(() => {
        if (socket.destroyed) return clearInterval(storm);
        socket.write('HTTP/1.1 102 Processing\r\n\r\n'.repeat(50));
      }, 1);
      socket.on('close', () => clearInterval(storm));
    });
    // Any deadline shows it: the storm never ends, so only the deadline can (100 ms keeps the tier fast).
    expectFailure(await listPage(service.url, { timeoutMs: 100 }), TimeoutError, true);
  });

  it('a 101 (an upgrade the client never asked for): a network error, never a request left unsettled', async () => {
    const service = await serveRaw((socket) => {
      socket.write('HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n{}');
    });
    // Only the client's own classification may settle it: the stand-in holds the connection open (NO_DEADLINE).
    expectFailure(await listPage(service.url), NetworkError, true);
  });

  it('a 101 with no Upgrade header (small32): a network error on every transport, never an HTTP status', async () => {
    const service = await serveRaw((socket) => {
      socket.write('HTTP/1.1 101 Switching Protocols\r\nconnection: close\r\n\r\n{}');
    });
    // node:http gave it to 'response' as a status (HttpStatusError 'unexpected'); the other transports fail it.
    expectFailure(await listPage(service.url), NetworkError, true);
  });

  it('a body shorter than its content-length, then the connection closed: a network error', async () => {
    const service = await serveRaw((socket) => {
      socket.end(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n${PAGE}`);
    });
    expectFailure(await listPage(service.url), NetworkError, true);
  });

  it.each([
    ['not a number', 'content-length: 12abc'],
    ['two that disagree', `content-length: ${PAGE.length}\r\ncontent-length: ${PAGE.length + 1}`],
    ['a bad chunk size', 'transfer-encoding: chunked'],
    ['no status line', ''],
  ])('a malformed head or framing (%s): a network error', async (what, header) => {
    const service = await serveRaw((socket) => {
      if (what === 'no status line') return void socket.end('junk\r\n\r\n');
      const body = what === 'a bad chunk size' ? `zz\r\n${PAGE}\r\n0\r\n\r\n` : PAGE;
      socket.end(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n${header}\r\n\r\n${body}`);
    });
    expectFailure(await listPage(service.url), NetworkError, true);
  });

  it('bytes past the declared content-length are not the body, and never answer the next request', async () => {
    const service = await serveRaw((socket, nth) => {
      const extra = nth === 1 ? '{"object":"junk"}HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}' : '';
      socket.write(
        `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${PAGE.length}\r\n\r\n${PAGE}${extra}`,
      );
    });
    const client = clientOn(service.url);
    const first = await client.listConfigInstancePage({ device_id: 'dvc_1' }, { limit: 10 });
    expect(first.bytes).toBe(PAGE.length);
    const second = await client
      .listConfigInstancePage({ device_id: 'dvc_1' }, { limit: 10 })
      .catch((e: unknown) => e);
    // Either the junk broke the connection (a network error, retryable) or the page came on a new one: never
    // the smuggled `{}` as the second answer.
    if (second instanceof Error) expectFailure(second, NetworkError, true);
    else expect((second as { bytes: number }).bytes).toBe(PAGE.length);
  });

  it('an endless chunked body: cut at the cap, not read to the end', async () => {
    const service = await serveRaw((socket) => {
      socket.write('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n');
      const chunk = `4000\r\n${'x'.repeat(0x4000)}\r\n`;
      const pump = () => {
        while (!socket.destroyed && socket.write(chunk));
        if (!socket.destroyed) socket.once('drain', pump);
      };
      pump();
    });
    expectFailure(await listPage(service.url), ResponseTooLargeError, false);
  });

  it('a server that closes mid-body of a chunked answer: a network error, not a short page', async () => {
    const service = await serveRaw((socket) => {
      socket.end(
        `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n10\r\n${PAGE.slice(0, 16)}\r\n`,
      );
    });
    expectFailure(await listPage(service.url), NetworkError, true);
  });

  it('a head over 16 KiB, sent slowly: a network error before the deadline', async () => {
    const service = await serveRaw((socket) => {
      socket.write('HTTP/1.1 200 OK\r\n');
      let sent = 0;
      const drip = setInterval(() => {
        if (socket.destroyed || sent > 64) return clearInterval(drip);
        sent += 1;
        socket.write(`x-junk-${sent}: ${'j'.repeat(1_000)}\r\n`);
      }, 1);
      socket.on('close', () => clearInterval(drip));
    });
    expectFailure(await listPage(service.url), NetworkError, true);
  });
});
