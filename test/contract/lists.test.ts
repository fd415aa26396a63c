// Contract: the three lists of the real mock through the client — clamping, paging, sorting, filters, expand.
import { readFileSync } from 'node:fs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { PageOptions, ServiceClient } from '../../src/api/client.js';
import { HttpStatusError } from '../../src/api/errors.js';
import type { ListEnvelope } from '../../src/api/schemas.js';
import { type Contract, collect, expectedOrder, failure, startContract } from './harness.js';

const demo = JSON.parse(readFileSync(new URL('../fixtures/demo.json', import.meta.url), 'utf8')) as Record<
  'devices' | 'releases' | 'config_instances',
  { id: string }[]
>;

let contract: Contract;
let client: ServiceClient;
beforeEach(async () => {
  contract = await startContract();
  client = contract.client();
});
afterEach(async () => {
  await contract.close();
});

type Lister = (page?: PageOptions<'total_count'>) => Promise<ListEnvelope<{ id: string }>>;
type Iterator = (page?: PageOptions<'total_count'>) => AsyncIterableIterator<{ id: string }>;
const LISTS: [
  name: 'config_instances' | 'releases' | 'devices',
  list: () => Lister,
  iterate: () => Iterator,
][] = [
  [
    'config_instances',
    () => (page) => client.listConfigInstances({}, page),
    () => (page) => client.iterateConfigInstances({}, page),
  ],
  [
    'releases',
    () => (page) => client.listReleases({}, page),
    () => (page) => client.iterateReleases({}, page),
  ],
  ['devices', () => (page) => client.listDevices({}, page), () => (page) => client.iterateDevices({}, page)],
];

async function expectBadRequest(promise: Promise<unknown>, mentioning: string): Promise<void> {
  const error = await failure(promise);
  expect(error).toBeInstanceOf(HttpStatusError);
  const http = error as HttpStatusError;
  expect(http.status).toBe(400);
  expect(http.retryable).toBe(false);
  expect(http.body?.error.code).toBe('invalid_request');
  expect(http.body?.error.message).toContain(mentioning);
}

describe.each(LISTS)('GET /v1/%s paging', (name, list, iterate) => {
  const total = demo[name].length;

  it('defaults to limit 10, offset 0 and total_count -1; expand[]=total_count counts the matches', async () => {
    const page = await list()();
    expect(page).toMatchObject({ object: 'list', limit: 10, offset: 0, total_count: -1 });
    expect(page.data).toHaveLength(Math.min(10, total));
    expect(page.has_more).toBe(total > 10);
    expect((await list()({ expand: ['total_count'] })).total_count).toBe(total);
  });

  it('clamps limit 0 → 1, limit 1000 → 100 and offset -5 → 0', async () => {
    const one = await list()({ limit: 0 });
    expect(one.limit).toBe(1);
    expect(one.data).toHaveLength(1);
    const max = await list()({ limit: 1000 });
    expect(max.limit).toBe(100);
    expect(max.data).toHaveLength(Math.min(100, total));
    const negative = await list()({ offset: -5, limit: 2 });
    expect(negative.offset).toBe(0);
    expect(negative.data.map((i) => i.id)).toEqual(
      (await list()({ offset: 0, limit: 2 })).data.map((i) => i.id),
    );
  });

  it('offset is the starting position: offset k, limit n returns items k+1..k+n of the full order', async () => {
    const all = (await list()({ limit: 100, orderBy: 'id:asc' })).data.map((i) => i.id);
    const page = await list()({ offset: 1, limit: 2, orderBy: 'id:asc' });
    expect(page.data.map((i) => i.id)).toEqual(all.slice(1, 3));
    const beyond = await list()({ offset: total + 5 });
    expect(beyond.data).toEqual([]);
    expect(beyond.has_more).toBe(false);
  });

  it('has_more is true exactly while items remain beyond the page', async () => {
    expect((await list()({ limit: total })).has_more).toBe(false);
    if (total > 1) expect((await list()({ limit: total - 1 })).has_more).toBe(true);
    expect((await list()({ offset: total - 1, limit: 1 })).has_more).toBe(false);
  });

  it.each([1, 2, 3, 7, 100])('the iterator with limit %i visits every item exactly once', async (limit) => {
    const ids = (await collect(iterate()({ limit }))).map((i) => i.id);
    expect(ids).toHaveLength(total);
    expect(new Set(ids)).toEqual(new Set(demo[name].map((i) => i.id)));
    const stats = await contract.admin.stats();
    expect(stats[`GET /v1/${name}`]).toBe(Math.max(1, Math.ceil(total / limit)));
  });

  it('manual paging with offset += limit reproduces the single-page order', async () => {
    const whole = (await list()({ limit: 100 })).data.map((i) => i.id);
    const pieces: string[] = [];
    let offset = 0;
    for (let pages = 0; pages < 50; pages++) {
      const page = await list()({ offset, limit: 3 });
      pieces.push(...page.data.map((i) => i.id));
      if (!page.has_more) break;
      offset += 3;
    }
    expect(pieces).toEqual(whole);
  });

  it('rejects a non-numeric offset or limit with 400', async () => {
    await expectBadRequest(list()({ offset: 'abc' as unknown as number }), 'offset');
    await expectBadRequest(list()({ limit: 'ten' as unknown as number }), 'limit');
  });
});

