// Pull: the query set of a pass, paged (api/pager.ts); escalation from incremental to full; the owners a poll
// did not fetch.
import type { ServiceClient } from '../api/client.js';
import type { ItemWire, KnownItems } from '../api/list-page.js';
import {
  type InvalidListItem,
  type PullResult,
  pullConfigInstances,
  type SkippedListItem,
} from '../api/pager.js';
import { type RequestRetryOptions, withRequestRetry } from '../api/retry.js';
import type { ConfigInstance, ConfigInstanceFilters, ConfigInstanceHead } from '../api/schemas.js';
import type { Clock } from '../lib/clock.js';
import type { Logger } from '../lib/logger.js';
import { foldKey } from '../store/path-aliases.js';
import type { ManagedFile } from '../store/state.js';
import type { PassMode } from './pass-runner.js';
import type { ToldItems } from './told-items.js';

export interface PullContext<I extends ConfigInstanceHead = ConfigInstance> {
  client: ServiceClient;
  deviceId: string;
  /** The files the agent recorded writing: who owns each path it may have to decide about. */
  files: ReadonlyMap<string, ManagedFile>;
  retry: RequestRetryOptions;
  logger: Logger;
  /** The pull's deadline runs on it. */
  clock: Clock;
  /** The client's response cap, for the pull's byte budget. */
  maxResponseBytes?: number;
  /**
   * What each instance is turned into as its page arrives (api/pager.ts); the instance as parsed without.
   * `wire.known`: its content was not checked, only the recorded file may be used (api/list-page.ts).
   */
  prepare?: (instance: ConfigInstance, wire?: ItemWire) => I | Promise<I>;
  /** Items judged valid before (store/fingerprints.ts): taken without checking their content again. */
  knownItems?: KnownItems;
  /** What this process already logged of unusable items (told-items.ts): each is told at its level once. */
  told?: ToldItems;
  signal?: AbortSignal;
}

export interface Pulled<I extends ConfigInstanceHead = ConfigInstance> {
  /** At most one per id, all of this device. */
  instances: I[];
  /** `full` when an incremental pull had to escalate. */
  mode: PassMode;
  /** Items the agent cannot accept (reported `failed` when their id is readable). */
  invalid: InvalidListItem[];
  /** Items with a status value the agent does not know: not acted on. */
  skipped: SkippedListItem[];
  /** Why the listing may have left instances out (pager.ts `PullResult.incomplete`). */
  incomplete?: string;
}

/**
 * A poll that would remove a recorded file becomes a full pull: whether anyone else still wants a path can
 * only be told from every instance targeting `deployed`. Otherwise a poll fetches the recorded owner of every
 * path its instances want, so a newcomer is never given a path it should be refused.
 */
export async function pullInstances<I extends ConfigInstanceHead = ConfigInstance>(
  mode: PassMode,
  ctx: PullContext<I>,
): Promise<Pulled<I>> {
  const listed = await listInstances(queriesFor(mode, ctx.deviceId), ctx, mode);
  const { instances } = listed;
  if (mode === 'full') return { ...listed, mode };
  if (
    instances.some((i) => i.target_status !== 'deployed' && ctx.files.has(i.relative_filepath)) ||
    respellsRecordedPath(instances, ctx.files)
  ) {
    return { ...(await listInstances(queriesFor('full', ctx.deviceId), ctx, 'full')), mode: 'full' };
  }
  const owners = await fetchUnpulledOwners(instances, ctx);
  return {
    instances: [...instances, ...owners.instances],
    invalid: [...listed.invalid, ...owners.invalid],
    skipped: [...listed.skipped, ...owners.skipped],
    mode,
  };
}

/**
 * Whether an instance wants a path that spells a recorded path otherwise (`etc/App.json` beside a recorded
 * `etc/app.json`): on a case-insensitive root that is the recorded file, whose instance the poll did not pull,
 * so only a full pull can tell which of the two wins it (plan.ts). Costs a fold of every recorded path only
 * when a pulled path is not recorded as it is spelled.
 */
