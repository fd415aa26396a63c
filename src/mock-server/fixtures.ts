// The mock's fixtures file: validation that names the bad item and field, and loading into a MockState.
import { Fixtures } from '../api/admin-schemas.js';
import type { ConfigSchemaRef } from '../api/schemas.js';
import { AgentError } from '../lib/errors.js';
import { formatFieldPath } from '../lib/field-path.js';
import {
  type ConfigInstanceRecord,
  type DeploymentRecord,
  defaultConfigSchemaId,
  defaultConfigTypeId,
  deriveDeployment,
  MockState,
} from './state.js';

export type { Fixtures } from '../api/admin-schemas.js';

const COLLECTIONS = ['devices', 'releases', 'config_instances', 'deployments'] as const;

export class FixtureError extends AgentError {
  /** e.g. `config_instances[3] (id "cfg_x")`, or `fixtures` for the top level. */
  readonly item: string;
  /** e.g. `device_id`, `content.limits`; empty when the item as a whole is wrong. */
  readonly field: string;
  readonly problem: string;

  constructor(item: string, field: string, problem: string) {
    super('invalid_fixtures', `fixtures: ${item}${field === '' ? '' : ` field ${field}`}: ${problem}`, {
      retryable: false,
    });
    this.item = item;
    this.field = field;
    this.problem = problem;
  }
}

/** Validates a parsed fixtures file: shapes first, then that every id it refers to exists. */
export function parseFixtures(json: unknown): Fixtures {
  const result = Fixtures.safeParse(json);
  if (!result.success) {
    const issue = result.error.issues[0];
    if (issue === undefined) throw new FixtureError('fixtures', '', 'invalid');
    const [collection, index, ...rest] = issue.path;
    const unknownKeys = issue.code === 'unrecognized_keys' ? issue.keys.join(', ') : undefined;
    if (typeof collection === 'string' && typeof index === 'number') {
      const field = unknownKeys ?? formatFieldPath(rest);
      throw new FixtureError(
        itemName(json, collection, index),
        field,
        unknownKeys ? 'unknown field' : issue.message,
      );
    }
    const field = unknownKeys ?? formatFieldPath(issue.path);
    throw new FixtureError('fixtures', field, unknownKeys ? 'unknown field' : issue.message);
  }
  const fixtures = result.data;
  checkUniqueIds(fixtures);
  checkReferences(fixtures);
  return fixtures;
}

function itemName(json: unknown, collection: string, index: number): string {
  const items = (json as Record<string, unknown>)[collection];
  const item = Array.isArray(items) ? (items[index] as unknown) : undefined;
  const id = typeof item === 'object' && item !== null ? (item as { id?: unknown }).id : undefined;
  return typeof id === 'string'
    ? `${collection}[${index}] (id ${JSON.stringify(id)})`
    : `${collection}[${index}]`;
}

function named(collection: string, index: number, id: string): string {
  return `${collection}[${index}] (id ${JSON.stringify(id)})`;
}

function checkUniqueIds(fixtures: Fixtures): void {
  for (const collection of COLLECTIONS) {
    const seen = new Set<string>();
    (fixtures[collection] ?? []).forEach((item, index) => {
      if (seen.has(item.id)) throw new FixtureError(named(collection, index, item.id), 'id', 'duplicate id');
      seen.add(item.id);
    });
  }
  const versions = new Set<string>();
  (fixtures.releases ?? []).forEach((release, index) => {
    if (versions.has(release.version)) {
      throw new FixtureError(named('releases', index, release.id), 'version', 'duplicate version');
    }
    versions.add(release.version);
  });
}

