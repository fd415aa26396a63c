// The list endpoints: clamping, paging, every sort form and tie-break, filters and expansions.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Fixtures } from '../../src/api/admin-schemas.js';
import { ConfigInstanceList, DeviceList, ErrorBody, ReleaseList } from '../../src/api/schemas.js';
import { type RunningMockServer, startMockServer } from '../../src/mock-server/server.js';
import { API_KEY, demoFixtures, get, startDemo } from './helpers.js';

let demo: RunningMockServer;
let custom: RunningMockServer;

/** Created_at ties (one written with an offset) and device fields with ties, for exact order assertions. */
const SORT_FIXTURES: Fixtures = {
  devices: [
    {
      id: 'dvc_1',
      name: 'alpha',
      status: 'online',
      created_at: '2025-01-01T00:00:00Z',
      updated_at: '2025-03-01T00:00:00Z',
      last_connected_at: '2025-05-01T00:00:00Z',
    },
    {
      id: 'dvc_2',
      name: 'beta',
      status: 'offline',
      created_at: '2025-01-01T00:00:00Z',
      updated_at: '2025-02-01T00:00:00Z',
      last_connected_at: '2025-05-01T00:00:00Z',
    },
    {
      id: 'dvc_3',
      name: 'alpha',
      status: 'online',
      created_at: '2025-01-02T00:00:00Z',
      updated_at: '2025-02-01T00:00:00Z',
      last_connected_at: '2025-04-01T00:00:00Z',
    },
    {
      id: 'dvc_4',
      name: 'gamma',
      status: 'maintenance',
      created_at: '2025-01-03T00:00:00Z',
      updated_at: '2025-03-01T00:00:00Z',
      last_connected_at: '2025-06-01T00:00:00Z',
    },
  ],
  releases: [
    { id: 'rel_b', version: 'v2.0.0', created_at: '2025-02-01T00:00:00Z' },
    { id: 'rel_a', version: 'v1.0.0', created_at: '2025-02-01T00:00:00Z' },
    { id: 'rel_c', version: 'v3.0.0', created_at: '2025-03-01T00:00:00Z' },
  ],
  config_instances: [
    {
      id: 'cfg_b',
      device_id: 'dvc_1',
      relative_filepath: 'b.json',
      content: {},
      created_at: '2025-01-01T00:00:00Z',
    },
    {
      id: 'cfg_a',
      device_id: 'dvc_1',
      relative_filepath: 'a.json',
      content: {},
      created_at: '2025-01-01T00:00:00Z',
    },
    {
      id: 'cfg_c',
      device_id: 'dvc_1',
      relative_filepath: 'c.json',
      content: {},
      created_at: '2025-01-02T00:00:00Z',
    },
    // The same instant as cfg_a and cfg_b, written with an offset: sorting must compare instants, not strings.
    {
      id: 'cfg_d',
      device_id: 'dvc_1',
      relative_filepath: 'd.json',
      content: {},
      created_at: '2025-01-01T01:00:00+01:00',
    },
  ],
};

beforeAll(async () => {
  demo = await startDemo();
  custom = await startMockServer({ apiKeys: [API_KEY], fixtures: SORT_FIXTURES });
});
afterAll(async () => {
  await demo.close();
  await custom.close();
});

async function instances(server: RunningMockServer, query: string) {
  const response = await get(server, `/v1/config_instances${query}`);
  expect(response.status, response.text).toBe(200);
  return ConfigInstanceList.parse(response.body);
}

async function expectBadRequest(path: string, parameter: string, server = demo) {
  const response = await get(server, path);
  expect(response.status, response.text).toBe(400);
  const body = ErrorBody.parse(response.body);
  expect(body.error.code).toBe('invalid_request');
  expect(body.error.message).toContain(parameter);
  expect(body.error.params.parameter).toBe(parameter);
}

