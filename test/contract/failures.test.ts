// Contract: auth, versions, error bodies, injected faults and the byte cap, as the client classifies them.
import { inspect } from 'node:util';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ServiceClient } from '../../src/api/client.js';
import {
  HttpStatusError,
  isRetryableError,
  MalformedResponseError,
  NetworkError,
  ResponseTooLargeError,
  TimeoutError,
} from '../../src/api/errors.js';
import { API_KEY, type Contract, collect, failure, startContract } from './harness.js';

let contract: Contract;
let client: ServiceClient;
beforeEach(async () => {
  contract = await startContract();
  client = contract.client();
});
afterEach(async () => {
  await contract.close();
});

function expectKeyAbsent(error: unknown, key: string): void {
  const err = error as Error;
  for (const text of [String(err), err.stack ?? '', JSON.stringify(err), inspect(err, { depth: Infinity })]) {
    expect(text).not.toContain(key);
  }
}

describe('authentication', () => {
  it('an unknown key → 401 with the error body shape, not retryable, and the key appears nowhere', async () => {
    const wrongKey = 'wrong-key-3b9f0e2a71';
    for (const call of [
      (c: ServiceClient) => c.listConfigInstances(),
      (c: ServiceClient) => c.getDevice('dvc_robot_01'),
      (c: ServiceClient) => c.deployConfigInstance('cfg_r1_motion_limits', { dryRun: true }),
    ]) {
      const error = await failure(call(contract.client({ apiKey: wrongKey })));
      expect(error).toBeInstanceOf(HttpStatusError);
      const http = error as HttpStatusError;
      expect(http.status).toBe(401);
      expect(http.retryable).toBe(false);
      expect(http.body).toEqual({ error: { code: 'unauthorized', message: expect.any(String), params: {} } });
      expectKeyAbsent(error, wrongKey);
    }
  });

  it('the right key is never echoed in an error either', async () => {
    const error = await failure(client.getDevice('dvc_missing'));
    expect((error as HttpStatusError).status).toBe(404);
    expectKeyAbsent(error, API_KEY);
  });
});

describe('versions and error bodies', () => {
  it("apiVersion 'v2' → 404 with an error body naming the problem", async () => {
    const v2 = contract.client({ apiVersion: 'v2' });
    for (const promise of [v2.listDevices(), v2.getDevice('dvc_robot_01')]) {
      const error = (await failure(promise)) as HttpStatusError;
      expect(error).toBeInstanceOf(HttpStatusError);
      expect(error.status).toBe(404);
      expect(error.body?.error.code).toBe('not_found');
      expect(error.message).toContain('/v2/');
    }
  });

  it('every error body has a snake_case code, a message and params', async () => {
    const errors = [
      await failure(client.getDevice('dvc_missing')),
      await failure(client.listConfigInstances({ target_status: 'exploded' as never })),
      await failure(client.listReleases({}, { orderBy: 'version:asc' })),
      await failure(contract.client({ apiKey: 'nope-nope-nope' }).listReleases()),
    ];
    expect(errors.map((e) => (e as HttpStatusError).status)).toEqual([404, 400, 400, 401]);
    for (const error of errors) {
      const body = (error as HttpStatusError).body;
      expect(body?.error.code).toMatch(/^[a-z]+(_[a-z]+)*$/);
      expect(body?.error.message.length).toBeGreaterThan(0);
      expect(body?.error.params).toBeTypeOf('object');
    }
  });
});

