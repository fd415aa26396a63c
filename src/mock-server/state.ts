// The mock service's whole world in memory: records, the deploy and report operations, faults and counters.
import type { ActiveFault, AdminStats, FaultRequest, ReceivedReport } from '../api/admin-schemas.js';
import type {
  ConfigContent,
  ConfigInstanceActivityStatus,
  ConfigInstanceTargetStatus,
  ConfigSchemaRef,
  DeploymentActivityStatus,
  DeploymentTargetStatus,
  ErrorStatus,
  KnownRemoveCode,
  StatusReport,
} from '../api/schemas.js';
import { MockServiceError, notFound } from './errors.js';

export interface DeviceRecord {
  id: string;
  name: string;
  status: string;
  last_connected_at: string;
  last_disconnected_at: string;
  created_at: string;
  updated_at: string;
}

export interface ReleaseRecord {
  id: string;
  version: string;
  created_at: string;
  updated_at: string;
  config_schemas: ConfigSchemaRef[];
}

export interface ConfigInstanceRecord {
  id: string;
  device_id: string;
  relative_filepath: string;
  config_schema_id: string;
  config_type_id: string;
  target_status: ConfigInstanceTargetStatus;
  activity_status: ConfigInstanceActivityStatus;
  error_status: ErrorStatus;
  content: ConfigContent;
  created_at: string;
  updated_at: string;
}

export interface DeploymentRecord {
  id: string;
  description: string;
  device_id: string;
  /** The release's version label, as the spec defines the field. */
  release_id: string;
  target_status: DeploymentTargetStatus;
  activity_status: DeploymentActivityStatus;
  error_status: ErrorStatus;
  config_instance_ids: string[];
  created_at: string;
  updated_at: string;
}

export interface DeployRemovalRecord {
  code: KnownRemoveCode;
  explanation: string;
  instance: ConfigInstanceRecord;
}

export interface DeployOutcome {
  deploy: ConfigInstanceRecord;
  remove: DeployRemovalRecord[];
}

export interface NewConfigInstance {
  device_id: string;
  relative_filepath: string;
  content: ConfigContent;
  id?: string | undefined;
  config_schema_id?: string | undefined;
  config_type_id?: string | undefined;
  created_at?: string | undefined;
}

type InstanceStatusChange = Partial<
  Pick<ConfigInstanceRecord, 'target_status' | 'activity_status' | 'error_status'>
>;

/*
 * Deployment transitions (the spec shows none; these are the mock's choice). A deployment's statuses follow
 * its config instances and are recomputed whenever one of them changes:
 *   activity_status, first rule that applies:
 *     1. any instance activity `queued`                              → queued
 *     2. any instance target `removed` while its activity is `deployed` → removing (a file awaits deletion)
 *     3. every instance activity `deployed`                          → deployed
 *     4. every instance activity `removed`                           → archived
 *     5. every instance `deployed` or `removed`, at least one deployed → deployed
 *     6. any instance activity `validating`                          → validating
 *     7. otherwise (e.g. instances still `created`, or no instances)  → unchanged
 *   error_status: any instance `failed` → failed; else any `retrying` → retrying; else none.
 *   target_status: any instance target `deployed` → deployed; every instance target `removed` → archived;
 *     otherwise unchanged.
 * `status` is derived on output by the merge rule (an error wins over the activity).
 */
export function deriveDeployment(
  deployment: DeploymentRecord,
  instances: readonly ConfigInstanceRecord[],
): Pick<DeploymentRecord, 'activity_status' | 'error_status' | 'target_status'> {
  return {
    activity_status: deriveActivity(deployment.activity_status, instances),
    error_status: instances.some((i) => i.error_status === 'failed')
      ? 'failed'
      : instances.some((i) => i.error_status === 'retrying')
        ? 'retrying'
        : 'none',
    target_status: instances.some((i) => i.target_status === 'deployed')
      ? 'deployed'
      : instances.length > 0 && instances.every((i) => i.target_status === 'removed')
        ? 'archived'
        : deployment.target_status,
  };
}

function deriveActivity(
  current: DeploymentActivityStatus,
  instances: readonly ConfigInstanceRecord[],
): DeploymentActivityStatus {
  if (instances.length === 0) return current;
  const activities = instances.map((i) => i.activity_status);
  if (activities.includes('queued')) return 'queued';
  if (instances.some((i) => i.target_status === 'removed' && i.activity_status === 'deployed'))
    return 'removing';
  if (activities.every((a) => a === 'deployed')) return 'deployed';
  if (activities.every((a) => a === 'removed')) return 'archived';
  if (activities.every((a) => a === 'deployed' || a === 'removed')) return 'deployed';
  if (activities.includes('validating')) return 'validating';
  return current;
}

/** Default ids for instances created without them: the schema follows the path so that two created instances
 * conflict by schema only when they also share a path. */
export function defaultConfigSchemaId(relativeFilepath: string): string {
  return `cfs_${relativeFilepath.replace(/[^A-Za-z0-9]+/g, '_').replace(/^_+|_+$/g, '') || 'root'}`;
}

