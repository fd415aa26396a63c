// Unit tests of the service client against raw node:http servers on loopback: wire shape, classification, limits.
import { getEventListeners } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { inspect } from 'node:util';
import { Agent } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { PATIENCE_MS, waitFor } from '../../test/helpers/wait-for.js';
import { type Clock, systemClock } from '../lib/clock.js';
import {
  type ClientOptions,
  createClient,
  parseRetryAfter,
  type ReportAnswer,
  type RequestEvent,
} from './client.js';
import {
  HttpStatusError,
  InvalidArgumentError,
  InvalidResponseError,
  isRetryableError,
  MalformedResponseError,
  NetworkError,
  ResponseTooLargeError,
  TimeoutError,
} from './errors.js';
import { isJsonContentFile } from './json-file.js';
import type { RequestSignal, Transport, TransportResponse } from './transport.js';

/** A report answer's head without the fields it passes on (ReportAnswer `fields`). */
function headOf(answer: ReportAnswer | undefined): Omit<ReportAnswer, 'fields'> | undefined {
  if (answer === undefined) return undefined;
  const { fields: _fields, ...head } = answer;
  return head;
}

const API_KEY = 'sk-unit-test-0123456789abcdef';
const T0 = '2025-01-01T00:00:00Z';

interface Recorded {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
}
type Handler = (req: IncomingMessage, res: ServerResponse, recorded: Recorded) => void;

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A raw HTTP server on 127.0.0.1:0 that records every request and answers with `handler`. */
async function serve(handler: Handler): Promise<{ url: string; requests: Recorded[] }> {
  const requests: Recorded[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const recorded: Recorded = {
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
      };
      requests.push(recorded);
      handler(req, res, recorded);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, requests };
}

function json(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': String(Buffer.byteLength(text)),
    ...headers,
  });
  res.end(text);
}

function client(url: string, overrides: Partial<ClientOptions> = {}) {
  return createClient({
    baseUrl: url,
    apiKey: API_KEY,
    // Generous: a deadline is only tested with its own small timeoutMs; a busy machine must not fail the rest.
    timeoutMs: PATIENCE_MS,
    maxResponseBytes: 1_000_000,
    ...overrides,
  });
}

function device(id: string, extra: Record<string, unknown> = {}) {
  return {
    object: 'device',
    id,
    name: `name-${id}`,
    status: 'online',
    last_connected_at: T0,
    last_disconnected_at: T0,
    created_at: T0,
    updated_at: T0,
    ...extra,
  };
}

function configInstance(id: string) {
  return {
    object: 'config_instance',
    id,
    target_status: 'deployed',
    activity_status: 'queued',
    error_status: 'none',
    status: 'queued',
    relative_filepath: 'app/settings.json',
    created_at: T0,
    updated_at: T0,
    device_id: 'dev_1',
    config_schema_id: 'sch_1',
    config_type_id: 'typ_1',
    device: null,
    config_schema: null,
    config_type: null,
    content: { port: 8080, nested: { enabled: true } },
  };
}

function envelope(data: unknown[], offset: number, limit: number, hasMore: boolean) {
  return { object: 'list', total_count: -1, limit, offset, has_more: hasMore, data };
}

function errorBody(code: string, message = 'something went wrong') {
  return { error: { code, message, params: {} } };
}

async function failure(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected the promise to reject');
}

