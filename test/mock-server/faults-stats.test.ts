// Fault injection (status, reset, hang, truncate, malformed, slow), request stats, close and restart.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ActiveFault, ActiveFaultList, AdminStats } from '../../src/api/admin-schemas.js';
import { DeployResponse, DeviceList, ErrorBody } from '../../src/api/schemas.js';
import { type RunningMockServer, startMockServer } from '../../src/mock-server/server.js';
import { PATIENCE_MS, waitFor } from '../helpers/wait-for.js';
import { API_KEY, call, get, startDemo } from './helpers.js';

let server: RunningMockServer;

beforeEach(async () => {
  server = await startDemo();
});
afterEach(async () => {
  await server.close();
});

async function addFault(body: Record<string, unknown>) {
  const response = await call(server, 'POST', '/_admin/faults', { body });
  expect(response.status, response.text).toBe(201);
  return ActiveFault.parse(response.body);
}

function rawFetch(path: string, init: RequestInit = {}): Promise<Response> {
  return fetch(`${server.url}${path}`, {
    ...init,
    headers: { 'X-API-Key': API_KEY },
    signal: init.signal ?? AbortSignal.timeout(10_000),
  });
}

async function stats() {
  return AdminStats.parse((await get(server, '/_admin/stats')).body);
}

/** Waits (bounded by PATIENCE_MS, so a loaded machine only makes it slower) until the server counted `n` for `route`. */
async function waitForRequests(route: string, n: number): Promise<void> {
  await waitFor(() => (server.state.stats.get(route) ?? 0) >= n, PATIENCE_MS, {
    what: `the server seeing ${n} requests for ${route}`,
    intervalMs: 5,
  });
}

/** Settles to what became of `promise` so far: its outcome once settled, else 'pending'. */
function outcomeOf<T>(promise: Promise<T>): () => T | 'pending' {
  let outcome: T | 'pending' = 'pending';
  void promise.then((value) => {
    outcome = value;
  });
  return () => outcome;
}

