// `config-agent sync` against an agent that never answers (SIGSTOP, wedged), a live one, and one older than its 102.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer as createHttpServer, type Server as HttpServer, type ServerResponse } from 'node:http';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { manualClock } from '../../test/helpers/drift-watched.js';
import { bufferedIo } from '../../test/helpers/local-socket.js';
import { PATIENCE_MS, waitFor } from '../../test/helpers/wait-for.js';
import { LocalApiServer } from '../daemon/local-api.js';
import { systemClock } from '../lib/clock.js';
import { silentLogger } from '../lib/logger.js';
import { ExitCode } from './exit-codes.js';
import { runSync } from './local-client.js';

let dir: string;
let socketPath: string;
let configPath: string;
const closers: (() => Promise<void> | void)[] = [];

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-sync-wait-'));
  socketPath = path.join(dir, 'agent.sock');
  configPath = path.join(dir, 'config.json');
  await writeFile(
    configPath,
    JSON.stringify({
      deviceId: 'dvc_1',
      server: { baseUrl: 'https://configs.example.com' },
      rootDir: `${dir}/root`,
      stateDir: `${dir}/state`,
      socketPath,
    }),
  );
});

afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
  await rm(dir, { recursive: true, force: true });
});

/** A command still running, or its exit code once it ended. */
function watched(run: Promise<number>): { code: () => number | undefined } {
  let code: number | undefined;
  void run.then((value) => {
    code = value;
  });
  return { code: () => code };
}

const summary = 'Pass: full, 1 file written\n';

describe('config-agent sync against an agent that takes connections but never answers (adv36)', () => {
  // A SIGSTOPped agent's socket still has its connections accepted by the kernel; nothing is ever read or answered.
  it('gives up after 10 s with exit 3 and says why, leaving no connection open', async () => {
    const held = new Set<Socket>();
    let accepted = 0;
    const stopped: Server = createServer((socket) => {
      accepted += 1;
      held.add(socket);
      // Read and dropped (so its end is seen), never answered.
      socket.resume();
      socket.once('close', () => held.delete(socket));
    });
    await new Promise<void>((resolve) => stopped.listen(socketPath, resolve));
    closers.push(async () => {
      for (const socket of held) socket.destroy();
      await new Promise((resolve) => stopped.close(resolve));
    });
    const clock = manualClock();
    const io = bufferedIo();
    const sync = watched(runSync({ configPath }, io, { clock }));

    await waitFor(() => accepted === 1, PATIENCE_MS, { what: 'the sync connection' });
    clock.advance(1_000);
    await waitFor(() => accepted === 2, PATIENCE_MS, { what: 'the health probe' });
    clock.advance(8_999);
    // Not before its 10 s.
    await new Promise((resolve) => setImmediate(resolve));
    expect(sync.code()).toBeUndefined();
    clock.advance(1);

    await waitFor(() => sync.code() !== undefined, PATIENCE_MS, { what: 'the exit' });
    expect(sync.code()).toBe(ExitCode.Unreachable);
    expect(io.err()).toContain(
      `cannot reach the agent at ${socketPath}: no answer within 10s: the agent takes connections but answers nothing`,
    );
    expect(io.out()).toBe('');
    await waitFor(() => held.size === 0, PATIENCE_MS, { what: 'both connections closed by the client' });
  });
});