describe('request shape', () => {
  it('sends X-API-Key and addresses {baseUrl}/{apiVersion}/... with percent-encoded ids', async () => {
    const server = await serve((_req, res) => json(res, 200, device('dev/1 ä')));
    const got = await client(`${server.url}/api/`).getDevice('dev/1 ä');
    expect(got.id).toBe('dev/1 ä');
    const [request] = server.requests;
    expect(request?.method).toBe('GET');
    expect(request?.url).toBe('/api/v1/devices/dev%2F1%20%C3%A4');
    expect(request?.headers['x-api-key']).toBe(API_KEY);
  });

  it('uses the configured apiVersion and keeps dot-only ids from being normalised away', async () => {
    const server = await serve((_req, res) => json(res, 200, device('..')));
    await client(server.url, { apiVersion: 'v2' }).getDevice('..');
    expect(server.requests[0]?.url).toBe('/v2/devices/%2E%2E');
  });

  it('sends filters, paging, order_by and repeated expand[] on lists', async () => {
    const server = await serve((_req, res) =>
      json(res, 200, envelope([configInstance('ci_1')], 5, 2, false)),
    );
    const list = await client(server.url).listConfigInstances(
      { device_id: 'dev 1', activity_status: 'queued' },
      { offset: 5, limit: 2, orderBy: 'created_at:desc,id:asc', expand: ['total_count', 'device'] },
    );
    expect(list.data.map((ci) => ci.id)).toEqual(['ci_1']);
    const url = new URL(server.requests[0]?.url ?? '', server.url);
    expect(url.pathname).toBe('/v1/config_instances');
    expect(url.searchParams.get('device_id')).toBe('dev 1');
    expect(url.searchParams.get('activity_status')).toBe('queued');
    expect(url.searchParams.get('offset')).toBe('5');
    expect(url.searchParams.get('limit')).toBe('2');
    expect(url.searchParams.get('order_by')).toBe('created_at:desc,id:asc');
    expect(url.searchParams.getAll('expand[]')).toEqual(['total_count', 'device']);
    expect(server.requests[0]?.url).toContain('expand[]=total_count&expand[]=device');
  });

  it('addresses every endpoint at its route', async () => {
    const server = await serve((req, res) => {
      const path = new URL(req.url ?? '', 'http://x').pathname;
      if (path === '/v1/releases') return json(res, 200, envelope([], 0, 10, false));
      if (path === '/v1/devices') return json(res, 200, envelope([device('d1')], 0, 10, false));
      if (path.endsWith('/deploy')) return json(res, 200, { deploy: configInstance('ci_1'), remove: [] });
      if (path.startsWith('/v1/deployments/')) {
        return json(res, 200, {
          object: 'deployment',
          id: 'dpl_1',
          description: 'first',
          status: 'queued',
          activity_status: 'queued',
          error_status: 'none',
          target_status: 'deployed',
          device_id: 'dev_1',
          release_id: 'v1.2.3',
          created_at: T0,
          updated_at: T0,
          device: null,
          release: null,
          config_instances: null,
        });
      }
      return json(res, 200, configInstance('ci_1'));
    });
    const c = client(server.url);
    await c.getDeployment('dpl_1', { expand: ['device', 'release'] });
    await c.deployConfigInstance('ci_1', { dryRun: true });
    await c.deployConfigInstance('ci_1');
    await c.listReleases({ version: 'v1.0.0' });
    await c.listDevices({ status: 'online' }, { orderBy: 'name:asc' });
    await c.reportConfigInstanceStatus('ci_1', {
      activity_status: 'deployed',
      error_status: 'none',
      message: 'ok',
    });
    expect(server.requests.map((r) => `${r.method} ${r.url}`)).toEqual([
      'GET /v1/deployments/dpl_1?expand[]=device&expand[]=release',
      'POST /v1/config_instances/ci_1/deploy?dry_run=true',
      'POST /v1/config_instances/ci_1/deploy',
      'GET /v1/releases?version=v1.0.0',
      'GET /v1/devices?status=online&order_by=name%3Aasc',
      'PATCH /v1/config_instances/ci_1',
    ]);
    const patch = server.requests[5];
    expect(patch?.headers['content-type']).toBe('application/json');
    expect(JSON.parse(patch?.body ?? '')).toEqual({
      activity_status: 'deployed',
      error_status: 'none',
      message: 'ok',
    });
  });

  it('refuses empty ids and invalid status reports without sending anything', async () => {
    const server = await serve((_req, res) => json(res, 200, configInstance('ci_1')));
    const c = client(server.url);
    expect(await failure(c.getDevice(''))).toBeInstanceOf(InvalidArgumentError);
    const bad = await failure(
      c.reportConfigInstanceStatus('ci_1', { activity_status: 'exploded', error_status: 'none' } as never),
    );
    expect(bad).toBeInstanceOf(InvalidArgumentError);
    expect((bad as Error).message).toContain('activity_status');
    expect(isRetryableError(bad)).toBe(false);
    expect(server.requests).toHaveLength(0);
  });

  it('sends the reports StatusReport takes, with their message, and refuses the others without sending them', async () => {
    const server = await serve((_req, res) => json(res, 200, configInstance('ci_1')));
    const c = client(server.url);
    const sent = [
      { error_status: 'none', activity_status: 'deployed' },
      { activity_status: 'deployed', error_status: 'failed', message: 'x'.repeat(4096) },
      { activity_status: 'removed', error_status: 'retrying', message: undefined },
    ] as const;
    for (const report of sent) await c.reportConfigInstanceStatus('ci_1', report);
    expect(server.requests.map((r) => r.body)).toEqual([
      '{"activity_status":"deployed","error_status":"none"}',
      `{"activity_status":"deployed","error_status":"failed","message":"${'x'.repeat(4096)}"}`,
      '{"activity_status":"removed","error_status":"retrying"}',
    ]);
    const refused: [report: unknown, field: string][] = [
      [{ activity_status: 'deployed', error_status: 'none', extra: 1 }, '(report)'],
      [{ activity_status: 'deployed', error_status: 'none', message: 'x'.repeat(4097) }, 'message'],
      [{ activity_status: 'deployed', error_status: 'none', message: 7 }, 'message'],
      [{ activity_status: 'deployed' }, 'error_status'],
      [['deployed', 'none'], '(report)'],
    ];
    for (const [report, field] of refused) {
      const error = await failure(c.reportConfigInstanceStatus('ci_1', report as never));
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect((error as Error).message).toContain(`at ${field}`);
    }
    expect(server.requests).toHaveLength(3);
  });

  it("reads a large report answer's head from its bytes, whatever its content", async () => {
    const rules = Array.from({ length: 2000 }, (_, k) => `rule ${k}: ship /var/log/app-${k}/*.log`);
    const answers = [
      { ...configInstance('ci_1'), updated_at: '2025-01-02T00:00:00Z', content: { rules } },
      // Content the agent would refuse to write (nested past 64 levels): the head is what a report reads.
      {
        ...configInstance('ci_1'),
        updated_at: '2025-01-03T00:00:00Z',
        content: { rules, deep: JSON.parse(`${'['.repeat(70)}${']'.repeat(70)}`) },
      },
      { ...configInstance('ci_1'), content: { rules }, updated_at: 'yesterday' },
    ];
    const server = await serve((_req, res) => json(res, 200, answers.shift()));
    const c = client(server.url);
    const report = { activity_status: 'deployed', error_status: 'none' } as const;
    const head = { id: 'ci_1', activity_status: 'queued', error_status: 'none' };
    expect(headOf(await c.reportConfigInstanceStatus('ci_1', report))).toEqual({
      ...head,
      updated_at: '2025-01-02T00:00:00Z',
    });
    expect(headOf(await c.reportConfigInstanceStatus('ci_1', report))).toEqual({
      ...head,
      updated_at: '2025-01-03T00:00:00Z',
    });
    expect(await c.reportConfigInstanceStatus('ci_1', report)).toBeUndefined();
    expect(server.requests).toHaveLength(3);
  });

  it('reads the head of a report answer over the cap past its content up to twice the cap, and no further', async () => {
    const head = {
      id: 'ci_1',
      activity_status: 'deployed',
      error_status: 'none',
      updated_at: '2025-01-05T00:00:00Z',
    };
    // The content first: 6,000 bytes (within twice the 4,096-byte cap), then 20,000 (past it).
    const answers = [6_000, 20_000, 6_000, 20_000].map((pad) =>
      JSON.stringify({ content: 'x'.repeat(pad), ...head }),
    );
    let served = 0;
    const server = await serve((_req, res) => {
      const text = answers[served] ?? '';
      // The first two with content-length, the others chunked (readCapped's own scan).
      res.writeHead(200, {
        'content-type': 'application/json',
        ...(served < 2 ? { 'content-length': String(Buffer.byteLength(text)) } : {}),
      });
      served += 1;
      res.end(text);
    });
    const c = client(server.url, { maxResponseBytes: 4_096 });
    const report = { activity_status: 'deployed', error_status: 'none' } as const;
    const read: unknown[] = [];
    for (let i = 0; i < answers.length; i += 1)
      read.push(headOf(await c.reportConfigInstanceStatus('ci_1', report)));
    expect(read).toEqual([head, undefined, head, undefined]);
    expect(server.requests).toHaveLength(4);
  });

  it("reads a small report answer's id, statuses and updated_at, and takes none of a head that is not valid", async () => {
    const answers: unknown[] = [
      { ...configInstance('ci_1'), updated_at: '2025-01-03T00:00:00Z', extra: 'ignored' },
      // Only the head counts: an expanded device, content of any shape, or no other field at all.
      { ...configInstance('ci_1'), updated_at: '2025-01-04T00:00:00Z', device: device('dev_1'), content: 7 },
      { id: 'ci_1', activity_status: 'deployed', error_status: 'none', updated_at: '2025-01-05T00:00:00Z' },
      // A repeated key: the last one, as JSON.parse and the lossless parser both take it.
      '{"id":"ci_1","activity_status":"queued","error_status":"none","updated_at":"2025-01-05T00:00:00Z","updated_at":"2025-01-06T00:00:00Z"}',
      { ...configInstance('ci_1'), activity_status: 'exploded' },
      { ...configInstance('ci_1'), updated_at: 'yesterday' },
      { ...configInstance(''), updated_at: '2025-01-07T00:00:00Z' },
      [configInstance('ci_1')],
      'not json',
    ];
    const server = await serve((_req, res) => {
      const answer = answers.shift();
      const text = typeof answer === 'string' ? answer : JSON.stringify(answer);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(text);
    });
    const c = client(server.url);
    const report = { activity_status: 'deployed', error_status: 'none' } as const;
    const read: unknown[] = [];
    for (let i = 0; i < 9; i += 1) read.push(headOf(await c.reportConfigInstanceStatus('ci_1', report)));
    const head = (activity: string, updatedAt: string) => ({
      id: 'ci_1',
      activity_status: activity,
      error_status: 'none',
      updated_at: updatedAt,
    });
    expect(read).toEqual([
      head('queued', '2025-01-03T00:00:00Z'),
      head('queued', '2025-01-04T00:00:00Z'),
      head('deployed', '2025-01-05T00:00:00Z'),
      head('queued', '2025-01-06T00:00:00Z'),
      undefined,
      undefined,
      undefined,
      undefined,
      undefined,
    ]);
    expect(server.requests).toHaveLength(9);
  });
});

