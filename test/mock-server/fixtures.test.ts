// Fixtures: errors that name the item and field, defaults, and the shape of the shipped demo fleet.
import { describe, expect, it } from 'vitest';
import type { Fixtures } from '../../src/api/admin-schemas.js';
import { createMockService } from '../../src/mock-server/app.js';
import { FixtureError, parseFixtures, stateFromFixtures } from '../../src/mock-server/fixtures.js';
import { MockState } from '../../src/mock-server/state.js';
import { API_KEY, demoFixtures } from './helpers.js';

const BASE = {
  devices: [{ id: 'dvc_1' }, { id: 'dvc_2' }],
  releases: [{ id: 'rel_1', version: 'v1.0.0' }],
  config_instances: [
    { id: 'cfg_1', device_id: 'dvc_1', relative_filepath: 'a.json', content: { a: 1 } },
    { id: 'cfg_2', device_id: 'dvc_2', relative_filepath: 'b.json', content: {} },
  ],
  deployments: [{ id: 'dpl_1', device_id: 'dvc_1', release_id: 'v1.0.0', config_instance_ids: ['cfg_1'] }],
};

function fixtureError(json: unknown): FixtureError {
  try {
    parseFixtures(json);
  } catch (error) {
    if (error instanceof FixtureError) return error;
    throw error;
  }
  throw new Error('expected a FixtureError');
}

function withItem(collection: keyof typeof BASE, index: number, patch: Record<string, unknown>): unknown {
  const copy = structuredClone(BASE) as Record<string, Record<string, unknown>[]>;
  const items = copy[collection] ?? [];
  items[index] = { ...items[index], ...patch };
  return copy;
}

describe('parseFixtures errors name the item and the field', () => {
  it.each([
    ['a non-object', [], 'fixtures', ''],
    ['an unknown top-level key', { ...BASE, widgets: [] }, 'fixtures', 'widgets'],
    ['a collection that is not an array', { devices: {} }, 'fixtures', 'devices'],
    ['a device without id', { devices: [{ name: 'x' }] }, 'devices[0]', 'id'],
    [
      'a bad activity_status',
      withItem('config_instances', 1, { activity_status: 'sleeping' }),
      'config_instances[1] (id "cfg_2")',
      'activity_status',
    ],
    [
      'a bad target_status',
      withItem('deployments', 0, { target_status: 'live' }),
      'deployments[0] (id "dpl_1")',
      'target_status',
    ],
    [
      'content that is not an object',
      withItem('config_instances', 0, { content: 'x=1' }),
      'config_instances[0] (id "cfg_1")',
      'content',
    ],
    [
      'a bad timestamp',
      withItem('devices', 1, { created_at: '02/10/2025' }),
      'devices[1] (id "dvc_2")',
      'created_at',
    ],
    ['an unknown field', withItem('releases', 0, { versoin: 'v2' }), 'releases[0] (id "rel_1")', 'versoin'],
    [
      'a duplicate id',
      withItem('config_instances', 1, { id: 'cfg_1', device_id: 'dvc_1' }),
      'config_instances[1] (id "cfg_1")',
      'id',
    ],
    [
      'a duplicate release version',
      { ...BASE, releases: [...BASE.releases, { id: 'rel_2', version: 'v1.0.0' }] },
      'releases[1] (id "rel_2")',
      'version',
    ],
    [
      'an unknown device',
      withItem('config_instances', 1, { device_id: 'dvc_9' }),
      'config_instances[1] (id "cfg_2")',
      'device_id',
    ],
    [
      'an unknown deployment device',
      withItem('deployments', 0, { device_id: 'dvc_9' }),
      'deployments[0] (id "dpl_1")',
      'device_id',
    ],
    [
      'a release id where a version label belongs',
      withItem('deployments', 0, { release_id: 'rel_1' }),
      'deployments[0] (id "dpl_1")',
      'release_id',
    ],
    [
      'an unknown instance in a deployment',
      withItem('deployments', 0, { config_instance_ids: ['cfg_1', 'cfg_9'] }),
      'deployments[0] (id "dpl_1")',
      'config_instance_ids[1]',
    ],
    [
      "another device's instance in a deployment",
      withItem('deployments', 0, { config_instance_ids: ['cfg_2'] }),
      'deployments[0] (id "dpl_1")',
      'config_instance_ids[0]',
    ],
  ])('%s', (_label, json, item, field) => {
    const error = fixtureError(json);
    expect(error.code).toBe('invalid_fixtures');
    expect(error.retryable).toBe(false);
    expect(error.item).toBe(item);
    expect(error.field).toBe(field);
    expect(error.message).toContain(item);
    expect(error.message).toContain(field);
  });

  it('createMockService refuses bad fixtures with the same error', () => {
    expect(() =>
      createMockService({ apiKeys: [API_KEY], fixtures: withItem('devices', 0, { id: '' }) as Fixtures }),
    ).toThrow(FixtureError);
  });
});

