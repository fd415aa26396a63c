// The socket lane after a whole answer followed, in the same read, by bytes that are not an answer (adv24): the socket is not reused.
import net, { type AddressInfo, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { type LlhttpParserClass, llhttpParserFrom, nodeHttpCommon, SocketLane } from './socket-lane.js';

const servers: net.Server[] = [];
afterEach(async () => {
  for (const server of servers.splice(0)) await new Promise((resolve) => server.close(resolve));
});

/** A raw loopback server writing `answer` (one write, so one read on the other end) for each request head. */
async function rawServer(answer: string): Promise<{ port: number; connections: () => number }> {
  let connections = 0;
  const sockets: Socket[] = [];
  const server = net.createServer((socket) => {
    connections += 1;
    sockets.push(socket);
    let buffered = '';
    socket.on('error', () => {});
    socket.on('data', (chunk) => {
      buffered += chunk.toString('latin1');
      for (let end = buffered.indexOf('\r\n\r\n'); end !== -1; end = buffered.indexOf('\r\n\r\n')) {
        buffered = buffered.slice(end + 4);
        socket.write(answer);
      }
    });
  });
  const originalClose = server.close.bind(server);
  server.close = (callback) => {
    for (const socket of sockets) socket.destroy();
    return originalClose(callback);
  };
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { port: (server.address() as AddressInfo).port, connections: () => connections };
}

const Parser = llhttpParserFrom(nodeHttpCommon) as LlhttpParserClass;
const ok = ['HTTP/1.1 200 OK', 'Content-Length: 3', '', 'one'].join('\r\n');

describe('socket lane: bytes past a whole answer in the same read (adv24)', () => {
  it.each([
    ['garbage the parser refuses', 'XYZ garbage\r\n\r\n'],
    ['the start of another answer', 'HTTP/1.1 2'],
  ])('%s: the answer is the answer, and the socket is not used again', async (_name, tail) => {
    const server = await rawServer(ok + tail);
    const lane = new SocketLane({ idleMs: 60_000, connectTimeoutMs: 5_000, Parser });
    for (let i = 0; i < 2; i += 1) {
      const request = {
        secure: false,
        hostname: '127.0.0.1',
        port: server.port,
        path: '/x',
        method: 'GET',
        headers: {},
        body: null,
        signal: new AbortController().signal,
      };
      const response = await lane.request(request);
      let text = '';
      for await (const chunk of response.body) text += String(chunk);
      expect(response.statusCode).toBe(200);
      expect(text).toBe('one');
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(server.connections()).toBe(2);
    lane.destroy();
  });
});
