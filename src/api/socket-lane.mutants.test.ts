// The socket lane where mutation testing found it untested: the parser's shape checks, headers as node:http gives them, a doubled answer, IPv6 hosts, the connect timer.
import net, { type AddressInfo, type Socket } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { HttpTransport } from './http-transport.js';
import {
  type LlhttpParserClass,
  llhttpParserFrom,
  nodeHttpCommon,
  SocketLane,
  type SocketLaneRequest,
} from './socket-lane.js';
import type { TransportRequest } from './transport.js';

const servers: net.Server[] = [];
afterEach(async () => {
  vi.useRealTimers();
  for (const server of servers.splice(0)) {
    await new Promise((resolve) => server.close(resolve));
  }
});

/** A raw TCP server answering each request head it reads with `answer`; counts the connections it accepted. */
async function rawServer(
  answer: (head: string) => string,
  host = '127.0.0.1',
): Promise<{ port: number; connections: () => number; heads: string[] }> {
  let connections = 0;
  const heads: string[] = [];
  const sockets: Socket[] = [];
  const server = net.createServer((socket) => {
    connections += 1;
    sockets.push(socket);
    let buffered = '';
    socket.on('error', () => {});
    socket.on('data', (chunk) => {
      buffered += chunk.toString('latin1');
      for (let end = buffered.indexOf('\r\n\r\n'); end !== -1; end = buffered.indexOf('\r\n\r\n')) {
        const head = buffered.slice(0, end);
        buffered = buffered.slice(end + 4);
        heads.push(head);
        socket.write(answer(head));
      }
    });
  });
  server.on('close', () => {
    for (const socket of sockets) socket.destroy();
  });
  const originalClose = server.close.bind(server);
  server.close = (callback) => {
    for (const socket of sockets) socket.destroy();
    return originalClose(callback);
  };
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  return { port: (server.address() as AddressInfo).port, connections: () => connections, heads };
}

function get(origin: string): TransportRequest {
  return { origin, path: '/x', method: 'GET', headers: {}, body: null, signal: new AbortController().signal };
}

async function readAll(body: NodeJS.ReadableStream): Promise<string> {
  let text = '';
  for await (const chunk of body) text += String(chunk);
  return text;
}

const { HTTPParser } = process.getBuiltinModule('_http_common') as { HTTPParser: LlhttpParserClass };

describe('llhttpParserFrom: a binding is taken only when every part the lane drives is there', () => {
  /** node's parser with one static or one method taken away, everything else as it is. */
  function without(part: { static: string } | { method: string }): () => unknown {
    class Reshaped extends HTTPParser {}
    if ('static' in part) Object.defineProperty(Reshaped, part.static, { value: undefined });
    else Object.defineProperty(Reshaped.prototype, part.method, { value: undefined });
    return () => ({ HTTPParser: Reshaped });
  }

  it('the same parser with nothing taken away is taken', () => {
    class Same extends HTTPParser {}
    expect(llhttpParserFrom(() => ({ HTTPParser: Same }))).toBe(Same);
  });

  it.each([
    ...['RESPONSE', 'kOnHeaders', 'kOnHeadersComplete', 'kOnBody', 'kOnMessageComplete'].map((name) => ({
      static: name,
    })),
    ...['initialize', 'execute', 'finish', 'close'].map((name) => ({ method: name })),
  ])('without %o: not taken (requests go through node:http)', (part) => {
    expect(llhttpParserFrom(without(part))).toBeUndefined();
  });
});