describe('injected faults (POST /_admin/faults)', () => {
  it('503 with retry_after → retryable HttpStatusError with retryAfterMs; only count requests fail', async () => {
    await contract.admin.addFault({ match: '^/v1/devices$', count: 2, status: 503, retry_after: 7 });
    for (let i = 0; i < 2; i++) {
      const error = (await failure(client.listDevices())) as HttpStatusError;
      expect(error).toBeInstanceOf(HttpStatusError);
      expect(error.status).toBe(503);
      expect(error.retryable).toBe(true);
      expect(error.retryAfterMs).toBe(7_000);
      expect(error.body?.error.code).toMatch(/^[a-z_]+$/);
    }
    expect((await client.listDevices()).object).toBe('list');
  });

  it('a fault matches only its path pattern, and DELETE clears pending faults', async () => {
    await contract.admin.addFault({ match: '^/v1/releases$', count: 5, status: 500 });
    expect((await client.listDevices()).object).toBe('list');
    expect(await failure(client.listReleases())).toBeInstanceOf(HttpStatusError);
    await contract.admin.clearFaults();
    expect((await client.listReleases()).object).toBe('list');
  });

  it.each([
    [429, true],
    [500, true],
    [408, true],
    [400, false],
    [403, false],
  ])('status %i → HttpStatusError retryable=%s', async (status, retryable) => {
    await contract.admin.addFault({ match: '^/v1/devices/', count: 1, status });
    const error = (await failure(client.getDevice('dvc_robot_01'))) as HttpStatusError;
    expect(error.status).toBe(status);
    expect(isRetryableError(error)).toBe(retryable);
    expect(error.retryAfterMs).toBeUndefined();
  });

  it('reset → NetworkError (retryable)', async () => {
    await contract.admin.addFault({ match: '^/v1/config_instances$', count: 1, mode: 'reset' });
    const error = await failure(client.listConfigInstances());
    expect(error).toBeInstanceOf(NetworkError);
    expect(isRetryableError(error)).toBe(true);
  });

  it('hang → TimeoutError within the deadline', async () => {
    await contract.admin.addFault({ match: '^/v1/devices$', count: 1, mode: 'hang' });
    const started = performance.now();
    const error = await failure(contract.client({ timeoutMs: 300 }).listDevices());
    expect(error).toBeInstanceOf(TimeoutError);
    expect(isRetryableError(error)).toBe(true);
    expect(performance.now() - started).toBeLessThan(3_000);
  });

  it('truncate → MalformedResponseError (retryable), although the mock did perform the request', async () => {
    await contract.admin.addFault({ match: '^/v1/deployments/[^/]+$', count: 1, mode: 'truncate' });
    const error = await failure(client.getDeployment('dpl_robot_01_v1_5_0'));
    expect(error).toBeInstanceOf(MalformedResponseError);
    expect(isRetryableError(error)).toBe(true);
  });

  it('truncate on a status report: the 200 settles it (any 2xx does), and the service recorded it', async () => {
    await contract.admin.addFault({ match: '^/v1/config_instances/[^/]+$', count: 1, mode: 'truncate' });
    const answer = await client.reportConfigInstanceStatus('cfg_r2_app_settings', {
      activity_status: 'deployed',
      error_status: 'none',
    });
    expect(answer).toBeUndefined();
    expect((await contract.admin.reports()).map((r) => r.config_instance_id)).toEqual([
      'cfg_r2_app_settings',
    ]);
  });

  it.each([
    [204, undefined],
    [200, ''],
    [200, '{}'],
    [202, 'accepted'],
  ])(
    'a status report answered %i with body %j is settled (any 2xx), and was recorded',
    async (status, body) => {
      await contract.admin.addFault({
        match: '^/v1/config_instances/[^/]+$',
        count: 1,
        mode: 'rewrite',
        status,
        ...(body === undefined ? {} : { body }),
      });
      const answer = await client.reportConfigInstanceStatus('cfg_r2_app_settings', {
        activity_status: 'deployed',
        error_status: 'none',
      });
      expect(answer).toBeUndefined();
      expect((await contract.admin.reports()).map((r) => r.config_instance_id)).toEqual([
        'cfg_r2_app_settings',
      ]);
    },
  );

  it('a deployment status the agent does not know (and never acts on) is tolerated', async () => {
    await contract.admin.addFault({
      match: '^/v1/deployments/[^/]+$',
      count: 1,
      mode: 'rewrite',
      replace: [{ find: '"target_status":"deployed"', with: '"target_status":"rolled_out"' }],
    });
    const deployment = await client.getDeployment('dpl_robot_01_v1_5_0');
    expect(deployment.target_status).toBe('rolled_out');
  });

  it('malformed → MalformedResponseError', async () => {
    await contract.admin.addFault({ match: '^/v1/releases$', count: 1, mode: 'malformed' });
    const error = await failure(client.listReleases());
    expect(error).toBeInstanceOf(MalformedResponseError);
    expect((error as MalformedResponseError).status).toBe(200);
  });

  it('slow + a short total deadline → TimeoutError; slow within the deadline still succeeds', async () => {
    await contract.admin.addFault({
      match: '^/v1/devices$',
      count: 1,
      mode: 'slow',
      chunk_bytes: 8,
      interval_ms: 100,
    });
    const started = performance.now();
    const error = await failure(contract.client({ timeoutMs: 600 }).listDevices());
    expect(error).toBeInstanceOf(TimeoutError);
    expect(performance.now() - started).toBeLessThan(3_000);

    await contract.admin.addFault({
      match: '^/v1/devices/',
      count: 1,
      mode: 'slow',
      chunk_bytes: 64,
      interval_ms: 5,
    });
    expect((await client.getDevice('dvc_robot_01')).id).toBe('dvc_robot_01');
  });
});

describe('maxResponseBytes', () => {
  it('a big page exceeds the cap → ResponseTooLargeError; smaller pages of the same data fit', async () => {
    for (let i = 0; i < 40; i++) {
      await contract.admin.createInstance({
        id: `cfg_big_${String(i).padStart(2, '0')}`,
        device_id: 'dvc_robot_02',
        relative_filepath: `big/${i}.json`,
        content: { blob: 'x'.repeat(4_000), index: i },
      });
    }
    const cap = 60_000;
    // An injected transport and the one the client builds (both node:http: the client's own byte count is the cap).
    const injected = contract.client({ maxResponseBytes: cap });
    const built = contract.client({ maxResponseBytes: cap }, { builtDispatcher: true });
    for (const c of [injected, built]) {
      const error = await failure(c.listConfigInstances({ device_id: 'dvc_robot_02' }, { limit: 100 }));
      expect(error).toBeInstanceOf(ResponseTooLargeError);
      expect(isRetryableError(error)).toBe(false);
      const all = await collect(c.iterateConfigInstances({ device_id: 'dvc_robot_02' }, { limit: 5 }));
      expect(all.filter((i) => i.id.startsWith('cfg_big_'))).toHaveLength(40);
    }
  });
});
