// Pipelined `POST /v1/sync` requests sharing one pass share one encoded answer (adv28): a real unix socket in-process.
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
const sockets: Socket[] = [];

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-api-sync-'));
});

afterEach(async () => {
  for (const socket of sockets.splice(0)) socket.destroy();
  await server?.close();
  server = undefined;
  await rm(dir, { recursive: true, force: true });
});

describe('POST /v1/sync pipelined on one connection (adv28)', () => {
  // A full pass's answer holds every instance's outcome and the summary: megabytes at 10,000 managed files. Each
  // request sharing the pass had it serialised, scrubbed and encoded again, all at once when the pass ended: a
  // member of the socket's group pipelining 1,000 syncs had the agent hold a thousand copies (gigabytes).
  it('answers every request with one answer serialised, scrubbed and encoded once per pass', async () => {
    const socketPath = path.join(dir, 'agent.sock');
    const outcomes = Array.from({ length: 2_000 }, (_, k) => ({
      path: `dir/file-${k}.json`,
      action: 'unchanged',
    }));
    let passes = 0;
    let encodedBytes = 0;
    server = new LocalApiServer(
      socketPath,
      {
        health: () => ({ healthy: true, lastLoopAt: null }),
        status: () => ({}),
        sync: async () => {
          passes += 1;
          return { converged: true, exitCode: 0, result: { pass: passes, outcomes } };
        },
        scrub: (text) => {
          encodedBytes += text.length;
          return text;
        },
      },
      silentLogger(),
      {
        headersTimeoutMs: 60_000,
        requestTimeoutMs: 60_000,
        keepAliveTimeoutMs: 60_000,
        sendTimeoutMs: 60_000,
      },
      systemClock,
    );
    await server.start();
    const socket = createConnection(socketPath);
    sockets.push(socket);
    let received = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => {
      received += chunk;
    });
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    const requests = 100;
    socket.write('POST /v1/sync HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n'.repeat(requests));
    await waitFor(() => received.split('HTTP/1.1 200').length - 1 === requests, PATIENCE_MS, {
      what: 'every answer',
    });
    const answer = JSON.stringify({ converged: true, exitCode: 0, result: { pass: 1, outcomes } });
    expect(received.split(answer).length - 1).toBe(requests);
    expect(passes).toBe(1);
    // What the agent serialised and scrubbed for them: one answer's worth, not one per request.
    expect(encodedBytes).toBe(answer.length);
  });
});
