// POST /config_instances/{id}/deploy: resulting statuses, both conflict codes, and dry runs.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ConfigInstance, ConfigInstanceList, DeployResponse, ErrorBody } from '../../src/api/schemas.js';
import type { RunningMockServer } from '../../src/mock-server/server.js';
import { call, get, manualClock, startDemo } from './helpers.js';

let server: RunningMockServer;
let clock: ReturnType<typeof manualClock>;

beforeEach(async () => {
  clock = manualClock();
  server = await startDemo({ now: clock.now });
});
afterEach(async () => {
  await server.close();
});

async function deploy(id: string, query = '') {
  const response = await call(server, 'POST', `/v1/config_instances/${id}/deploy${query}`);
  expect(response.status, response.text).toBe(200);
  return DeployResponse.parse(response.body);
}

async function createInstance(body: Record<string, unknown>) {
  const response = await call(server, 'POST', '/_admin/config_instances', {
    body: { content: { a: 1 }, ...body },
  });
  expect(response.status, response.text).toBe(201);
  return ConfigInstance.parse(response.body);
}

async function instance(id: string) {
  const page = ConfigInstanceList.parse((await get(server, `/v1/config_instances?id=${id}`)).body);
  const found = page.data[0];
  if (found === undefined) throw new Error(`instance ${id} not listed`);
  return found;
}

/** A deep copy of everything a deploy could change. */
function snapshot() {
  return structuredClone({
    instances: [...server.state.instances.entries()],
    deployments: [...server.state.deployments.entries()],
  });
}