describe('HTTP status classification', () => {
  const cases: [status: number, retryable: boolean][] = [
    [400, false],
    [401, false],
    [404, false],
    [408, true],
    [429, true],
    [500, true],
    [503, true],
  ];
  it.each(cases)(
    'HTTP %i → HttpStatusError, retryable %s, with the parsed error body',
    async (status, retryable) => {
      const server = await serve((_req, res) => json(res, status, errorBody(`code_${status}`, 'detail')));
      const error = await failure(client(server.url).getDevice('dev_1'));
      expect(error).toBeInstanceOf(HttpStatusError);
      const http = error as HttpStatusError;
      expect(http.code).toBe('http_status');
      expect(http.status).toBe(status);
      expect(http.retryable).toBe(retryable);
      expect(isRetryableError(http)).toBe(retryable);
      expect(http.body).toEqual(errorBody(`code_${status}`, 'detail'));
      expect(http.message).toContain('GET /v1/devices/{id}');
      expect(http.message).toContain(String(status));
      expect(http.message).not.toContain('dev_1');
    },
  );

  it('leaves body undefined when the error body is not the service shape', async () => {
    const server = await serve((_req, res) => {
      res.writeHead(502, { 'content-type': 'text/html' });
      res.end('<html>bad gateway</html>');
    });
    const error = (await failure(client(server.url).getDevice('dev_1'))) as HttpStatusError;
    expect(error.status).toBe(502);
    expect(error.body).toBeUndefined();
    expect(error.retryable).toBe(true);
  });

  it('carries at most 1 KiB of an error body, and a code only when it is a plain token', async () => {
    // A hostile or broken service answering every failure with the 64 KiB the client reads of an error body.
    const huge = 'x'.repeat(30_000);
    const server = await serve((_req, res) =>
      json(res, 500, { error: { code: 'internal_error', message: huge, params: { echo: huge } } }),
    );
    const error = (await failure(client(server.url).getDevice('dev_1'))) as HttpStatusError;
    expect(error.status).toBe(500);
    expect(error.message).toBe('GET /v1/devices/{id} failed with HTTP 500 (internal_error)');
    // What a log line of the error serializes (pino copies its enumerable fields).
    expect(JSON.stringify({ ...error, message: error.message }).length).toBeLessThan(2048);
    expect(error.body?.error.code).toBe('internal_error');

    const longCode = await serve((_req, res) => json(res, 503, errorBody(`${huge}${API_KEY.slice(0, 8)}`)));
    const coded = (await failure(client(longCode.url).getDevice('dev_1'))) as HttpStatusError;
    expect(coded.message).toBe('GET /v1/devices/{id} failed with HTTP 503');
    expect(JSON.stringify({ ...coded, message: coded.message })).not.toContain('xxxxxxxx');
    // A small body is carried as it is.
    const small = await serve((_req, res) => json(res, 404, errorBody('not_found', 'no such device')));
    const plain = (await failure(client(small.url).getDevice('dev_1'))) as HttpStatusError;
    expect(plain.body).toEqual(errorBody('not_found', 'no such device'));
  });

  it('parses Retry-After in seconds', async () => {
    const server = await serve((_req, res) =>
      json(res, 429, errorBody('rate_limited'), { 'retry-after': '7' }),
    );
    const error = (await failure(client(server.url).getDevice('dev_1'))) as HttpStatusError;
    expect(error.retryAfterMs).toBe(7_000);
  });

  it("parses Retry-After as an HTTP-date relative to the service's Date header, never negative", async () => {
    const now = Date.parse('2025-06-01T12:00:00Z');
    // The device's clock is wrong (booted at 1970): the wait is still what the service asked.
    const clock: Clock = { ...systemClock, now: () => 0 };
    const later = new Date(now + 90_000).toUTCString();
    const earlier = new Date(now - 90_000).toUTCString();
    let answer = later;
    const server = await serve((_req, res) =>
      json(res, 503, errorBody('unavailable'), { 'retry-after': answer, date: new Date(now).toUTCString() }),
    );
    const c = client(server.url, { clock });
    expect(((await failure(c.getDevice('d'))) as HttpStatusError).retryAfterMs).toBe(90_000);
    answer = earlier;
    expect(((await failure(c.getDevice('d'))) as HttpStatusError).retryAfterMs).toBe(0);
    answer = 'soon';
    expect(((await failure(c.getDevice('d'))) as HttpStatusError).retryAfterMs).toBeUndefined();
  });
});