describe.each(['never', 'always'] as const)(
  'an answer read through node:http or own sockets (%s)',
  (ownSockets) => {
    it('repeated headers as IncomingMessage gives them: joined, set-cookie a list, a single-valued one kept first', async () => {
      const body = '{"ok":true}';
      const { port } = await rawServer(() =>
        [
          'HTTP/1.1 200 OK',
          `Content-Length: ${body.length}`,
          'X-Many: a',
          'X-Many: b',
          'Set-Cookie: c=1',
          'Set-Cookie: d=2',
          'Content-Type: application/json',
          'Content-Type: text/plain',
          'X-One: z',
          '',
          body,
        ].join('\r\n'),
      );
      const transport = new HttpTransport({ timeoutMs: 5_000, ownSockets });
      const response = await transport.request(get(`http://127.0.0.1:${port}`));
      expect(await readAll(response.body)).toBe(body);
      expect(response.headers['x-many']).toBe('a, b');
      expect(response.headers['set-cookie']).toEqual(['c=1', 'd=2']);
      expect(response.headers['content-type']).toBe('application/json');
      expect(response.headers['x-one']).toBe('z');
      await transport.destroy();
    });

    it('every header node:http keeps once: a repeat is dropped, the first value kept', async () => {
      // content-length is one too, but llhttp refuses a repeated one before any header is read.
      const single = [
        'content-type',
        'user-agent',
        'referer',
        'host',
        'authorization',
        'proxy-authorization',
        'if-modified-since',
        'if-unmodified-since',
        'from',
        'location',
        'max-forwards',
        'retry-after',
        'etag',
        'last-modified',
        'server',
        'age',
        'expires',
      ];
      const { port } = await rawServer(() =>
        [
          'HTTP/1.1 200 OK',
          'Content-Length: 0',
          ...single.flatMap((name) => [`${name}: first`, `${name}: second`]),
          '',
          '',
        ].join('\r\n'),
      );
      const transport = new HttpTransport({ timeoutMs: 5_000, ownSockets });
      const response = await transport.request(get(`http://127.0.0.1:${port}`));
      await readAll(response.body);
      for (const name of single) expect(response.headers[name], name).toBe('first');
      await transport.destroy();
    });

    it.each([
      ['timeout=1', 2],
      ['timeout=12', 1],
      ['max=5, timeout=1', 1],
    ])(
      'Keep-Alive: %s — the server keeps it under a second or not at all: connections for two requests',
      async (hint, connections) => {
        const server = await rawServer(() =>
          ['HTTP/1.1 200 OK', 'Content-Length: 2', `Keep-Alive: ${hint}`, '', 'ok'].join('\r\n'),
        );
        const transport = new HttpTransport({ timeoutMs: 5_000, ownSockets });
        for (let i = 0; i < 2; i += 1) {
          const response = await transport.request(get(`http://127.0.0.1:${server.port}`));
          expect(await readAll(response.body)).toBe('ok');
          await new Promise((resolve) => setImmediate(resolve));
        }
        expect(server.connections()).toBe(connections);
        await transport.destroy();
      },
    );

    it.each([
      ['a path with a space', { path: '/x y' }],
      ['a path with a line break', { path: '/x\r\nX-Injected: 1' }],
      ['a header name starting with a space', { headers: { ' x-a': '1' } }],
      ['a header name ending with a space', { headers: { 'x-a ': '1' } }],
      ['a header name with a colon', { headers: { 'x:a': '1' } }],
    ])('%s is refused before anything is sent', async (_name, change) => {
      const server = await rawServer(() => ['HTTP/1.1 200 OK', 'Content-Length: 2', '', 'ok'].join('\r\n'));
      const transport = new HttpTransport({ timeoutMs: 5_000, ownSockets });
      await expect(
        transport.request({ ...get(`http://127.0.0.1:${server.port}`), ...change }),
      ).rejects.toBeInstanceOf(Error);
      // The same transport still sends a well-formed request: the refusal wrote nothing.
      const response = await transport.request(get(`http://127.0.0.1:${server.port}`));
      expect(await readAll(response.body)).toBe('ok');
      expect(server.heads).toHaveLength(1);
      expect(server.heads[0]?.split('\r\n')[0]).toBe('GET /x HTTP/1.1');
      await transport.destroy();
    });

    it.each([100, 103, 199])(
      'an interim %i before the answer is skipped: the answer after it is the one read',
      async (interim) => {
        const server = await rawServer(
          () =>
            `HTTP/1.1 ${interim} Interim\r\n\r\n` +
            ['HTTP/1.1 200 OK', 'Content-Length: 2', '', 'ok'].join('\r\n'),
        );
        const transport = new HttpTransport({ timeoutMs: 5_000, ownSockets });
        for (let i = 0; i < 2; i += 1) {
          const response = await transport.request(get(`http://127.0.0.1:${server.port}`));
          expect(response.statusCode).toBe(200);
          expect(await readAll(response.body)).toBe('ok');
          await new Promise((resolve) => setImmediate(resolve));
        }
        await transport.destroy();
      },
    );

    it('one set-cookie is a list of one; other headers are strings', async () => {
      const { port } = await rawServer(() =>
        ['HTTP/1.1 200 OK', 'Content-Length: 0', 'Set-Cookie: c=1', 'X-One: z', '', ''].join('\r\n'),
      );
      const transport = new HttpTransport({ timeoutMs: 5_000, ownSockets });
      const response = await transport.request(get(`http://127.0.0.1:${port}`));
      await readAll(response.body);
      expect(response.headers['set-cookie']).toEqual(['c=1']);
      expect(response.headers['x-one']).toBe('z');
      await transport.destroy();
    });

    it('forty headers (llhttp hands over more than 32 in parts): every one is there', async () => {
      const names = Array.from({ length: 40 }, (_, i) => `X-H${i}: v${i}`);
      const { port } = await rawServer(() =>
        ['HTTP/1.1 200 OK', 'Content-Length: 2', ...names, '', 'ok'].join('\r\n'),
      );
      const transport = new HttpTransport({ timeoutMs: 5_000, ownSockets });
      const response = await transport.request(get(`http://127.0.0.1:${port}`));
      expect(await readAll(response.body)).toBe('ok');
      for (let i = 0; i < 40; i += 1) expect(response.headers[`x-h${i}`], `x-h${i}`).toBe(`v${i}`);
      await transport.destroy();
    });

    it('an IPv6 literal service: the Host header is bracketed, with the port', async () => {
      const { port, heads } = await rawServer(
        () => ['HTTP/1.1 200 OK', 'Content-Length: 2', '', 'ok'].join('\r\n'),
        '::1',
      );
      const transport = new HttpTransport({ timeoutMs: 5_000, ownSockets });
      const response = await transport.request(get(`http://[::1]:${port}`));
      expect(await readAll(response.body)).toBe('ok');
      expect(heads[0]?.split('\r\n')).toContain(`Host: [::1]:${port}`);
      await transport.destroy();
    });
  },
);