describe('status faults', () => {
  it('answer the next `count` matching requests with the status, Retry-After and the error body', async () => {
    const fault = await addFault({ match: '^/v1/devices$', count: 2, status: 503, retry_after: 7 });
    expect(fault).toMatchObject({ match: '^/v1/devices$', count: 2, remaining: 2 });

    expect((await get(server, '/v1/releases')).status).toBe(200);
    for (let i = 0; i < 2; i++) {
      const response = await get(server, '/v1/devices');
      expect(response.status).toBe(503);
      expect(response.headers.get('retry-after')).toBe('7');
      expect(ErrorBody.parse(response.body).error.code).toBe('service_unavailable');
    }
    expect((await get(server, '/v1/devices')).status).toBe(200);
    expect(server.state.faults).toEqual([]);
  });

  it.each([
    [429, 'rate_limited'],
    [500, 'internal_error'],
    [502, 'bad_gateway'],
    [401, 'unauthorized'],
  ])('uses a stable code for status %i (%s)', async (status, code) => {
    await addFault({ match: 'config_instances', count: 1, status });
    const response = await get(server, '/v1/config_instances');
    expect(response.status).toBe(status);
    expect(response.headers.get('retry-after')).toBeNull();
    expect(ErrorBody.parse(response.body).error.code).toBe(code);
  });

  it('defaults to 503 and never reaches the handler', async () => {
    await addFault({ match: '/deploy$', count: 1 });
    const before = server.state.instances.get('cfg_r1_motion_limits_next');
    const response = await call(server, 'POST', '/v1/config_instances/cfg_r1_motion_limits_next/deploy');
    expect(response.status).toBe(503);
    expect(server.state.instances.get('cfg_r1_motion_limits_next')).toBe(before);
  });

  it('applies the first registered matching fault and consumes one match per request', async () => {
    await addFault({ match: '^/v1/', count: 1, status: 500 });
    await addFault({ match: '^/v1/devices', count: 1, status: 502 });
    expect((await get(server, '/v1/devices')).status).toBe(500);
    expect((await get(server, '/v1/devices')).status).toBe(502);
    expect((await get(server, '/v1/devices')).status).toBe(200);
  });

  it('never faults /_admin routes and does not spend matches on them', async () => {
    await addFault({ match: '.*', count: 3, status: 500 });
    expect((await get(server, '/_admin/stats')).status).toBe(200);
    expect((await get(server, '/_admin/reports')).status).toBe(200);
    const listed = ActiveFaultList.parse((await get(server, '/_admin/faults')).body);
    expect(listed.data.map((f) => f.remaining)).toEqual([3]);
  });

  it('DELETE /_admin/faults clears every fault', async () => {
    await addFault({ match: 'devices', count: 5, status: 500 });
    await addFault({ match: 'releases', count: 5, mode: 'reset' });
    const cleared = await call(server, 'DELETE', '/_admin/faults');
    expect(cleared.body).toEqual({ cleared: 2 });
    expect((await get(server, '/v1/devices')).status).toBe(200);
    expect((await get(server, '/v1/releases')).status).toBe(200);
  });

  it.each([
    [{ match: '([', count: 1 }, 'match'],
    [{ match: 'x', count: 0 }, 'count'],
    [{ match: 'x', count: 1.5 }, 'count'],
    [{ match: 'x', count: 1, mode: 'explode' }, 'mode'],
    [{ match: 'x', count: 1, status: 200 }, 'status'],
    [{ match: 'x', count: 1, retry_after: -1 }, 'retry_after'],
    [{ match: 'x', count: 1, skip: -1 }, 'skip'],
    [{ match: 'x', count: 1, skip: 0.5 }, 'skip'],
    [{ count: 1 }, 'match'],
  ])('rejects the fault %j naming %s', async (body, field) => {
    const response = await call(server, 'POST', '/_admin/faults', { body });
    expect(response.status).toBe(400);
    expect(ErrorBody.parse(response.body).error.message).toContain(field);
    expect(server.state.faults).toEqual([]);
  });
});

describe('skip: the first n matching requests pass before the fault applies', () => {
  it('targets page 2 of a list: page 1 answers 200, then `count` faults, then the list works again', async () => {
    const fault = await addFault({ match: '^/v1/devices$', count: 2, skip: 1, status: 503 });
    expect(fault).toMatchObject({ skip: 1, skip_remaining: 1, remaining: 2 });

    // Requests the pattern does not match spend no skip.
    expect((await get(server, '/v1/releases')).status).toBe(200);
    const page1 = await get(server, '/v1/devices?limit=1&offset=0');
    expect(page1.status).toBe(200);
    expect(DeviceList.parse(page1.body).data).toHaveLength(1);
    const listed = ActiveFaultList.parse((await get(server, '/_admin/faults')).body);
    expect(listed.data).toMatchObject([{ id: fault.id, skip_remaining: 0, remaining: 2 }]);

    // The query string is not part of the path the pattern is tested against.
    for (let attempt = 0; attempt < 2; attempt += 1) {
      const page2 = await get(server, '/v1/devices?limit=1&offset=1');
      expect(page2.status).toBe(503);
      expect(ErrorBody.parse(page2.body).error.code).toBe('service_unavailable');
    }
    expect((await get(server, '/v1/devices?limit=1&offset=1')).status).toBe(200);
    expect(server.state.faults).toEqual([]);
  });

  it('skipped requests reach the handler: the skipped report is recorded, the reset one is not', async () => {
    await addFault({ match: '^/v1/config_instances/[^/]+$', count: 1, skip: 1, mode: 'reset' });
    const route = '/v1/config_instances/cfg_r1_motion_limits_next';
    const body = { activity_status: 'deployed', error_status: 'none' };
    expect((await call(server, 'PATCH', route, { body })).status).toBe(200);
    await expect(
      call(server, 'PATCH', route, { body: { ...body, error_status: 'retrying' } }),
    ).rejects.toThrow();
    expect(server.state.reports.map((r) => [r.config_instance_id, r.error_status])).toEqual([
      ['cfg_r1_motion_limits_next', 'none'],
    ]);
    expect(server.state.faults).toEqual([]);
  });

  it('a fault still skipping counts every request it matches, even one another fault answered', async () => {
    await addFault({ match: '^/v1/', count: 1, skip: 1, status: 500 });
    await addFault({ match: '^/v1/devices$', count: 1, status: 502 });
    expect((await get(server, '/v1/devices')).status).toBe(502);
    expect((await get(server, '/v1/devices')).status).toBe(500);
    expect((await get(server, '/v1/devices')).status).toBe(200);
  });

  it('skip 0 is the same as no skip', async () => {
    await addFault({ match: '^/v1/devices$', count: 1, skip: 0, status: 500 });
    expect((await get(server, '/v1/devices')).status).toBe(500);
    expect((await get(server, '/v1/devices')).status).toBe(200);
  });
});