describe('transport failures', () => {
  it('a server that never answers → TimeoutError within the deadline', async () => {
    const server = await serve(() => {});
    const started = performance.now();
    const error = await failure(client(server.url, { timeoutMs: 300 }).getDevice('dev_1'));
    const elapsed = performance.now() - started;
    expect(error).toBeInstanceOf(TimeoutError);
    expect((error as TimeoutError).code).toBe('timeout');
    expect((error as TimeoutError).retryable).toBe(true);
    // Not early. No upper bound on a wall clock (a busy machine can take seconds to run the timer): a server
    // that never answers can only end in a TimeoutError through the deadline.
    expect(elapsed).toBeGreaterThanOrEqual(250);
  });

  it('a server trickling one byte at a time hits the total deadline (bodyTimeout alone would not)', async () => {
    const text = JSON.stringify(device('dev_1'));
    const server = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(text.length) });
      let i = 0;
      const timer = setInterval(() => {
        if (res.destroyed || i >= text.length) {
          clearInterval(timer);
          return;
        }
        res.write(text[i++]);
      }, 40);
      res.on('close', () => clearInterval(timer));
    });
    // A dispatcher whose per-chunk body timeout is generous: only the total deadline can stop this.
    const agent = new Agent({ bodyTimeout: 5_000, headersTimeout: 5_000 });
    cleanups.push(() => agent.close());
    // The trickle would deliver the whole body within bodyTimeout (a byte per 40 ms): only the total deadline
    // can end it in a TimeoutError.
    const error = await failure(client(server.url, { timeoutMs: 500, dispatcher: agent }).getDevice('dev_1'));
    expect(error).toBeInstanceOf(TimeoutError);
  });

  it('an oversize body → ResponseTooLargeError, with the built dispatcher and with an injected one', async () => {
    const big = envelope(
      Array.from({ length: 200 }, (_, i) => device(`dev_${i}`)),
      0,
      100,
      false,
    );
    const chunked = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(big));
    });
    const withLength = await serve((_req, res) => json(res, 200, big));
    const agent = new Agent();
    cleanups.push(() => agent.close());
    for (const url of [chunked.url, withLength.url]) {
      for (const dispatcher of [undefined, agent]) {
        const c = client(url, {
          maxResponseBytes: 4_096,
          ...(dispatcher === undefined ? {} : { dispatcher }),
        });
        const error = await failure(c.listDevices());
        expect(error).toBeInstanceOf(ResponseTooLargeError);
        expect((error as ResponseTooLargeError).code).toBe('response_too_large');
        expect((error as ResponseTooLargeError).retryable).toBe(false);
      }
    }
  });

  it('a close-delimited body cut mid-JSON arrives as 200 → MalformedResponseError (retryable)', async () => {
    const server = await serve((req) => {
      req.socket.end(
        'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{"object":"device","id":"dev_',
      );
    });
    const error = await failure(client(server.url).getDevice('dev_1'));
    expect(error).toBeInstanceOf(MalformedResponseError);
    expect((error as MalformedResponseError).code).toBe('malformed_response');
    expect((error as MalformedResponseError).retryable).toBe(true);
  });

  it('valid JSON that violates the schema → InvalidResponseError naming the field (not retryable)', async () => {
    const server = await serve((_req, res) =>
      json(res, 200, envelope([device('d0'), device('d1', { created_at: 'yesterday' })], 0, 10, false)),
    );
    const error = await failure(client(server.url).listDevices());
    expect(error).toBeInstanceOf(InvalidResponseError);
    const invalid = error as InvalidResponseError;
    expect(invalid.code).toBe('invalid_response');
    expect(invalid.retryable).toBe(false);
    expect(invalid.paths).toEqual(['data[1].created_at']);
    expect(invalid.message).toContain('data[1].created_at');
    expect(invalid.message).toContain('GET /v1/devices');
  });

  it('a connection reset → NetworkError (retryable)', async () => {
    const server = await serve((req) => req.socket.resetAndDestroy());
    const error = await failure(client(server.url).getDevice('dev_1'));
    expect(error).toBeInstanceOf(NetworkError);
    expect((error as NetworkError).code).toBe('network_error');
    expect((error as NetworkError).retryable).toBe(true);
  });

  it('a refused connection → NetworkError (retryable)', async () => {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    await new Promise<void>((resolve) => server.close(() => resolve()));
    const error = await failure(client(`http://127.0.0.1:${port}`).getDevice('dev_1'));
    expect(error).toBeInstanceOf(NetworkError);
    expect((error as NetworkError).message).toContain('ECONNREFUSED');
    expect(isRetryableError(error)).toBe(true);
  });

  it("the caller's abort is passed through as the caller's reason, not as a timeout", async () => {
    const server = await serve(() => {});
    const controller = new AbortController();
    const reason = new Error('shutting down');
    setTimeout(() => controller.abort(reason), 50);
    const error = await failure(client(server.url).getDevice('dev_1', { signal: controller.signal }));
    expect(error).toBe(reason);
  });
});

