// Pull: the query set of a pass, paged; escalation from incremental to full; the owners a poll did not fetch.
import type { ServiceClient } from '../api/client.js';
import { type RequestRetryOptions, withRequestRetry } from '../api/retry.js';
import type { ConfigInstance, ConfigInstanceFilters } from '../api/schemas.js';
import type { Logger } from '../lib/logger.js';
import type { ManagedFile } from '../store/state.js';
import type { PassMode } from './pass-runner.js';

const PAGE_LIMIT = 100;

export interface PullContext {
  client: ServiceClient;
  deviceId: string;
  /** The files the agent recorded writing: who owns each path it may have to decide about. */
  files: ReadonlyMap<string, ManagedFile>;
  retry: RequestRetryOptions;
  logger: Logger;
  signal?: AbortSignal;
}

export interface Pulled {
  /** At most one per id, all of this device. */
  instances: ConfigInstance[];
  /** `full` when an incremental pull had to escalate. */
  mode: PassMode;
}

/**
 * A poll that would remove a recorded file becomes a full pull: whether anyone else still wants a path can
 * only be told from every instance targeting `deployed`. Otherwise a poll fetches the recorded owner of every
 * path its instances want, so a newcomer is never given a path it should be refused.
 */
export async function pullInstances(mode: PassMode, ctx: PullContext): Promise<Pulled> {
  const instances = await listInstances(queriesFor(mode, ctx.deviceId), ctx);
  if (mode === 'full') return { instances, mode };
  if (instances.some((i) => i.target_status !== 'deployed' && ctx.files.has(i.relative_filepath))) {
    return { instances: await listInstances(queriesFor('full', ctx.deviceId), ctx), mode: 'full' };
  }
  return { instances: [...instances, ...(await fetchUnpulledOwners(instances, ctx))], mode };
}

/** `full` asks for every instance targeting `deployed`; both ask for what changed. */
export function queriesFor(mode: PassMode, deviceId: string): ConfigInstanceFilters[] {
  const device = { device_id: deviceId };
  const changed: ConfigInstanceFilters[] = [
    { ...device, activity_status: 'queued' },
    { ...device, target_status: 'removed', activity_status: 'deployed' },
  ];
  if (mode === 'incremental') return changed;
  return [
    { ...device, target_status: 'deployed' },
    ...changed,
    // Rarer cases, asked only on full passes: a file to remove whose target went back to `created`, and
    // removals of instances the device never received (archived without touching the disk).
    { ...device, target_status: 'created', activity_status: 'deployed' },
    ...(['created', 'validating', 'validated'] as const).map((activity) => ({
      ...device,
      target_status: 'removed' as const,
      activity_status: activity,
    })),
  ];
}

async function listInstances(
  queries: readonly ConfigInstanceFilters[],
  ctx: PullContext,
): Promise<ConfigInstance[]> {
  const byId = new Map<string, ConfigInstance>();
  for (const filters of queries) {
    const page = await withRequestRetry(
      'list config instances',
      async () => {
        const items: ConfigInstance[] = [];
        const iterator = ctx.client.iterateConfigInstances(filters, {
          limit: PAGE_LIMIT,
          orderBy: 'id:asc',
          ...(ctx.signal === undefined ? {} : { signal: ctx.signal }),
        });
        for await (const instance of iterator) items.push(instance);
        return items;
      },
      ctx.retry,
    );
    for (const instance of ofThisDevice(page, ctx))
      if (!byId.has(instance.id)) byId.set(instance.id, instance);
  }
  return [...byId.values()];
}

/** Defence in depth: a server bug must not make this device write (or delete) another device's files. */
function ofThisDevice(instances: readonly ConfigInstance[], ctx: PullContext): ConfigInstance[] {
  return instances.filter((instance) => {
    if (instance.device_id === ctx.deviceId) return true;
    ctx.logger.error({ instanceId: instance.id }, 'service returned an instance of another device: ignored');
    return false;
  });
}

/** One small request per recorded owner a poll did not fetch, and only while a conflict is open. */
async function fetchUnpulledOwners(
  instances: readonly ConfigInstance[],
  ctx: PullContext,
): Promise<ConfigInstance[]> {
  const pulled = new Set(instances.map((instance) => instance.id));
  const owners = new Set<string>();
  for (const instance of instances) {
    const owner = ctx.files.get(instance.relative_filepath)?.instanceId;
    if (owner !== undefined && owner !== instance.id && !pulled.has(owner)) owners.add(owner);
  }
  const fetched: ConfigInstance[] = [];
  for (const id of owners) {
    const found = await withRequestRetry(
      'get the owner of a path',
      () =>
        ctx.client.listConfigInstances(
          { device_id: ctx.deviceId, id },
          ctx.signal === undefined ? {} : { signal: ctx.signal },
        ),
      ctx.retry,
    );
    fetched.push(...ofThisDevice(found.data, ctx));
  }
  return fetched;
}