describe('network faults', () => {
  it('reset: the connection is destroyed without a response', async () => {
    await addFault({ match: '^/v1/devices$', count: 3, mode: 'reset' });
    await expect(rawFetch('/v1/devices')).rejects.toThrow(TypeError);
    await call(server, 'DELETE', '/_admin/faults');
    expect((await get(server, '/v1/devices')).status).toBe(200);
  });

  it('hang: no answer until the client gives up', async () => {
    await addFault({ match: '^/v1/devices$', count: 1, mode: 'hang' });
    // No wall-clock window: the client gives up when the test says so, once the server holds the request.
    const giveUp = new AbortController();
    const hanging = rawFetch('/v1/devices', { signal: giveUp.signal }).then(
      () => 'answered' as const,
      (error: unknown) => (error instanceof Error ? error.name : 'failed'),
    );
    const hung = outcomeOf(hanging);
    await waitForRequests('GET /v1/devices', 1);
    expect(server.state.faults).toEqual([]);
    // The server answers other requests meanwhile, and still not this one.
    expect((await get(server, '/v1/releases')).status).toBe(200);
    expect(hung()).toBe('pending');
    giveUp.abort();
    expect(await hanging).toBe('AbortError');
    expect((await get(server, '/v1/devices')).status).toBe(200);
  });

  it('hang: close() destroys the hanging connection, without waiting for the client to give up', async () => {
    await addFault({ match: '^/v1/devices$', count: 1, mode: 'hang' });
    // A client that never gives up by itself: close() resolving at all (within the test's bound) is the point.
    const never = new AbortController();
    const pending = rawFetch('/v1/devices', { signal: never.signal }).then(
      () => 'answered',
      () => 'failed',
    );
    try {
      await waitForRequests('GET /v1/devices', 1);
      await server.close();
      expect(await pending).toBe('failed');
    } finally {
      never.abort();
    }
  });

  it('truncate: 200 with a close-delimited body cut in the middle of the real JSON', async () => {
    const full = await (await rawFetch('/v1/devices')).text();
    await addFault({ match: '^/v1/devices$', count: 1, mode: 'truncate' });
    const response = await rawFetch('/v1/devices');
    expect(response.status).toBe(200);
    expect(response.headers.get('content-length')).toBeNull();
    expect(response.headers.get('transfer-encoding')).toBeNull();
    const text = await response.text();
    expect(text.length).toBeGreaterThan(0);
    expect(text.length).toBeLessThan(full.length);
    expect(full.startsWith(text)).toBe(true);
    expect(() => JSON.parse(text)).toThrow(SyntaxError);
    expect(DeviceList.parse(JSON.parse(await (await rawFetch('/v1/devices')).text())).data).toHaveLength(3);
  });

  it('truncate: the handler still ran, so a truncated deploy did change the state', async () => {
    await addFault({ match: '/deploy$', count: 1, mode: 'truncate' });
    const response = await fetch(`${server.url}/v1/config_instances/cfg_r1_motion_limits_next/deploy`, {
      method: 'POST',
      headers: { 'X-API-Key': API_KEY },
    });
    expect(response.status).toBe(200);
    const text = await response.text();
    expect(() => JSON.parse(text)).toThrow(SyntaxError);
    // The same deploy answered in full shows what the client missed.
    const again = await call(server, 'POST', '/v1/config_instances/cfg_r1_motion_limits_next/deploy');
    expect(DeployResponse.parse(again.body).deploy.target_status).toBe('deployed');
    expect(server.state.instances.get('cfg_r1_motion_limits_next')?.target_status).toBe('deployed');
  });

  it('malformed: 200 with a body that is not JSON', async () => {
    await addFault({ match: '^/v1/config_instances$', count: 1, mode: 'malformed' });
    const response = await rawFetch('/v1/config_instances');
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/application\/json/);
    const text = await response.text();
    expect(() => JSON.parse(text)).toThrow(SyntaxError);
  });

  it('slow: trickles the real body in small chunks', async () => {
    const full = await (await rawFetch('/v1/devices/dvc_robot_01')).text();
    await addFault({ match: '^/v1/devices/', count: 1, mode: 'slow', chunk_bytes: 64, interval_ms: 40 });
    const response = await rawFetch('/v1/devices/dvc_robot_01');
    expect(response.status).toBe(200);
    expect(response.headers.get('content-length')).toBe(String(Buffer.byteLength(full)));
    const reader = response.body?.getReader();
    if (reader === undefined) throw new Error('no body');
    const chunks: Uint8Array[] = [];
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
    }
    // Paced, not timed: written at once, the body would come in one or two reads, not one per 64 bytes.
    const expectedChunks = Math.ceil(Buffer.byteLength(full) / 64);
    expect(chunks.length).toBeGreaterThanOrEqual(expectedChunks - 1);
    expect(Math.max(...chunks.map((chunk) => chunk.length))).toBeLessThanOrEqual(128);
    expect(Buffer.concat(chunks).toString()).toBe(full);
  });

  it('slow with defaults (8 bytes every 300 ms) is still trickling when a client gives up, and close() cuts it', async () => {
    await addFault({ match: '^/v1/config_instances$', count: 1, mode: 'slow' });
    const giveUp = new AbortController();
    const response = await rawFetch('/v1/config_instances', { signal: giveUp.signal });
    expect(response.status).toBe(200);
    const reader = response.body?.getReader();
    if (reader === undefined) throw new Error('no body');
    // One chunk of at most 8 bytes read, the body still coming: a client's total-time cap ends it, not the server.
    const first = await reader.read();
    expect(first.done).toBe(false);
    expect(first.value?.length).toBeLessThanOrEqual(8);
    giveUp.abort();
    await expect(reader.read()).rejects.toMatchObject({ name: 'AbortError' });

    await addFault({ match: '^/v1/config_instances$', count: 1, mode: 'slow' });
    const never = new AbortController();
    try {
      const second = await rawFetch('/v1/config_instances', { signal: never.signal });
      const reading = second.text().then(
        () => 'complete',
        () => 'cut',
      );
      // The whole listing at 8 bytes per 300 ms takes minutes: close() resolving within the test's bound cuts it.
      await server.close();
      expect(await reading).toBe('cut');
    } finally {
      never.abort();
    }
  });
});