describe('cancellation', () => {
  it("leaves no listener on the caller's long-lived signal, whatever the outcome", async () => {
    const server = await serve((req, res) => {
      if (req.url?.includes('missing')) return json(res, 404, errorBody('not_found'));
      return json(res, 200, device('dev_1'));
    });
    const shutdown = new AbortController();
    const c = client(server.url);
    for (let i = 0; i < 5; i++) {
      await c.getDevice('dev_1', { signal: shutdown.signal });
      await failure(c.getDevice('missing', { signal: shutdown.signal }));
    }
    expect(getEventListeners(shutdown.signal, 'abort')).toHaveLength(0);
  });

  it("one caller's abort ends every request in flight under it, and only those", async () => {
    const server = await serve((req, res) => {
      if (req.url?.includes('fast')) json(res, 200, device('fast'));
      // The others are never answered: only an abort ends them.
    });
    const c = client(server.url);
    const pass = new AbortController();
    const other = new AbortController();
    const reason = new Error('pass stopped');
    const slow = Array.from({ length: 8 }, (_, i) =>
      failure(c.getDevice(`slow_${i}`, { signal: pass.signal })),
    );
    const beside = failure(c.getDevice('beside', { signal: other.signal }));
    expect((await c.getDevice('fast', { signal: pass.signal })).id).toBe('fast');
    await waitFor(() => server.requests.length === 10, PATIENCE_MS, { what: 'ten requests at the server' });
    // One listener of the client's on each signal with requests in flight, not one per request.
    expect(getEventListeners(pass.signal, 'abort')).toHaveLength(1);
    pass.abort(reason);
    for (const error of await Promise.all(slow)) expect(error).toBe(reason);
    expect(getEventListeners(pass.signal, 'abort')).toHaveLength(0);
    // A request under another signal goes on: it ends with its own abort.
    const otherReason = new Error('other stopped');
    other.abort(otherReason);
    expect(await beside).toBe(otherReason);
    expect(getEventListeners(other.signal, 'abort')).toHaveLength(0);
    // The aborted signal fails a new request at once, with nothing sent.
    expect(await failure(c.getDevice('late', { signal: pass.signal }))).toBe(reason);
    expect(server.requests).toHaveLength(10);
  });

  it('a deadline ends its own request only, also under a shared caller signal', async () => {
    const server = await serve((req, res) => {
      if (req.url?.includes('fast')) json(res, 200, device('fast'));
    });
    const c = client(server.url, { timeoutMs: 300 });
    const pass = new AbortController();
    const error = await failure(c.getDevice('slow', { signal: pass.signal }));
    expect(error).toBeInstanceOf(TimeoutError);
    expect((await c.getDevice('fast', { signal: pass.signal })).id).toBe('fast');
    expect(pass.signal.aborted).toBe(false);
    expect(getEventListeners(pass.signal, 'abort')).toHaveLength(0);
  });

  it('an already aborted caller signal fails at once with its reason', async () => {
    const server = await serve((_req, res) => json(res, 200, device('dev_1')));
    const reason = new Error('stopped');
    const error = await failure(client(server.url).getDevice('dev_1', { signal: AbortSignal.abort(reason) }));
    expect(error).toBe(reason);
  });

  it("a request whose abort throws does not keep the caller's abort from the others, nor ends the process", async () => {
    // Each request waits for its abort; the first one's transport has a listener that throws.
    const seen: RequestSignal[] = [];
    const transport: Transport = {
      request: (request) =>
        new Promise<TransportResponse>((_resolve, reject) => {
          const { signal } = request;
          seen.push(signal);
          if (seen.length === 1)
            signal.addEventListener('abort', () => {
              throw new Error('a broken abort listener');
            });
          signal.addEventListener('abort', () => reject(signal.reason));
        }),
      close: async () => undefined,
      destroy: async () => undefined,
    };
    const c = createClient({
      baseUrl: 'http://127.0.0.1:9',
      apiKey: API_KEY,
      timeoutMs: PATIENCE_MS,
      maxResponseBytes: 1_000_000,
      transport,
    });
    // A real signal, as a pass's: a throw of its listener is an uncaught exception (runAgent's fatal exit,
    // state not flushed), so the client's listener must not throw whatever a transport's does.
    const uncaught: unknown[] = [];
    const onUncaught = (error: unknown) => uncaught.push(error);
    process.prependListener('uncaughtException', onUncaught);
    try {
      const pass = new AbortController();
      const requests = ['dev_1', 'dev_2', 'dev_3'].map((id) =>
        failure(c.getDevice(id, { signal: pass.signal })),
      );
      await waitFor(() => seen.length === 3, PATIENCE_MS, { what: 'three requests at the transport' });
      const reason = new Error('pass stopped');
      pass.abort(reason);
      expect(seen.map((s) => s.aborted)).toEqual([true, true, true]);
      for (const error of await Promise.all(requests)) expect(error).toBe(reason);
      await new Promise((resolve) => setImmediate(resolve));
      expect(uncaught).toEqual([]);
    } finally {
      process.off('uncaughtException', onUncaught);
    }
  });
});