function checkReferences(fixtures: Fixtures): void {
  const devices = new Set((fixtures.devices ?? []).map((d) => d.id));
  const versions = new Set((fixtures.releases ?? []).map((r) => r.version));
  const instanceDevice = new Map((fixtures.config_instances ?? []).map((i) => [i.id, i.device_id]));
  (fixtures.config_instances ?? []).forEach((instance, index) => {
    if (!devices.has(instance.device_id)) {
      throw new FixtureError(
        named('config_instances', index, instance.id),
        'device_id',
        `unknown device ${JSON.stringify(instance.device_id)}`,
      );
    }
  });
  (fixtures.deployments ?? []).forEach((deployment, index) => {
    const item = named('deployments', index, deployment.id);
    if (!devices.has(deployment.device_id)) {
      throw new FixtureError(item, 'device_id', `unknown device ${JSON.stringify(deployment.device_id)}`);
    }
    if (!versions.has(deployment.release_id)) {
      throw new FixtureError(
        item,
        'release_id',
        `no release has version ${JSON.stringify(deployment.release_id)} (release_id holds a version label)`,
      );
    }
    (deployment.config_instance_ids ?? []).forEach((id, k) => {
      const device = instanceDevice.get(id);
      if (device === undefined) {
        throw new FixtureError(
          item,
          `config_instance_ids[${k}]`,
          `unknown config instance ${JSON.stringify(id)}`,
        );
      }
      if (device !== deployment.device_id) {
        throw new FixtureError(
          item,
          `config_instance_ids[${k}]`,
          `config instance ${JSON.stringify(id)} belongs to device ${device}, not ${deployment.device_id}`,
        );
      }
    });
  });
}

/** A new state holding the fixtures; missing timestamps become `at`, missing statuses the initial ones. */
export function stateFromFixtures(input: Fixtures, at: string): MockState {
  const fixtures = parseFixtures(input);
  const state = new MockState();
  for (const d of fixtures.devices ?? []) {
    const created_at = d.created_at ?? at;
    state.devices.set(d.id, {
      id: d.id,
      name: d.name ?? d.id,
      status: d.status ?? 'offline',
      last_connected_at: d.last_connected_at ?? created_at,
      last_disconnected_at: d.last_disconnected_at ?? created_at,
      created_at,
      updated_at: d.updated_at ?? created_at,
    });
  }
  for (const r of fixtures.releases ?? []) {
    const created_at = r.created_at ?? at;
    const config_schemas: ConfigSchemaRef[] = (r.config_schemas ?? []).map((schema) =>
      typeof schema === 'string'
        ? { object: 'config_schema', id: schema }
        : { ...schema, object: 'config_schema', id: schema.id },
    );
    state.releases.set(r.id, {
      id: r.id,
      version: r.version,
      created_at,
      updated_at: r.updated_at ?? created_at,
      config_schemas,
    });
  }
  for (const i of fixtures.config_instances ?? []) {
    const created_at = i.created_at ?? at;
    const record: ConfigInstanceRecord = {
      id: i.id,
      device_id: i.device_id,
      relative_filepath: i.relative_filepath,
      config_schema_id: i.config_schema_id ?? defaultConfigSchemaId(i.relative_filepath),
      config_type_id: i.config_type_id ?? defaultConfigTypeId(i.relative_filepath),
      target_status: i.target_status ?? 'created',
      activity_status: i.activity_status ?? 'created',
      error_status: i.error_status ?? 'none',
      content: i.content,
      created_at,
      updated_at: i.updated_at ?? created_at,
    };
    state.instances.set(i.id, record);
  }
  for (const d of fixtures.deployments ?? []) {
    const created_at = d.created_at ?? at;
    const config_instance_ids = d.config_instance_ids ?? [];
    const initial: DeploymentRecord = {
      id: d.id,
      description: d.description ?? '',
      device_id: d.device_id,
      release_id: d.release_id,
      target_status: 'pending',
      activity_status: 'pending',
      error_status: 'none',
      config_instance_ids,
      created_at,
      updated_at: d.updated_at ?? created_at,
    };
    const members = config_instance_ids.map((id) => state.instance(id));
    // Statuses the file leaves out follow the instances, as they will after every later change.
    const derived = deriveDeployment(initial, members);
    state.deployments.set(d.id, {
      ...initial,
      target_status: d.target_status ?? derived.target_status,
      activity_status: d.activity_status ?? derived.activity_status,
      error_status: d.error_status ?? derived.error_status,
    });
  }
  return state;
}