describe('stats', () => {
  it('counts requests per method and route pattern, unmatched ones apart, admin routes not at all', async () => {
    await get(server, '/v1/config_instances');
    await get(server, '/v1/config_instances?limit=3');
    await get(server, '/v1/devices/dvc_robot_01');
    await get(server, '/v1/devices/dvc_robot_02');
    await call(server, 'POST', '/v1/config_instances/cfg_r1_lidar/deploy?dry_run=true');
    await call(server, 'PATCH', '/v1/config_instances/cfg_r1_lidar', {
      body: { activity_status: 'deployed', error_status: 'none' },
    });
    await call(server, 'DELETE', '/v1/devices');
    await get(server, '/v9/devices');
    await call(server, 'GET', '/v1/releases', { key: null });
    await get(server, '/_admin/reports');
    await addFault({ match: 'deployments', count: 1, status: 500 });
    await get(server, '/v1/deployments/dpl_robot_01_v1_5_0');

    expect(await stats()).toEqual({
      requests: {
        'DELETE /v1/devices': 1,
        'GET (unmatched)': 1,
        'GET /v1/config_instances': 2,
        'GET /v1/deployments/:id': 1,
        'GET /v1/devices/:id': 2,
        'GET /v1/releases': 1,
        'PATCH /v1/config_instances/:id': 1,
        'POST /v1/config_instances/:id/deploy': 1,
      },
      total: 10,
    });
  });
});