describe('deploy', () => {
  it('gives the instance target deployed, activity queued, error none, and moves updated_at', async () => {
    clock.advance(60_000);
    const result = await deploy('cfg_r2_nginx_site_draft');
    expect(result.deploy).toMatchObject({
      id: 'cfg_r2_nginx_site_draft',
      target_status: 'deployed',
      activity_status: 'queued',
      error_status: 'none',
      status: 'queued',
      updated_at: clock.iso(),
    });
    expect(result.remove).toEqual([]);
    expect(await instance('cfg_r2_nginx_site_draft')).toEqual(result.deploy);
  });

  it('leaves instances of other devices alone even when path and schema match', async () => {
    const before = snapshot();
    await deploy('cfg_r2_nginx_site_draft');
    for (const id of ['cfg_r1_nginx_site', 'cfg_gw_nginx_site']) {
      expect(server.state.instances.get(id)).toEqual(new Map(before.instances).get(id));
    }
  });

  it('queues a live instance with the same config schema for removal (device_config_schema_conflict)', async () => {
    clock.advance(1000);
    const result = await deploy('cfg_r1_motion_limits_next');
    expect(result.remove).toHaveLength(1);
    const [removal] = result.remove;
    expect(removal?.code).toBe('device_config_schema_conflict');
    expect(removal?.explanation).toContain('cfg_r1_motion_limits');
    expect(removal?.explanation).toContain('cfg_r1_motion_limits_next');
    expect(removal?.config_instance).toMatchObject({
      id: 'cfg_r1_motion_limits',
      target_status: 'removed',
      activity_status: 'queued',
      updated_at: clock.iso(),
    });
    expect(await instance('cfg_r1_motion_limits')).toEqual(removal?.config_instance);
  });

  it('queues a live instance at the same path for removal (device_file_path_conflict)', async () => {
    const created = await createInstance({
      id: 'cfg_r1_app_settings_v2',
      device_id: 'dvc_robot_01',
      relative_filepath: 'app/settings.json',
      config_schema_id: 'cfs_app_settings_v2',
    });
    const result = await deploy(created.id);
    expect(result.remove.map((r) => [r.code, r.config_instance.id, r.config_instance.target_status])).toEqual(
      [['device_file_path_conflict', 'cfg_r1_app_settings', 'removed']],
    );
    expect(result.remove[0]?.explanation).toMatch(/cfg_r1_app_settings\b.*cfg_r1_app_settings_v2/);
    expect(result.remove[0]?.explanation).toContain('app/settings.json');
  });

  it('reports both codes in one deploy, ordered by id, and one entry when path and schema both match', async () => {
    const created = await createInstance({
      id: 'cfg_r1_mixed',
      device_id: 'dvc_robot_01',
      relative_filepath: 'robot/motion/pid.json',
      config_schema_id: 'cfs_camera',
    });
    const result = await deploy(created.id);
    expect(result.remove.map((r) => [r.config_instance.id, r.code])).toEqual([
      ['cfg_r1_camera_front', 'device_config_schema_conflict'],
      ['cfg_r1_motion_pid', 'device_file_path_conflict'],
    ]);

    const twin = await createInstance({
      id: 'cfg_r1_lidar_twin',
      device_id: 'dvc_robot_01',
      relative_filepath: 'sensors/lidar/config.json',
      config_schema_id: 'cfs_lidar',
    });
    const twinResult = await deploy(twin.id);
    expect(twinResult.remove.map((r) => [r.config_instance.id, r.code])).toEqual([
      ['cfg_r1_lidar', 'device_file_path_conflict'],
    ]);
  });

  it('counts an instance as live when its target is deployed or its activity is queued or deployed', async () => {
    // cfg_gw_telemetry_legacy: target removed but still deployed on the device → live, listed again.
    const legacyPath = await createInstance({
      id: 'cfg_gw_telemetry',
      device_id: 'dvc_gateway_01',
      relative_filepath: 'app/telemetry-legacy.json',
    });
    const result = await deploy(legacyPath.id);
    expect(result.remove.map((r) => [r.config_instance.id, r.config_instance.target_status])).toEqual([
      ['cfg_gw_telemetry_legacy', 'removed'],
    ]);

    // A draft (target and activity created) at the same path is not live: it is neither removed nor listed.
    const sibling = await createInstance({
      id: 'cfg_r2_nginx_site_final',
      device_id: 'dvc_robot_02',
      relative_filepath: 'nginx/conf.d/site.json',
    });
    const siblingResult = await deploy(sibling.id);
    expect(siblingResult.remove).toEqual([]);
    expect((await instance('cfg_r2_nginx_site_draft')).target_status).toBe('created');
  });

  it('resets a failed instance to error none and merges statuses again', async () => {
    const patched = await call(server, 'PATCH', '/v1/config_instances/cfg_r2_camera_front', {
      body: { activity_status: 'queued', error_status: 'failed' },
    });
    expect(ConfigInstance.parse(patched.body).status).toBe('failed');
    const result = await deploy('cfg_r2_camera_front');
    expect(result.deploy).toMatchObject({ error_status: 'none', status: 'queued' });
  });

  it('is stable when repeated: a second deploy of the same instance changes nothing more', async () => {
    const first = await deploy('cfg_r1_motion_limits_next');
    const after = snapshot();
    clock.advance(5000);
    const second = await deploy('cfg_r1_motion_limits_next');
    expect(second.deploy).toEqual(first.deploy);
    expect(second.remove.map((r) => r.config_instance)).toEqual(first.remove.map((r) => r.config_instance));
    expect(snapshot()).toEqual(after);
  });

  it('rejects a dry_run that is not a boolean', async () => {
    const response = await call(server, 'POST', '/v1/config_instances/cfg_r1_lidar/deploy?dry_run=yes');
    expect(response.status).toBe(400);
    expect(ErrorBody.parse(response.body).error.params.parameter).toBe('dry_run');
  });
});

describe('deploy?dry_run=true', () => {
  it.each([
    ['cfg_r1_motion_limits_next', 1],
    ['cfg_r2_nginx_site_draft', 0],
    ['cfg_gw_app_settings', 0],
  ])(
    'for %s answers exactly what the real deploy then answers, and changes nothing',
    async (id, removals) => {
      clock.advance(30_000);
      const before = snapshot();
      const reportsBefore = server.state.reports.length;
      const dryRun = await call(server, 'POST', `/v1/config_instances/${id}/deploy?dry_run=true`);
      expect(dryRun.status).toBe(200);
      expect(snapshot()).toEqual(before);
      expect(server.state.reports).toHaveLength(reportsBefore);

      const real = await call(server, 'POST', `/v1/config_instances/${id}/deploy`);
      expect(real.text).toBe(dryRun.text);
      expect(DeployResponse.parse(real.body).remove).toHaveLength(removals);
      expect((await instance(id)).target_status).toBe('deployed');
    },
  );

  it('treats dry_run=false as a real deploy', async () => {
    await deploy('cfg_r1_motion_limits_next', '?dry_run=false');
    expect((await instance('cfg_r1_motion_limits')).target_status).toBe('removed');
  });
});