describe('limit and offset', () => {
  it('default to 10 and 0, with total_count -1', async () => {
    const page = await instances(demo, '');
    expect(page).toMatchObject({ object: 'list', limit: 10, offset: 0, total_count: -1, has_more: true });
    expect(page.data).toHaveLength(10);
  });

  it.each([
    ['limit=0', 1, 0],
    ['limit=-3', 1, 0],
    ['limit=101', 100, 0],
    ['limit=1000000000000', 100, 0],
    ['limit=100', 100, 0],
    ['limit=1', 1, 0],
    ['offset=-1', 10, 0],
    ['offset=-999&limit=5', 5, 0],
    ['offset=3&limit=2', 2, 3],
  ])('clamp %s to limit %i offset %i', async (query, limit, offset) => {
    const page = await instances(demo, `?${query}`);
    expect(page.limit).toBe(limit);
    expect(page.offset).toBe(offset);
    expect(page.data.length).toBeLessThanOrEqual(limit);
  });

  it.each([
    ['limit=ten', 'limit'],
    ['limit=1.5', 'limit'],
    ['limit=', 'limit'],
    ['limit=0x10', 'limit'],
    ['offset=abc', 'offset'],
    ['offset=2e1', 'offset'],
  ])('rejects non-numeric %s with 400', async (query, parameter) => {
    await expectBadRequest(`/v1/config_instances?${query}`, parameter);
    await expectBadRequest(`/v1/releases?${query}`, parameter);
    await expectBadRequest(`/v1/devices?${query}`, parameter);
  });

  it('follows the rule "offset is the starting position" (not the spec example of items 21-35)', async () => {
    const all = await instances(demo, '?limit=100');
    const page = await instances(demo, '?limit=15&offset=10');
    expect(page.data.map((i) => i.id)).toEqual(all.data.slice(10, 25).map((i) => i.id));
  });

  it('has_more is true exactly when items exist beyond the page; total_count on request', async () => {
    const total = demoFixtures().config_instances?.length ?? 0;
    expect(total).toBe(20);
    expect((await instances(demo, '?limit=19')).has_more).toBe(true);
    expect((await instances(demo, '?limit=20')).has_more).toBe(false);
    expect((await instances(demo, '?limit=5&offset=15')).has_more).toBe(false);
    expect((await instances(demo, '?limit=5&offset=14')).has_more).toBe(true);
    const beyond = await instances(demo, '?offset=500&expand[]=total_count');
    expect(beyond).toMatchObject({ data: [], has_more: false, total_count: 20, offset: 500 });
    const filtered = await instances(demo, '?device_id=dvc_robot_01&expand[]=total_count&limit=2');
    expect(filtered.total_count).toBe(9);
    expect(filtered.data).toHaveLength(2);
  });

  it.each([
    [1, ''],
    [3, ''],
    [7, '&order_by=id:asc'],
    [10, '&order_by=created_at:asc'],
    [6, '&device_id=dvc_robot_01'],
    [100, ''],
  ])('paging with limit %i%s and offset += limit visits every item exactly once', async (limit, extra) => {
    const reference = await instances(demo, `?limit=100${extra}`);
    const seen: string[] = [];
    let offset = 0;
    for (let pages = 0; pages < 50; pages++) {
      const page = await instances(demo, `?limit=${limit}&offset=${offset}${extra}`);
      seen.push(...page.data.map((i) => i.id));
      if (!page.has_more) break;
      offset += limit;
    }
    expect(seen).toEqual(reference.data.map((i) => i.id));
    expect(new Set(seen).size).toBe(seen.length);
  });

  it('pages devices and releases the same way', async () => {
    const devices = DeviceList.parse(
      (await get(custom, '/v1/devices?limit=3&offset=3&expand[]=total_count')).body,
    );
    expect(devices).toMatchObject({ total_count: 4, limit: 3, offset: 3, has_more: false });
    expect(devices.data).toHaveLength(1);
    const releases = ReleaseList.parse((await get(custom, '/v1/releases?limit=2')).body);
    expect(releases).toMatchObject({ total_count: -1, has_more: true });
  });
});

describe('order_by on config instances and releases (the four values, and id/created_at combinations)', () => {
  it.each([
    ['', ['cfg_c', 'cfg_a', 'cfg_b', 'cfg_d']],
    ['created_at:desc', ['cfg_c', 'cfg_a', 'cfg_b', 'cfg_d']],
    ['created_at', ['cfg_c', 'cfg_a', 'cfg_b', 'cfg_d']],
    ['created_at:asc', ['cfg_a', 'cfg_b', 'cfg_d', 'cfg_c']],
    ['id:asc', ['cfg_a', 'cfg_b', 'cfg_c', 'cfg_d']],
    ['id:desc', ['cfg_d', 'cfg_c', 'cfg_b', 'cfg_a']],
    ['id', ['cfg_d', 'cfg_c', 'cfg_b', 'cfg_a']],
    ['created_at:asc,id:desc', ['cfg_d', 'cfg_b', 'cfg_a', 'cfg_c']],
    ['created_at:desc,id:desc', ['cfg_c', 'cfg_d', 'cfg_b', 'cfg_a']],
    ['id:asc,created_at:desc', ['cfg_a', 'cfg_b', 'cfg_c', 'cfg_d']],
  ])('order_by=%j', async (orderBy, expected) => {
    const page = await instances(custom, `?order_by=${orderBy}`);
    expect(page.data.map((i) => i.id)).toEqual(expected);
  });

  it.each([
    ['', ['rel_c', 'rel_a', 'rel_b']],
    ['created_at:asc', ['rel_a', 'rel_b', 'rel_c']],
    ['id:desc', ['rel_c', 'rel_b', 'rel_a']],
    ['created_at:asc,id:desc', ['rel_b', 'rel_a', 'rel_c']],
  ])('releases order_by=%j', async (orderBy, expected) => {
    const page = ReleaseList.parse((await get(custom, `/v1/releases?order_by=${orderBy}`)).body);
    expect(page.data.map((r) => r.id)).toEqual(expected);
  });

  it.each([
    'name:asc',
    'updated_at:desc',
    'created_at:up',
    'created_at:ASC',
    'id:asc,id:desc',
    'created_at:asc,',
  ])('rejects order_by=%j with 400', async (orderBy) => {
    await expectBadRequest(
      `/v1/config_instances?order_by=${encodeURIComponent(orderBy)}`,
      'order_by',
      custom,
    );
    await expectBadRequest(`/v1/releases?order_by=${encodeURIComponent(orderBy)}`, 'order_by', custom);
  });
});

