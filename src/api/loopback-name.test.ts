// Loopback names answered without the resolver: which names, which addresses, and a connection made with them.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { HttpTransport } from './http-transport.js';
import { isLoopbackName, loopbackLookup } from './loopback-name.js';

const lookup = (options: Parameters<typeof loopbackLookup>[1]) =>
  new Promise<unknown[]>((resolve) => loopbackLookup('localhost', options, (...answer) => resolve(answer)));

describe('isLoopbackName', () => {
  it('takes localhost and names under it, in any case, with or without the root dot; nothing else', () => {
    for (const name of ['localhost', 'LOCALHOST', 'localhost.', 'api.localhost', 'a.b.localhost'])
      expect(isLoopbackName(name), name).toBe(true);
    for (const name of [
      'localhost.example',
      'notlocalhost',
      'example.com',
      '127.0.0.1',
      '[::1]',
      'localhostx',
    ])
      expect(isLoopbackName(name), name).toBe(false);
  });
});

describe('loopbackLookup', () => {
  it('answers both loopback addresses when all are asked for, one family when one is', async () => {
    expect(await lookup({ all: true })).toEqual([
      null,
      [
        { address: '127.0.0.1', family: 4 },
        { address: '::1', family: 6 },
      ],
    ]);
    expect(await lookup({ all: true, family: 6 })).toEqual([null, [{ address: '::1', family: 6 }]]);
    expect(await lookup({ family: 'IPv6' })).toEqual([null, '::1', 6]);
    expect(await lookup({})).toEqual([null, '127.0.0.1', 4]);
    expect(await lookup({ family: 4 })).toEqual([null, '127.0.0.1', 4]);
  });

  it('a request to http://localhost reaches a server listening on 127.0.0.1', async () => {
    const server = createServer((_req, res) => res.end('here'));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const transport = new HttpTransport({ timeoutMs: 5_000 });
    try {
      const { port } = server.address() as AddressInfo;
      const response = await transport.request({
        origin: `http://localhost:${port}`,
        path: '/',
        method: 'GET',
        headers: {},
        body: null,
        signal: AbortSignal.timeout(5_000),
      });
      expect(response.statusCode).toBe(200);
    } finally {
      transport.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});
