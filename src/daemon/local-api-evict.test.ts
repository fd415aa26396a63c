// The local API at its connection cap, on a fake monotonic clock: the slot taken is the one idle longest, counted
// from its last answer, and an answered request no longer holds its connection's slot.
import { mkdtemp, rm } from 'node:fs/promises';
import { createConnection, type Socket } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { PATIENCE_MS, waitFor } from '../../test/helpers/wait-for.js';
import { systemClock } from '../lib/clock.js';
import { silentLogger } from '../lib/logger.js';
import { LocalApiServer } from './local-api.js';

let dir: string;
let socketPath: string;
let server: LocalApiServer | undefined;
const sockets: Socket[] = [];
let now = 0;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-api-evict-'));
  socketPath = path.join(dir, 'agent.sock');
  now = 0;
});

afterEach(async () => {
  for (const socket of sockets.splice(0)) socket.destroy();
  await server?.close();
  server = undefined;
  await rm(dir, { recursive: true, force: true });
});

interface Client {
  socket: Socket;
  closed: boolean;
  received: string;
}

/** A raw connection, admitted by the server (counted by it) before this resolves. */
async function connect(api: LocalApiServer, count: number): Promise<Client> {
  const socket = createConnection(socketPath);
  sockets.push(socket);
  const client: Client = { socket, closed: false, received: '' };
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => {
    client.received += chunk;
  });
  socket.on('close', () => {
    client.closed = true;
  });
  socket.on('error', () => undefined);
  await waitFor(async () => (await api.connectionCount()) >= count, PATIENCE_MS, {
    what: 'admitted',
    intervalMs: 2,
  });
  return client;
}

it('at the cap, the connection idle longest since its last answer gives its slot, not the first one made', async () => {
  const api = new LocalApiServer(
    socketPath,
    {
      health: () => ({ healthy: true, lastLoopAt: null }),
      status: () => ({ ok: true }),
      sync: async () => ({ converged: true, exitCode: 0, result: null }),
    },
    silentLogger(),
    { headersTimeoutMs: 60_000, requestTimeoutMs: 60_000, keepAliveTimeoutMs: 60_000, maxConnections: 3 },
    { monotonic: () => now, sleep: systemClock.sleep },
  );
  server = api;
  await api.start();
  const first = await connect(api, 1);
  now = 1_000;
  const second = await connect(api, 2);
  // Idle as long as the second: of two equal, the one made first gives its slot.
  const third = await connect(api, 3);
  now = 3_000;
  // The first one made asks and is answered (keep-alive): idle since now, the most recently of the three.
  first.socket.write('GET /v1/health HTTP/1.1\r\nHost: agent\r\n\r\n');
  await waitFor(() => first.received.startsWith('HTTP/1.1 200'), PATIENCE_MS, {
    what: 'the answer',
    intervalMs: 2,
  });
  await waitFor(() => api.requestsInProgress() === 0, PATIENCE_MS, {
    what: 'no request in progress',
    intervalMs: 2,
  });
  now = 4_000;

  const fourth = await connect(api, 3);

  await waitFor(() => second.closed, PATIENCE_MS, {
    what: 'the connection idle longest closed',
    intervalMs: 2,
  });
  expect([first.closed, third.closed, fourth.closed]).toEqual([false, false, false]);
  expect(api.requestsInProgress()).toBe(0);
});
