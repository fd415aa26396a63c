// Proxy support over loopback with a real CONNECT proxy (the `proxy` package): the key crosses it only inside TLS.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage } from 'node:http';
import { createServer as createHttpsServer, type Server } from 'node:https';
import {
  type AddressInfo,
  getDefaultAutoSelectFamilyAttemptTimeout,
  setDefaultAutoSelectFamilyAttemptTimeout,
} from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { createProxy, type ProxyServer } from 'proxy';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { PATIENCE_MS } from '../../test/helpers/wait-for.js';
import { parseAgentConfig } from '../config/load.js';
import { createClient } from './client.js';
import { NetworkError } from './errors.js';
import { chooseProxy } from './proxy.js';

const KEY = 'sk_proxy_test_0123456789abcdef';
const T = '2026-01-01T00:00:00Z';
const DEVICE = {
  object: 'device',
  id: 'dvc_1',
  name: 'robot',
  status: 'online',
  last_connected_at: T,
  last_disconnected_at: T,
  created_at: T,
  updated_at: T,
};
const hasOpenssl = spawnSync('openssl', ['version']).error === undefined;

/** What each server saw: the proxy's requests (method, target, headers), the service's key headers. */
const proxySaw: { method: string; url: string; headers: IncomingMessage['headers'] }[] = [];
const serviceSawKeys: (string | undefined)[] = [];
let service: Server;
let serviceUrl = '';
let ca = '';
let proxy: ProxyServer;
let proxyUrl = '';
let refusing: ProxyServer;
let refusingUrl = '';
const dir = mkdtempSync(path.join(os.tmpdir(), 'config-agent-proxy-'));

async function listen(server: {
  listen: (port: number, host: string, done: () => void) => unknown;
  address: () => unknown;
}) {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

function startProxy(authenticate: boolean): ProxyServer {
  const server = createProxy(createHttpServer());
  server.on('request', (req: IncomingMessage) =>
    proxySaw.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers }),
  );
  server.on('connect', (req: IncomingMessage) =>
    proxySaw.push({ method: 'CONNECT', url: req.url ?? '', headers: req.headers }),
  );
  server.authenticate = () => authenticate;
  return server;
}

/**
 * `localhost` is 127.0.0.1 and ::1 (loopback-name.ts) and the services listen on 127.0.0.1: Node gives each address
 * 250 ms before it tries the next, so on a busy machine (load ~20) a connect that waited longer for the event loop
 * was dropped, ::1 refused, and the request failed "ETIMEDOUT" instead of the certificate's name error. Here each
 * address gets the test's patience (restored after).
 */
const attemptTimeout = getDefaultAutoSelectFamilyAttemptTimeout();
beforeAll(() => setDefaultAutoSelectFamilyAttemptTimeout(PATIENCE_MS));
afterAll(() => setDefaultAutoSelectFamilyAttemptTimeout(attemptTimeout));

beforeAll(async () => {
  if (!hasOpenssl) return;
  const key = path.join(dir, 'key.pem');
  const cert = path.join(dir, 'cert.pem');
  const made = spawnSync('openssl', [
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:P-256',
    '-nodes',
    '-days',
    '1',
    '-subj',
    '/CN=127.0.0.1',
    '-addext',
    'subjectAltName=IP:127.0.0.1',
    '-keyout',
    key,
    '-out',
    cert,
  ]);
  if (made.status !== 0) throw new Error(String(made.stderr));
  ca = readFileSync(cert, 'utf8');
  service = createHttpsServer({ key: readFileSync(key), cert: ca }, (req, res) => {
    serviceSawKeys.push(req.headers['x-api-key'] as string | undefined);
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify(DEVICE));
  });
  serviceUrl = `https://127.0.0.1:${await listen(service)}`;
  proxy = startProxy(true);
  proxyUrl = `http://127.0.0.1:${await listen(proxy)}`;
  refusing = startProxy(false);
  refusingUrl = `http://127.0.0.1:${await listen(refusing)}`;
});

