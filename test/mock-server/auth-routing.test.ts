// The mock's gatekeeping: API key on every route, error body shape, versions, unknown routes and ids.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ErrorBody } from '../../src/api/schemas.js';
import { createMockService } from '../../src/mock-server/app.js';
import type { RunningMockServer } from '../../src/mock-server/server.js';
import { API_KEY, call, get, startDemo } from './helpers.js';

let server: RunningMockServer;
beforeAll(async () => {
  server = await startDemo();
});
afterAll(async () => {
  await server.close();
});

const EVERY_ROUTE: ReadonlyArray<readonly [string, string]> = [
  ['GET', '/v1/config_instances'],
  ['POST', '/v1/config_instances/cfg_r1_lidar/deploy'],
  ['PATCH', '/v1/config_instances/cfg_r1_lidar'],
  ['GET', '/v1/deployments/dpl_robot_01_v1_5_0'],
  ['GET', '/v1/releases'],
  ['GET', '/v1/devices'],
  ['GET', '/v1/devices/dvc_robot_01'],
  ['POST', '/_admin/config_instances'],
  ['POST', '/_admin/config_instances/cfg_r1_lidar/remove'],
  ['GET', '/_admin/reports'],
  ['POST', '/_admin/faults'],
  ['DELETE', '/_admin/faults'],
  ['GET', '/_admin/stats'],
  ['GET', '/v2/config_instances'],
  ['GET', '/no/such/route'],
];

describe('authentication', () => {
  it.each(EVERY_ROUTE)('%s %s without a key → 401 with the error body', async (method, path) => {
    const response = await call(server, method, path, { key: null });
    expect(response.status).toBe(401);
    expect(ErrorBody.parse(response.body)).toEqual({
      error: { code: 'unauthorized', message: 'missing X-API-Key header', params: {} },
    });
  });

  it.each(EVERY_ROUTE)('%s %s with an unknown key → 401', async (method, path) => {
    const response = await call(server, method, path, { key: `${API_KEY}-wrong` });
    expect(response.status).toBe(401);
    expect(ErrorBody.parse(response.body).error.code).toBe('unauthorized');
    expect(response.text).not.toContain(API_KEY);
  });

  it('leaves state untouched when a mutating request is refused', async () => {
    const before = server.state.instances.get('cfg_r1_lidar');
    await call(server, 'POST', '/v1/config_instances/cfg_r1_lidar/deploy', { key: 'nope' });
    expect(server.state.instances.get('cfg_r1_lidar')).toBe(before);
  });

  it('accepts any of several configured keys', async () => {
    const { app } = createMockService({ apiKeys: ['first-key', 'second-key'] });
    for (const key of ['first-key', 'second-key']) {
      const response = await app.request('/v1/devices', { headers: { 'X-API-Key': key } });
      expect(response.status).toBe(200);
    }
    expect((await app.request('/v1/devices', { headers: { 'X-API-Key': 'first' } })).status).toBe(401);
  });

  it('refuses to build a service without keys', () => {
    expect(() => createMockService({ apiKeys: [] })).toThrow(/apiKeys/);
    expect(() => createMockService({ apiKeys: [''] })).toThrow(/apiKeys/);
  });
});

describe('versions, routes and ids', () => {
  it.each(['/v2/config_instances', '/v0/devices', '/v10/releases'])(
    'unknown version %s → 404',
    async (path) => {
      const response = await get(server, path);
      expect(response.status).toBe(404);
      const body = ErrorBody.parse(response.body);
      expect(body.error.code).toBe('not_found');
      expect(body.error.message).toMatch(/API version v\d+ does not exist/);
    },
  );

  it.each(['/', '/v1', '/v1/', '/v1/widgets', '/config_instances', '/v1/deployments', '/_admin/nothing'])(
    'unknown route %s → 404 with the error body',
    async (path) => {
      const response = await get(server, path);
      expect(response.status).toBe(404);
      expect(ErrorBody.parse(response.body).error.code).toBe('not_found');
    },
  );

  it.each([
    ['GET', '/v1/deployments/dpl_nope', 'deployment'],
    ['GET', '/v1/devices/dvc_nope', 'device'],
    ['POST', '/v1/config_instances/cfg_nope/deploy', 'config instance'],
    ['POST', '/_admin/config_instances/cfg_nope/remove', 'config instance'],
  ])('%s %s → 404 naming the %s', async (method, path, what) => {
    const response = await call(server, method, path);
    expect(response.status).toBe(404);
    const body = ErrorBody.parse(response.body);
    expect(body.error.code).toBe('not_found');
    expect(body.error.message).toContain(what);
  });

  it('PATCH on an unknown instance → 404 even with a valid body', async () => {
    const response = await call(server, 'PATCH', '/v1/config_instances/cfg_nope', {
      body: { activity_status: 'deployed', error_status: 'none' },
    });
    expect(response.status).toBe(404);
    expect(ErrorBody.parse(response.body).error.code).toBe('not_found');
  });

  it.each([
    ['DELETE', '/v1/config_instances', 'GET'],
    ['POST', '/v1/devices', 'GET'],
    ['GET', '/v1/config_instances/cfg_r1_lidar/deploy', 'POST'],
    ['GET', '/v1/config_instances/cfg_r1_lidar', 'PATCH'],
    ['PUT', '/_admin/faults', 'GET, POST, DELETE'],
  ])('%s %s → 405 with Allow: %s', async (method, path, allow) => {
    const response = await call(server, method, path);
    expect(response.status).toBe(405);
    expect(response.headers.get('allow')).toBe(allow);
    expect(ErrorBody.parse(response.body).error.code).toBe('method_not_allowed');
  });

  it('answers application/json on success and on errors', async () => {
    for (const path of ['/v1/devices', '/v1/devices/dvc_nope']) {
      const response = await fetch(`${server.url}${path}`, { headers: { 'X-API-Key': API_KEY } });
      expect(response.headers.get('content-type')).toMatch(/^application\/json/);
      await response.body?.cancel();
    }
  });
});