describe('pagination', () => {
  const all = Array.from({ length: 25 }, (_, i) => device(`dev_${String(i).padStart(2, '0')}`));
  async function pagedServer() {
    return serve((req, res) => {
      const url = new URL(req.url ?? '', 'http://x');
      const offset = Math.max(0, Number(url.searchParams.get('offset') ?? 0));
      const limit = Math.min(100, Math.max(1, Number(url.searchParams.get('limit') ?? 10)));
      json(res, 200, envelope(all.slice(offset, offset + limit), offset, limit, offset + limit < all.length));
    });
  }

  it('the iterator visits every page with offset += limit (full pages) and stops when has_more is false', async () => {
    const server = await pagedServer();
    const seen: string[] = [];
    for await (const d of client(server.url).iterateDevices({}, { limit: 10 })) seen.push(d.id);
    expect(seen).toEqual(all.map((d) => d.id));
    expect(server.requests.map((r) => r.url)).toEqual([
      '/v1/devices?offset=0&limit=10',
      '/v1/devices?offset=10&limit=10',
      '/v1/devices?offset=20&limit=10',
    ]);
  });

  it('the iterator steps past only what a page held: a service cutting pages shorter than their limit loses no item', async () => {
    // At most 3 items a page though the envelope says limit 10, has_more while any are left (lead23).
    const server = await serve((req, res) => {
      const url = new URL(req.url ?? '', 'http://x');
      const offset = Math.max(0, Number(url.searchParams.get('offset') ?? 0));
      json(res, 200, envelope(all.slice(offset, offset + 3), offset, 10, offset + 3 < all.length));
    });
    const seen: string[] = [];
    for await (const d of client(server.url).iterateDevices({}, { limit: 10 })) seen.push(d.id);
    expect(seen).toEqual(all.map((d) => d.id));
    expect(server.requests.map((r) => r.url).slice(0, 3)).toEqual([
      '/v1/devices?offset=0&limit=10',
      '/v1/devices?offset=3&limit=10',
      '/v1/devices?offset=6&limit=10',
    ]);
  });

  it('the iterator asks for 100 per page by default', async () => {
    const server = await pagedServer();
    const seen: string[] = [];
    for await (const d of client(server.url).iterateDevices()) seen.push(d.id);
    expect(seen).toHaveLength(25);
    expect(server.requests.map((r) => r.url)).toEqual(['/v1/devices?offset=0&limit=100']);
  });

  it('the iterator stops with an error when the server claims has_more on an empty page', async () => {
    const server = await serve((_req, res) => json(res, 200, envelope([], 0, 10, true)));
    const error = await failure(
      (async () => {
        for await (const _ of client(server.url).iterateReleases()) {
          // draining
        }
      })(),
    );
    expect(error).toBeInstanceOf(InvalidResponseError);
    expect((error as Error).message).toContain('has_more');
    expect(server.requests).toHaveLength(1);
  });
});

describe('the API key never leaks', () => {
  function expectNoKey(error: unknown): void {
    const err = error as Error;
    for (const text of [
      String(err),
      err.stack ?? '',
      JSON.stringify(err),
      inspect(err, { depth: Infinity }),
    ]) {
      expect(text).not.toContain(API_KEY);
    }
  }

  it('in any error form, even when the server echoes the key', async () => {
    const server = await serve((req, res) => {
      const key = String(req.headers['x-api-key']);
      const path = req.url ?? '';
      if (path.includes('echo')) return json(res, 401, errorBody('unauthorized', `bad key ${key}`));
      if (path.includes('schema')) return json(res, 200, device('x', { name: 42, status: key }));
      if (path.includes('malformed')) {
        res.writeHead(200, { 'content-type': 'application/json' });
        return res.end(`{"key":"${key}"`);
      }
      if (path.includes('reset')) return req.socket.resetAndDestroy();
      return undefined;
    });
    // Only the hanging request is meant to time out: on a busy machine 300 ms can pass before the server resets.
    const c = client(server.url, { timeoutMs: 30_000 });
    const hasty = client(server.url, { timeoutMs: 300 });
    const errors = [
      await failure(c.getDevice('echo')),
      await failure(c.getDevice('schema')),
      await failure(c.getDevice('malformed')),
      await failure(c.getDevice('reset')),
      await failure(hasty.getDevice('hang')),
    ];
    expect(errors.map((e) => (e as { code?: string }).code)).toEqual([
      'http_status',
      'invalid_response',
      'malformed_response',
      'network_error',
      'timeout',
    ]);
    expect((errors[0] as HttpStatusError).body?.error.message).toBe('bad key [REDACTED]');
    for (const error of errors) expectNoKey(error);
  });
});