afterAll(async () => {
  for (const server of [service, proxy, refusing]) {
    if (server === undefined) continue;
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
  rmSync(dir, { recursive: true, force: true });
});

beforeEach(() => {
  proxySaw.length = 0;
  serviceSawKeys.length = 0;
});

function client(baseUrl: string, proxySettings: { url?: string; env: NodeJS.ProcessEnv }) {
  // The injected CA stands in for NODE_EXTRA_CA_CERTS; the dispatcher is the one the client builds.
  return createClient({
    baseUrl,
    apiKey: KEY,
    // Nothing here tests a deadline: a TLS handshake through a tunnel can take seconds on a busy machine.
    timeoutMs: PATIENCE_MS,
    maxResponseBytes: 1024 * 1024,
    proxy: proxySettings,
    dispatcherCa: [ca],
  });
}

describe('chooseProxy', () => {
  it.each([
    ['https://s', undefined, { kind: 'direct' }],
    ['https://s', { env: {} }, { kind: 'direct' }],
    [
      'https://s',
      { url: 'http://p:3128', env: { HTTPS_PROXY: 'http://e:1' } },
      { kind: 'configured', url: 'http://p:3128' },
    ],
    [
      'http://127.0.0.1:8080',
      { url: 'http://p:3128', env: { HTTPS_PROXY: 'http://e:1' } },
      { kind: 'direct' },
    ],
    [
      'https://s',
      { env: { https_proxy: 'http://low:1', HTTPS_PROXY: 'http://up:1', NO_PROXY: 'a.b' } },
      { kind: 'environment', httpsProxy: 'http://low:1', httpProxy: undefined, noProxy: 'a.b' },
    ],
    ['https://s', { env: { HTTPS_PROXY: ' ' } }, { kind: 'direct' }],
  ])('%s with %j → %j', (baseUrl, settings, choice) => {
    expect(chooseProxy(baseUrl, settings)).toEqual(choice);
  });
});

describe.skipIf(!hasOpenssl)(
  'requests through a real CONNECT proxy on loopback (skipped without openssl)',
  () => {
    it('server.proxy: the proxy sees one CONNECT to the service and never the key; the service gets it', async () => {
      const device = await client(serviceUrl, { url: proxyUrl, env: {} }).getDevice('dvc_1');
      expect(device.id).toBe('dvc_1');
      expect(proxySaw.map((r) => `${r.method} ${r.url}`)).toEqual([`CONNECT ${new URL(serviceUrl).host}`]);
      expect(JSON.stringify(proxySaw)).not.toContain(KEY);
      expect(serviceSawKeys).toEqual([KEY]);
    });

    it('HTTPS_PROXY from the environment, and NO_PROXY sending the service direct', async () => {
      await client(serviceUrl, { env: { HTTPS_PROXY: proxyUrl } }).getDevice('dvc_1');
      expect(proxySaw.map((r) => r.method)).toEqual(['CONNECT']);
      proxySaw.length = 0;
      await client(serviceUrl, { env: { HTTPS_PROXY: proxyUrl, NO_PROXY: '127.0.0.1' } }).getDevice('dvc_1');
      expect(proxySaw).toEqual([]);
      expect(serviceSawKeys).toEqual([KEY, KEY]);
    });

    it('a proxy variable blank but for spaces is unset for undici too: the other one is used', async () => {
      // chooseProxy trims and takes a blank value for unset; undici, given no value, read the process's own
      // environment, took " " for a proxy URL and failed building its agent, so every request failed (exit 3).
      vi.stubEnv('http_proxy', ' ');
      vi.stubEnv('https_proxy', proxyUrl);
      try {
        expect((await client(serviceUrl, { env: process.env }).getDevice('dvc_1')).id).toBe('dvc_1');
      } finally {
        vi.unstubAllEnvs();
      }
      expect(proxySaw.map((r) => r.method)).toEqual(['CONNECT']);
      expect(serviceSawKeys).toEqual([KEY]);
    });

    it("a status report direct to an HTTPS service, on the transport's own TLS sockets: trusted CA and name required", async () => {
      const report = { activity_status: 'deployed', error_status: 'none' } as const;
      const direct = client(serviceUrl, { env: {} });
      for (let i = 0; i < 3; i += 1) await direct.reportConfigInstanceStatus('ci_1', report);
      expect(serviceSawKeys).toEqual([KEY, KEY, KEY]);
      // Without the CA the self-signed certificate is refused before any request is written.
      const untrusted = createClient({
        baseUrl: serviceUrl,
        apiKey: KEY,
        timeoutMs: PATIENCE_MS,
        maxResponseBytes: 1024 * 1024,
        proxy: { env: {} },
      });
      const refused = await untrusted.reportConfigInstanceStatus('ci_1', report).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(NetworkError);
      expect((refused as NetworkError).message).toMatch(/SELF_SIGNED/);
      // The certificate names 127.0.0.1 alone: reached by another name, it is refused.
      const misnamed = await client(`https://localhost:${new URL(serviceUrl).port}`, { env: {} })
        .reportConfigInstanceStatus('ci_1', report)
        .catch((e: unknown) => e);
      expect(misnamed).toBeInstanceOf(NetworkError);
      expect((misnamed as NetworkError).message).toMatch(/ERR_TLS_CERT_ALTNAME_INVALID/);
      expect(serviceSawKeys).toEqual([KEY, KEY, KEY]);
    });

    it('a proxy that refuses the tunnel is a network error naming the proxy answer; the service sees nothing', async () => {
      const error = await client(serviceUrl, { url: refusingUrl, env: {} })
        .getDevice('dvc_1')
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(NetworkError);
      expect((error as NetworkError).retryable).toBe(true);
      expect((error as NetworkError).message).toMatch(/proxy|407/i);
      expect((error as NetworkError).message).not.toContain(KEY);
      expect(proxySaw.map((r) => r.method)).toEqual(['CONNECT']);
      expect(serviceSawKeys).toEqual([]);
    });

    it('through the tunnel, a TLS connection the service closed is met and the request sent again on a new one', async () => {
      // The service answers each connection's first request and closes the connection on the next one.
      const requestsOn = new Map<unknown, number>();
      const seen: number[] = [];
      const stale = createHttpsServer(
        { key: readFileSync(path.join(dir, 'key.pem')), cert: ca },
        (req, res) => {
          const nth = (requestsOn.get(req.socket) ?? 0) + 1;
          requestsOn.set(req.socket, nth);
          seen.push(nth);
          if (nth > 1) return req.socket.destroy();
          res.setHeader('content-type', 'application/json');
          res.end(JSON.stringify(DEVICE));
        },
      );
      const port = await listen(stale);
      try {
        const c = client(`https://127.0.0.1:${port}`, { url: proxyUrl, env: {} });
        for (let i = 0; i < 6; i += 1) expect((await c.getDevice('dvc_1')).id).toBe('dvc_1');
        const killed = seen.filter((nth) => nth > 1).length;
        expect(killed).toBeGreaterThan(0);
        // Each killed request was followed by one on a new connection, and nothing else was sent.
        expect(seen).toHaveLength(6 + killed);
        for (const [i, nth] of seen.entries()) if (nth > 1) expect(seen[i + 1]).toBe(1);
        expect(proxySaw.every((r) => r.method === 'CONNECT')).toBe(true);
      } finally {
        stale.closeAllConnections();
        await new Promise((resolve) => stale.close(resolve));
      }
    });

    it('an http:// (loopback) service is never sent through a proxy, so the key never crosses one in clear', async () => {
      const plain = createHttpServer((req, res) => {
        serviceSawKeys.push(req.headers['x-api-key'] as string | undefined);
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify(DEVICE));
      });
      const port = await listen(plain);
      try {
        await client(`http://127.0.0.1:${port}`, { url: proxyUrl, env: { HTTP_PROXY: proxyUrl } }).getDevice(
          'dvc_1',
        );
        expect(proxySaw).toEqual([]);
        expect(serviceSawKeys).toEqual([KEY]);
      } finally {
        plain.closeAllConnections();
        await new Promise((resolve) => plain.close(resolve));
      }
    });
  },
);

describe('server.proxy in the config schema', () => {
  const parse = (proxyValue: unknown) =>
    parseAgentConfig(
      {
        deviceId: 'dvc_1',
        server: { baseUrl: 'https://configs.example.com', proxy: proxyValue },
        rootDir: '/srv/config-agent',
        stateDir: '/var/lib/config-agent',
      },
      'test.json',
    );

  it('takes an http(s) proxy URL', () => {
    expect(parse('http://proxy.corp:3128').server.proxy).toBe('http://proxy.corp:3128');
  });

  it.each([
    ['proxy.corp:3128', 'server.proxy: must use http or https (got proxy.corp)'],
    ['socks5://proxy.corp:1080', 'server.proxy: must use http or https (got socks5)'],
    ['http://user:pw@proxy.corp:3128', 'server.proxy: must not contain credentials'],
    ['http://proxy.corp:3128/path', 'server.proxy: must be only a scheme, host and port'],
    ['not a url', 'server.proxy: must be an absolute URL like "http://proxy.example.com:3128"'],
  ])('refuses %s', (value, message) => {
    expect(() => parse(value)).toThrow(message);
  });
});
