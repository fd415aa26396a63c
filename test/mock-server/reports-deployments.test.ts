// The agent's PATCH extension, the admin instance routes, and how deployments follow their instances.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ReceivedReportList } from '../../src/api/admin-schemas.js';
import { ConfigInstance, Deployment, ErrorBody, STATUS_MESSAGE_MAX } from '../../src/api/schemas.js';
import { type RunningMockServer, startMockServer } from '../../src/mock-server/server.js';
import { API_KEY, call, get, manualClock, startDemo } from './helpers.js';

let server: RunningMockServer;
let clock: ReturnType<typeof manualClock>;

afterEach(async () => {
  await server.close();
});

async function patch(id: string, body: unknown) {
  return call(server, 'PATCH', `/v1/config_instances/${id}`, { body });
}

async function reports() {
  return ReceivedReportList.parse((await get(server, '/_admin/reports')).body).data;
}

async function deployment(id: string, query = '') {
  const response = await get(server, `/v1/deployments/${id}${query}`);
  expect(response.status, response.text).toBe(200);
  return Deployment.parse(response.body);
}

describe('PATCH /v1/config_instances/{id} (extension for the agent)', () => {
  beforeEach(async () => {
    clock = manualClock();
    server = await startDemo({ now: clock.now });
  });

  it('updates the instance, returns it, and records the report in order with received_at', async () => {
    clock.advance(1000);
    const first = await patch('cfg_r1_lidar', { activity_status: 'deployed', error_status: 'none' });
    expect(first.status).toBe(200);
    expect(ConfigInstance.parse(first.body)).toMatchObject({
      id: 'cfg_r1_lidar',
      target_status: 'deployed',
      activity_status: 'deployed',
      error_status: 'none',
      status: 'deployed',
      updated_at: clock.iso(),
    });
    const firstAt = clock.iso();
    clock.advance(1000);
    const second = await patch('cfg_r1_camera_front', {
      activity_status: 'queued',
      error_status: 'retrying',
      message: 'EACCES: permission denied, open sensors/camera/front.json',
    });
    // The error wins over the activity in the merged status.
    expect(ConfigInstance.parse(second.body).status).toBe('retrying');

    expect(await reports()).toEqual([
      {
        config_instance_id: 'cfg_r1_lidar',
        activity_status: 'deployed',
        error_status: 'none',
        received_at: firstAt,
      },
      {
        config_instance_id: 'cfg_r1_camera_front',
        activity_status: 'queued',
        error_status: 'retrying',
        message: 'EACCES: permission denied, open sensors/camera/front.json',
        received_at: clock.iso(),
      },
    ]);
    expect(server.state.instances.get('cfg_r1_camera_front')?.error_status).toBe('retrying');
  });

  it('keeps updated_at when a report changes nothing, but still records it', async () => {
    const before = server.state.instances.get('cfg_r1_app_logging');
    clock.advance(1000);
    const response = await patch('cfg_r1_app_logging', { activity_status: 'deployed', error_status: 'none' });
    expect(ConfigInstance.parse(response.body).updated_at).toBe(before?.updated_at);
    expect(await reports()).toHaveLength(1);
  });

  it.each([
    [{ activity_status: 'installed', error_status: 'none' }, 'activity_status'],
    [{ activity_status: 'deployed', error_status: 'broken' }, 'error_status'],
    [{ activity_status: 'deployed' }, 'error_status'],
    [{ error_status: 'none' }, 'activity_status'],
    [{ activity_status: 'deployed', error_status: 'none', extra: 1 }, 'extra'],
    [{ activity_status: 'deployed', error_status: 'none', message: 42 }, 'message'],
    [
      { activity_status: 'deployed', error_status: 'none', message: 'x'.repeat(STATUS_MESSAGE_MAX + 1) },
      'message',
    ],
    [['deployed', 'none'], 'body'],
  ])('rejects %j with 400 naming %s, and records nothing', async (body, field) => {
    const before = server.state.instances.get('cfg_r1_lidar');
    const response = await patch('cfg_r1_lidar', body);
    expect(response.status).toBe(400);
    const error = ErrorBody.parse(response.body).error;
    expect(error.code).toBe('invalid_request');
    expect(error.message).toContain(field);
    expect(server.state.instances.get('cfg_r1_lidar')).toBe(before);
    expect(await reports()).toEqual([]);
  });

  it.each(['{"activity_status": ', '', 'deployed'])(
    'rejects the body %j that is not JSON',
    async (rawBody) => {
      const response = await call(server, 'PATCH', '/v1/config_instances/cfg_r1_lidar', { rawBody });
      expect(response.status).toBe(400);
      expect(ErrorBody.parse(response.body).error.code).toBe('invalid_request');
    },
  );
});

