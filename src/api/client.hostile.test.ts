// The client against hostile loopback stand-ins: redirects elsewhere, compressed or HTML bodies, header floods.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';
import { afterEach, describe, expect, it } from 'vitest';
import { createClient } from './client.js';
import { deliveryVerdict, HttpStatusError, MalformedResponseError, NetworkError } from './errors.js';

const API_KEY = 'sk-hostile-test-0123456789abcdef';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

interface Seen {
  method: string;
  url: string;
  key: string | undefined;
}

async function serve(
  handler: (req: IncomingMessage, res: ServerResponse) => void,
): Promise<{ url: string; seen: Seen[] }> {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const key = req.headers['x-api-key'];
      seen.push({ method: req.method ?? '', url: req.url ?? '', key: Array.isArray(key) ? key[0] : key });
      handler(req, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

function client(baseUrl: string) {
  return createClient({ baseUrl, apiKey: API_KEY, timeoutMs: 5_000, maxResponseBytes: 1 << 20 });
}

const deployed = { activity_status: 'deployed', error_status: 'none' } as const;

describe('a redirect to another host or scheme', () => {
  it.each([301, 302, 303, 307, 308])(
    '%i is never followed: the key never reaches the Location',
    async (status) => {
      const elsewhere = await serve((_req, res) => res.end('{}'));
      const service = await serve((req, res) => {
        res.writeHead(status, { location: `${elsewhere.url}${req.url ?? '/'}?key=${API_KEY}` }).end();
      });
      const api = client(service.url);

      const list = await api
        .listConfigInstancePage({ device_id: 'dvc_1' }, { limit: 10 })
        .catch((e: unknown) => e);
      const report = await api.reportConfigInstanceStatus('cfg_a', deployed).catch((e: unknown) => e);

      expect(list).toBeInstanceOf(HttpStatusError);
      expect(report).toBeInstanceOf(HttpStatusError);
      expect((list as HttpStatusError).status).toBe(status);
      expect(String(list)).not.toContain(API_KEY);
      expect(service.seen.map((s) => s.method)).toEqual(['GET', 'PATCH']);
      expect(elsewhere.seen).toEqual([]);
    },
  );
});

describe('bodies the client did not ask for', () => {
  it('a gzip body (Content-Encoding the client never offered) is malformed, retryable, not decoded', async () => {
    const body = gzipSync(
      JSON.stringify({ object: 'list', total_count: -1, limit: 10, offset: 0, has_more: false, data: [] }),
    );
    const service = await serve((_req, res) =>
      res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip' }).end(body),
    );
    const error = await client(service.url)
      .listConfigInstancePage({ device_id: 'dvc_1' }, { limit: 10 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(MalformedResponseError);
    expect(service.seen[0]?.url).toBeDefined();
  });

  it('a 200 with an HTML page (a captive portal, a proxy login) is malformed, never a listing', async () => {
    const service = await serve((_req, res) =>
      res.writeHead(200, { 'content-type': 'text/html' }).end('<html><body>Sign in</body></html>'),
    );
    const error = await client(service.url)
      .listConfigInstancePage({ device_id: 'dvc_1' }, { limit: 10 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(MalformedResponseError);
  });

  it('a flood of headers (over 16 KiB) fails the request as a network error, bounded', async () => {
    const service = await serve((_req, res) => {
      for (let i = 0; i < 200; i++) res.setHeader(`x-junk-${i}`, 'j'.repeat(1_000));
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
    const error = await client(service.url)
      .listConfigInstancePage({ device_id: 'dvc_1' }, { limit: 10 })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(NetworkError);
  });
});

describe('a report answered 2xx by something that is not the service', () => {
  it('an HTML page (a captive portal, a proxy login page) does not settle it: it stays queued', async () => {
    const portal = await serve((_req, res) =>
      res
        .writeHead(200, { 'content-type': 'text/html; charset=utf-8' })
        .end('<!doctype html><title>Log in</title>'),
    );
    const untyped = await serve((_req, res) =>
      res.writeHead(200).end('\n  <html><body>Welcome</body></html>'),
    );
    for (const stand_in of [portal, untyped]) {
      const error = await client(stand_in.url)
        .reportConfigInstanceStatus('cfg_a', deployed)
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(MalformedResponseError);
      // No report gets through such a page now: delivery stops, every report stays queued as it was.
      expect(deliveryVerdict(error)).toBe('stop');
    }
  });

  it('an empty 200, a 204 and a JSON body still settle it', async () => {
    const answers = [
      (res: ServerResponse) => res.writeHead(200, { 'content-type': 'text/html' }).end(),
      (res: ServerResponse) => res.writeHead(204).end(),
      (res: ServerResponse) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}'),
      (res: ServerResponse) => res.writeHead(200, { 'content-type': 'text/plain' }).end('OK'),
    ];
    for (const answer of answers) {
      const service = await serve((_req, res) => answer(res));
      await expect(
        client(service.url).reportConfigInstanceStatus('cfg_a', deployed),
      ).resolves.toBeUndefined();
    }
  });
});

describe('a report answered 4xx by a page that is not the service', () => {
  it("an HTML error page (nginx's 405 for a PATCH, a proxy's 404, a portal's 400) keeps it: sent again later", async () => {
    const pages = [
      (res: ServerResponse) =>
        res
          .writeHead(405, { 'content-type': 'text/html' })
          .end('<html><head><title>405 Not Allowed</title></head><body>nginx</body></html>'),
      (res: ServerResponse) => res.writeHead(404).end('\r\n<!DOCTYPE html><h1>Not Found</h1>'),
      (res: ServerResponse) => res.writeHead(400, { 'content-type': 'text/html; charset=utf-8' }).end('Bad'),
      (res: ServerResponse) => res.writeHead(413, { 'content-type': 'text/html' }).end('<h1>Too Large</h1>'),
    ];
    for (const page of pages) {
      const proxy = await serve((_req, res) => page(res));
      const error = await client(proxy.url)
        .reportConfigInstanceStatus('cfg_a', deployed)
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(HttpStatusError);
      expect(deliveryVerdict(error)).toBe('skip');
    }
  });

  it("the service's own refusal (its JSON error, or no body) still drops it", async () => {
    const answers = [
      (res: ServerResponse) =>
        res
          .writeHead(404, { 'content-type': 'application/json' })
          .end('{"error":{"code":"not_found","message":"no such config instance"}}'),
      (res: ServerResponse) => res.writeHead(405).end(),
      (res: ServerResponse) => res.writeHead(422, { 'content-type': 'text/plain' }).end('bad status'),
    ];
    for (const answer of answers) {
      const service = await serve((_req, res) => answer(res));
      const error = await client(service.url)
        .reportConfigInstanceStatus('cfg_a', deployed)
        .catch((e: unknown) => e);
      expect(deliveryVerdict(error)).toBe('drop');
    }
  });
});
