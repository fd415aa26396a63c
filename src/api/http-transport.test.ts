// The node:http transport's abort: the request's signal ends the request and the body being read, and no listener stays on it.
import { getEventListeners } from 'node:events';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { HttpTransport } from './http-transport.js';
import { llhttpParserFrom, nodeHttpCommon, SocketLane } from './socket-lane.js';
import type { TransportRequest } from './transport.js';

const servers: http.Server[] = [];
afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

async function serve(handler: http.RequestListener): Promise<string> {
  const server = http.createServer(handler);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function request(origin: string, signal: AbortSignal): TransportRequest {
  return { origin, path: '/x', method: 'PATCH', headers: {}, body: '{}', signal };
}

async function readAll(body: NodeJS.ReadableStream): Promise<string> {
  let text = '';
  for await (const chunk of body) text += String(chunk);
  return text;
}

describe.each(['never', 'always'] as const)(
  'HttpTransport and the request signal, own sockets %s',
  (ownSockets) => {
    it('a complete answer, then another: no listener is left on either signal', async () => {
      const origin = await serve((_req, res) => res.end('{"ok":true}'));
      const transport = new HttpTransport({ timeoutMs: 5_000, ownSockets });
      for (let i = 0; i < 2; i += 1) {
        const controller = new AbortController();
        const response = await transport.request(request(origin, controller.signal));
        expect(await readAll(response.body)).toBe('{"ok":true}');
        await new Promise((resolve) => setImmediate(resolve));
        expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
      }
      await transport.destroy();
    });

    it('an abort after the head fails the body being read, with the reason as its cause', async () => {
      const origin = await serve((_req, res) => {
        res.writeHead(200, { 'content-length': '100' });
        res.write('{"partial":');
      });
      const transport = new HttpTransport({ timeoutMs: 5_000, ownSockets });
      const controller = new AbortController();
      const response = await transport.request(request(origin, controller.signal));
      const reading = readAll(response.body).then(
        () => undefined,
        (error: unknown) => error,
      );
      const reason = new Error('deadline');
      controller.abort(reason);
      const error = (await reading) as Error & { code?: string };
      expect(error).toBeInstanceOf(Error);
      expect(error.name).toBe('AbortError');
      expect(error.code).toBe('ABORT_ERR');
      expect(error.cause).toBe(reason);
      await new Promise((resolve) => setImmediate(resolve));
      expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
      await transport.destroy();
    });

    it('an abort before any answer rejects the request; an already aborted signal too', async () => {
      const origin = await serve(() => {});
      const transport = new HttpTransport({ timeoutMs: 5_000, ownSockets });
      const controller = new AbortController();
      const pending = transport.request(request(origin, controller.signal)).then(
        () => undefined,
        (error: unknown) => error,
      );
      const reason = new Error('stopped');
      controller.abort(reason);
      const error = (await pending) as Error;
      expect(error.name).toBe('AbortError');
      expect(error.cause).toBe(reason);
      const early = (await transport.request(request(origin, AbortSignal.abort(reason))).then(
        () => undefined,
        (e: unknown) => e,
      )) as Error;
      expect(early.name).toBe('AbortError');
      expect(early.cause).toBe(reason);
      expect(getEventListeners(controller.signal, 'abort')).toHaveLength(0);
      await transport.destroy();
    });
  },
);

describe('HttpTransport: status reports on its own sockets', () => {
  it('a header value with a line break is refused before anything is sent', async () => {
    let requests = 0;
    const origin = await serve((_req, res) => {
      requests += 1;
      res.end('{}');
    });
    const transport = new HttpTransport({ timeoutMs: 5_000 });
    const smuggled = {
      ...request(origin, new AbortController().signal),
      headers: { 'x-api-key': 'k\r\nx-evil: 1' },
    };
    const error = (await transport.request(smuggled).then(
      () => undefined,
      (e: unknown) => e,
    )) as Error & { code?: string };
    expect(error.code).toBe('ERR_INVALID_CHAR');
    const fine = await transport.request(request(origin, new AbortController().signal));
    expect(await readAll(fine.body)).toBe('{}');
    expect(requests).toBe(1);
    await transport.destroy();
  });

  it("a frozen headers object's lines are checked once and sent on every request; a bad one is refused every time", async () => {
    const seen: (string | undefined)[] = [];
    const origin = await serve((req, res) => {
      seen.push(req.headers['x-api-key'] as string | undefined);
      res.end('{}');
    });
    const transport = new HttpTransport({ timeoutMs: 5_000 });
    const headers = Object.freeze({ 'x-api-key': 'k-1', accept: 'application/json' });
    const smuggling = Object.freeze({ 'x-api-key': 'k\r\nx-evil: 1' });
    for (let i = 0; i < 3; i += 1) {
      const fine = await transport.request({ ...request(origin, new AbortController().signal), headers });
      expect(await readAll(fine.body)).toBe('{}');
      const refused = (await transport
        .request({ ...request(origin, new AbortController().signal), headers: smuggling })
        .then(
          () => undefined,
          (e: unknown) => e,
        )) as Error & { code?: string };
      expect(refused.code).toBe('ERR_INVALID_CHAR');
    }
    expect(seen).toEqual(['k-1', 'k-1', 'k-1']);
    await transport.destroy();
  });

  it.each([
    ['own sockets', 'always'],
    ['node:http', 'never'],
  ] as const)(
    'a path with a space or a line break is refused before anything is sent (%s)',
    async (_name, own) => {
      let requests = 0;
      const origin = await serve((_req, res) => {
        requests += 1;
        res.end('{}');
      });
      const transport = new HttpTransport({ timeoutMs: 5_000, ownSockets: own });
      for (const path of ['/x y', '/x\r\nx-evil: 1\r\n\r\nPATCH /y', '/x\u0000', '/\u0100']) {
        const error = (await transport
          .request({ ...request(origin, new AbortController().signal), path })
          .then(
            () => undefined,
            (e: unknown) => e,
          )) as Error & { code?: string };
        expect(error.code, path).toBe('ERR_UNESCAPED_CHARACTERS');
      }
      const fine = await transport.request(request(origin, new AbortController().signal));
      expect(await readAll(fine.body)).toBe('{}');
      expect(requests).toBe(1);
      await transport.destroy();
    },
  );

  it('by default the pages and the reports share the kept-alive sockets: a GET, a PATCH, a GET on one connection', async () => {
    let connections = 0;
    const origin = await serve((req, res) => res.end(JSON.stringify({ method: req.method })));
    servers[0]!.on('connection', () => {
      connections += 1;
    });
    const transport = new HttpTransport({ timeoutMs: 5_000 });
    const methods: string[] = [];
    for (const method of ['GET', 'PATCH', 'GET']) {
      const response = await transport.request({
        ...request(origin, new AbortController().signal),
        method,
        body: method === 'GET' ? null : '{}',
      });
      methods.push(JSON.parse(await readAll(response.body)).method);
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(methods).toEqual(['GET', 'PATCH', 'GET']);
    expect(connections).toBe(1);
    await transport.destroy();
  });

  it('200 reports one after another on kept-alive sockets: each answer whole, the big ones read slowly too', async () => {
    let served = 0;
    const origin = await serve((_req, res) => {
      served += 1;
      // Every third answer is larger than a stream's buffer mark, so the reader pauses its socket.
      res.end(JSON.stringify({ n: served, pad: 'x'.repeat(served % 3 === 0 ? 40_000 : 10) }));
    });
    const transport = new HttpTransport({ timeoutMs: 5_000 });
    for (let i = 1; i <= 200; i += 1) {
      const response = await transport.request(request(origin, new AbortController().signal));
      if (i % 3 === 0) await new Promise((resolve) => setImmediate(resolve));
      expect(JSON.parse(await readAll(response.body)).n).toBe(i);
    }
    await transport.destroy();
  });
});

describe('SocketLane: a socket that fails right after a whole answer', () => {
  const ANSWER = 'HTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\n{"ok":1}';

  it('an error between the end of its answer and its return to the idle ones is heard, and the socket is not reused', async () => {
    let connections = 0;
    const server = net.createServer((socket) => {
      connections += 1;
      socket.on('error', () => {});
      socket.on('data', () => socket.write(ANSWER));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    const Parser = llhttpParserFrom(nodeHttpCommon);
    if (Parser === undefined) throw new Error("this runtime's llhttp binding is not there");
    const lane = new SocketLane({
      idleMs: 4_000,
      connectTimeoutMs: 5_000,
      Parser,
      // The first socket fails (a reset, as a read would report it) in the turn its answer's last byte arrives:
      // after the lane has parsed the whole answer, before the socket goes back to the idle ones.
      open: ({ hostname, port }) => {
        const socket = net.connect({ host: hostname, port });
        if (connections === 0) {
          let received = 0;
          socket.on('data', (chunk: Buffer) => {
            received += chunk.length;
            if (received === Buffer.byteLength(ANSWER)) {
              process.nextTick(() =>
                socket.destroy(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' })),
              );
            }
          });
        }
        return socket;
      },
    });
    const send = () =>
      lane.request({
        secure: false,
        hostname: '127.0.0.1',
        port,
        path: '/x',
        method: 'PATCH',
        headers: {},
        body: '{}',
        signal: new AbortController().signal,
      });
    try {
      expect(await readAll((await send()).body)).toBe('{"ok":1}');
      await new Promise((resolve) => setImmediate(resolve));
      // The failed socket was not kept: the next request is answered on a new connection.
      expect(await readAll((await send()).body)).toBe('{"ok":1}');
      expect(connections).toBe(2);
    } finally {
      lane.destroy();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe('SocketLane: one socket, one parser, many answers', () => {
  it('answers of every framing one after another on one kept socket are each read whole', async () => {
    const answers = [
      'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\n{"a\r\n4\r\n":1}\r\n0\r\nx-trailer: t\r\n\r\n',
      'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\n{"b":2}',
      'HTTP/1.1 204 No Content\r\n\r\n',
      'HTTP/1.1 503 Service Unavailable\r\ncontent-length: 7\r\nretry-after: 1\r\n\r\n{"c":3}',
      'HTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\n{"d":4}',
    ];
    let connections = 0;
    let served = 0;
    const server = net.createServer((socket) => {
      connections += 1;
      socket.on('error', () => {});
      // The lane writes each request in one write and waits for its answer: one request a read.
      socket.on('data', () => socket.write(answers[served++ % answers.length]!));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    const Parser = llhttpParserFrom(nodeHttpCommon);
    if (Parser === undefined) throw new Error("this runtime's llhttp binding is not there");
    const lane = new SocketLane({ idleMs: 4_000, connectTimeoutMs: 5_000, Parser });
    const read: string[] = [];
    try {
      for (let i = 0; i < 3 * answers.length; i += 1) {
        const response = await lane.request({
          secure: false,
          hostname: '127.0.0.1',
          port,
          path: '/x',
          method: 'PATCH',
          headers: {},
          body: '{}',
          signal: new AbortController().signal,
        });
        read.push(`${response.statusCode} ${await readAll(response.body)}`);
        await new Promise((resolve) => setImmediate(resolve));
      }
    } finally {
      lane.destroy();
      await new Promise((resolve) => server.close(resolve));
    }
    const once = ['200 {"a":1}', '200 {"b":2}', '204 ', '503 {"c":3}', '200 {"d":4}'];
    expect(read).toEqual([...once, ...once, ...once]);
    expect(connections).toBe(1);
  });
});

describe('SocketLane: a socket with no request on it', () => {
  const ANSWER = 'HTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\n{"ok":1}';

  it('is dropped when bytes, an end or an error reach it idle, and its listeners do not grow request by request', async () => {
    const serverSockets: net.Socket[] = [];
    const server = net.createServer((socket) => {
      serverSockets.push(socket);
      socket.on('error', () => {});
      socket.on('data', () => socket.write(ANSWER));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    const Parser = llhttpParserFrom(nodeHttpCommon);
    if (Parser === undefined) throw new Error("this runtime's llhttp binding is not there");
    const opened: net.Socket[] = [];
    const lane = new SocketLane({
      idleMs: 60_000,
      connectTimeoutMs: 5_000,
      Parser,
      open: ({ hostname, port }) => {
        const socket = net.connect({ host: hostname, port });
        opened.push(socket);
        return socket;
      },
    });
    const send = async () => {
      const response = await lane.request({
        secure: false,
        hostname: '127.0.0.1',
        port,
        path: '/x',
        method: 'PATCH',
        headers: {},
        body: '{}',
        signal: new AbortController().signal,
      });
      const text = await readAll(response.body);
      // The socket goes back to the idle ones once the answer's turn is over.
      await new Promise((resolve) => setImmediate(resolve));
      return text;
    };
    const closed = (socket: net.Socket) =>
      socket.destroyed ? Promise.resolve() : new Promise((resolve) => socket.once('close', resolve));
    const counts = (socket: net.Socket) =>
      ['data', 'end', 'error', 'close', 'timeout'].map((event) => getEventListeners(socket, event).length);
    try {
      expect(await send()).toBe('{"ok":1}');
      const idle = counts(opened[0]!);
      for (let i = 0; i < 50; i += 1) expect(await send()).toBe('{"ok":1}');
      expect(opened).toHaveLength(1);
      expect(counts(opened[0]!)).toEqual(idle);
      // Bytes nobody asked for on the idle socket: dropped, and the next request goes on a new connection.
      serverSockets[0]!.write('HTTP/1.1 200 OK\r\n');
      await closed(opened[0]!);
      expect(await send()).toBe('{"ok":1}');
      expect(opened).toHaveLength(2);
      // The server ends the idle socket: dropped too.
      serverSockets[1]!.end();
      await closed(opened[1]!);
      expect(await send()).toBe('{"ok":1}');
      // A reset of the idle socket: heard (never thrown) and dropped.
      opened[2]!.destroy(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }));
      await closed(opened[2]!);
      expect(await send()).toBe('{"ok":1}');
      expect(opened).toHaveLength(4);
      expect(opened.slice(0, 3).every((socket) => socket.destroyed)).toBe(true);
    } finally {
      lane.destroy();
      for (const socket of serverSockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe('SocketLane: an answer whole in the read its head came in', () => {
  it('is handed on whole, its body made only when asked for; one whose body comes later is a stream', async () => {
    const serverSockets: net.Socket[] = [];
    let requests = 0;
    const server = net.createServer((socket) => {
      serverSockets.push(socket);
      socket.on('error', () => {});
      socket.on('data', () => {
        requests += 1;
        // The first answer in one write; the second's head alone (its body is written once the test asks).
        if (requests === 1) socket.write('HTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\n{"n":11}');
        else if (requests === 2) socket.write('HTTP/1.1 200 OK\r\ncontent-length: 8\r\n\r\n');
        else socket.write('HTTP/1.1 204 No Content\r\n\r\n');
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    const Parser = llhttpParserFrom(nodeHttpCommon);
    if (Parser === undefined) throw new Error("this runtime's llhttp binding is not there");
    const lane = new SocketLane({ idleMs: 60_000, connectTimeoutMs: 5_000, Parser });
    const send = () =>
      lane.request({
        secure: false,
        hostname: '127.0.0.1',
        port,
        path: '/x',
        method: 'PATCH',
        headers: {},
        body: '{}',
        signal: new AbortController().signal,
      });
    try {
      const first = await send();
      expect(first.whole?.toString()).toBe('{"n":11}');
      expect(await readAll(first.body)).toBe('{"n":11}');
      await new Promise((resolve) => setImmediate(resolve));
      const second = await send();
      expect(second.whole).toBeUndefined();
      serverSockets[0]!.write('{"n":22}');
      expect(await readAll(second.body)).toBe('{"n":22}');
      await new Promise((resolve) => setImmediate(resolve));
      const third = await send();
      expect([third.statusCode, third.whole?.length]).toEqual([204, 0]);
      expect(await readAll(third.body)).toBe('');
      // Every answer on the one kept connection.
      expect(serverSockets).toHaveLength(1);
    } finally {
      lane.destroy();
      for (const socket of serverSockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe('HttpTransport: a runtime whose llhttp binding the lane cannot drive', () => {
  const { HTTPParser } = process.getBuiltinModule('_http_common') as { HTTPParser: Record<string, unknown> };
  const withoutBody = Object.assign(function Parser() {}, { ...HTTPParser, kOnBody: undefined });
  it.each([
    ['no _http_common', () => undefined],
    [
      'loading it throws',
      () => {
        throw new Error('No such built-in module: _http_common');
      },
    ],
    ['no HTTPParser', () => ({})],
    ['a parser without kOnBody', () => ({ HTTPParser: withoutBody })],
    ['a parser without execute', () => ({ HTTPParser: Object.assign(function Parser() {}, HTTPParser) })],
  ])('%s: status reports go through node:http, each answered whole', async (_name, httpCommon) => {
    expect(llhttpParserFrom(httpCommon)).toBeUndefined();
    let served = 0;
    const origin = await serve((_req, res) => {
      served += 1;
      res.end(JSON.stringify({ n: served }));
    });
    const transport = new HttpTransport({ timeoutMs: 5_000, ownSockets: 'always', httpCommon });
    for (let i = 1; i <= 3; i += 1) {
      const response = await transport.request(request(origin, new AbortController().signal));
      expect(response.statusCode).toBe(200);
      expect(JSON.parse(await readAll(response.body)).n).toBe(i);
    }
    expect(served).toBe(3);
    await transport.destroy();
  });

  it("this runtime's own binding is taken", () => {
    expect(llhttpParserFrom(nodeHttpCommon)).toBe(HTTPParser);
  });
});
