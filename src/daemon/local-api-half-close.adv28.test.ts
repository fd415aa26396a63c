// A local API client that half-closes after its request still gets its answer (adv28): a real unix socket in-process.
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { mkdtemp, rm } from 'node:fs/promises';
import { createConnection, type Socket } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PATIENCE_MS, waitFor } from '../../test/helpers/wait-for.js';
import { systemClock } from '../lib/clock.js';
import { silentLogger } from '../lib/logger.js';
import { LocalApiServer } from './local-api.js';

let dir: string;
let server: LocalApiServer | undefined;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-api-half-'));
});

afterEach(async () => {
  await server?.close();
  server = undefined;
  await rm(dir, { recursive: true, force: true });
});

describe('a client that half-closes after its request (adv28)', () => {
  // `printf 'POST /v1/sync ...' | nc -N -U /run/config-agent/agent.sock` sends its FIN after the request; node's
  // HTTP server aborted the request then, so a sync (answered once its pass ended) got nothing back.
  it('gets the answer of a sync that ends after its FIN, and the connection is closed after it', async () => {
    const socketPath = path.join(dir, 'agent.sock');
    let finishPass: (() => void) | undefined;
    server = new LocalApiServer(
      socketPath,
      {
        health: () => ({ healthy: true, lastLoopAt: null }),
        status: () => ({}),
        sync: async () => {
          await new Promise<void>((resolve) => (finishPass = resolve));
          return { converged: true, exitCode: 0, result: { pass: 1 } };
        },
      },
      silentLogger(),
      { headersTimeoutMs: 60_000, requestTimeoutMs: 60_000, keepAliveTimeoutMs: 60_000 },
      systemClock,
    );
    await server.start();
    // The server's side of the connection, seen as node's HTTP server takes the request: whether it has the FIN.
    let serverSide: Socket | undefined;
    let finSeen = false;
    const onRequest = (message: unknown) => {
      const { request, socket } = message as {
        request: { headers: Record<string, unknown> };
        socket: Socket;
      };
      if (request.headers['x-test'] !== 'half-close-fix32') return;
      serverSide = socket;
      if (socket.readableEnded) finSeen = true;
      else socket.once('end', () => (finSeen = true));
    };
    subscribe('http.server.request.start', onRequest);
    const client = createConnection(socketPath);
    let received = '';
    let closed = false;
    client.setEncoding('utf8');
    client.on('data', (chunk: string) => {
      received += chunk;
    });
    client.on('close', () => {
      closed = true;
    });
    client.on('error', () => undefined);
    await new Promise<void>((resolve) => client.once('connect', () => resolve()));
    try {
      client.end(
        'POST /v1/sync HTTP/1.1\r\nHost: a\r\nX-Test: half-close-fix32\r\nContent-Length: 0\r\n\r\n',
      );
      await waitFor(() => finishPass !== undefined, PATIENCE_MS, { what: 'the pass to start' });
      // The server has the FIN before the pass ends: seen on its side, not waited for (a fixed sleep let a slow
      // machine end the pass before the FIN arrived, and the test passed without the fix; fix32).
      await waitFor(() => finSeen, PATIENCE_MS, { what: "the server to see the client's FIN" });
    } finally {
      unsubscribe('http.server.request.start', onRequest);
    }
    expect(serverSide).toBeDefined();
    finishPass?.();
    await waitFor(() => closed, PATIENCE_MS, { what: 'the connection to end' });
    // Taken at once (102 Processing), answered when the pass ended.
    expect(received).toMatch(/^HTTP\/1\.1 102 Processing\r\n\r\nHTTP\/1\.1 200 /);
    expect(received).toContain('{"converged":true,"exitCode":0,"result":{"pass":1}}');
  });
});