describe('sorting', () => {
  const simpleOrders: [string, [string, 'asc' | 'desc'][]][] = [
    ['id:asc', [['id', 'asc']]],
    ['id:desc', [['id', 'desc']]],
    ['created_at:desc', [['created_at', 'desc']]],
    ['created_at:asc', [['created_at', 'asc']]],
    ['created_at', [['created_at', 'desc']]],
    [
      'created_at:asc,id:desc',
      [
        ['created_at', 'asc'],
        ['id', 'desc'],
      ],
    ],
    ['id:asc,created_at:desc', [['id', 'asc']]],
  ];

  it.each(simpleOrders)(
    'config instances and releases sort by %s with the id:asc tie-break',
    async (orderBy, terms) => {
      const instances = (await client.listConfigInstances({}, { limit: 100, orderBy })).data;
      expect(instances.map((i) => i.id)).toEqual(expectedOrder(instances, terms as never));
      const releases = (await client.listReleases({}, { limit: 100, orderBy })).data;
      expect(releases.map((r) => r.id)).toEqual(expectedOrder(releases, terms as never));
    },
  );

  it('the default order is created_at:desc,id:asc (ties exist in the demo fleet and resolve by id)', async () => {
    const instances = (await client.listConfigInstances({}, { limit: 100 })).data;
    const createdAt = instances.map((i) => i.created_at);
    expect(new Set(createdAt).size).toBeLessThan(createdAt.length);
    expect(instances.map((i) => i.id)).toEqual(expectedOrder(instances, [['created_at', 'desc']]));
    const devices = (await client.listDevices({}, { limit: 100 })).data;
    expect(devices.map((d) => d.id)).toEqual(expectedOrder(devices, [['created_at', 'desc']]));
  });

  const deviceOrders: [string, [string, 'asc' | 'desc'][]][] = [
    ...['id', 'name', 'created_at', 'updated_at', 'last_connected_at'].flatMap((field) =>
      (['asc', 'desc'] as const).map((dir): [string, [string, 'asc' | 'desc'][]] => [
        `${field}:${dir}`,
        [[field, dir]],
      ]),
    ),
    ['name', [['name', 'desc']]],
    [
      'created_at:asc,name:desc',
      [
        ['created_at', 'asc'],
        ['name', 'desc'],
      ],
    ],
    [
      'last_connected_at:asc,updated_at:desc,id:desc',
      [
        ['last_connected_at', 'asc'],
        ['updated_at', 'desc'],
        ['id', 'desc'],
      ],
    ],
  ];

  it.each(deviceOrders)('devices sort by %s', async (orderBy, terms) => {
    const devices = (await client.listDevices({}, { limit: 100, orderBy })).data;
    expect(devices).toHaveLength(demo.devices.length);
    expect(devices.map((d) => d.id)).toEqual(expectedOrder(devices, terms as never));
  });

  it('rejects an unknown field or direction with 400', async () => {
    await expectBadRequest(client.listConfigInstances({}, { orderBy: 'name:asc' }), 'order_by');
    await expectBadRequest(client.listReleases({}, { orderBy: 'version:asc' }), 'order_by');
    await expectBadRequest(client.listDevices({}, { orderBy: 'status:asc' }), 'order_by');
    await expectBadRequest(client.listConfigInstances({}, { orderBy: 'id:up' }), 'order_by');
    await expectBadRequest(client.listDevices({}, { orderBy: 'name:asc,id:sideways' }), 'order_by');
  });
});

