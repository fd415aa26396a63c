// Contract: deploy conflicts (both codes), dry run, and the PATCH status report extension on the real mock.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { ReportAnswer, ServiceClient } from '../../src/api/client.js';
import type { ConfigInstance } from '../../src/api/schemas.js';
import { type Contract, collect, NOW, startContract } from './harness.js';

let contract: Contract;
let client: ServiceClient;
beforeEach(async () => {
  contract = await startContract();
  client = contract.client();
});
afterEach(async () => {
  await contract.close();
});

const DEVICE = 'dvc_robot_02';

async function create(id: string, relative_filepath: string, config_schema_id: string, device_id = DEVICE) {
  return contract.admin.createInstance({
    id,
    device_id,
    relative_filepath,
    config_schema_id,
    content: { id },
  });
}

async function instance(id: string): Promise<ConfigInstance> {
  const [found] = (await client.listConfigInstances({ id })).data;
  if (found === undefined) throw new Error(`instance ${id} not listed`);
  return found;
}

/** Everything a deploy could change, as the client sees it. */
async function world() {
  return {
    instances: await collect(client.iterateConfigInstances({}, { orderBy: 'id:asc' })),
    deployments: await Promise.all(
      ['dpl_robot_01_v1_5_0', 'dpl_gateway_01_v1_4_0'].map((id) => client.getDeployment(id)),
    ),
    reports: await contract.admin.reports(),
  };
}

describe('POST /v1/config_instances/{id}/deploy', () => {
  it('queues the instance: target deployed, activity queued, error none', async () => {
    const created = await create('cfg_contract_a', 'contract/app.yaml', 'cfs_contract_a');
    expect([created.target_status, created.activity_status]).toEqual(['created', 'created']);
    const response = await client.deployConfigInstance('cfg_contract_a');
    expect(response.deploy).toMatchObject({
      id: 'cfg_contract_a',
      target_status: 'deployed',
      activity_status: 'queued',
      error_status: 'none',
      status: 'queued',
    });
    expect(response.remove).toEqual([]);
    expect(await instance('cfg_contract_a')).toEqual(response.deploy);
  });

  it('queues a live instance with the same device and file path for removal: device_file_path_conflict', async () => {
    await create('cfg_contract_a', 'contract/app.yaml', 'cfs_contract_a');
    await create('cfg_contract_b', 'contract/app.yaml', 'cfs_contract_b');
    // Same path on another device: not a conflict.
    await create('cfg_contract_elsewhere', 'contract/app.yaml', 'cfs_contract_a', 'dvc_robot_01');
    await client.deployConfigInstance('cfg_contract_elsewhere');
    await client.deployConfigInstance('cfg_contract_a');

    const response = await client.deployConfigInstance('cfg_contract_b');
    expect(response.deploy).toMatchObject({
      id: 'cfg_contract_b',
      target_status: 'deployed',
      activity_status: 'queued',
    });
    expect(response.remove).toHaveLength(1);
    const [removal] = response.remove;
    expect(removal?.code).toBe('device_file_path_conflict');
    expect(removal?.explanation).toContain('cfg_contract_a');
    expect(removal?.explanation).toContain('cfg_contract_b');
    expect(removal?.config_instance).toMatchObject({ id: 'cfg_contract_a', target_status: 'removed' });

    expect((await instance('cfg_contract_a')).target_status).toBe('removed');
    expect((await instance('cfg_contract_b')).target_status).toBe('deployed');
    expect((await instance('cfg_contract_elsewhere')).target_status).toBe('deployed');
  });

  it('queues a live instance with the same device and config schema for removal: device_config_schema_conflict', async () => {
    await create('cfg_contract_b', 'contract/app.yaml', 'cfs_contract_shared');
    await create('cfg_contract_c', 'contract/other.yaml', 'cfs_contract_shared');
    await client.deployConfigInstance('cfg_contract_b');

    const response = await client.deployConfigInstance('cfg_contract_c');
    expect(
      response.remove.map((r) => [r.code, r.config_instance.id, r.config_instance.target_status]),
    ).toEqual([['device_config_schema_conflict', 'cfg_contract_b', 'removed']]);
    expect(response.remove[0]?.explanation).toContain('cfg_contract_b');
    expect(response.remove[0]?.explanation).toContain('cfg_contract_c');
    expect((await instance('cfg_contract_b')).target_status).toBe('removed');
  });

  it('an instance still deployed on the device conflicts even when its target is already removed', async () => {
    await create('cfg_contract_old', 'contract/app.yaml', 'cfs_contract_old');
    await client.deployConfigInstance('cfg_contract_old');
    await client.reportConfigInstanceStatus('cfg_contract_old', {
      activity_status: 'deployed',
      error_status: 'none',
    });
    await contract.admin.removeInstance('cfg_contract_old');
    // Never deployed: neither target deployed nor activity queued/deployed, so not live and not listed.
    await create('cfg_contract_idle', 'contract/app.yaml', 'cfs_contract_idle');
    await create('cfg_contract_new', 'contract/app.yaml', 'cfs_contract_new');

    const response = await client.deployConfigInstance('cfg_contract_new');
    expect(response.remove.map((r) => [r.code, r.config_instance.id])).toEqual([
      ['device_file_path_conflict', 'cfg_contract_old'],
    ]);
    expect((await instance('cfg_contract_idle')).target_status).toBe('created');
  });

  it('a dry run answers exactly what the real deploy answers, and changes nothing', async () => {
    const all = await collect(client.iterateConfigInstances());
    const live = (i: ConfigInstance) =>
      i.target_status === 'deployed' || i.activity_status === 'queued' || i.activity_status === 'deployed';
    // A demo instance that is not deployed yet but would displace a live one: the interesting case.
    const candidate = all.find(
      (i) =>
        i.target_status !== 'deployed' &&
        all.some(
          (o) =>
            o.id !== i.id &&
            o.device_id === i.device_id &&
            live(o) &&
            (o.relative_filepath === i.relative_filepath || o.config_schema_id === i.config_schema_id),
        ),
    );
    expect(candidate, 'the demo fleet has a pending instance that conflicts with a live one').toBeDefined();
    const id = candidate!.id;

    const before = await world();
    const dryRun = await client.deployConfigInstance(id, { dryRun: true });
    expect(dryRun.remove.length).toBeGreaterThan(0);
    expect(dryRun.deploy).toMatchObject({ id, target_status: 'deployed', activity_status: 'queued' });
    expect(await world()).toEqual(before);

    const real = await client.deployConfigInstance(id);
    expect(real).toEqual(dryRun);
    const after = await world();
    expect(after.instances.find((i) => i.id === id)).toEqual(real.deploy);
    for (const removal of real.remove) {
      expect(after.instances.find((i) => i.id === removal.config_instance.id)?.target_status).toBe('removed');
    }
  });
});