describe('SocketLane', () => {
  const Parser = llhttpParserFrom(nodeHttpCommon) as LlhttpParserClass;
  const laneRequest = (port: number): SocketLaneRequest => ({
    secure: false,
    hostname: '127.0.0.1',
    port,
    path: '/x',
    method: 'GET',
    headers: {},
    body: null,
    signal: new AbortController().signal,
  });

  it('two answers to one request: the first is the answer, and the socket is not used again', async () => {
    const one = ['HTTP/1.1 200 OK', 'Content-Length: 3', '', 'one'].join('\r\n');
    const two = ['HTTP/1.1 200 OK', 'Content-Length: 3', '', 'two'].join('\r\n');
    const server = await rawServer(() => one + two);
    const lane = new SocketLane({ idleMs: 60_000, connectTimeoutMs: 5_000, Parser });
    for (let i = 0; i < 2; i += 1) {
      const response = await lane.request(laneRequest(server.port));
      expect(await readAll(response.body)).toBe('one');
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(server.connections()).toBe(2);
    lane.destroy();
  });

  it('a kept-alive socket outlives the connect timeout: the timer ends with the connect', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const server = await rawServer(() => ['HTTP/1.1 200 OK', 'Content-Length: 2', '', 'ok'].join('\r\n'));
    const lane = new SocketLane({ idleMs: 60_000, connectTimeoutMs: 1_000, Parser });
    const first = await lane.request(laneRequest(server.port));
    expect(await readAll(first.body)).toBe('ok');
    await new Promise((resolve) => setImmediate(resolve));
    vi.advanceTimersByTime(5_000);
    await new Promise((resolve) => setImmediate(resolve));
    const second = await lane.request(laneRequest(server.port));
    expect(await readAll(second.body)).toBe('ok');
    expect(server.connections()).toBe(1);
    lane.destroy();
  });

  it('a connect that never completes fails with CONNECT_TIMEOUT once connectTimeoutMs has passed', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    // A host name whose lookup never answers: the socket stays connecting.
    const lane = new SocketLane({
      idleMs: 60_000,
      connectTimeoutMs: 1_000,
      Parser,
      open: () => net.connect({ host: 'service.test', port: 80, lookup: () => {} }),
    });
    const settled = lane.request(laneRequest(80)).then(
      () => 'answered',
      (error: Error & { code?: string }) => error.code,
    );
    vi.advanceTimersByTime(999);
    await new Promise((resolve) => setImmediate(resolve));
    let early: unknown = 'pending';
    void settled.then((value) => {
      early = value;
    });
    await new Promise((resolve) => setImmediate(resolve));
    expect(early).toBe('pending');
    vi.advanceTimersByTime(1);
    expect(await settled).toBe('CONNECT_TIMEOUT');
    lane.destroy();
  });
});