export function defaultConfigTypeId(relativeFilepath: string): string {
  const match = /\.([A-Za-z0-9]+)$/.exec(relativeFilepath);
  return `cft_${match?.[1]?.toLowerCase() ?? 'file'}`;
}

function byId<T extends { id: string }>(a: T, b: T): number {
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

export class MockState {
  readonly devices = new Map<string, DeviceRecord>();
  readonly releases = new Map<string, ReleaseRecord>();
  readonly instances = new Map<string, ConfigInstanceRecord>();
  readonly deployments = new Map<string, DeploymentRecord>();
  /** Every accepted status report, in arrival order. */
  readonly reports: ReceivedReport[] = [];
  /** Registered faults that still have matches left, in registration order (the first armed match wins). */
  readonly faults: ActiveFault[] = [];
  /** Requests per route key (`GET /v1/config_instances`), admin routes excluded. */
  readonly stats = new Map<string, number>();
  private faultSequence = 0;
  private instanceSequence = 0;

  // ---- reads ----

  instance(id: string): ConfigInstanceRecord {
    const record = this.instances.get(id);
    if (record === undefined) throw notFound('config instance', id);
    return record;
  }

  device(id: string): DeviceRecord {
    const record = this.devices.get(id);
    if (record === undefined) throw notFound('device', id);
    return record;
  }

  deployment(id: string): DeploymentRecord {
    const record = this.deployments.get(id);
    if (record === undefined) throw notFound('deployment', id);
    return record;
  }

  releaseByVersion(version: string): ReleaseRecord | undefined {
    for (const release of this.releases.values()) if (release.version === version) return release;
    return undefined;
  }

  // ---- operations of the service ----

  /**
   * Deploys an instance and queues every live instance of the same device that shares its file path or its
   * config schema for removal. With `dryRun` nothing changes, but the outcome is exactly the one a real deploy
   * at the same time would return.
   */
  deploy(id: string, options: { dryRun: boolean; at: string }): DeployOutcome {
    const target = this.instance(id);
    const deployed = withStatus(
      target,
      { target_status: 'deployed', activity_status: 'queued', error_status: 'none' },
      options.at,
    );
    const remove: DeployRemovalRecord[] = [];
    for (const other of [...this.instances.values()].sort(byId)) {
      if (other.id === id || other.device_id !== target.device_id) continue;
      const live =
        other.target_status === 'deployed' ||
        other.activity_status === 'queued' ||
        other.activity_status === 'deployed';
      if (!live) continue;
      let code: KnownRemoveCode;
      let explanation: string;
      if (other.relative_filepath === target.relative_filepath) {
        code = 'device_file_path_conflict';
        explanation =
          `config instance ${other.id} is queued for removal because config instance ${id} is deployed to ` +
          `the same file path ${JSON.stringify(target.relative_filepath)} on device ${target.device_id}`;
      } else if (other.config_schema_id === target.config_schema_id) {
        code = 'device_config_schema_conflict';
        explanation =
          `config instance ${other.id} is queued for removal because config instance ${id} is deployed with ` +
          `the same config schema ${target.config_schema_id} on device ${target.device_id}`;
      } else {
        continue;
      }
      remove.push({
        code,
        explanation,
        instance: withStatus(other, { target_status: 'removed' }, options.at),
      });
    }
    if (!options.dryRun) {
      this.instances.set(id, deployed);
      for (const removal of remove) this.instances.set(removal.instance.id, removal.instance);
      this.refreshDeployments([id, ...remove.map((r) => r.instance.id)], options.at);
    }
    return { deploy: deployed, remove };
  }

  /** Records the agent's status report (extension PATCH) and applies it to the instance and its deployments. */
  applyReport(id: string, report: StatusReport, at: string): ConfigInstanceRecord {
    const updated = withStatus(
      this.instance(id),
      { activity_status: report.activity_status, error_status: report.error_status },
      at,
    );
    this.instances.set(id, updated);
    this.reports.push({
      config_instance_id: id,
      activity_status: report.activity_status,
      error_status: report.error_status,
      ...(report.message === undefined ? {} : { message: report.message }),
      received_at: at,
    });
    this.refreshDeployments([id], at);
    return updated;
  }

  // ---- admin operations ----

  createInstance(request: NewConfigInstance, at: string): ConfigInstanceRecord {
    if (!this.devices.has(request.device_id)) {
      throw new MockServiceError(
        404,
        'not_found',
        `device_id: device ${JSON.stringify(request.device_id)} not found`,
        {
          field: 'device_id',
          id: request.device_id,
        },
      );
    }
    const id = request.id ?? this.nextInstanceId();
    if (this.instances.has(id)) {
      throw new MockServiceError(409, 'conflict', `config instance ${JSON.stringify(id)} already exists`, {
        field: 'id',
        id,
      });
    }
    const created_at = request.created_at ?? at;
    const record: ConfigInstanceRecord = {
      id,
      device_id: request.device_id,
      relative_filepath: request.relative_filepath,
      config_schema_id: request.config_schema_id ?? defaultConfigSchemaId(request.relative_filepath),
      config_type_id: request.config_type_id ?? defaultConfigTypeId(request.relative_filepath),
      target_status: 'created',
      activity_status: 'created',
      error_status: 'none',
      content: request.content,
      created_at,
      updated_at: created_at,
    };
    this.instances.set(id, record);
    return record;
  }

  /** Deletes an instance outright (mock `mutate` fault): it is no longer listed, as if purged on the service. */
  deleteInstance(id: string): void {
    this.instances.delete(id);
  }

  /** Sets an instance's target to `removed`, as an operator retiring it would. */
  removeInstance(id: string, at: string): ConfigInstanceRecord {
    const updated = withStatus(this.instance(id), { target_status: 'removed' }, at);
    this.instances.set(id, updated);
    this.refreshDeployments([id], at);
    return updated;
  }

  /** Recomputes the derived statuses of every deployment holding one of `instanceIds`. */
  refreshDeployments(instanceIds: readonly string[], at: string): void {
    const touched = new Set(instanceIds);
    for (const deployment of this.deployments.values()) {
      if (!deployment.config_instance_ids.some((id) => touched.has(id))) continue;
      const members = deployment.config_instance_ids
        .map((id) => this.instances.get(id))
        .filter((i): i is ConfigInstanceRecord => i !== undefined);
      const derived = deriveDeployment(deployment, members);
      if (
        derived.activity_status !== deployment.activity_status ||
        derived.error_status !== deployment.error_status ||
        derived.target_status !== deployment.target_status
      ) {
        this.deployments.set(deployment.id, { ...deployment, ...derived, updated_at: at });
      }
    }
  }

  // ---- faults ----

  addFault(request: FaultRequest): ActiveFault {
    this.faultSequence += 1;
    const fault: ActiveFault = {
      id: `flt_${this.faultSequence}`,
      ...request,
      remaining: request.count,
      ...(request.skip === undefined ? {} : { skip_remaining: request.skip }),
    };
    this.faults.push(fault);
    return { ...fault };
  }

  /**
   * Picks the faults for a request to `path`: the first registered fault matching it that skips no more
   * requests, and apart from it the first such `paging` fault (which only bends how a list page is cut, so it
   * applies together with a rewrite, mutate, slow... fault on the same request), consuming one of each one's
   * matches (exhausted faults are dropped). Every matching fault still skipping counts this request as one of
   * the ones it lets through.
   */
  takeFaults(path: string): { fault?: ActiveFault; paging?: ActiveFault } {
    let index = -1;
    let pagingIndex = -1;
    this.faults.forEach((fault, position) => {
      if (!new RegExp(fault.match).test(path)) return;
      if ((fault.skip_remaining ?? 0) > 0) fault.skip_remaining = (fault.skip_remaining ?? 0) - 1;
      else if (fault.mode === 'paging') {
        if (pagingIndex === -1) pagingIndex = position;
      } else if (index === -1) index = position;
    });
    const take = (at: number): ActiveFault | undefined => {
      const fault = this.faults[at];
      if (fault === undefined) return undefined;
      fault.remaining -= 1;
      return { ...fault };
    };
    const fault = take(index);
    const paging = take(pagingIndex);
    // Exhausted ones go, the later first so that the earlier's index still holds.
    for (const at of [index, pagingIndex].sort((a, b) => b - a)) {
      if (at !== -1 && (this.faults[at]?.remaining ?? 1) <= 0) this.faults.splice(at, 1);
    }
    return {
      ...(fault === undefined ? {} : { fault }),
      ...(paging === undefined ? {} : { paging }),
    };
  }

  clearFaults(): number {
    return this.faults.splice(0, this.faults.length).length;
  }

  // ---- counters ----

  countRequest(routeKey: string): void {
    this.stats.set(routeKey, (this.stats.get(routeKey) ?? 0) + 1);
  }

  statsSnapshot(): AdminStats {
    const requests: Record<string, number> = {};
    let total = 0;
    for (const [key, count] of [...this.stats].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
      requests[key] = count;
      total += count;
    }
    return { requests, total };
  }

  private nextInstanceId(): string {
    let id: string;
    do {
      this.instanceSequence += 1;
      id = `cfg_${String(this.instanceSequence).padStart(4, '0')}`;
    } while (this.instances.has(id));
    return id;
  }
}

/** The record with the given statuses; `updated_at` moves only when something actually changed. */
function withStatus(
  record: ConfigInstanceRecord,
  change: InstanceStatusChange,
  at: string,
): ConfigInstanceRecord {
  const next = { ...record, ...change };
  const changed =
    next.target_status !== record.target_status ||
    next.activity_status !== record.activity_status ||
    next.error_status !== record.error_status;
  return changed ? { ...next, updated_at: at } : record;
}
