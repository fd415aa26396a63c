// The local API's bounds on a real unix socket: connection cap, idle and slow clients cut off, no request bodies.
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { createConnection, type Socket } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PATIENCE_MS, waitFor } from '../../test/helpers/wait-for.js';
import { callAgent } from '../cli/local-client.js';
import { type Clock, systemClock } from '../lib/clock.js';
import { silentLogger } from '../lib/logger.js';
import { type LocalApiLimits, LocalApiServer } from './local-api.js';

let dir: string;
let socketPath: string;
let server: LocalApiServer | undefined;
const clients: Socket[] = [];

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-api-'));
  socketPath = path.join(dir, 'agent.sock');
});

afterEach(async () => {
  for (const client of clients.splice(0)) client.destroy();
  await server?.close();
  server = undefined;
  await rm(dir, { recursive: true, force: true });
});

/** Timeouts far longer than any test, unless a test injects short ones. */
const PATIENT: Partial<LocalApiLimits> = {
  headersTimeoutMs: 60_000,
  requestTimeoutMs: 60_000,
  keepAliveTimeoutMs: 60_000,
};

async function startServer(
  limits: Partial<LocalApiLimits>,
  status: () => unknown = () => ({ ok: true }),
  clock: Pick<Clock, 'monotonic' | 'sleep'> = systemClock,
): Promise<LocalApiServer> {
  server = new LocalApiServer(
    socketPath,
    {
      health: () => ({ healthy: true, lastLoopAt: null }),
      status,
      sync: async () => ({ converged: true, exitCode: 0, result: null }),
    },
    silentLogger(),
    limits,
    clock,
  );
  await server.start();
  return server;
}

interface Client {
  socket: Socket;
  closed: boolean;
  received: string;
}

/** A raw connection that records whether the server closed it and what it sent. */
async function connect(): Promise<Client> {
  const socket = createConnection(socketPath);
  clients.push(socket);
  const client: Client = { socket, closed: false, received: '' };
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => {
    client.received += chunk;
  });
  socket.on('close', () => {
    client.closed = true;
  });
  socket.on('error', () => undefined);
  await new Promise<void>((resolve) => {
    socket.once('connect', () => resolve());
    socket.once('close', () => resolve());
  });
  return client;
}

