// Records → wire objects: derived fields (`object`, merged `status`) and expansions, null unless asked for.
import {
  type ConfigInstance,
  type ConfigInstanceListExpand,
  type Deployment,
  type DeploymentExpand,
  type Device,
  mergeStatus,
  type Release,
} from '../api/schemas.js';
import type {
  ConfigInstanceRecord,
  DeploymentRecord,
  DeviceRecord,
  MockState,
  ReleaseRecord,
} from './state.js';

/** What an instance's expansions can hold: a list's `expand[]` but `total_count`, which belongs to the envelope. */
export type InstanceExpand = Exclude<ConfigInstanceListExpand, 'total_count'>;

export function deviceView(record: DeviceRecord): Device {
  return { object: 'device', ...record };
}

export function releaseView(record: ReleaseRecord): Release {
  return { object: 'release', ...record, config_schemas: record.config_schemas.map((s) => ({ ...s })) };
}

export function instanceView(
  record: ConfigInstanceRecord,
  state: MockState,
  expand: ReadonlySet<InstanceExpand> = new Set(),
): ConfigInstance {
  const device = expand.has('device') ? state.devices.get(record.device_id) : undefined;
  return {
    object: 'config_instance',
    id: record.id,
    target_status: record.target_status,
    activity_status: record.activity_status,
    error_status: record.error_status,
    status: mergeStatus(record.activity_status, record.error_status),
    relative_filepath: record.relative_filepath,
    created_at: record.created_at,
    updated_at: record.updated_at,
    device_id: record.device_id,
    config_schema_id: record.config_schema_id,
    config_type_id: record.config_type_id,
    device: device === undefined ? null : deviceView(device),
    // The spec shows no fields of schemas and types beyond their ids.
    config_schema: expand.has('config_schema')
      ? { object: 'config_schema', id: record.config_schema_id }
      : null,
    config_type: expand.has('config_type') ? { object: 'config_type', id: record.config_type_id } : null,
    content: record.content,
  };
}

export function deploymentView(
  record: DeploymentRecord,
  state: MockState,
  expand: ReadonlySet<DeploymentExpand> = new Set(),
): Deployment {
  const device = expand.has('device') ? state.devices.get(record.device_id) : undefined;
  const release = expand.has('release') ? state.releaseByVersion(record.release_id) : undefined;
  return {
    object: 'deployment',
    id: record.id,
    description: record.description,
    status: mergeStatus(record.activity_status, record.error_status),
    activity_status: record.activity_status,
    error_status: record.error_status,
    target_status: record.target_status,
    device_id: record.device_id,
    release_id: record.release_id,
    created_at: record.created_at,
    updated_at: record.updated_at,
    device: device === undefined ? null : deviceView(device),
    release: release === undefined ? null : releaseView(release),
    config_instances: expand.has('config_instances')
      ? record.config_instance_ids
          .map((id) => state.instances.get(id))
          .filter((i): i is ConfigInstanceRecord => i !== undefined)
          .map((i) => instanceView(i, state))
      : null,
  };
}