describe('onRequest', () => {
  it('reports method, route pattern, outcome, status and duration once per request', async () => {
    const server = await serve((req, res) => {
      if (req.url?.includes('missing')) return json(res, 404, errorBody('not_found'));
      return json(res, 200, device('dev_1'));
    });
    const events: RequestEvent[] = [];
    const c = client(server.url, { onRequest: (e) => events.push(e) });
    await c.getDevice('dev_1');
    await failure(c.getDevice('missing'));
    expect(events.map(({ durationMs: _, ...rest }) => rest)).toEqual([
      { method: 'GET', route: '/v1/devices/{id}', outcome: 'ok', status: 200 },
      { method: 'GET', route: '/v1/devices/{id}', outcome: 'http_error', status: 404 },
    ]);
    for (const event of events) expect(event.durationMs).toBeGreaterThanOrEqual(0);
  });
});

describe('parseRetryAfter', () => {
  const now = Date.parse('2025-06-01T12:00:00Z');
  it('reads delta-seconds and the three HTTP-date forms relative to now', () => {
    expect(parseRetryAfter('0', now)).toBe(0);
    expect(parseRetryAfter(' 120 ', now)).toBe(120_000);
    expect(parseRetryAfter('Sun, 01 Jun 2025 12:00:30 GMT', now)).toBe(30_000);
    expect(parseRetryAfter('Sunday, 01-Jun-25 12:01:00 GMT', now)).toBe(60_000);
    expect(parseRetryAfter('Sun Jun  1 12:00:10 2025', now)).toBeGreaterThanOrEqual(0);
    expect(parseRetryAfter(['5', '9'], now)).toBe(5_000);
  });

  it("measures an HTTP-date against the response's Date header when it has one, not the local clock", () => {
    const epoch = 0; // a device booted with its clock at 1970
    const date = 'Sun, 01 Jun 2025 12:00:00 GMT';
    expect(parseRetryAfter('Sun, 01 Jun 2025 12:00:30 GMT', epoch, date)).toBe(30_000);
    expect(parseRetryAfter('Sun, 01 Jun 2025 12:00:30 GMT', now + 3_600_000, [date])).toBe(30_000);
    expect(parseRetryAfter('120', epoch, date)).toBe(120_000);
    // A Date header it cannot read: the local clock, as before.
    expect(parseRetryAfter('Sun, 01 Jun 2025 12:00:30 GMT', now, 'yesterday')).toBe(30_000);
  });

  it('is never negative and undefined for anything it cannot read', () => {
    expect(parseRetryAfter('Sun, 01 Jun 2025 11:00:00 GMT', now)).toBe(0);
    for (const bad of [undefined, '', '-5', '1.5', 'soon', '12abc', 'Xyz, 99 Foo 2025']) {
      expect(parseRetryAfter(bad, now)).toBeUndefined();
    }
  });
});

describe('isRetryableError', () => {
  it('is false for anything that is not a classified client error', () => {
    expect(isRetryableError(new Error('boom'))).toBe(false);
    expect(isRetryableError('text')).toBe(false);
    expect(isRetryableError(undefined)).toBe(false);
  });
});

describe('listConfigInstancePage: bytes that are not UTF-8', () => {
  function instance(id: string, content: string) {
    return `{"object":"config_instance","id":"${id}","target_status":"deployed","activity_status":"queued","error_status":"none","status":"queued","relative_filepath":"${id}.json","created_at":"${T0}","updated_at":"${T0}","device_id":"d","config_schema_id":"s","config_type_id":"t","device":null,"config_schema":null,"config_type":null,"content":{"s":"${content}"}}`;
  }

  it('cost only the item they are in: an item holding U+FFFD as valid UTF-8 is kept, even in such a body', async () => {
    const tail = Buffer.from(`,${instance('also_good', 'x')}]}`);
    // A lone continuation byte and a truncated sequence inside the "broken" item's string: not UTF-8.
    const brokenItem = Buffer.concat([
      Buffer.from(instance('broken', 'caf').replace('"caf"}}', '"caf')),
      Buffer.from([0x80, 0xc3]),
      Buffer.from('"}}'),
    ]);
    const full = Buffer.concat([
      Buffer.from(`{"object":"list","total_count":3,"limit":10,"offset":0,"has_more":false,"data":[`),
      Buffer.from(instance('replacement', 'caf\u00e9 \ufffd')),
      Buffer.from(','),
      brokenItem,
      tail,
    ]);
    const { url } = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(full.length) });
      res.end(full);
    });
    const page = await client(url).listConfigInstancePage();
    expect([...page.items].map((item) => (item.kind === 'valid' ? item.instance.id : item))).toEqual([
      'replacement',
      { kind: 'invalid', id: 'broken', problem: 'not valid UTF-8 (JSON text must be UTF-8)' },
      'also_good',
    ]);
  });
});

it('a body of valid UTF-8 keeps an item holding U+FFFD', async () => {
  const text = `{"object":"list","total_count":1,"limit":10,"offset":0,"has_more":false,"data":[{"object":"config_instance","id":"ok","target_status":"deployed","activity_status":"queued","error_status":"none","status":"queued","relative_filepath":"a.json","created_at":"${T0}","updated_at":"${T0}","device_id":"d","config_schema_id":"s","config_type_id":"t","device":null,"config_schema":null,"config_type":null,"content":{"s":"\ufffd"}}]}`;
  const { url } = await serve((_req, res) => json(res, 200, JSON.parse(text)));
  const [item] = (await client(url).listConfigInstancePage()).items;
  expect(item?.kind === 'valid' && item.instance.content).toEqual({ s: '\ufffd' });
});