describe('close and restart', () => {
  it('restarts "the same" service on the same port with the same state', async () => {
    await call(server, 'PATCH', '/v1/config_instances/cfg_r1_lidar', {
      body: { activity_status: 'deployed', error_status: 'none' },
    });
    const { port, url, state } = server;
    await server.close();
    await expect(fetch(`${url}/v1/devices`, { headers: { 'X-API-Key': API_KEY } })).rejects.toThrow();

    server = await startMockServer({ apiKeys: [API_KEY], port, state });
    expect(server.url).toBe(url);
    expect(server.state).toBe(state);
    expect(state.reports).toHaveLength(1);
    const response = await get(server, '/v1/config_instances?id=cfg_r1_lidar');
    expect(response.text).toContain('"activity_status":"deployed"');
  });

  it('reports a URL without a trailing slash or version, and close() may be called twice', async () => {
    expect(server.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(server.url).toBe(`http://127.0.0.1:${server.port}`);
    await server.close();
    await server.close();
  });

  it('fails to start on a port that is taken', async () => {
    await expect(startMockServer({ apiKeys: [API_KEY], port: server.port })).rejects.toMatchObject({
      code: 'EADDRINUSE',
    });
  });
});

describe('extension faults for hostile-service tests: rewrite, paging, mutate', () => {
  it('rewrite serves the request for real, then answers the given status and body (a 204 has no body)', async () => {
    await addFault({ match: '^/v1/config_instances/[^/]+$', count: 1, mode: 'rewrite', status: 204 });
    const response = await call(server, 'PATCH', '/v1/config_instances/cfg_r1_motion_limits', {
      body: { activity_status: 'deployed', error_status: 'none' },
    });
    expect(response.status).toBe(204);
    expect(response.text).toBe('');
    expect(server.state.reports.map((r) => r.config_instance_id)).toEqual(['cfg_r1_motion_limits']);
  });

  it('rewrite applies literal substitutions to the real body, every occurrence', async () => {
    await addFault({
      match: '^/v1/devices$',
      count: 1,
      mode: 'rewrite',
      replace: [{ find: '"object":"device"', with: '"object":"gadget"' }],
    });
    const rewritten = await get(server, '/v1/devices?limit=100');
    expect(rewritten.text).not.toContain('"object":"device"');
    expect(rewritten.text.split('"object":"gadget"').length - 1).toBeGreaterThan(1);
    expect((await get(server, '/v1/devices')).text).toContain('"object":"device"');
  });

  it('a status below 400 is refused unless the mode is rewrite', async () => {
    const response = await call(server, 'POST', '/_admin/faults', {
      body: { match: 'x', count: 1, status: 204 },
    });
    expect(response.status).toBe(400);
    expect(response.text).toContain('status');
  });

  it('paging: ignore_offset serves page one at every offset while echoing the offset; has_more forced', async () => {
    await addFault({
      match: '^/v1/config_instances$',
      count: 2,
      mode: 'paging',
      ignore_offset: true,
      has_more: true,
    });
    const first = (await get(server, '/v1/config_instances?limit=2&order_by=id:asc')).body as Record<
      string,
      unknown
    >;
    const later = (await get(server, '/v1/config_instances?limit=2&offset=40&order_by=id:asc'))
      .body as Record<string, unknown>;
    expect(later.data).toEqual(first.data);
    expect(later.offset).toBe(40);
    expect(later.has_more).toBe(true);
    const honest = (await get(server, '/v1/config_instances?limit=2&offset=40')).body as Record<
      string,
      unknown
    >;
    expect(honest.data).toEqual([]);
    expect(honest.has_more).toBe(false);
  });

  it('paging limit: pages of at most that many items, the envelope saying that limit, stepped by it', async () => {
    await addFault({ match: '^/v1/config_instances$', count: 100, mode: 'paging', limit: 2 });
    const all = (await get(server, '/v1/config_instances?limit=100&order_by=id:asc&expand[]=total_count'))
      .body as { data: { id: string }[]; limit: number; total_count: number; has_more: boolean };
    expect(all.data).toHaveLength(2);
    expect(all).toMatchObject({ limit: 2, has_more: true });
    const ids: string[] = [];
    for (let offset = 0; ; ) {
      const page = (await get(server, `/v1/config_instances?limit=100&offset=${offset}&order_by=id:asc`))
        .body as { data: { id: string }[]; limit: number; offset: number; has_more: boolean };
      expect(page.offset).toBe(offset);
      ids.push(...page.data.map((item) => item.id));
      if (!page.has_more) break;
      offset += page.limit;
    }
    await call(server, 'DELETE', '/_admin/faults');
    const whole = (await get(server, '/v1/config_instances?limit=100&order_by=id:asc')).body as {
      data: { id: string }[];
    };
    expect(ids).toEqual(whole.data.map((item) => item.id));
    expect(ids.length).toBe(all.total_count);
    expect(ids.length).toBeGreaterThan(2);
  });

  it('a paging fault and a rewrite fault on the same request both apply, each counting it', async () => {
    await addFault({ match: '^/v1/config_instances$', count: 2, mode: 'paging', limit: 1 });
    await addFault({
      match: '^/v1/config_instances$',
      count: 1,
      mode: 'rewrite',
      replace: [{ find: '"has_more":true', with: '"has_more":false' }],
    });
    const first = (await get(server, '/v1/config_instances?limit=100')).body as Record<string, unknown>;
    expect(first).toMatchObject({ limit: 1, has_more: false });
    expect(first.data).toHaveLength(1);
    const second = (await get(server, '/v1/config_instances?limit=100')).body as Record<string, unknown>;
    expect(second).toMatchObject({ limit: 1, has_more: true });
    const third = (await get(server, '/v1/config_instances?limit=100')).body as Record<string, unknown>;
    expect(third.limit).toBe(100);
    expect((await get(server, '/_admin/faults')).body).toMatchObject({ data: [] });
  });

  it('mutate removes and adds instances before serving the request', async () => {
    await addFault({
      match: '^/v1/config_instances$',
      count: 1,
      mode: 'mutate',
      remove_instances: ['cfg_r1_motion_limits'],
      add_instances: [{ id: 'cfg_new', device_id: 'dvc_robot_01', relative_filepath: 'n.json', content: {} }],
    });
    const ids = (
      (await get(server, '/v1/config_instances?limit=100')).body as { data: { id: string }[] }
    ).data.map((instance) => instance.id);
    expect(ids).toContain('cfg_new');
    expect(ids).not.toContain('cfg_r1_motion_limits');
  });
});