describe('loading fixtures', () => {
  const AT = '2025-10-02T12:00:00.000Z';

  it('derives object and status, defaults timestamps to now and statuses to the initial ones', () => {
    const state = stateFromFixtures(
      {
        devices: [{ object: 'device', id: 'dvc_1', created_at: '2025-01-01T00:00:00Z' }],
        releases: [{ id: 'rel_1', version: 'v1.0.0', config_schemas: ['cfs_a', { id: 'cfs_b', name: 'B' }] }],
        config_instances: [
          {
            object: 'config_instance',
            status: 'bogus',
            id: 'cfg_1',
            device_id: 'dvc_1',
            relative_filepath: 'x/y.yaml',
            content: {},
          },
        ],
        deployments: [
          { id: 'dpl_1', device_id: 'dvc_1', release_id: 'v1.0.0', config_instance_ids: ['cfg_1'] },
        ],
      },
      AT,
    );
    expect(state.devices.get('dvc_1')).toEqual({
      id: 'dvc_1',
      name: 'dvc_1',
      status: 'offline',
      created_at: '2025-01-01T00:00:00Z',
      updated_at: '2025-01-01T00:00:00Z',
      last_connected_at: '2025-01-01T00:00:00Z',
      last_disconnected_at: '2025-01-01T00:00:00Z',
    });
    expect(state.releases.get('rel_1')).toMatchObject({
      created_at: AT,
      updated_at: AT,
      config_schemas: [
        { object: 'config_schema', id: 'cfs_a' },
        { object: 'config_schema', id: 'cfs_b', name: 'B' },
      ],
    });
    expect(state.instances.get('cfg_1')).toMatchObject({
      target_status: 'created',
      activity_status: 'created',
      error_status: 'none',
      config_schema_id: 'cfs_x_y_yaml',
      config_type_id: 'cft_yaml',
      created_at: AT,
      updated_at: AT,
    });
    expect(state.deployments.get('dpl_1')).toMatchObject({
      description: '',
      target_status: 'pending',
      activity_status: 'pending',
      error_status: 'none',
      created_at: AT,
    });
  });

  it('keeps deployment statuses the file gives and derives the others from the instances', () => {
    const state = stateFromFixtures(
      {
        devices: [{ id: 'dvc_1' }],
        releases: [{ id: 'rel_1', version: 'v1.0.0' }],
        config_instances: [
          {
            id: 'cfg_1',
            device_id: 'dvc_1',
            relative_filepath: 'a',
            content: {},
            target_status: 'deployed',
            activity_status: 'deployed',
            error_status: 'retrying',
          },
        ],
        deployments: [
          {
            id: 'dpl_given',
            device_id: 'dvc_1',
            release_id: 'v1.0.0',
            config_instance_ids: ['cfg_1'],
            activity_status: 'approved',
            target_status: 'approved',
          },
          { id: 'dpl_derived', device_id: 'dvc_1', release_id: 'v1.0.0', config_instance_ids: ['cfg_1'] },
        ],
      },
      AT,
    );
    expect(state.deployments.get('dpl_given')).toMatchObject({
      activity_status: 'approved',
      target_status: 'approved',
      error_status: 'retrying',
    });
    expect(state.deployments.get('dpl_derived')).toMatchObject({
      activity_status: 'deployed',
      target_status: 'deployed',
      error_status: 'retrying',
    });
  });

  it('ignores fixtures when a state is passed in, so a restart keeps the world it had', () => {
    const state = new MockState();
    const { state: used } = createMockService({ apiKeys: [API_KEY], state, fixtures: demoFixtures() });
    expect(used).toBe(state);
    expect(state.devices.size).toBe(0);
  });
});

describe('test/fixtures/demo.json', () => {
  const demo = demoFixtures();
  const instances = demo.config_instances ?? [];
  const robot01 = instances.filter((i) => i.device_id === 'dvc_robot_01');

  it('is a small realistic fleet: 3 devices, 2 releases, about 20 instances, 2 deployments', () => {
    expect(demo.devices?.map((d) => d.id)).toEqual(['dvc_robot_01', 'dvc_gateway_01', 'dvc_robot_02']);
    expect(demo.releases?.map((r) => r.version)).toEqual(['v1.4.0', 'v1.5.0']);
    expect(instances.length).toBeGreaterThanOrEqual(18);
    expect(instances.length).toBeLessThanOrEqual(22);
    expect(demo.deployments).toHaveLength(2);
    expect(instances.every((i) => i.relative_filepath.includes('/'))).toBe(true);
    expect(
      instances.every((i) => Object.values(i.content).some((v) => typeof v === 'object' && v !== null)),
    ).toBe(true);
  });

  it('gives an agent work: most instances deployed+queued, one or two already deployed, one removed', () => {
    const queued = instances.filter((i) => i.target_status === 'deployed' && i.activity_status === 'queued');
    const deployed = instances.filter(
      (i) => i.target_status === 'deployed' && i.activity_status === 'deployed',
    );
    expect(queued.length).toBeGreaterThan(instances.length / 2);
    expect(deployed.length).toBeGreaterThanOrEqual(1);
    expect(deployed.length).toBeLessThanOrEqual(2);
    expect(instances.filter((i) => i.target_status === 'removed')).toHaveLength(1);
  });

  it('keeps every dvc_robot_01 instance that targets deployed at a distinct path and schema', () => {
    const targeted = robot01.filter((i) => i.target_status === 'deployed');
    expect(targeted.length).toBe(8);
    expect(new Set(targeted.map((i) => i.relative_filepath)).size).toBe(targeted.length);
    expect(new Set(targeted.map((i) => i.config_schema_id)).size).toBe(targeted.length);
    const schemas = robot01.map((i) => i.config_schema_id);
    expect(schemas.some((s, k) => schemas.indexOf(s) !== k)).toBe(true);
  });

  it('redeploying any instance that already targets deployed removes nothing', () => {
    const state = stateFromFixtures(demo, '2025-10-02T12:00:00.000Z');
    for (const instance of instances.filter((i) => i.target_status === 'deployed')) {
      const outcome = state.deploy(instance.id, { dryRun: true, at: '2025-10-02T12:00:00.000Z' });
      expect(outcome.remove, instance.id).toEqual([]);
    }
  });
});