describe('LocalApiServer limits', () => {
  it('holds at most maxConnections: 300 idle connections leave it at the cap, the rest are closed', async () => {
    const api = await startServer({ ...PATIENT, maxConnections: 20 });
    const idle = await Promise.all(Array.from({ length: 300 }, () => connect()));
    await waitFor(() => idle.filter((c) => c.closed).length >= 280, PATIENCE_MS, {
      what: 'connections over the cap closed',
    });
    expect(idle.filter((c) => !c.closed)).toHaveLength(20);
    expect(await api.connectionCount()).toBe(20);
  });

  // One member of the socket's group holding every slot idle shut `status` out for up to 10 s, renewable (ops14).
  it('at the cap a new connection takes the slot of the one idle longest: idle holders never shut a request out', async () => {
    const api = await startServer({ ...PATIENT, maxConnections: 5 });
    const idle = await Promise.all(Array.from({ length: 4 }, () => connect()));
    // One more trickling a head it never finishes: no request in progress either.
    const trickle = await connect();
    trickle.socket.write('GET /v1/status HTTP/1.1\r\nHost: a');
    await waitFor(async () => (await api.connectionCount()) === 5, PATIENCE_MS, { what: 'five held' });
    for (let round = 0; round < 3; round++) {
      expect(await callAgent(socketPath, 'GET', '/v1/status', PATIENCE_MS)).toMatchObject({ status: 200 });
    }
    // The oldest made room (each answered request's own connection is closed after it, leaving room for the next).
    await waitFor(() => idle[0]!.closed, PATIENCE_MS, { what: 'the oldest closed' });
    expect(idle.slice(1).map((c) => c.closed)).toEqual([false, false, false]);
    expect(trickle.closed).toBe(false);
    expect(await api.connectionCount()).toBeLessThanOrEqual(5);
  });

  it('a connection with a request in progress keeps its slot: with all of them busy a new one is closed', async () => {
    let release: () => void = () => undefined;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    server = new LocalApiServer(
      socketPath,
      {
        health: () => ({ healthy: true, lastLoopAt: null }),
        status: () => ({ ok: true }),
        sync: async () => {
          await held;
          return { converged: true, exitCode: 0, result: null };
        },
      },
      silentLogger(),
      { ...PATIENT, maxConnections: 2, minSyncIntervalMs: 0 },
      systemClock,
    );
    await server.start();
    const busy = await Promise.all([connect(), connect()]);
    for (const client of busy) client.socket.write('POST /v1/sync HTTP/1.1\r\nHost: a\r\n\r\n');
    await waitFor(() => server!.requestsInProgress() === 2, PATIENCE_MS, { what: 'both in progress' });
    const late = await connect();
    await waitFor(() => late.closed, PATIENCE_MS, { what: 'the late connection closed' });
    expect(busy.every((c) => !c.closed)).toBe(true);
    release();
    // Each taken at once (102), answered when the pass ends (200).
    await waitFor(
      () => busy.every((c) => c.received.startsWith('HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 200')),
      PATIENCE_MS,
      {
        what: 'both syncs answered',
      },
    );
  });

  it('closes idle connections that send nothing (408) and frees their slots for real requests', async () => {
    const api = await startServer({
      maxConnections: 5,
      headersTimeoutMs: 100,
      requestTimeoutMs: 200,
      keepAliveTimeoutMs: 100,
      checkIntervalMs: 20,
    });
    const idle = await Promise.all(Array.from({ length: 5 }, () => connect()));
    await waitFor(() => idle.every((c) => c.closed), PATIENCE_MS, { what: 'idle connections closed' });
    expect(idle.map((c) => c.received.split('\r\n')[0])).toEqual(
      Array(5).fill('HTTP/1.1 408 Request Timeout'),
    );
    expect(await api.connectionCount()).toBe(0);
    // The real request meets the same 100 ms head timeout: on a busy machine (load ~13) the server could be
    // starved between accepting it and reading its head, and answered it 408 too (an empty body: "Unexpected
    // end of JSON input"). Asked again until its head is read in time; the freed slots are the count above.
    const health = await waitFor(() => callAgent(socketPath, 'GET', '/v1/health', PATIENCE_MS), PATIENCE_MS, {
      what: 'a real request answered',
    });
    expect(health).toMatchObject({ status: 200, body: { healthy: true } });
  });

  it('cuts off a client that trickles its request head', async () => {
    await startServer({
      headersTimeoutMs: 150,
      requestTimeoutMs: 300,
      keepAliveTimeoutMs: 100,
      checkIntervalMs: 20,
    });
    const slow = await connect();
    const head = `GET /v1/status HTTP/1.1\r\nHost: agent\r\nX-Pad: ${'a'.repeat(10_000)}`;
    let sent = 0;
    // One byte per tick until the server gives up on it; the bound only stops a broken server from looping.
    while (!slow.closed && sent < head.length) {
      slow.socket.write(head[sent] ?? '');
      sent += 1;
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    await waitFor(() => slow.closed, PATIENCE_MS, { what: 'the slow client closed' });
    // Node answers 408 when it can; on a loaded machine it may only get to close the socket. Either way the
    // client was cut off before it finished its head.
    if (slow.received !== '') expect(slow.received.split('\r\n')[0]).toMatch(/^HTTP\/1\.1 (408|431) /);
    expect(sent).toBeLessThan(head.length);
  });

  it('closes a connection that is idle between keep-alive requests', async () => {
    await startServer({ ...PATIENT, keepAliveTimeoutMs: 100, checkIntervalMs: 20 });
    const client = await connect();
    client.socket.write('GET /v1/health HTTP/1.1\r\nHost: agent\r\n\r\n');
    await waitFor(() => client.received.includes('"healthy":true'), PATIENCE_MS, { what: 'the answer' });
    await waitFor(() => client.closed, PATIENCE_MS, { what: 'the idle keep-alive connection closed' });
  });

  it('refuses request heads over maxHeaderBytes (431) and any request body (413), without reading it', async () => {
    await startServer({ ...PATIENT, maxHeaderBytes: 1024 });
    const big = await connect();
    big.socket.write(`GET /v1/status HTTP/1.1\r\nHost: agent\r\nX-Pad: ${'a'.repeat(4096)}\r\n\r\n`);
    await waitFor(() => big.closed, PATIENCE_MS, { what: 'the oversized head refused' });
    expect(big.received.split('\r\n')[0]).toBe('HTTP/1.1 431 Request Header Fields Too Large');

    for (const framing of ['Content-Length: 1000000000', 'Transfer-Encoding: chunked']) {
      const body = await connect();
      body.socket.write(`POST /v1/sync HTTP/1.1\r\nHost: agent\r\n${framing}\r\n\r\nxxxx`);
      await waitFor(() => body.closed, PATIENCE_MS, { what: `the body (${framing}) refused` });
      expect(body.received.split('\r\n')[0]).toBe('HTTP/1.1 413 Payload Too Large');
      expect(body.received).toContain('"code":"body_too_large"');
    }
  });
});

describe('LocalApiServer: a client that never reads its answers', () => {
  // The status of 10,000 managed files is megabytes (paths are up to 4 KiB each): a client that asked for it and
  // never read held it in the agent's memory for good, 32 connections 32 copies, and their slots with it.
  it('is cut off once an answer is not taken within sendTimeoutMs (on the injected clock), its slot and memory freed', async () => {
    const big = { files: Array.from({ length: 2_000 }, (_, i) => `${'p'.repeat(1000)}/${i}`) };
    const clock = fakeClock();
    const sendTimeoutMs = 7_777;
    const api = await startServer({ ...PATIENT, sendTimeoutMs }, () => big, clock);
    const socket = createConnection(socketPath);
    clients.push(socket);
    socket.pause();
    let closed = false;
    socket.on('close', () => {
      closed = true;
    });
    socket.on('error', () => undefined);
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    // Pipelined, none read: 2 MB per answer, far beyond what the socket buffers take.
    socket.write('GET /v1/status HTTP/1.1\r\nHost: agent\r\n\r\n'.repeat(20));
    // The answers stuck in the socket's buffers: their send timeouts run on the clock the server was given.
    await waitFor(() => clock.sleepingFor(sendTimeoutMs) > 0, PATIENCE_MS, {
      what: 'the send timeout armed',
    });
    expect(await api.connectionCount()).toBe(1);
    clock.advance(sendTimeoutMs);
    await waitFor(async () => (await api.connectionCount()) === 0, PATIENCE_MS, {
      what: 'the non-reading client cut off',
    });
    // Reading at last, it finds the connection closed, the answer cut short.
    let received = 0;
    socket.on('data', (chunk: Buffer) => {
      received += chunk.length;
    });
    socket.resume();
    await waitFor(() => closed, PATIENCE_MS, { what: 'the client sees its connection closed' });
    expect(received).toBeLessThan(20 * JSON.stringify(big).length);
    expect(await callAgent(socketPath, 'GET', '/v1/health', PATIENCE_MS)).toMatchObject({ status: 200 });
  });

  it('a close (a stop, a reload) while answers are stuck ends their send timeouts: none is left to hold the process', async () => {
    // The send timeout is a sleep of the injected clock, not an unref'd timer of its own: what keeps a stop from
    // waiting sendTimeoutMs on it is that every stuck answer's sleep ends with its connection. Before, the answers
    // queued behind the first on the pipelining connection kept theirs (they never emit 'close').
    const big = { files: Array.from({ length: 2_000 }, (_, i) => `${'p'.repeat(1000)}/${i}`) };
    const clock = fakeClock();
    const sendTimeoutMs = 7_778;
    const api = await startServer({ ...PATIENT, sendTimeoutMs }, () => big, clock);
    const socket = createConnection(socketPath);
    clients.push(socket);
    socket.pause();
    socket.on('error', () => undefined);
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    socket.write('GET /v1/status HTTP/1.1\r\nHost: agent\r\n\r\n'.repeat(4));
    await waitFor(() => clock.sleepingFor(sendTimeoutMs) > 0, PATIENCE_MS, {
      what: 'the send timeout armed',
    });
    await api.close();
    await waitFor(() => clock.sleepingFor(sendTimeoutMs) === 0, PATIENCE_MS, {
      what: 'every send timeout ended by the close',
    });
    expect(clock.sleeping).toBe(0);
  });

  it('answers stuck behind one another on a pipelining connection add no listener each to it: no leak warning', async () => {
    // Each stuck answer's send timeout ends with its connection's close (4bc040b); one 'close' listener a stuck
    // answer put eleven on one socket for a local client that pipelined requests without reading, and Node printed
    // a MaxListenersExceededWarning (on stderr, outside the logs) for what any socket user could do.
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(warning.name);
    process.on('warning', onWarning);
    try {
      const answer = { files: Array.from({ length: 20 }, (_, i) => `${'p'.repeat(100)}/${i}`) };
      const clock = fakeClock();
      const sendTimeoutMs = 7_779;
      const api = await startServer({ ...PATIENT, sendTimeoutMs }, () => answer, clock);
      const socket = createConnection(socketPath);
      clients.push(socket);
      socket.pause();
      socket.on('error', () => undefined);
      await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
      socket.write('GET /v1/status HTTP/1.1\r\nHost: agent\r\n\r\n'.repeat(400));
      await waitFor(() => clock.sleepingFor(sendTimeoutMs) > 20, PATIENCE_MS, {
        what: 'more than twenty answers stuck',
      });
      await new Promise((resolve) => setImmediate(resolve));
      expect(warnings).toEqual([]);
      await api.close();
      await waitFor(() => clock.sleepingFor(sendTimeoutMs) === 0, PATIENCE_MS, {
        what: 'every send timeout ended by the close',
      });
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('a client that reads slowly but steadily gets the whole answer', async () => {
    const big = { files: Array.from({ length: 2_000 }, (_, i) => `${'p'.repeat(1000)}/${i}`) };
    await startServer({ ...PATIENT, sendTimeoutMs: 60_000 }, () => big);
    const answer = await callAgent(socketPath, 'GET', '/v1/status', PATIENCE_MS);
    expect(answer).toMatchObject({ status: 200 });
    expect(JSON.stringify(answer.body)).toBe(JSON.stringify(big));
  });
});

/** Monotonic time moves only when told; sleeps resolve when it passes their deadline, or reject on their abort. */
function fakeClock() {
  let mono = 0;
  const sleepers: { ms: number; until: number; resolve: () => void }[] = [];
  return {
    monotonic: () => mono,
    sleep: (ms: number, signal?: AbortSignal) =>
      new Promise<void>((resolve, reject) => {
        const sleeper = { ms, until: mono + ms, resolve };
        sleepers.push(sleeper);
        signal?.addEventListener(
          'abort',
          () => {
            sleepers.splice(sleepers.indexOf(sleeper), 1);
            reject(signal.reason);
          },
          { once: true },
        );
      }),
    advance(ms: number) {
      mono += ms;
      for (const sleeper of sleepers.splice(0)) {
        if (sleeper.until <= mono) sleeper.resolve();
        else sleepers.push(sleeper);
      }
    },
    get sleeping() {
      return sleepers.length;
    },
    /** Sleeps of exactly `ms` not yet ended. */
    sleepingFor(ms: number) {
      return sleepers.filter((sleeper) => sleeper.ms === ms).length;
    },
  };
}

describe('LocalApiServer sync rate', () => {
  it('a loop of syncs runs at most one pass per minSyncIntervalMs; each answer comes from a pass started after its request', async () => {
    const clock = fakeClock();
    let passes = 0;
    const api = new LocalApiServer(
      socketPath,
      {
        health: () => ({ healthy: true, lastLoopAt: null }),
        status: () => ({}),
        sync: async () => {
          passes += 1;
          return { converged: true, exitCode: 0, result: { pass: passes } };
        },
      },
      silentLogger(),
      { ...PATIENT, minSyncIntervalMs: 5_000 },
      clock,
    );
    server = api;
    await api.start();
    const first = await callAgent(socketPath, 'POST', '/v1/sync', PATIENCE_MS);
    expect(first.body).toMatchObject({ result: { pass: 1 } });
    // 20 more requests at once, within the interval: they wait and share a pass. On a busy machine some may
    // reach the server only after that pass started; those wait out one more interval for a pass of their own.
    let settled = false;
    const burst = Promise.all(
      Array.from({ length: 20 }, () => callAgent(socketPath, 'POST', '/v1/sync', PATIENCE_MS)),
    ).finally(() => {
      settled = true;
    });
    let intervals = 0;
    for (;;) {
      await waitFor(() => settled || clock.sleeping > 0, PATIENCE_MS, {
        what: 'a sync waiting out the interval',
      });
      if (settled) break;
      // Nothing runs before its interval has passed.
      expect(passes).toBe(intervals + 1);
      clock.advance(5_000);
      intervals += 1;
    }
    const answers = await burst;
    // One pass per interval waited, every answer from a pass started after the first one ended.
    expect(passes).toBe(intervals + 1);
    expect(passes).toBeLessThan(1 + answers.length);
    for (const answer of answers) {
      expect(answer.body).toMatchObject({ result: { pass: expect.any(Number) } });
      expect((answer.body as { result: { pass: number } }).result.pass).toBeGreaterThanOrEqual(2);
    }
  });
});

describe('LocalApiServer status answers', () => {
  // Built, serialised and scrubbed once per request (~4 ms at 10,000 managed files): a loop on every connection
  // kept a core busy. Requests arriving together now share one answer, built after they all arrived.
  it('requests that arrive together share one answer built after them; a later request gets a fresh one', async () => {
    let builds = 0;
    let generation = 1;
    await startServer(PATIENT, () => {
      builds += 1;
      return { generation };
    });
    const client = await connect();
    // Ten requests pipelined in one write: parsed in one turn of the event loop.
    client.socket.write('GET /v1/status HTTP/1.1\r\nHost: a\r\n\r\n'.repeat(10));
    await waitFor(() => client.received.split('HTTP/1.1 200').length - 1 === 10, PATIENCE_MS, {
      what: 'ten answers',
    });
    expect(client.received.split('{"generation":1}').length - 1).toBe(10);
    expect(builds).toBe(1);

    generation = 2;
    const after = await callAgent(socketPath, 'GET', '/v1/status', PATIENCE_MS);
    expect(after.body).toEqual({ generation: 2 });
    expect(builds).toBe(2);
  });

  it('a loop of status requests gets at most one answer built per minStatusIntervalMs, each built after its request', async () => {
    const clock = fakeClock();
    let builds = 0;
    let generation = 1;
    server = new LocalApiServer(
      socketPath,
      {
        health: () => ({ healthy: true, lastLoopAt: null }),
        status: () => {
          builds += 1;
          return { generation };
        },
        sync: async () => ({ converged: true, exitCode: 0, result: null }),
      },
      silentLogger(),
      { ...PATIENT, minStatusIntervalMs: 200 },
      clock,
    );
    await server.start();
    // After a quiet moment: answered at once.
    expect((await callAgent(socketPath, 'GET', '/v1/status', PATIENCE_MS)).body).toEqual({ generation: 1 });
    generation = 2;
    let answer: unknown;
    const next = callAgent(socketPath, 'GET', '/v1/status', PATIENCE_MS).then((reply) => {
      answer = reply.body;
    });
    await waitFor(() => clock.sleeping > 0, PATIENCE_MS, { what: 'the request waiting out the interval' });
    expect(builds).toBe(1);
    expect(answer).toBeUndefined();
    clock.advance(200);
    await next;
    expect(answer).toEqual({ generation: 2 });
    expect(builds).toBe(2);
  });
});

describe('the socket file', () => {
  // libuv's close of a listening pipe unlinks the path it was bound to by name, whatever file is there by then.
  it("closing never removes another program's socket put at the path after ours was removed", async () => {
    const first = await startServer(PATIENT);
    await rm(socketPath);
    const handlers = {
      health: () => ({ healthy: true, lastLoopAt: null }),
      status: () => ({ second: true }),
      sync: async () => ({ converged: true, exitCode: 0, result: null }),
    };
    const second = new LocalApiServer(socketPath, handlers, silentLogger(), PATIENT, systemClock);
    await second.start();
    try {
      await first.close();
      server = undefined;
      expect(await second.reachable()).toBe(true);
      expect((await callAgent(socketPath, 'GET', '/v1/status', PATIENCE_MS)).body).toEqual({ second: true });
      // Nothing but the socket is left in its directory (no name it was bound to first).
      expect(await readdir(dir)).toEqual(['agent.sock']);
    } finally {
      await second.close();
    }
    expect(await readdir(dir)).toEqual([]);
  });

  it('refuses a path where another agent listens, and leaves that socket alone', async () => {
    const first = await startServer(PATIENT);
    const second = new LocalApiServer(
      socketPath,
      {
        health: () => ({ healthy: true, lastLoopAt: null }),
        status: () => ({}),
        sync: async () => ({ converged: true, exitCode: 0, result: null }),
      },
      silentLogger(),
      PATIENT,
      systemClock,
    );
    await expect(second.start()).rejects.toMatchObject({
      code: 'socket_path_taken',
      retryable: false,
      message: expect.stringMatching(/already listening/),
    });
    expect(await first.reachable()).toBe(true);
    expect(await readdir(dir)).toEqual(['agent.sock']);
  });

  it("refuses a path holding another program's regular file, with a code, and leaves its bytes alone", async () => {
    await writeFile(socketPath, 'not ours\n');
    const server = new LocalApiServer(
      socketPath,
      {
        health: () => ({ healthy: true, lastLoopAt: null }),
        status: () => ({}),
        sync: async () => ({ converged: true, exitCode: 0, result: null }),
      },
      silentLogger(),
      PATIENT,
      systemClock,
    );
    await expect(server.start()).rejects.toMatchObject({
      code: 'socket_path_taken',
      retryable: false,
      message: expect.stringMatching(/is not a socket/),
    });
    expect(await readFile(socketPath, 'utf8')).toBe('not ours\n');
    expect(await readdir(dir)).toEqual(['agent.sock']);
  });

  it('tells whether the file it made is still at its path: not once removed, nor once another took its place', async () => {
    const first = await startServer(PATIENT);
    expect(await first.reachable()).toBe(true);
    await rm(socketPath);
    expect(await first.reachable()).toBe(false);
    const handlers = {
      health: () => ({ healthy: true, lastLoopAt: null }),
      status: () => ({ second: true }),
      sync: async () => ({ converged: true, exitCode: 0, result: null }),
    };
    const second = new LocalApiServer(socketPath, handlers, silentLogger(), PATIENT, systemClock);
    await second.start();
    try {
      // Most likely with the inode number the removed file had: the change time tells them apart.
      expect(await first.reachable()).toBe(false);
      expect(await second.reachable()).toBe(true);
    } finally {
      await second.close();
    }
  });
});