function respellsRecordedPath(
  instances: readonly ConfigInstanceHead[],
  files: ReadonlyMap<string, ManagedFile>,
): boolean {
  const wanted = new Set<string>();
  for (const instance of instances) {
    if (!files.has(instance.relative_filepath)) wanted.add(foldKey(instance.relative_filepath));
  }
  if (wanted.size === 0) return false;
  for (const recorded of files.keys()) {
    if (wanted.has(foldKey(recorded))) return true;
  }
  return false;
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

/**
 * The pager does the paging, its bounds and its retries (one layer: withRequestRetry per page). A full pull
 * lists the device's whole listing once and keeps what its seven queries would give (api/pager.ts `wide`): one
 * request instead of seven for a device with up to 100 instances, and each instance listed once, not twice, on a
 * first sync. A device whose listing is mostly history gets the seven queries instead.
 */
async function listInstances<I extends ConfigInstanceHead>(
  queries: readonly ConfigInstanceFilters[],
  ctx: PullContext<I>,
  mode: PassMode | 'owners' = 'owners',
): Promise<PullResult<I>> {
  const pulled = await pullConfigInstances<I>(queries, {
    ...(mode === 'full' ? { wide: { device_id: ctx.deviceId } } : {}),
    client: ctx.client,
    clock: ctx.clock,
    logger: ctx.logger,
    ...(ctx.told === undefined ? {} : { tellOnce: told(ctx.told) }),
    retry: (what, request, signal) => withRequestRetry(what, request, { ...ctx.retry, signal }),
    ...(ctx.maxResponseBytes === undefined ? {} : { maxResponseBytes: ctx.maxResponseBytes }),
    ...(ctx.prepare === undefined ? {} : { prepare: ctx.prepare }),
    ...(ctx.knownItems === undefined ? {} : { knownItems: knownItemsFor(mode, ctx.knownItems) }),
    ...(ctx.signal === undefined ? {} : { signal: ctx.signal }),
  });
  // Told at their level once per process (ToldItems), at debug while the service keeps listing them so.
  for (const item of pulled.skipped) {
    const said = `${item.unknown.field} ${JSON.stringify(item.unknown.value)}`;
    const level = ctx.told?.firstTime(item.id, said) === false ? 'debug' : 'warn';
    ctx.logger[level](
      { instanceId: item.id, path: item.relativeFilepath, [item.unknown.field]: item.unknown.value },
      `instance skipped: its ${said} is not a value this agent knows`,
    );
  }
  for (const item of pulled.invalid) {
    const key = item.id ?? `(unnamed) ${item.problem}`;
    const level = ctx.told?.firstTime(key, item.problem) === false ? 'debug' : 'error';
    ctx.logger[level](
      { instanceId: item.id, problem: item.problem },
      'the service sent an instance this agent cannot accept',
    );
  }
  const foreign: string[] = [];
  const kept = {
    instances: ofThisDevice(pulled.instances, ctx.deviceId, foreign, (instance) => instance),
    invalid: ofThisDevice(pulled.invalid, ctx.deviceId, foreign, (item) => ({
      id: item.id,
      device_id: item.deviceId,
    })),
    skipped: ofThisDevice(pulled.skipped, ctx.deviceId, foreign, (item) => ({
      id: item.id,
      device_id: item.deviceId,
    })),
  };
  if (foreign.length > 0) tellForeign(foreign, ctx);
  return { ...kept, ...(pulled.incomplete === undefined ? {} : { incomplete: pulled.incomplete }) };
}

/** The pager's warnings about how the service answers, told once per process and cause (ToldItems). */
function told(items: ToldItems): (cause: string, what: string) => boolean {
  return (cause, what) => items.firstTime(cause, what);
}

/** How many of the other devices' instance ids the line about them names. */
const FOREIGN_IDS_NAMED = 10;

/**
 * One line per listing for the other devices' instances in it, at `error` the first time this process sees that
 * listing of them (ToldItems), at `debug` while the service keeps sending the same. A line each, at `error` on
 * every poll, was a service that ignores the `device_id` filter (the fleet's whole listing): 500 lines a poll from
 * 500 instances of other devices (adv35).
 */
function tellForeign(foreign: readonly string[], ctx: { logger: Logger; told?: ToldItems }): void {
  const said = `${foreign.length} ${foreign[0]} ${foreign[foreign.length - 1]}`;
  const level = ctx.told?.firstTime('(instances of another device)', said) === false ? 'debug' : 'error';
  ctx.logger[level](
    { count: foreign.length, instanceIds: foreign.slice(0, FOREIGN_IDS_NAMED) },
    `service returned ${foreign.length} instance(s) of another device: ignored`,
  );
}

/**
 * Pages are known only in full pulls, the listing an idle `--once` repeats: a poll's pages hold what changed, and
 * recording them would rewrite the fingerprints on every poll (they are kept until the next full pull's end).
 */
function knownItemsFor(mode: PassMode | 'owners', known: KnownItems): KnownItems {
  if (mode === 'full' || known.pages === undefined) return known;
  return { lookup: (id, key, length) => known.lookup(id, key, length) };
}

/**
 * Defence in depth: a server bug must not make this device write (or delete) another device's files, nor
 * report another device's broken items `failed`, nor let them hold a path. An item whose device is unreadable
 * was listed for this device's id: it stays.
 */
function ofThisDevice<T>(
  items: readonly T[],
  deviceId: string,
  foreign: string[],
  head: (item: T) => { id?: string | undefined; device_id?: string | undefined },
): T[] {
  return items.filter((item) => {
    const { id, device_id } = head(item);
    if (device_id === undefined || device_id === deviceId) return true;
    foreign.push(id ?? '(no id)');
    return false;
  });
}

/** One small request per recorded owner a poll did not fetch, and only while a conflict is open. */
async function fetchUnpulledOwners<I extends ConfigInstanceHead>(
  instances: readonly I[],
  ctx: PullContext<I>,
): Promise<PullResult<I>> {
  const pulled = new Set(instances.map((instance) => instance.id));
  const owners = new Set<string>();
  for (const instance of instances) {
    const owner = ctx.files.get(instance.relative_filepath)?.instanceId;
    if (owner !== undefined && owner !== instance.id && !pulled.has(owner)) owners.add(owner);
  }
  if (owners.size === 0) return { instances: [], invalid: [], skipped: [] };
  const fetched = await listInstances(
    [...owners].map((id) => ({ device_id: ctx.deviceId, id })),
    ctx,
  );
  // Only what was asked for: another instance in the answer (a broken service) would be a second copy of one
  // the poll listed, and both would be acted on (a file written at each copy's path).
  const asked = (id: string | undefined) => id === undefined || owners.has(id);
  const stray = fetched.instances.filter((instance) => !asked(instance.id));
  if (stray.length > 0) {
    ctx.logger.error(
      { instanceIds: stray.map((instance) => instance.id) },
      'service answered a fetch by id with other instances: ignored',
    );
  }
  return {
    instances: fetched.instances.filter((instance) => asked(instance.id)),
    invalid: fetched.invalid.filter((item) => asked(item.id)),
    skipped: fetched.skipped.filter((item) => asked(item.id)),
  };
}