describe('listConfigInstancePage: a page read as bytes, its items judged one by one', () => {
  /** A page of three items (2.4 MB: over NATIVE_SPLIT_MAX_CHARS), one broken, strings with multi-byte UTF-8. */
  function pageBody(): Buffer {
    const items = ['cfg_a', 'cfg_b', 'cfg_c'].map((id, i) => ({
      ...configInstance(id),
      content: { note: `caf\u00e9 ☃ 𝄞 ${'x'.repeat(400_000 * (i + 1))}`, i },
    }));
    const text = JSON.stringify({ ...envelope(items, 0, 10, false), total_count: 3 }).replace(
      '"cfg_b","target_status":"deployed"',
      '"cfg_b","target_status":"deployed","broken":tru',
    );
    return Buffer.from(text, 'utf8');
  }

  it('gives the same items with a declared length and chunked, whatever the pieces', async () => {
    const body = pageBody();
    const send = (withLength: boolean) =>
      serve(async (_req, res) => {
        res.writeHead(200, {
          'content-type': 'application/json',
          ...(withLength ? { 'content-length': String(body.length) } : {}),
        });
        // Pieces of an odd size: multi-byte characters and item boundaries fall across them.
        for (let at = 0; at < body.length; at += 65_537) {
          res.write(body.subarray(at, at + 65_537));
          await new Promise((resolve) => setImmediate(resolve));
        }
        res.end();
      });
    for (const withLength of [true, false]) {
      const { url } = await send(withLength);
      const page = await client(url, { maxResponseBytes: 8_000_000 }).listConfigInstancePage();
      expect(page.bytes).toBe(body.length);
      expect(page.items.length).toBe(3);
      const items = [...page.items];
      expect(items.map((item) => item.kind)).toEqual(['valid', 'invalid', 'valid']);
      expect(items[1]).toMatchObject({ id: 'cfg_b', problem: expect.stringMatching(/not valid JSON/) });
      const third = items[2];
      // A large item's content comes as the bytes of its file, written without a tree (json-file.ts).
      const content = third?.kind === 'valid' ? third.instance.content : undefined;
      expect(isJsonContentFile(content) && content.data.toString('utf8')).toBe(
        `${JSON.stringify({ note: `caf\u00e9 ☃ 𝄞 ${'x'.repeat(1_200_000)}`, i: 2 }, null, 2)}\n`,
      );
      // Each item is judged afresh from the page's bytes: the same verdict, a new value.
      expect(page.items.at(2)).toEqual(third);
      expect(page.items.at(2)).not.toBe(third);
      expect(page.items.at(3)).toBeUndefined();
    }
  });
});

describe('reading a body (its chunks by events: every way a body ends)', () => {
  /** A transport answering 200 with `body()`'s stream, declaring `declared` bytes when given. */
  function answering(body: () => Readable, declared?: number): Transport {
    return {
      request: async (): Promise<TransportResponse> => ({
        statusCode: 200,
        headers: {
          'content-type': 'application/json',
          ...(declared === undefined ? {} : { 'content-length': String(declared) }),
        },
        body: body(),
      }),
      close: async () => undefined,
      destroy: async () => undefined,
    };
  }
  const text = JSON.stringify(device('dev_1'));
  const viaTransport = (transport: Transport, maxResponseBytes = 1_000_000) =>
    createClient({
      baseUrl: 'http://127.0.0.1:9',
      apiKey: API_KEY,
      timeoutMs: PATIENCE_MS,
      maxResponseBytes,
      transport,
    });

  it('chunks of a declared and of an undeclared length, and a body already at its end', async () => {
    const pieces = () =>
      Readable.from([text.slice(0, 10), text.slice(10, 50), text.slice(50)].map((p) => Buffer.from(p)));
    expect((await viaTransport(answering(pieces, Buffer.byteLength(text))).getDevice('dev_1')).id).toBe(
      'dev_1',
    );
    expect((await viaTransport(answering(pieces)).getDevice('dev_1')).id).toBe('dev_1');
    const ended = () => {
      const body = new Readable({ read() {} });
      body.push(null);
      body.resume();
      return body;
    };
    // An empty body is no device: the answer is malformed, not a hang.
    expect(await failure(viaTransport(answering(ended)).getDevice('dev_1'))).toBeInstanceOf(
      MalformedResponseError,
    );
  });

  it('closed before its end without an error: a retryable network error (premature close), not a hang', async () => {
    const cut = () => {
      const body = new Readable({ read() {} });
      body.push(Buffer.from(text.slice(0, 20)));
      setImmediate(() => body.destroy());
      return body;
    };
    const error = await failure(viaTransport(answering(cut, Buffer.byteLength(text))).getDevice('dev_1'));
    expect(error).toBeInstanceOf(NetworkError);
    expect((error as NetworkError).message).toContain('ERR_STREAM_PREMATURE_CLOSE');
    expect(isRetryableError(error)).toBe(true);
  });

  it('an error from the body fails the request with it; over the cap the body is destroyed', async () => {
    const broken = () => {
      const body = new Readable({ read() {} });
      body.push(Buffer.from(text.slice(0, 20)));
      setImmediate(() => body.destroy(Object.assign(new Error('reset'), { code: 'ECONNRESET' })));
      return body;
    };
    const error = await failure(viaTransport(answering(broken)).getDevice('dev_1'));
    expect(error).toBeInstanceOf(NetworkError);
    expect((error as NetworkError).message).toContain('ECONNRESET');
    let big: Readable | undefined;
    const endless = () => {
      big = new Readable({
        read() {
          this.push(Buffer.alloc(1024, 0x20));
        },
      });
      return big;
    };
    expect(await failure(viaTransport(answering(endless), 10_000).getDevice('dev_1'))).toBeInstanceOf(
      ResponseTooLargeError,
    );
    expect(big?.destroyed).toBe(true);
  });
});
