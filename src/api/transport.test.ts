// deferredTransport: a transport built later (undici through a proxy), a failed build tried again, an eager one built at once.
import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { deferredTransport, type Transport, type TransportRequest } from './transport.js';

const request: TransportRequest = {
  origin: 'http://service.test',
  path: '/v1/x',
  method: 'GET',
  headers: {},
  body: null,
  signal: new AbortController().signal,
};

/** A build that fails `failures` times (a chunk not found: an upgrade replaced the bundle) and then answers 200. */
function flakyBuild(failures: number) {
  const state = { builds: 0 };
  const answering: Transport = {
    request: async () => ({ statusCode: 200, headers: {}, body: Readable.from(['ok']) }),
    close: async () => {},
    destroy: async () => {},
  };
  const build = async () => {
    state.builds += 1;
    if (state.builds <= failures)
      throw Object.assign(new Error('Cannot find module'), { code: 'ERR_MODULE_NOT_FOUND' });
    return answering;
  };
  return { state, build };
}

describe('deferredTransport', () => {
  it('a failed build is not kept: the next request builds again and is answered', async () => {
    const { state, build } = flakyBuild(1);
    const transport = deferredTransport(build, { freshable: false, eager: false });
    await expect(transport.request(request)).rejects.toMatchObject({ code: 'ERR_MODULE_NOT_FOUND' });
    expect((await transport.request(request)).statusCode).toBe(200);
    expect((await transport.request(request)).statusCode).toBe(200);
    expect(state.builds).toBe(2);
  });

  it('eager: built as it is made, before any request (the proxy transport loads undici at start)', async () => {
    const { state, build } = flakyBuild(0);
    const transport = deferredTransport(build, { freshable: true, eager: true });
    expect(state.builds).toBe(1);
    expect((await transport.request(request)).statusCode).toBe(200);
    expect(state.builds).toBe(1);
  });

  it('eager and failed: no unhandled rejection, the first request builds again; close and destroy still settle', async () => {
    const { state, build } = flakyBuild(1);
    const transport = deferredTransport(build, { freshable: true, eager: true });
    await new Promise((resolve) => setImmediate(resolve));
    await expect(transport.close()).resolves.toBeUndefined();
    expect((await transport.request(request)).statusCode).toBe(200);
    expect(state.builds).toBe(2);
    await expect(transport.destroy()).resolves.toBeUndefined();
  });

  it('lazy: nothing is built until the first request', async () => {
    const { state, build } = flakyBuild(0);
    const transport = deferredTransport(build, { freshable: false, eager: false });
    await transport.close();
    expect(state.builds).toBe(0);
  });
});