describe('filters', () => {
  it('every config instance filter returns exactly the matching instances', async () => {
    const all = await collect(client.iterateConfigInstances());
    expect(all).toHaveLength(demo.config_instances.length);
    const sample = all[all.length - 1]!;
    const filters = [
      { id: sample.id },
      { target_status: 'deployed' },
      { target_status: 'removed' },
      { activity_status: 'queued' },
      { activity_status: 'deployed' },
      { error_status: 'none' },
      { error_status: 'failed' },
      { device_id: sample.device_id },
      { config_schema_id: sample.config_schema_id },
      { config_type_id: sample.config_type_id },
      { device_id: sample.device_id, activity_status: 'queued' },
    ] as const;
    for (const filter of filters) {
      const got = await client.listConfigInstances(filter, { limit: 100, expand: ['total_count'] });
      const want = all.filter((i) =>
        Object.entries(filter).every(([k, v]) => (i as Record<string, unknown>)[k] === v),
      );
      expect(got.data.map((i) => i.id).sort(), JSON.stringify(filter)).toEqual(want.map((i) => i.id).sort());
      expect(got.total_count).toBe(want.length);
    }
    expect((await client.listConfigInstances({ device_id: 'dvc_nobody' })).data).toEqual([]);
  });

  it('a config instance filter value outside its enum is rejected with 400', async () => {
    for (const name of ['target_status', 'activity_status', 'error_status']) {
      await expectBadRequest(client.listConfigInstances({ [name]: 'exploded' } as never), name);
    }
  });

  it('releases filter by id and version; devices by id, name and status', async () => {
    const releases = await collect(client.iterateReleases());
    const release = releases[0]!;
    expect((await client.listReleases({ id: release.id })).data.map((r) => r.id)).toEqual([release.id]);
    expect((await client.listReleases({ version: release.version })).data.map((r) => r.id)).toEqual([
      release.id,
    ]);
    expect((await client.listReleases({ version: 'v0.0.0-none' })).data).toEqual([]);

    const devices = await collect(client.iterateDevices());
    const device = devices[0]!;
    expect((await client.listDevices({ id: device.id })).data.map((d) => d.id)).toEqual([device.id]);
    expect((await client.listDevices({ name: device.name })).data.map((d) => d.id)).toEqual([device.id]);
    for (const status of new Set(devices.map((d) => d.status))) {
      const want = devices
        .filter((d) => d.status === status)
        .map((d) => d.id)
        .sort();
      expect((await client.listDevices({ status })).data.map((d) => d.id).sort()).toEqual(want);
    }
  });
});