describe('order_by on devices (id, name, created_at, updated_at, last_connected_at in any combination)', () => {
  const FIELDS = ['id', 'name', 'created_at', 'updated_at', 'last_connected_at'] as const;

  async function deviceIds(query: string): Promise<string[]> {
    const response = await get(custom, `/v1/devices${query}`);
    expect(response.status, response.text).toBe(200);
    return DeviceList.parse(response.body).data.map((d) => d.id);
  }

  it.each([
    ['', ['dvc_4', 'dvc_3', 'dvc_1', 'dvc_2']],
    ['name:asc', ['dvc_1', 'dvc_3', 'dvc_2', 'dvc_4']],
    ['name', ['dvc_4', 'dvc_2', 'dvc_1', 'dvc_3']],
    ['name:asc,id:desc', ['dvc_3', 'dvc_1', 'dvc_2', 'dvc_4']],
    ['name:asc,created_at:desc', ['dvc_3', 'dvc_1', 'dvc_2', 'dvc_4']],
    ['last_connected_at:desc', ['dvc_4', 'dvc_1', 'dvc_2', 'dvc_3']],
    ['updated_at:asc,name:desc', ['dvc_2', 'dvc_3', 'dvc_4', 'dvc_1']],
    ['created_at:desc,id:asc', ['dvc_4', 'dvc_3', 'dvc_1', 'dvc_2']],
  ])('order_by=%j', async (orderBy, expected) => {
    expect(await deviceIds(`?order_by=${orderBy}`)).toEqual(expected);
  });

  it('sorts by every ordered pair of fields and directions like a reference sort', async () => {
    const records = SORT_FIXTURES.devices ?? [];
    const value = (d: (typeof records)[number], field: string): string | number => {
      const raw = String((d as Record<string, unknown>)[field]);
      return field.endsWith('_at') ? Date.parse(raw) : raw;
    };
    let checked = 0;
    for (const first of FIELDS) {
      for (const second of FIELDS) {
        if (first === second) continue;
        for (const d1 of ['asc', 'desc'] as const) {
          for (const d2 of ['asc', 'desc'] as const) {
            const terms = [
              [first, d1],
              [second, d2],
            ] as const;
            const withTieBreak = terms.some(([f]) => f === 'id') ? terms : [...terms, ['id', 'asc'] as const];
            const expected = [...records]
              .sort((a, b) => {
                for (const [field, dir] of withTieBreak) {
                  const x = value(a, field);
                  const y = value(b, field);
                  if (x !== y) return (x < y ? -1 : 1) * (dir === 'asc' ? 1 : -1);
                }
                return 0;
              })
              .map((d) => d.id);
            expect(
              await deviceIds(`?order_by=${first}:${d1},${second}:${d2}`),
              `${first}:${d1},${second}:${d2}`,
            ).toEqual(expected);
            checked += 1;
          }
        }
      }
    }
    expect(checked).toBe(80);
  });

  it.each(['status:asc', 'last_disconnected_at', 'name:sideways', 'name:asc,,id:asc'])(
    'rejects order_by=%j with 400',
    async (orderBy) => {
      await expectBadRequest(`/v1/devices?order_by=${encodeURIComponent(orderBy)}`, 'order_by', custom);
    },
  );
});

