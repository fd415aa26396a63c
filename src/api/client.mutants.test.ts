// The client where mutation testing found it untested: the hand check of a status report lets through nothing
// StatusReport would refuse; the shared headers carry accept; an answer over the cap that is not a report's keeps
// its first bytes, not a report's scan.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { PATIENCE_MS, waitFor } from '../../test/helpers/wait-for.js';
import { createClient, type RequestEvent } from './client.js';
import { InvalidArgumentError, ResponseTooLargeError } from './errors.js';

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

/** A loopback service answering every request with `answer` (204 by default); the bodies and accept headers it received. */
async function service(
  answer: (res: ServerResponse, req: IncomingMessage) => void = (res) => res.writeHead(204).end(),
): Promise<{ url: string; bodies: string[]; accepts: (string | undefined)[] }> {
  const bodies: string[] = [];
  const accepts: (string | undefined)[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => {
      body += chunk.toString('utf8');
    });
    req.on('end', () => {
      bodies.push(body);
      accepts.push(req.headers.accept);
      answer(res, req);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, bodies, accepts };
}

describe('a status report the hand check must leave to StatusReport', () => {
  it('is refused as an invalid argument naming its field, with nothing sent', async () => {
    const { url, bodies } = await service();
    const c = createClient({
      baseUrl: url,
      apiKey: 'k',
      timeoutMs: PATIENCE_MS,
      maxResponseBytes: 1_000_000,
    });
    // Statuses inherited rather than the report's own (as a class instance's getters would be), and another key.
    const inheritedActivity = Object.assign(Object.create({ activity_status: 'deployed' }), {
      error_status: 'none',
      other: 1,
    });
    const inheritedError = Object.assign(Object.create({ error_status: 'none' }), {
      activity_status: 'deployed',
      other: 1,
    });
    const refused: [report: unknown, field: string][] = [
      [null, '(report)'],
      [{ activity_status: 'deployed', error_status: 'bogus' }, 'error_status'],
      [inheritedActivity, '(report)'],
      [inheritedError, '(report)'],
      // A third key named '' is not a message.
      [{ activity_status: 'deployed', error_status: 'none', '': 'x' }, '(report)'],
    ];
    for (const [report, field] of refused) {
      const error = await c.reportConfigInstanceStatus('ci_1', report as never).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect((error as Error).message).toContain(`at ${field}`);
    }
    expect(bodies).toEqual([]);
    // The everyday report still goes, as StatusReport gives it.
    await c.reportConfigInstanceStatus('ci_1', { error_status: 'none', activity_status: 'deployed' });
    expect(bodies).toEqual(['{"activity_status":"deployed","error_status":"none"}']);
  });
});

describe('the headers every request shares', () => {
  it('ask for JSON, on a report and on a read', async () => {
    const { url, accepts } = await service((res, req) =>
      req.method === 'PATCH' ? res.writeHead(204).end() : res.writeHead(404).end(),
    );
    const c = createClient({
      baseUrl: url,
      apiKey: 'k',
      timeoutMs: PATIENCE_MS,
      maxResponseBytes: 1_000_000,
    });
    await c.reportConfigInstanceStatus('ci_1', { activity_status: 'deployed', error_status: 'none' });
    await c.getDevice('dev_1').catch(() => undefined);
    expect(accepts).toEqual(['application/json', 'application/json']);
  });

  it("name a report's route pattern to onRequest", async () => {
    const { url } = await service();
    const events: RequestEvent[] = [];
    const c = createClient({
      baseUrl: url,
      apiKey: 'k',
      timeoutMs: PATIENCE_MS,
      maxResponseBytes: 1_000_000,
      onRequest: (event) => events.push(event),
    });
    await c.reportConfigInstanceStatus('ci_1', { activity_status: 'deployed', error_status: 'none' });
    expect(events.map(({ method, route, outcome }) => [method, route, outcome])).toEqual([
      ['PATCH', '/v1/config_instances/{id}', 'ok'],
    ]);
  });
});

describe('an answer over the cap to a read (not a report)', () => {
  it.each([
    ['declared', true],
    ['chunked', false],
  ])('%s: fails response_too_large with its first bytes as they came', async (_kind, declared) => {
    const text = JSON.stringify({ id: 'dev_1', name: 'x'.repeat(10_000), status: 'online' });
    const { url } = await service((res) => {
      res.writeHead(200, {
        'content-type': 'application/json',
        ...(declared ? { 'content-length': String(text.length) } : {}),
      });
      res.end(text);
    });
    const c = createClient({ baseUrl: url, apiKey: 'k', timeoutMs: PATIENCE_MS, maxResponseBytes: 4_096 });
    const error = await c.getDevice('dev_1').then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(ResponseTooLargeError);
    const prefix = (error as ResponseTooLargeError).bodyPrefix ?? '';
    expect(prefix.length).toBeGreaterThanOrEqual(4_096);
    expect(text.startsWith(prefix)).toBe(true);
  });
});

describe("a report's answer that is no instance", () => {
  it('settles the report with no head: null, a number, a string, an array', async () => {
    const answers = ['null', '7', '"ci_1"', '[]'];
    const { url, bodies } = await service((res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(answers[bodies.length - 1]);
    });
    const c = createClient({
      baseUrl: url,
      apiKey: 'k',
      timeoutMs: PATIENCE_MS,
      maxResponseBytes: 1_000_000,
    });
    const read: unknown[] = [];
    for (let i = 0; i < answers.length; i += 1) {
      read.push(
        await c.reportConfigInstanceStatus('ci_1', { activity_status: 'deployed', error_status: 'none' }),
      );
    }
    expect(read).toEqual([undefined, undefined, undefined, undefined]);
    expect(bodies).toHaveLength(4);
  });
});

describe('a request through an undici dispatcher (a proxy, an injected one)', () => {
  it("ends with the caller's abort, and with an already aborted signal, as on the lane", async () => {
    const { url, bodies } = await service(() => {
      // Never answered: only the abort ends the request.
    });
    const dispatcher = new Agent();
    closers.push(() => dispatcher.destroy());
    const c = createClient({
      baseUrl: url,
      apiKey: 'k',
      timeoutMs: PATIENCE_MS,
      maxResponseBytes: 1_000_000,
      dispatcher,
    });
    const pass = new AbortController();
    const reason = new Error('pass stopped');
    const pending = c.getDevice('dev_1', { signal: pass.signal }).then(
      () => undefined,
      (e: unknown) => e,
    );
    await waitFor(() => bodies.length === 1, PATIENCE_MS, { what: 'the request at the server' });
    pass.abort(reason);
    expect(await pending).toBe(reason);
    expect(
      await c.getDevice('dev_1', { signal: AbortSignal.abort(reason) }).then(
        () => undefined,
        (e: unknown) => e,
      ),
    ).toBe(reason);
    expect(bodies).toHaveLength(1);
  });
});