describe('expand', () => {
  it('config instance list items expand device, config_schema and config_type; otherwise they are null', async () => {
    const plain = await client.listConfigInstances({}, { limit: 100 });
    for (const item of plain.data) {
      expect([item.device, item.config_schema, item.config_type]).toEqual([null, null, null]);
    }
    const expanded = await client.listConfigInstances(
      {},
      { limit: 100, expand: ['device', 'config_schema', 'config_type', 'total_count'] },
    );
    expect(expanded.total_count).toBe(demo.config_instances.length);
    for (const item of expanded.data) {
      expect(item.device?.id).toBe(item.device_id);
      expect(item.config_schema?.id).toBe(item.config_schema_id);
      expect(item.config_type?.id).toBe(item.config_type_id);
    }
    const onlyDevice = await client.listConfigInstances({}, { limit: 1, expand: ['device'] });
    expect(onlyDevice.data[0]?.device).not.toBeNull();
    expect(onlyDevice.data[0]?.config_schema).toBeNull();
    expect(onlyDevice.total_count).toBe(-1);
  });

  it('a deployment expands device, release (looked up by version label) and config_instances', async () => {
    const instances = await collect(client.iterateConfigInstances());
    const deployments = await Promise.all(
      ['dpl_robot_01_v1_5_0', 'dpl_gateway_01_v1_4_0'].map((id) => client.getDeployment(id)),
    );
    for (const deployment of deployments) {
      expect([deployment.device, deployment.release, deployment.config_instances]).toEqual([
        null,
        null,
        null,
      ]);
      const full = await client.getDeployment(deployment.id, {
        expand: ['device', 'release', 'config_instances'],
      });
      expect(full.device?.id).toBe(deployment.device_id);
      expect(full.release?.version).toBe(deployment.release_id);
      expect(full.config_instances?.length).toBeGreaterThan(0);
      for (const member of full.config_instances ?? []) {
        expect(member.device_id).toBe(deployment.device_id);
        expect(instances.find((i) => i.id === member.id)).toEqual(member);
      }
      const onlyRelease = await client.getDeployment(deployment.id, { expand: ['release'] });
      expect(onlyRelease.release).toEqual(full.release);
      expect(onlyRelease.device).toBeNull();
      expect(onlyRelease.config_instances).toBeNull();
    }
  });

  it('a deployment and a config instance carry the merged status (error wins over activity)', async () => {
    for (const id of ['dpl_robot_01_v1_5_0', 'dpl_gateway_01_v1_4_0']) {
      const d = await client.getDeployment(id);
      expect(d.status).toBe(d.error_status === 'none' ? d.activity_status : d.error_status);
    }
    for (const i of await collect(client.iterateConfigInstances())) {
      expect(i.status).toBe(i.error_status === 'none' ? i.activity_status : i.error_status);
    }
  });

  it('an unknown expand value is rejected with 400', async () => {
    await expectBadRequest(client.listReleases({}, { expand: ['device' as 'total_count'] }), 'expand');
    await expectBadRequest(
      client.getDeployment('dpl_robot_01_v1_5_0', { expand: ['owner' as 'device'] }),
      'expand',
    );
  });
});

describe('single resources', () => {
  it('getDevice returns the device as listed', async () => {
    const devices = await collect(client.iterateDevices());
    for (const device of devices) expect(await client.getDevice(device.id)).toEqual(device);
  });

  it('unknown ids → 404 not_found through HttpStatusError.body', async () => {
    for (const promise of [
      client.getDevice('dvc_missing'),
      client.getDeployment('dpl_missing'),
      client.deployConfigInstance('cfg_missing'),
      client.reportConfigInstanceStatus('cfg_missing', { activity_status: 'deployed', error_status: 'none' }),
    ]) {
      const error = (await failure(promise)) as HttpStatusError;
      expect(error).toBeInstanceOf(HttpStatusError);
      expect(error.status).toBe(404);
      expect(error.retryable).toBe(false);
      expect(error.body?.error.code).toBe('not_found');
      expect(typeof error.body?.error.message).toBe('string');
      expect(error.body?.error.params).toBeTypeOf('object');
    }
  });

  it('ids that need percent-encoding reach the mock intact', async () => {
    const created = await contract.admin.createInstance({
      id: 'cfg with space/and slash',
      device_id: 'dvc_robot_02',
      relative_filepath: 'odd/ids.json',
      content: { ok: true },
    });
    const deployed = await client.deployConfigInstance(created.id);
    expect(deployed.deploy.id).toBe('cfg with space/and slash');
  });
});