describe('filters', () => {
  const all = demoFixtures().config_instances ?? [];

  it.each([
    ['id', 'cfg_r1_lidar'],
    ['device_id', 'dvc_gateway_01'],
    ['config_schema_id', 'cfs_app_settings'],
    ['config_type_id', 'cft_sensor'],
    ['target_status', 'deployed'],
    ['target_status', 'removed'],
    ['activity_status', 'queued'],
    ['activity_status', 'deployed'],
    ['error_status', 'none'],
  ])('config instances filtered by %s=%s', async (field, value) => {
    const page = await instances(demo, `?${field}=${value}&limit=100&expand[]=total_count`);
    const expected = all.filter((i) => {
      const defaults: Record<string, string> = {
        target_status: 'created',
        activity_status: 'created',
        error_status: 'none',
      };
      return ((i as Record<string, unknown>)[field] ?? defaults[field]) === value;
    });
    expect(expected.length).toBeGreaterThan(0);
    expect(page.total_count).toBe(expected.length);
    expect(page.data.map((i) => i.id).sort()).toEqual(expected.map((i) => i.id).sort());
  });

  it('combines filters with AND', async () => {
    const page = await instances(demo, '?device_id=dvc_robot_01&activity_status=deployed');
    expect(page.data.map((i) => i.id)).toEqual(['cfg_r1_app_logging']);
    expect((await instances(demo, '?device_id=dvc_robot_02&error_status=failed')).data).toEqual([]);
  });

  it('matches ids exactly: an unknown id filters everything out', async () => {
    expect((await instances(demo, '?id=cfg_r1')).data).toEqual([]);
  });

  it.each([
    ['target_status', 'queued'],
    ['activity_status', 'archived'],
    ['error_status', 'bad'],
    ['target_status', ''],
  ])('a %s outside its enum (%j) → 400', async (field, value) => {
    await expectBadRequest(`/v1/config_instances?${field}=${value}`, field);
  });

  it('filters releases by id and version', async () => {
    const byVersion = ReleaseList.parse((await get(demo, '/v1/releases?version=v1.4.0')).body);
    expect(byVersion.data.map((r) => r.id)).toEqual(['rel_01HV4000']);
    const byId = ReleaseList.parse((await get(demo, '/v1/releases?id=rel_01HV5000')).body);
    expect(byId.data.map((r) => r.version)).toEqual(['v1.5.0']);
    expect(ReleaseList.parse((await get(demo, '/v1/releases?version=v9.9.9')).body).data).toEqual([]);
  });

  it('filters devices by id, name and status (status values are open, so any string is accepted)', async () => {
    const byName = DeviceList.parse((await get(custom, '/v1/devices?name=alpha&order_by=id:asc')).body);
    expect(byName.data.map((d) => d.id)).toEqual(['dvc_1', 'dvc_3']);
    const byStatus = DeviceList.parse((await get(custom, '/v1/devices?status=maintenance')).body);
    expect(byStatus.data.map((d) => d.id)).toEqual(['dvc_4']);
    const byId = DeviceList.parse((await get(custom, '/v1/devices?id=dvc_2')).body);
    expect(byId.data.map((d) => d.name)).toEqual(['beta']);
    const none = await get(custom, '/v1/devices?status=exploded');
    expect(none.status).toBe(200);
    expect(DeviceList.parse(none.body).data).toEqual([]);
  });
});

describe('expand[] on lists', () => {
  it('leaves item expansions null unless asked for', async () => {
    const page = await instances(demo, '?id=cfg_r1_lidar');
    expect(page.data[0]).toMatchObject({ device: null, config_schema: null, config_type: null });
  });

  it('expands device, config_schema and config_type on config instances', async () => {
    const page = await instances(
      demo,
      '?id=cfg_r1_lidar&expand[]=device&expand[]=config_schema&expand[]=config_type&expand[]=total_count',
    );
    expect(page.total_count).toBe(1);
    expect(page.data[0]?.device).toMatchObject({ object: 'device', id: 'dvc_robot_01' });
    expect(page.data[0]?.config_schema).toEqual({ object: 'config_schema', id: 'cfs_lidar' });
    expect(page.data[0]?.config_type).toEqual({ object: 'config_type', id: 'cft_sensor' });
  });

  it('accepts the percent-encoded key expand%5B%5D', async () => {
    expect((await instances(demo, '?expand%5B%5D=total_count')).total_count).toBe(20);
  });

  it.each([
    ['/v1/config_instances?expand[]=release', 'expand[]'],
    ['/v1/config_instances?expand[]=total', 'expand[]'],
    ['/v1/releases?expand[]=device', 'expand[]'],
    ['/v1/devices?expand[]=config_instances', 'expand[]'],
    ['/v1/deployments/dpl_robot_01_v1_5_0?expand[]=total_count', 'expand[]'],
  ])('rejects an unknown expansion: %s', async (path, parameter) => {
    await expectBadRequest(path, parameter);
  });
});

describe('API key hygiene on lists', () => {
  it('never echoes the key in a response', async () => {
    const response = await get(demo, `/v1/config_instances?id=${API_KEY}`);
    expect(response.text).not.toContain(API_KEY);
  });
});