describe('admin config instance routes', () => {
  beforeEach(async () => {
    clock = manualClock();
    server = await startDemo({ now: clock.now });
  });

  it('creates an instance with target and activity created, default ids, and lists it', async () => {
    const response = await call(server, 'POST', '/_admin/config_instances', {
      body: {
        device_id: 'dvc_robot_02',
        relative_filepath: 'app/extra/feature-flags.json',
        content: { beta: true },
      },
    });
    expect(response.status).toBe(201);
    const created = ConfigInstance.parse(response.body);
    expect(created).toMatchObject({
      target_status: 'created',
      activity_status: 'created',
      error_status: 'none',
      status: 'created',
      device_id: 'dvc_robot_02',
      config_schema_id: 'cfs_app_extra_feature_flags_json',
      config_type_id: 'cft_json',
      content: { beta: true },
      created_at: clock.iso(),
      updated_at: clock.iso(),
    });
    const listed = await get(server, `/v1/config_instances?id=${created.id}`);
    expect(listed.text).toContain(created.id);
  });

  it('honours given ids and created_at, and keeps hostile paths verbatim for the agent to reject', async () => {
    const response = await call(server, 'POST', '/_admin/config_instances', {
      body: {
        id: 'cfg_evil',
        device_id: 'dvc_robot_01',
        relative_filepath: '../../etc/passwd',
        content: {},
        config_schema_id: 'cfs_x',
        config_type_id: 'cft_x',
        created_at: '2025-01-01T00:00:00+02:00',
      },
    });
    expect(ConfigInstance.parse(response.body)).toMatchObject({
      id: 'cfg_evil',
      relative_filepath: '../../etc/passwd',
      config_schema_id: 'cfs_x',
      config_type_id: 'cft_x',
      created_at: '2025-01-01T00:00:00+02:00',
    });
  });

  it.each([
    [{ device_id: 'dvc_nope', relative_filepath: 'a.json', content: {} }, 404, 'not_found', 'device_id'],
    [
      { id: 'cfg_r1_lidar', device_id: 'dvc_robot_01', relative_filepath: 'a.json', content: {} },
      409,
      'conflict',
      'cfg_r1_lidar',
    ],
    [{ device_id: 'dvc_robot_01', relative_filepath: 'a.json' }, 400, 'invalid_request', 'content'],
    [
      { device_id: 'dvc_robot_01', relative_filepath: 'a.json', content: [1] },
      400,
      'invalid_request',
      'content',
    ],
    [
      { device_id: 'dvc_robot_01', relative_filepath: 'a.json', content: {}, created_at: 'yesterday' },
      400,
      'invalid_request',
      'created_at',
    ],
    [
      { device_id: 'dvc_robot_01', relative_filepath: 'a.json', content: {}, colour: 'red' },
      400,
      'invalid_request',
      'colour',
    ],
  ])('rejects %j with %i %s naming %s', async (body, status, code, named) => {
    const count = server.state.instances.size;
    const response = await call(server, 'POST', '/_admin/config_instances', { body });
    expect(response.status).toBe(status);
    const error = ErrorBody.parse(response.body).error;
    expect(error.code).toBe(code);
    expect(error.message).toContain(named);
    expect(server.state.instances.size).toBe(count);
  });

  it('sets target removed on /remove and moves updated_at', async () => {
    clock.advance(1000);
    const response = await call(server, 'POST', '/_admin/config_instances/cfg_r1_lidar/remove');
    expect(response.status).toBe(200);
    expect(ConfigInstance.parse(response.body)).toMatchObject({
      target_status: 'removed',
      activity_status: 'queued',
      updated_at: clock.iso(),
    });
  });
});