describe('config-agent sync against a live agent whose pass is long', () => {
  it("waits past 10 s for the in-process agent's pass (its 102 said it took the request) and exits with its outcome", async () => {
    let release!: () => void;
    const passEnds = new Promise<void>((resolve) => {
      release = resolve;
    });
    let passes = 0;
    const server = new LocalApiServer(
      socketPath,
      {
        health: () => ({ healthy: true, lastLoopAt: null }),
        status: () => ({}),
        sync: async () => {
          passes += 1;
          await passEnds;
          return { converged: true, exitCode: 0, result: { reachable: true, summary } };
        },
      },
      silentLogger(),
      {},
      systemClock,
    );
    await server.start();
    closers.push(() => server.close());
    const clock = manualClock();
    const io = bufferedIo();
    const sync = watched(runSync({ configPath }, io, { clock }));

    // Heard: the client's two timers (probe, give-up) are ended.
    await waitFor(() => passes === 1 && clock.sleeping() === 0, PATIENCE_MS, { what: 'the 102' });
    clock.advance(10 * 60_000);
    await new Promise((resolve) => setImmediate(resolve));
    expect(sync.code()).toBeUndefined();
    expect(await server.connectionCount()).toBe(1);
    release();

    await waitFor(() => sync.code() !== undefined, PATIENCE_MS, { what: 'the exit' });
    expect(sync.code()).toBe(ExitCode.Converged);
    expect(io.out()).toBe(summary);
    expect(passes).toBe(1);
  });

  it('answers an HTTP/1.1 sync 102 Processing at once, then 200 when the pass ends; nothing interim to HTTP/1.0', async () => {
    let release!: () => void;
    const passEnds = new Promise<void>((resolve) => {
      release = resolve;
    });
    const server = new LocalApiServer(
      socketPath,
      {
        health: () => ({ healthy: true, lastLoopAt: null }),
        status: () => ({}),
        sync: async () => {
          await passEnds;
          return { converged: true, exitCode: 0, result: {} };
        },
      },
      silentLogger(),
      { minSyncIntervalMs: 0 },
      systemClock,
    );
    await server.start();
    closers.push(() => server.close());
    const ask = (version: string) => {
      const socket = createConnection(socketPath);
      closers.push(() => void socket.destroy());
      let received = '';
      socket.setEncoding('utf8');
      socket.on('data', (chunk: string) => {
        received += chunk;
      });
      socket.write(`POST /v1/sync HTTP/${version}\r\nHost: a\r\nContent-Length: 0\r\n\r\n`);
      return () => received;
    };
    const v11 = ask('1.1');
    const v10 = ask('1.0');
    await waitFor(() => v11().includes('\r\n\r\n') && server.requestsInProgress() === 2, PATIENCE_MS, {
      what: 'the interim answer',
    });
    expect(v11()).toBe('HTTP/1.1 102 Processing\r\n\r\n');
    release();
    await waitFor(
      () => v11().includes('"converged":true') && v10().includes('"converged":true'),
      PATIENCE_MS,
      {
        what: 'both answers',
      },
    );
    expect(v11()).toMatch(/^HTTP\/1\.1 102 Processing\r\n\r\nHTTP\/1\.1 200 OK\r\n/);
    expect(v10()).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(v10()).not.toContain('102');
  });
});

describe('config-agent sync against an agent older than the 102 (it answers a sync only when the pass ends)', () => {
  it('waits for its pass as before once its /v1/health answered, and exits with its outcome', async () => {
    let release!: () => void;
    const passEnds = new Promise<void>((resolve) => {
      release = resolve;
    });
    let healthAnswers = 0;
    const old: HttpServer = createHttpServer((request, response: ServerResponse) => {
      const json = (body: unknown) => {
        response.writeHead(200, { 'content-type': 'application/json' });
        response.end(JSON.stringify(body));
      };
      if (request.url === '/v1/health') {
        healthAnswers += 1;
        json({ healthy: true, lastLoopAt: null });
        return;
      }
      void passEnds.then(() => json({ converged: true, exitCode: 0, result: { summary } }));
    });
    await new Promise<void>((resolve) => old.listen(socketPath, resolve));
    closers.push(async () => {
      old.closeAllConnections();
      await new Promise((resolve) => old.close(resolve));
    });
    const clock = manualClock();
    const io = bufferedIo();
    const sync = watched(runSync({ configPath }, io, { clock }));

    await waitFor(() => clock.sleeping() === 2, PATIENCE_MS, { what: 'the sync sent' });
    clock.advance(1_000);
    // Its health answered: the give-up timer is ended.
    await waitFor(() => healthAnswers === 1 && clock.sleeping() === 0, PATIENCE_MS, { what: 'the probe' });
    clock.advance(10 * 60_000);
    await new Promise((resolve) => setImmediate(resolve));
    expect(sync.code()).toBeUndefined();
    release();

    await waitFor(() => sync.code() !== undefined, PATIENCE_MS, { what: 'the exit' });
    expect(sync.code()).toBe(ExitCode.Converged);
    expect(io.out()).toBe(summary);
  });
});