/** An answer's head without the fields it passes on unchecked (ReportAnswer `fields`). */
function headOf(answer: ReportAnswer | undefined): Omit<ReportAnswer, 'fields'> {
  const { fields: _fields, ...head } = answer ?? ({} as ReportAnswer);
  return head;
}

describe('PATCH /v1/config_instances/{id} (extension: the agent status report)', () => {
  it('updates and returns the instance (merged status: error wins) and records every report in order', async () => {
    const first = await client.reportConfigInstanceStatus('cfg_r2_app_settings', {
      activity_status: 'deployed',
      error_status: 'none',
    });
    expect(first).toMatchObject({
      id: 'cfg_r2_app_settings',
      activity_status: 'deployed',
      error_status: 'none',
    });
    // The client reads an answer's head (id, statuses, updated_at); the instance it came from is the one listed.
    expect(await instance('cfg_r2_app_settings')).toMatchObject({ ...headOf(first), status: 'deployed' });
    const second = await client.reportConfigInstanceStatus('cfg_r2_camera_front', {
      activity_status: 'deployed',
      error_status: 'failed',
      message: 'write failed: ENOSPC',
    });
    expect(await instance('cfg_r2_camera_front')).toMatchObject({ ...headOf(second), status: 'failed' });

    expect(await contract.admin.reports()).toEqual([
      {
        config_instance_id: 'cfg_r2_app_settings',
        activity_status: 'deployed',
        error_status: 'none',
        received_at: NOW,
      },
      {
        config_instance_id: 'cfg_r2_camera_front',
        activity_status: 'deployed',
        error_status: 'failed',
        message: 'write failed: ENOSPC',
        received_at: NOW,
      },
    ]);
  });

  it('moves the deployment with its instances: all deployed → deployed, a failure wins, any queued → queued, all removed → archived', async () => {
    const deploymentId = 'dpl_gateway_01_v1_4_0';
    const members =
      (await client.getDeployment(deploymentId, { expand: ['config_instances'] })).config_instances ?? [];
    expect(members.length).toBeGreaterThan(1);
    const reportAll = async (activity_status: 'deployed' | 'removed') => {
      for (const m of members)
        await client.reportConfigInstanceStatus(m.id, { activity_status, error_status: 'none' });
    };

    await reportAll('deployed');
    expect(await client.getDeployment(deploymentId)).toMatchObject({
      activity_status: 'deployed',
      status: 'deployed',
    });

    const [one] = members;
    await client.reportConfigInstanceStatus(one!.id, { activity_status: 'deployed', error_status: 'failed' });
    expect(await client.getDeployment(deploymentId)).toMatchObject({
      activity_status: 'deployed',
      error_status: 'failed',
      status: 'failed',
    });

    await client.reportConfigInstanceStatus(one!.id, { activity_status: 'queued', error_status: 'none' });
    expect(await client.getDeployment(deploymentId)).toMatchObject({
      activity_status: 'queued',
      status: 'queued',
    });

    await reportAll('removed');
    expect(await client.getDeployment(deploymentId)).toMatchObject({
      activity_status: 'archived',
      status: 'archived',
    });
    expect((await contract.admin.reports()).length).toBe(2 * members.length + 2);
  });
});
