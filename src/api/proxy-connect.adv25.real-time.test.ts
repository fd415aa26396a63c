// A proxy that takes the connection and never answers the CONNECT: the request's deadline still ends the request (adv25).
import { type AddressInfo, createServer, type Server, type Socket } from 'node:net';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { PATIENCE_MS, waitFor } from '../../test/helpers/wait-for.js';
import { createClient } from './client.js';
import { TimeoutError } from './errors.js';

const KEY = 'sk_adv25_connect_0123456789abcdef';

/** A proxy that reads the CONNECT and answers nothing, ever; what each of its connections received. */
let proxy: Server;
let proxyUrl = '';
const connections: { socket: Socket; received: string; closed: boolean }[] = [];

beforeEach(async () => {
  proxy = createServer((socket) => {
    const seen = { socket, received: '', closed: false };
    connections.push(seen);
    socket.on('data', (chunk: Buffer) => {
      seen.received += chunk.toString('latin1');
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      seen.closed = true;
    });
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
});

afterEach(async () => {
  for (const { socket } of connections.splice(0)) socket.destroy();
  await new Promise((resolve) => proxy.close(resolve));
});

function client(timeoutMs: number, from: 'config' | 'environment' = 'config') {
  return createClient({
    // Nothing listens there: nothing but the proxy is ever reached.
    baseUrl: 'https://127.0.0.1:9',
    apiKey: KEY,
    timeoutMs,
    maxResponseBytes: 1024 * 1024,
    proxy: from === 'config' ? { url: proxyUrl, env: {} } : { env: { HTTPS_PROXY: proxyUrl } },
  });
}

it(
  'a request through a proxy that never answers its CONNECT ends at its deadline',
  async () => {
    // Before: undici noted the abort but settled nothing while the request waited for its connection, and the
    // connection waited on the proxy's answer for undici's own 300 s: the request (and a pull's deadline) hung.
    const error = await client(200)
      .getDevice('dvc_1')
      .catch((thrown: unknown) => thrown);
    expect(error).toBeInstanceOf(TimeoutError);
    // The same through HTTPS_PROXY (undici's EnvHttpProxyAgent builds the same proxy agent).
    const fromEnvironment = await client(200, 'environment')
      .getDevice('dvc_1')
      .catch((thrown: unknown) => thrown);
    expect(fromEnvironment).toBeInstanceOf(TimeoutError);
    expect(String((error as Error).message)).not.toContain(KEY);
    // On a busy machine the deadline can pass before the CONNECT is written: it still goes, and is what the proxy saw.
    await waitFor(
      () => connections.some((seen) => seen.received.startsWith('CONNECT 127.0.0.1:9 ')),
      PATIENCE_MS,
      {
        what: 'the CONNECT at the proxy',
      },
    );
  },
  PATIENCE_MS * 2,
);

it(
  "a stop (the caller's signal) ends a request waiting on the proxy's CONNECT at once, not at the deadline",
  async () => {
    // A deadline far past the test's patience: only the stop can end the request in time. Before, undici noted the
    // abort and settled nothing until the connection failed (the CONNECT's own timeout, here the deadline).
    const stop = new AbortController();
    const pending = client(PATIENCE_MS * 4)
      .getDevice('dvc_1', { signal: stop.signal })
      .catch((thrown: unknown) => thrown);
    await waitFor(() => connections.some((seen) => seen.received.startsWith('CONNECT ')), PATIENCE_MS, {
      what: 'the CONNECT at the proxy',
    });
    const reason = new Error('agent stopping');
    stop.abort(reason);
    expect(await pending).toBe(reason);
  },
  PATIENCE_MS * 2,
);

it(
  'each tunnel the proxy never answers is closed by the agent at the deadline, not held for 5 minutes',
  async () => {
    const agent = client(200);
    for (let i = 0; i < 3; i += 1) {
      const error = await agent.getDevice('dvc_1').catch((thrown: unknown) => thrown);
      expect(error).toBeInstanceOf(TimeoutError);
    }
    await waitFor(
      () => connections.length >= 1 && connections.every((seen) => seen.received !== ''),
      PATIENCE_MS,
      {
        what: 'every connection to the proxy asked for its tunnel',
      },
    );
    // Before: each connection stayed open, its CONNECT unanswered, for undici's default headersTimeout (300 s).
    await waitFor(() => connections.every((seen) => seen.closed), PATIENCE_MS, {
      what: 'every connection to the proxy closed by the agent',
    });
    expect(connections.every((seen) => seen.received.startsWith('CONNECT '))).toBe(true);
    expect(connections.map((seen) => seen.received).join('')).not.toContain(KEY);
  },
  PATIENCE_MS * 3,
);