describe('deployments', () => {
  beforeEach(async () => {
    clock = manualClock();
    server = await startDemo({ now: clock.now });
  });

  it('derives statuses from the fixtures and leaves expansions null unless asked', async () => {
    const robot = await deployment('dpl_robot_01_v1_5_0');
    expect(robot).toMatchObject({
      object: 'deployment',
      status: 'queued',
      activity_status: 'queued',
      error_status: 'none',
      target_status: 'deployed',
      device_id: 'dvc_robot_01',
      release_id: 'v1.5.0',
      device: null,
      release: null,
      config_instances: null,
    });
  });

  it('expands the device, the release named by its version label, and its config instances in order', async () => {
    const expanded = await deployment(
      'dpl_gateway_01_v1_4_0',
      '?expand[]=device&expand[]=release&expand[]=config_instances',
    );
    expect(expanded.device).toMatchObject({ object: 'device', id: 'dvc_gateway_01' });
    expect(expanded.release).toMatchObject({ object: 'release', id: 'rel_01HV4000', version: 'v1.4.0' });
    expect(expanded.config_instances?.map((i) => i.id)).toEqual([
      'cfg_gw_nginx_site',
      'cfg_gw_nginx_upstreams',
      'cfg_gw_mqtt_bridge',
      'cfg_gw_app_settings',
      'cfg_gw_firewall',
    ]);
    const onlyRelease = await deployment('dpl_gateway_01_v1_4_0', '?expand[]=release');
    expect(onlyRelease).toMatchObject({ device: null, config_instances: null });
    expect(onlyRelease.release?.version).toBe('v1.4.0');
  });

  it('follows its instances through deploy, reports and removal (the documented transitions)', async () => {
    await server.close();
    server = await startMockServer({
      apiKeys: [API_KEY],
      now: clock.now,
      fixtures: {
        devices: [{ id: 'dvc_1' }],
        releases: [{ id: 'rel_1', version: 'v1.0.0' }],
        config_instances: [
          {
            id: 'cfg_1',
            device_id: 'dvc_1',
            relative_filepath: 'a.json',
            content: {},
            target_status: 'deployed',
            activity_status: 'queued',
          },
          {
            id: 'cfg_2',
            device_id: 'dvc_1',
            relative_filepath: 'b.json',
            content: {},
            target_status: 'deployed',
            activity_status: 'queued',
          },
        ],
        deployments: [
          { id: 'dpl_1', device_id: 'dvc_1', release_id: 'v1.0.0', config_instance_ids: ['cfg_1', 'cfg_2'] },
        ],
      },
    });
    const statuses = async () => {
      const d = await deployment('dpl_1');
      return [d.activity_status, d.error_status, d.status, d.target_status];
    };
    const report = async (id: string, activity_status: string, error_status = 'none') => {
      clock.advance(1000);
      expect((await patch(id, { activity_status, error_status })).status).toBe(200);
    };
    const remove = async (id: string) => {
      clock.advance(1000);
      expect((await call(server, 'POST', `/_admin/config_instances/${id}/remove`)).status).toBe(200);
    };

    expect(await statuses()).toEqual(['queued', 'none', 'queued', 'deployed']);
    await report('cfg_1', 'deployed');
    expect(await statuses()).toEqual(['queued', 'none', 'queued', 'deployed']);
    await report('cfg_2', 'deployed');
    expect(await statuses()).toEqual(['deployed', 'none', 'deployed', 'deployed']);
    expect((await deployment('dpl_1')).updated_at).toBe(clock.iso());

    await report('cfg_2', 'deployed', 'retrying');
    expect(await statuses()).toEqual(['deployed', 'retrying', 'retrying', 'deployed']);
    await report('cfg_1', 'deployed', 'failed');
    expect(await statuses()).toEqual(['deployed', 'failed', 'failed', 'deployed']);
    await report('cfg_1', 'deployed');
    await report('cfg_2', 'deployed');
    expect(await statuses()).toEqual(['deployed', 'none', 'deployed', 'deployed']);

    const unchangedAt = (await deployment('dpl_1')).updated_at;
    await report('cfg_2', 'deployed');
    expect((await deployment('dpl_1')).updated_at).toBe(unchangedAt);

    await remove('cfg_1');
    expect(await statuses()).toEqual(['removing', 'none', 'removing', 'deployed']);
    await report('cfg_1', 'removed');
    expect(await statuses()).toEqual(['deployed', 'none', 'deployed', 'deployed']);
    await remove('cfg_2');
    expect(await statuses()).toEqual(['removing', 'none', 'removing', 'archived']);
    await report('cfg_2', 'removed');
    expect(await statuses()).toEqual(['archived', 'none', 'archived', 'archived']);

    clock.advance(1000);
    await call(server, 'POST', '/v1/config_instances/cfg_1/deploy');
    expect(await statuses()).toEqual(['queued', 'none', 'queued', 'deployed']);
  });

  it('a conflicting deploy marks the other deployment as removing once its file is on the device', async () => {
    await patch('cfg_r1_motion_limits', { activity_status: 'deployed', error_status: 'none' });
    for (const id of server.state.deployments.get('dpl_robot_01_v1_5_0')?.config_instance_ids ?? []) {
      await patch(id, { activity_status: 'deployed', error_status: 'none' });
    }
    expect((await deployment('dpl_robot_01_v1_5_0')).activity_status).toBe('deployed');
    await call(server, 'POST', '/v1/config_instances/cfg_r1_motion_limits_next/deploy');
    expect((await deployment('dpl_robot_01_v1_5_0')).status).toBe('removing');
  });
});
