// The planner: a pure function of (server instances, local state, disk observation) returning the steps.

import { newestFirst, sameInstant } from '../api/instant.js';
import {
  type ConfigInstance,
  type ConfigInstanceActivityStatus,
  type ConfigInstanceHead,
  type ErrorStatus,
  STATUS_MESSAGE_MAX,
  type StatusReport,
} from '../api/schemas.js';
import { errorMessage } from '../lib/errors.js';
import { sha256Hex } from '../lib/hash.js';
import { foldKey } from '../store/path-aliases.js';
import { validateRelativePath } from '../store/path-guard.js';
import type { LocalState } from '../store/state.js';
import { serializeContent } from './serialize.js';

/** What the agent saw at a path before planning. */
export type DiskObservation =
  | { kind: 'file'; sha256: string; mode: number; gid?: number }
  | { kind: 'absent' }
  /** Not a regular file, or reached through a symlink: never written through, never deleted. */
  | { kind: 'rejected'; reason: string }
  /** Could not be read (EACCES, EIO, ...): the write or removal is attempted and may fail and retry. */
  | { kind: 'unreadable'; reason: string };

/**
 * The bytes an instance's content serializes to (serialize.ts), and their sha256. No `data`: the bytes were set
 * aside in the content cache under `sha256` as they arrived (spill.ts), and are read back when written.
 */
export interface InstanceFile {
  data?: Buffer;
  sha256: string;
  /** The file's length, when its bytes were set aside (no `data`): apply bounds the bytes it reads back at once. */
  size?: number;
  /**
   * No `data` and nothing set aside: the item was known by its exact text (api/list-page.ts KnownItems), so its
   * file's sha256 and size were recorded and its bytes not made. This is that text: a pass whose plan writes
   * the file judges it in full and makes the bytes from it, then plans again (reconcile/pass.ts).
   */
  wire?: string;
}

/**
 * An instance as the planner takes it: with its content, or with the bytes that content serializes to. A pass
 * serializes each instance as its page arrives and keeps only the bytes (pull.ts `instanceFile`): the parsed
 * content of a large listing is never held whole next to its bytes.
 */
export type PlanInstance = ConfigInstance | (ConfigInstanceHead & { file: InstanceFile });

/** The report still queued for an instance, if any. */
export type ReportLookup = Pick<ReadonlyMap<string, StatusReport>, 'get'>;

export interface PlanInput {
  /** The instances pulled from the service, at most one per id. */
  instances: readonly PlanInstance[];
  local: Readonly<Pick<LocalState, 'files' | 'cooldowns'>> & {
    /** The last status recorded per instance: a repeated error report is due only when its message changed. */
    instances?: LocalState['instances'];
  };
  /** The report queued and not yet delivered per instance: a newer status must supersede it. */
  pendingReports?: ReportLookup;
  /** Keyed by relative path; a path missing from the map is treated as absent. */
  disk: ReadonlyMap<string, DiskObservation>;
  /** Monotonic now, compared with cooldown deadlines. */
  now: number;
  fileMode: number;
  /** files.rules resolved: the mode and group each path should have; absent: fileMode, any group. */
  fileMeta?: (path: string) => { mode: number; gid: number };
  /**
   * Whether a managed file changed by someone else (its instance's content unchanged) is rewritten. False
   * under the `report` and `off` drift policies: the operator keeps the local edit until the content changes.
   */
  restoreDrift?: boolean;
  /**
   * Whether `instances` holds every instance that targets `deployed` (a full pass). Only then may the planner
   * conclude that nobody wants a path.
   */
  complete: boolean;
  /**
   * Per instance, the `updated_at` the agent's own last report produced and the operator's `updated_at`
   * before it: "the one updated last wins" compares operators' updates, never the agent's reports.
   */
  reportEchoes?: ReadonlyMap<string, { updatedAt: string; operatorUpdatedAt: string }>;
  /**
   * Paths that name one file on disk (store/path-aliases.ts: a case-insensitive filesystem, a directory mounted
   * twice), each mapped to a key its aliases share; a path not in the map names a file of its own.
   */
  aliases?: ReadonlyMap<string, string>;
  /**
   * Per retired instance the service still shows `deployed`, its file in the agent's former root (a rootDir truly
   * moved: store/former-root.ts): where it is and whether the agent's bytes are still there. Never deleted (it is
   * outside rootDir): reported `retrying`, naming it, while they are.
   */
  formerRoot?: ReadonlyMap<string, { at: string; present: boolean }>;
}

export interface WriteStep {
  kind: 'write';
  instance: ConfigInstanceHead;
  path: string;
  /**
   * The bytes to write; absent: in the content cache under `sha256` (set aside by the pull, spill.ts). Undefined
   * once the step was applied: the pass lets the bytes go then (pass.ts `releaseWrittenBytes`).
   */
  data?: Buffer | undefined;
  sha256: string;
  /** The length of bytes set aside, when known (spill.ts). */
  size?: number;
  /** metadata: the bytes are right, only the mode or group the configuration wants changed (no rewrite). */
  reason: 'new' | 'changed' | 'drift' | 'adopt' | 'metadata';
  /** Mode and group of the file (files.rules); absent mode: the apply context's fileMode. */
  mode?: number;
  gid?: number;
  /** Instances removed to make room for this one (same config schema elsewhere): restored if the write fails. */
  displaces: readonly RemoveStep[];
  /** Instances whose file at this same path this write takes over: reported `removed` once it succeeds. */
  supersedes: readonly { instance: ConfigInstanceHead; report: StatusReport | undefined }[];
  /** The report due once the file is in place; undefined when the service already holds `deployed`. */
  report: StatusReport | undefined;
}

export interface RemoveStep {
  kind: 'remove';
  instance: ConfigInstanceHead;
  path: string;
  /** The report due once the file is gone; undefined when the service already holds `removed`. */
  report: StatusReport | undefined;
  /**
   * A file recorded as this instance's at a path it has left (the service lists it at another one): removed
   * without a report or a change to the instance's own status, which belong to its current path.
   */
  leftPath?: true;
  /**
   * The path names the same file as this one, which an instance targeting `deployed` is listed at: the file is
   * left in place and only this path's record goes (an unlink would delete that instance's file).
   */
  aliasOf?: { path: string; instanceId: string };
  /**
   * With `leftPath`: the file of an instance refused at a nested path conflict (PathNesting), removed so that the
   * instance updated last, at `path`, can be written: one of the two paths is a directory of the other.
   */
  makesWayFor?: { path: string; instanceId: string };
  /** Directories the agent made for other files removed with this one, pruned with its own once empty. */
  pruneWith?: readonly string[];
}

/** Why a file is left as it is, with nothing to report. */
export type KeepReason =
  /** Changed on disk by someone else, and the drift policy is not `restore`. */
  | 'drift_kept'
  /** Its path (or config schema) belongs to a new instance whose file is not in place yet. */
  | 'awaiting_owner';

export type Step =
  | WriteStep
  | RemoveStep
  /** A status change with no disk change (archive, already in place, ownership moved to another instance). */
  | { kind: 'report'; instance: ConfigInstanceHead; report: StatusReport | undefined; reason: ReportReason }
  /**
   * The file is in place as recorded: nothing to do but confirm `deployed` if the service lacks it. `recordSize`:
   * its length, for a record made before lengths were kept (ManagedFile.size), so later checks need not read it.
   */
  | { kind: 'confirm'; instance: ConfigInstanceHead; report: StatusReport | undefined; recordSize?: number }
  /** The file stays as it is and nothing is reported. */
  | { kind: 'keep'; instance: ConfigInstanceHead; reason: KeepReason }
  /** `error_status=failed` on the service: never touched again. */
  | { kind: 'skip'; instance: ConfigInstanceHead }
  /** A permanent problem (hostile path): reported `failed` at once, never retried. */
  | { kind: 'fail'; instance: ConfigInstanceHead; message: string }
  /**
   * Two instances want one path, or two paths naming one file: the loser is reported `retrying` and nothing of
   * it is written. `forgetFile`: its record at that path goes (the file is the winner's; deleting it when the
   * loser retires, or the drift watcher restoring the loser's bytes there, would undo the winner's).
   */
  | { kind: 'refuse'; instance: ConfigInstanceHead; message: string; forgetFile?: string }
  | { kind: 'wait'; instance: ConfigInstanceHead; until: number };

export type ReportReason =
  | 'archive'
  | 'already_in_place'
  | 'replaced_by_owner'
  | 'not_ours'
  | 'gone_from_former_root';

export type StepKind = Step['kind'];

export function planSteps(input: PlanInput): Step[] {
  const due = (instance: PlanInstance, report: StatusReport) => dueReport(instance, report, input);
  const skipped: Step[] = [];
  const active: PlanInstance[] = [];
  for (const instance of input.instances) {
    if (instance.error_status === 'failed') skipped.push({ kind: 'skip', instance });
    else active.push(instance);
  }

  const pathProblems = new Map<string, string>();
  for (const instance of active) {
    const problem = pathProblem(instance.relative_filepath);
    if (problem !== undefined) pathProblems.set(instance.id, problem);
  }
  const fileKey = (path: string): string => input.aliases?.get(path) ?? path;
  const winnerByPath = pathWinners(active, pathProblems, input, fileKey);
  const nestedLosers = nestingLosers(winnerByPath, input);
  const claimedPaths = new Set(
    input.instances
      .filter((instance) => instance.target_status === 'deployed')
      .map((i) => i.relative_filepath),
  );
  const claimedAlias = claimedAliases(input, claimedPaths);

  const others: Step[] = [];
  /** Writes as planned for instances targeting `deployed`; their swaps and takeovers are added below. */
  const writeById = new Map<string, Omit<WriteStep, 'displaces' | 'supersedes'>>();
  const removals: PlanInstance[] = [];
  const refusedNested: { instance: PlanInstance; winner: PlanInstance }[] = [];

  // Phase 1: instances that target `deployed`, so phase 2 knows which paths get a new owner in this pass.
  for (const instance of active) {
    const problem = pathProblems.get(instance.id);
    const cooldownUntil = input.local.cooldowns.get(instance.id);
    if (cooldownUntil !== undefined && cooldownUntil > input.now) {
      others.push({ kind: 'wait', instance, until: cooldownUntil });
    } else if (instance.target_status !== 'deployed') {
      removals.push(instance);
    } else if (problem !== undefined) {
      others.push({ kind: 'fail', instance, message: problem });
    } else {
      const winner = winnerByPath.get(fileKey(instance.relative_filepath))!;
      if (winner.id !== instance.id) {
        const path = JSON.stringify(instance.relative_filepath);
        if (winner.relative_filepath === instance.relative_filepath) {
          const message = `path conflict: ${path} is also targeted by ${winner.id}, updated later; ${instance.id} is not written`;
          others.push({ kind: 'refuse', instance, message });
          continue;
        }
        const message = aliasConflictMessage(instance, winner.relative_filepath, winner.id);
        const recorded = input.local.files.get(instance.relative_filepath)?.instanceId === instance.id;
        others.push({
          kind: 'refuse',
          instance,
          message,
          ...(recorded ? { forgetFile: instance.relative_filepath } : {}),
        });
        continue;
      }
      const nestedWinner = nestedLosers.get(instance.id);
      if (nestedWinner !== undefined) {
        refusedNested.push({ instance, winner: nestedWinner });
        continue;
      }
      const step = planDeployed(instance, input);
      if (step.kind === 'write') writeById.set(instance.id, step);
      else others.push(step);
    }
  }
  const nestedRemoves = refuseNested(refusedNested, writeById, input, others);

  // Phase 2: target removed or created (or anything not `deployed`): the file goes, if it is ours to remove.
  const supersedes = new Map<string, { instance: PlanInstance; report: StatusReport | undefined }[]>();
  const removes: RemoveStep[] = [];
  const facts: RemovalFacts = { input, pathProblems, winnerByPath, claimedPaths, claimedAlias, writeById };
  for (const instance of removals) {
    const planned = planRemoval(instance, facts);
    if (planned === undefined) continue;
    if ('takeoverBy' in planned) {
      const list = supersedes.get(planned.takeoverBy) ?? [];
      list.push({ instance, report: due(instance, removedReport()) });
      supersedes.set(planned.takeoverBy, list);
    } else if (planned.kind === 'remove') removes.push(planned);
    else others.push(planned);
  }

  // A removal whose config schema another instance now serves is a swap: applied with that instance's write
  // (and rolled back if it fails). While the successor is not in place — waiting for a retry, refused, failed
  // for good — the old file stays: a device keeps a working config rather than none.
  const displaces = new Map<string, RemoveStep[]>();
  const standaloneRemoves: RemoveStep[] = [];
  const bySchema = removes.length === 0 ? undefined : deployedBySchema(input.instances);
  // What each removal asks of its schema's group (a successor being written, one in place, any at all) is
  // summed up once per group: filtering the group for each removal cost n² when a service listed thousands of
  // instances of one schema on both sides (8,000 and 8,000: 40 s of CPU in each pass's plan, adv27).
  const groups = new Map<string, SuccessorGroup>();
  for (const remove of removes) {
    const key = schemaKey(remove.instance.device_id, remove.instance.config_schema_id);
    let group = groups.get(key);
    if (group === undefined) {
      group = successorGroup(bySchema?.get(key) ?? [], writeById, input.local.files);
      groups.set(key, group);
    }
    const own = remove.instance.id;
    const replacement = group.writing.find((successor) => successor.id !== own);
    const inPlace = group.inPlace.some((successor) => successor.id !== own);
    const successors = group.members.size - (group.members.has(own) ? 1 : 0);
    if (replacement !== undefined) {
      const displaced = displaces.get(replacement.id);
      if (displaced === undefined) displaces.set(replacement.id, [remove]);
      else displaced.push(remove);
    } else if (successors === 0 || inPlace) standaloneRemoves.push(remove);
    else others.push({ kind: 'keep', instance: remove.instance, reason: 'awaiting_owner' });
  }

  const left = leftPathRemovals(input, claimedPaths, claimedAlias, writeById);
  standaloneRemoves.push(...left.standalone);
  // An instance's own old file in the way of its new path goes with its write, as a nested loser's does.
  const wayRemoves = left.makingWay.length === 0 ? nestedRemoves : [...nestedRemoves, ...left.makingWay];
  // A nested loser's file goes with its winner's write, as a swap: put back if that write fails (a full disk, a
  // failing one), so the device never ends up with neither; apply removes nothing while something it must not
  // remove (a local file, a directory of someone else's) would still block the winner (swap-way.ts).
  for (const remove of withSharedPrune(wayRemoves, input)) {
    const winnerId = remove.makesWayFor!.instanceId;
    const displaced = displaces.get(winnerId);
    if (displaced === undefined) displaces.set(winnerId, [remove]);
    else displaced.push(remove);
  }

  // Object.assign, not `{ ...write, displaces }`: V8 (Node 20) gives every object made by a spread followed by a
  // new key a hidden class of its own, ~300 bytes each, and a pass makes one step per instance.
  const writes: WriteStep[] = nestedSwapsFirst(winnersFirst([...writeById.values()], input), wayRemoves).map(
    (write) =>
      Object.assign({}, write, {
        displaces: displaces.get(write.instance.id) ?? [],
        supersedes: supersedes.get(write.instance.id) ?? [],
      }),
  );
  // Removals first, so a path freed by one instance can be taken by another in the same pass.
  return [...skipped, ...standaloneRemoves, ...writes, ...others];
}

/** The key of a device's config schema: ids hold no NUL (a service's ids are tokens; any text works alike). */
function schemaKey(deviceId: string, schemaId: string): string {
  return `${deviceId}\u0000${schemaId}`;
}

/**
 * The instances targeting `deployed` by device and config schema, in listing order: a removal's successors are
 * looked up here. Each removal filtered every listed instance, so retiring n instances cost n² (8,000 at once:
 * 4.3 s of CPU in the plan alone, every pass while they were due; adv23).
 */
/** A schema's deployed instances as removals ask about them: the first two being written, the first two in place. */
interface SuccessorGroup {
  members: Set<string>;
  writing: PlanInstance[];
  inPlace: PlanInstance[];
}

/** Two ids of each kind are enough: a removal excludes only itself (in its group when a service lists it so). */
function successorGroup(
  group: readonly PlanInstance[],
  writeById: ReadonlyMap<string, unknown>,
  files: PlanInput['local']['files'],
): SuccessorGroup {
  const summary: SuccessorGroup = { members: new Set(), writing: [], inPlace: [] };
  for (const successor of group) {
    summary.members.add(successor.id);
    const first = (kept: PlanInstance[]) => kept.length < 2 && kept[0]?.id !== successor.id;
    if (first(summary.writing) && writeById.has(successor.id)) summary.writing.push(successor);
    if (first(summary.inPlace) && files.get(successor.relative_filepath)?.instanceId === successor.id) {
      summary.inPlace.push(successor);
    }
  }
  return summary;
}

function deployedBySchema(instances: readonly PlanInstance[]): Map<string, PlanInstance[]> {
  const bySchema = new Map<string, PlanInstance[]>();
  for (const instance of instances) {
    if (instance.target_status !== 'deployed') continue;
    const key = schemaKey(instance.device_id, instance.config_schema_id);
    const group = bySchema.get(key);
    if (group === undefined) bySchema.set(key, [instance]);
    else group.push(instance);
  }
  return bySchema;
}

/**
 * Files recorded as an instance's at a path it no longer has (the service now lists it at another one): the
 * agent's bytes of that instance, which nothing else removes — every other rule looks up files by the path an
 * instance is listed at. Only in a complete pull (an unlisted instance may claim the path), only where no listed
 * instance stands, never for an instance failed on the service (left alone), and, while the instance still
 * targets `deployed`, only once its file is in place at its new path (a device keeps a working config rather
 * than none). Before, such a file stayed recorded and on disk for good, also after its instance was retired and
 * reported `removed`.
 */
function leftPathRemovals(
  input: PlanInput,
  claimedPaths: ReadonlySet<string>,
  claimedAlias: (path: string) => { path: string; instanceId: string } | undefined,
  writeById: ReadonlyMap<string, unknown>,
): { standalone: RemoveStep[]; makingWay: RemoveStep[] } {
  const makingWay: RemoveStep[] = [];
  if (!input.complete) return { standalone: [], makingWay };
  const byId = new Map<string, PlanInstance>();
  const listedPaths = new Set<string>();
  for (const instance of input.instances) {
    byId.set(instance.id, instance);
    listedPaths.add(instance.relative_filepath);
  }
  const steps: RemoveStep[] = [];
  for (const [path, file] of input.local.files) {
    const owner = byId.get(file.instanceId);
    if (owner === undefined || owner.relative_filepath === path) continue;
    if (listedPaths.has(path) || claimedPaths.has(path) || owner.error_status === 'failed') continue;
    // Moved to another spelling of the same file (`app.json` to `App.json` on exFAT): only the record goes.
    const alias = claimedAlias(path);
    if (alias !== undefined) {
      steps.push({
        kind: 'remove',
        instance: owner,
        path,
        report: undefined,
        leftPath: true,
        aliasOf: alias,
      });
      continue;
    }
    if (
      owner.target_status === 'deployed' &&
      input.local.files.get(owner.relative_filepath)?.instanceId !== owner.id
    ) {
      // Its old file in the way of its new path (`x/a.json` moved to `x`, or `x.json` to `x.json/a.json`): the
      // new file can never be in place while the old one stands, so it goes with the write, as a swap (put back
      // if the write fails). Left for after the write, the instance was `retrying` for good (adv23).
      const to = owner.relative_filepath;
      if (writeById.has(owner.id) && (path.startsWith(`${to}/`) || to.startsWith(`${path}/`))) {
        makingWay.push({
          kind: 'remove',
          instance: owner,
          path,
          report: undefined,
          leftPath: true,
          makesWayFor: { path: to, instanceId: owner.id },
        });
      }
      continue;
    }
    steps.push({ kind: 'remove', instance: owner, path, report: undefined, leftPath: true });
  }
  return { standalone: steps, makingWay };
}

/** A segment of the owners' paths (nestingLosers): the owner whose path ends here, the winners taken and needing it. */
interface PathNode {
  children: Map<string, PathNode>;
  owner?: PlanInstance;
  taken?: PlanInstance;
  needed?: PlanInstance;
}

/**
 * Path nesting across instances: `a.json` of one and `a.json/b.json` of another cannot both be files, one needs a
 * directory where the other's file is. Of the owners of such paths the one operators updated last wins, as at one
 * path: taken in precedence order, each owner nesting with one taken before it loses to that one. Returns each
 * loser's id with the instance it lost to. Of two nesting paths at most one can be a file on disk, so a pass that
 * found every owner's file in place (an idle one) has none and skips the search; otherwise the owners' paths are
 * walked segment by segment, in proportion to their length.
 */
function nestingLosers(
  winnerByPath: ReadonlyMap<string, PlanInstance>,
  input: PlanInput,
): Map<string, PlanInstance> {
  const losers = new Map<string, PlanInstance>();
  let allInPlace = true;
  for (const owner of winnerByPath.values()) {
    if (input.disk.get(owner.relative_filepath)?.kind !== 'file') {
      allInPlace = false;
      break;
    }
  }
  if (allInPlace) return losers;
  // The owners' paths as a tree of segments: each directory above a path is a node met on the way down, so no
  // prefix is sliced out and hashed again. With slices a chain of n nested paths (a, a/a, a/a/a, ...) cost n³
  // characters hashed: 2,000 of them 19 s of CPU in every pass that listed them (adv27).
  const root: PathNode = { children: new Map() };
  const chains = new Map<PlanInstance, PathNode[]>();
  for (const owner of winnerByPath.values()) {
    const chain: PathNode[] = [];
    let node = root;
    for (const segment of owner.relative_filepath.split('/')) {
      let child = node.children.get(segment);
      if (child === undefined) {
        child = { children: new Map() };
        node.children.set(segment, child);
      }
      chain.push(child);
      node = child;
    }
    node.owner = owner;
    chains.set(owner, chain);
  }
  const involved = new Set<PlanInstance>();
  for (const [owner, chain] of chains) {
    if (chain.at(-1)?.owner !== owner) continue;
    for (let depth = 0; depth < chain.length - 1; depth += 1) {
      const above = chain[depth]!.owner;
      if (above === undefined) continue;
      involved.add(owner);
      involved.add(above);
    }
  }
  if (involved.size === 0) return losers;
  // Each node keeps the winner taken at its path and the first winner that needs it as a directory.
  for (const candidate of [...involved].sort(byPrecedence(input))) {
    const chain = chains.get(candidate)!;
    const own = chain.at(-1)!;
    let winner = own.needed;
    for (let depth = 0; winner === undefined && depth < chain.length - 1; depth += 1) {
      winner = chain[depth]!.taken;
    }
    if (winner !== undefined) {
      losers.set(candidate.id, winner);
      continue;
    }
    own.taken = candidate;
    for (let depth = 0; depth < chain.length - 1; depth += 1) chain[depth]!.needed ??= candidate;
  }
  return losers;
}

/**
 * The losers of a nested path conflict: each reported `retrying` with the conflict named, nothing of it written
 * (one message whether its file is still there or not, so the service hears it once). Its file, when the agent wrote it there, is removed (without a report: its status is the refusal) so that the
 * winner can be written, but only when the winner is written in this pass: a winner waiting for a retry, or kept
 * out otherwise, leaves the device the working config it has. The removal is displaced by the winner's write (a
 * swap): the winner is written in the same pass when the agent's removal clears its way (the file, and
 * directories the agent made, once empty), and when it cannot be written the loser's file is put back.
 */
function refuseNested(
  refused: readonly { instance: PlanInstance; winner: PlanInstance }[],
  writeById: ReadonlyMap<string, unknown>,
  input: PlanInput,
  others: Step[],
): RemoveStep[] {
  const removes: RemoveStep[] = [];
  for (const { instance, winner } of refused) {
    const path = instance.relative_filepath;
    const recorded = input.local.files.get(path)?.instanceId === instance.id;
    const removed = recorded && writeById.has(winner.id);
    const message =
      `path conflict: ${JSON.stringify(path)} and ${JSON.stringify(winner.relative_filepath)} of ${winner.id}, ` +
      `the instance updated last, cannot both be files (one is a directory of the other); ${instance.id} is not written`;
    others.push({ kind: 'refuse', instance, message });
    if (removed) {
      removes.push({
        kind: 'remove',
        instance,
        path,
        report: undefined,
        leftPath: true,
        makesWayFor: { path: winner.relative_filepath, instanceId: winner.id },
      });
    }
  }
  return removes;
}

/**
 * The last of a winner's nested removals also prunes the directories the agent made for the others (`pruneWith`):
 * files written in one batch share directories each made one of (`a.json` made for `a.json/x/b.json`, `a.json/x`
 * for `a.json/x/c.json`), so whichever went first found its own not empty yet, and they stayed in the winner's way
 * for good.
 */
function withSharedPrune(removes: readonly RemoveStep[], input: PlanInput): RemoveStep[] {
  if (removes.length < 2) return [...removes];
  const lastByWinner = new Map<string, number>();
  const dirsByWinner = new Map<string, Set<string>>();
  removes.forEach((remove, index) => {
    const winnerId = remove.makesWayFor!.instanceId;
    lastByWinner.set(winnerId, index);
    const dirs = dirsByWinner.get(winnerId) ?? new Set<string>();
    for (const dir of input.local.files.get(remove.path)?.createdDirs ?? []) dirs.add(dir);
    dirsByWinner.set(winnerId, dirs);
  });
  return removes.map((remove, index) => {
    const winnerId = remove.makesWayFor!.instanceId;
    const dirs = dirsByWinner.get(winnerId)!;
    if (lastByWinner.get(winnerId) !== index || dirs.size === 0) return remove;
    return Object.assign({}, remove, { pruneWith: [...dirs] });
  });
}

/**
 * Writes that clear a nested loser's file first: a plain write beside them (`a/x` beside `a/b`, both needing the
 * loser's `a` as a directory) then finds the way clear in the same pass.
 */
function nestedSwapsFirst<W extends { instance: ConfigInstanceHead }>(
  writes: W[],
  nestedRemoves: readonly RemoveStep[],
): W[] {
  if (nestedRemoves.length === 0) return writes;
  const winners = new Set(nestedRemoves.map((remove) => remove.makesWayFor!.instanceId));
  return [
    ...writes.filter((write) => winners.has(write.instance.id)),
    ...writes.filter((write) => !winners.has(write.instance.id)),
  ];
}

/** The owner of each path among instances that target `deployed`: the one operators updated last wins. */
function pathWinners(
  active: readonly PlanInstance[],
  pathProblems: ReadonlyMap<string, string>,
  input: PlanInput,
  fileKey: (path: string) => string,
): Map<string, PlanInstance> {
  const deployedByPath = new Map<string, PlanInstance[]>();
  for (const instance of active) {
    if (instance.target_status !== 'deployed' || pathProblems.has(instance.id)) continue;
    const key = fileKey(instance.relative_filepath);
    const group = deployedByPath.get(key) ?? [];
    group.push(instance);
    deployedByPath.set(key, group);
  }
  const winnerByPath = new Map<string, PlanInstance>();
  for (const [path, group] of deployedByPath) {
    winnerByPath.set(path, [...group].sort(byPrecedence(input))[0]!);
  }
  return winnerByPath;
}

/**
 * The error of an instance whose path names the file another instance targets at another path: the same text
 * whether apply found it (neither file on disk at planning) or the plan did, so the service hears it once.
 */
export function aliasConflictMessage(loser: ConfigInstanceHead, path: string, winnerId: string): string {
  return `path conflict: relative_filepath ${JSON.stringify(loser.relative_filepath)} names the same file on this device as ${JSON.stringify(path)} (a case-insensitive filesystem, or a directory mounted twice), targeted by ${winnerId}, the instance updated last; ${loser.id} is not written`;
}

/** "The one operators updated last wins": the order of instances competing for one file, winner first. */
function byPrecedence(input: PlanInput): (a: ConfigInstanceHead, b: ConfigInstanceHead) => number {
  // The agent's own report moves `updated_at` too; comparing that would let the last one reported win.
  const operatorUpdatedAt = (instance: ConfigInstanceHead): string => {
    const echo = input.reportEchoes?.get(instance.id);
    return echo !== undefined && sameInstant(echo.updatedAt, instance.updated_at)
      ? echo.operatorUpdatedAt
      : instance.updated_at;
  };
  return (a, b) => byNewestFirst(a, b, operatorUpdatedAt);
}

/**
 * For a path that names the same file as a path some other instance targets `deployed` at (PlanInput.aliases),
 * that path and the instance that wins it; undefined for a path that names a file of its own.
 */
function claimedAliases(
  input: PlanInput,
  claimedPaths: ReadonlySet<string>,
): (path: string) => { path: string; instanceId: string } | undefined {
  const aliases = input.aliases;
  if (aliases === undefined || aliases.size === 0) return () => undefined;
  const claims = new Map<string, ConfigInstanceHead[]>();
  for (const instance of input.instances) {
    const key = aliases.get(instance.relative_filepath);
    if (key === undefined || instance.target_status !== 'deployed') continue;
    claims.set(key, [...(claims.get(key) ?? []), instance]);
  }
  const order = byPrecedence(input);
  // Every claim's own path is claimed, so a path not claimed competes with all of its key's claims: the winner
  // is one per key, found once. Sorting the claims again for each such path cost n² comparisons when a service
  // listed thousands of instances at spellings of one file (4,000 and 4,000: 9 s of CPU in the plan, adv27).
  const winners = new Map<string, { path: string; instanceId: string }>();
  return (path) => {
    const key = aliases.get(path);
    if (key === undefined || claimedPaths.has(path)) return undefined;
    const known = winners.get(key);
    if (known !== undefined) return known;
    const claim = claims.get(key);
    if (claim === undefined || claim.length === 0) return undefined;
    let first = claim[0]!;
    for (const instance of claim) if (order(instance, first) < 0) first = instance;
    const winner = { path: first.relative_filepath, instanceId: first.id };
    winners.set(key, winner);
    return winner;
  };
}

/**
 * Writes to paths that may name one file on a case-insensitive filesystem (one `foldKey`) in precedence order,
 * the winner first: on a first sync neither exists yet, and apply refuses a later write whose path turns out to
 * name a file written earlier in the pass (apply.ts), so the winner is the one in place, as the next pass's plan
 * (which sees the alias on disk) decides. Other writes keep their order.
 */
function winnersFirst<W extends { instance: ConfigInstanceHead; path: string }>(
  writes: W[],
  input: PlanInput,
): W[] {
  if (writes.length < 2) return writes;
  const groups = new Map<string, W[]>();
  for (const write of writes) {
    const key = foldKey(write.path);
    const group = groups.get(key);
    if (group === undefined) groups.set(key, [write]);
    else group.push(write);
  }
  if (groups.size === writes.length) return writes;
  const order = byPrecedence(input);
  const ordered: W[] = [];
  for (const write of writes) {
    const group = groups.get(foldKey(write.path))!;
    if (group.length === 0) continue;
    ordered.push(...group.sort((a, b) => order(a.instance, b.instance)));
    group.length = 0;
  }
  return ordered;
}

interface RemovalFacts {
  input: PlanInput;
  pathProblems: ReadonlyMap<string, string>;
  winnerByPath: ReadonlyMap<string, PlanInstance>;
  /** Paths some instance still targets `deployed` at, failed ones included: their files are never removed. */
  claimedPaths: ReadonlySet<string>;
  /** The claimed path (and its instance) that names the same file as a path, if any. */
  claimedAlias: (path: string) => { path: string; instanceId: string } | undefined;
  writeById: ReadonlyMap<string, unknown>;
}

/**
 * What becomes of an instance that no longer targets `deployed`; undefined: nothing to do. `takeoverBy`: no
 * step of its own, its file is taken over by that instance's write in this pass and reported with it.
 */
function planRemoval(instance: PlanInstance, facts: RemovalFacts): Step | { takeoverBy: string } | undefined {
  const { input, winnerByPath, claimedPaths, writeById } = facts;
  const path = instance.relative_filepath;
  const problem = facts.pathProblems.get(instance.id);
  const owned = input.local.files.get(path);
  const ownedByThis = owned?.instanceId === instance.id && problem === undefined;
  /** A removal with no disk change; `note` says why the file stays (none for an archive or a takeover). */
  const report = (reason: ReportReason, note: ReportReason | undefined = reason): Step => ({
    kind: 'report',
    instance,
    report: dueReport(instance, removedReport(note), input),
    reason,
  });
  if (instance.activity_status !== 'deployed' && !ownedByThis) {
    // Never deployed by us: archive, disk untouched.
    return instance.activity_status === 'removed' ? undefined : report('archive', undefined);
  }
  const alias = problem === undefined ? facts.claimedAlias(path) : undefined;
  if (alias !== undefined) {
    // Its path names the file another instance is (or is about to be) deployed at: never unlinked for this one.
    if (!ownedByThis) return report('replaced_by_owner');
    return {
      kind: 'remove',
      instance,
      path,
      report: dueReport(instance, removedReport(), input),
      aliasOf: alias,
    };
  }
  const winner = problem === undefined ? winnerByPath.get(input.aliases?.get(path) ?? path) : undefined;
  if (problem === undefined && claimedPaths.has(path) && owned !== undefined) {
    // Another instance targets `deployed` at this path and takes the file over: our status changes only
    // once the file is the new owner's, so the service never hears "removed" while our bytes stay. If that
    // instance failed for good, our file stays too: a device keeps a working config rather than none.
    if (winner !== undefined && owned.instanceId === winner.id) {
      return report('replaced_by_owner', undefined);
    }
    if (winner !== undefined && writeById.has(winner.id)) return { takeoverBy: winner.id };
    if (ownedByThis) return { kind: 'keep', instance, reason: 'awaiting_owner' };
    // The bytes there are another earlier instance's, not ours: nothing of this one is on disk.
    return report('replaced_by_owner');
  }
  const remove = (): RemoveStep => ({
    kind: 'remove',
    instance,
    path,
    report: dueReport(instance, removedReport(), input),
  });
  // Even when the file is already gone the remover runs: it prunes the directories the agent created and the
  // record is forgotten; a bare report would leave both behind for good.
  if (ownedByThis) return remove();
  if (owned !== undefined && problem === undefined && input.complete && !claimedPaths.has(path)) {
    // Recorded as written by us for an earlier owner, and no instance wants the path any more: our file,
    // unwanted. (An owner that never took the file over would otherwise leave it behind for good.) Only a
    // complete pull can tell that nobody wants the path.
    return remove();
  }
  const former = winner === undefined && owned === undefined ? input.formerRoot?.get(instance.id) : undefined;
  if (former?.present === true) {
    // Written by us in the root used before rootDir moved: outside rootDir, so never deleted; not removed either.
    return { kind: 'refuse', instance, message: formerRootMessage(former.at) };
  }
  // Its bytes gone from the former root, and nothing at its path here: removed, truly.
  if (former !== undefined && input.disk.get(path)?.kind !== 'file')
    return report('gone_from_former_root', undefined);
  // Deployed per the service but not recorded as written by us (lost state, another owner): never delete.
  return report(winner !== undefined || owned !== undefined ? 'replaced_by_owner' : 'not_ours');
}

/** Why a retired instance whose file is in the agent's former root is not removed. */
export function formerRootMessage(at: string): string {
  return `file left in place outside rootDir: ${at} (written there before rootDir moved; the agent deletes nothing outside rootDir): remove it by hand`;
}

function planDeployed(
  instance: PlanInstance,
  input: PlanInput,
): Omit<WriteStep, 'displaces' | 'supersedes'> | Step {
  const path = instance.relative_filepath;
  const { data, sha256, size } = fileOf(instance);
  // Something in the way on disk (a symlink, a file where a directory goes) is not the path's fault: the write
  // is attempted after this pass's removals, refuses to go through it, and is retried while it stays.
  const observed = input.disk.get(path) ?? { kind: 'absent' };

  const owned = input.local.files.get(path);
  const deployed = dueReport(instance, deployedReport(), input);
  const want = input.fileMeta?.(path);
  const mode = want?.mode ?? input.fileMode;
  const gid = want?.gid;
  const sameBytes = observed.kind === 'file' && observed.sha256 === sha256;
  const groupDiffers =
    observed.kind === 'file' && gid !== undefined && observed.gid !== undefined && observed.gid !== gid;
  // A filesystem without permission bits shows the ones it keeps whatever the agent asks (ManagedFile.keptMode).
  const modeInPlace =
    observed.kind === 'file' &&
    (observed.mode === mode ||
      (owned?.instanceId === instance.id && owned.mode === mode && owned.keptMode === observed.mode));
  const inPlace = sameBytes && modeInPlace && !groupDiffers;
  if (inPlace && owned?.instanceId === instance.id && owned.sha256 === sha256) {
    const serverInPlace = instance.activity_status === 'deployed' && instance.error_status === 'none';
    // `confirm` also supersedes a stale undelivered error report (from a failed repair) with `deployed`.
    if (serverInPlace) {
      const length = data?.length ?? size;
      const recordSize = owned.size === undefined && length !== undefined ? { recordSize: length } : {};
      return { kind: 'confirm', instance, report: deployed, ...recordSize };
    }
    return { kind: 'report', instance, report: deployed, reason: 'already_in_place' };
  }
  let reason: WriteStep['reason'];
  const ours = owned?.instanceId === instance.id && owned.sha256 === sha256;
  if (inPlace) reason = 'adopt';
  else if (observed.kind === 'absent' && owned === undefined) reason = 'new';
  // Our own bytes, and the configuration now wants another mode or group: changed in place, never rewritten.
  // (The group is not recorded, so any group difference counts as the configuration's.)
  else if (sameBytes && ours && (owned.mode !== mode || groupDiffers)) reason = 'metadata';
  // Drift is someone else's change: when the agent's own configured mode changed, the rewrite is ours.
  else if (ours && owned.mode === mode) reason = 'drift';
  else reason = 'changed';
  if (reason === 'drift' && input.restoreDrift === false)
    return { kind: 'keep', instance, reason: 'drift_kept' };
  const meta = { ...(want === undefined ? {} : { mode }), ...(gid === undefined ? {} : { gid }) };
  const bytes = data !== undefined ? { data } : size === undefined ? {} : { size };
  return { kind: 'write', instance, path, ...bytes, sha256, reason, report: deployed, ...meta };
}

/** The bytes of an instance's file: serialized at arrival already (maybe set aside), or now. */
export function fileOf(instance: ConfigInstance): Required<InstanceFile>;
export function fileOf(instance: PlanInstance): InstanceFile;
export function fileOf(instance: PlanInstance): InstanceFile {
  if ('file' in instance) return instance.file;
  const data = serializeContent(instance.relative_filepath, instance.content);
  return { data, sha256: sha256Hex(data) };
}

/**
 * The instance with the bytes of its file in place of its parsed content, which is then free to go: a pass
 * holds each instance one way only. An instance whose content cannot be serialized is kept as it is, and
 * planning meets the problem as it would have.
 */
export function withFile(
  instance: ConfigInstance,
): ConfigInstance | (ConfigInstanceHead & { file: Required<InstanceFile> }) {
  let file: Required<InstanceFile>;
  try {
    file = fileOf(instance);
  } catch {
    return instance;
  }
  const { content: _content, ...head } = instance;
  // Added to the new object, not spread into another: see the note on `writes` in `plan` (one hidden class each).
  return Object.assign(head, { file });
}

/**
 * Whether the service must hear `report` for this instance: the one place this is decided (record.ts asks it
 * too, for the failure reports only an effect can produce). Not when the service already holds that status
 * and nothing else is pending for the instance; a pending different report must be superseded, or the older
 * status would be delivered last.
 */
export function dueReport(
  instance: ConfigInstanceHead,
  report: StatusReport,
  known: Pick<PlanInput, 'pendingReports'> & { local: Pick<PlanInput['local'], 'instances'> },
): StatusReport | undefined {
  const pending = known.pendingReports?.get(instance.id);
  const serverHasIt =
    instance.activity_status === report.activity_status &&
    instance.error_status === report.error_status &&
    (report.error_status === 'none' || known.local.instances?.get(instance.id)?.message === report.message);
  if (serverHasIt && pending === undefined) return undefined;
  if (pending !== undefined && sameReport(pending, report)) return undefined;
  return report;
}

function sameReport(a: StatusReport, b: StatusReport): boolean {
  return (
    a.activity_status === b.activity_status && a.error_status === b.error_status && a.message === b.message
  );
}

function pathProblem(path: string): string | undefined {
  try {
    validateRelativePath(path);
    return undefined;
  } catch (error) {
    return errorMessage(error);
  }
}

/** Newest `updated_at` first; ties broken deterministically so every pass picks the same winner. */
function byNewestFirst(
  a: ConfigInstanceHead,
  b: ConfigInstanceHead,
  updatedAt: (instance: ConfigInstanceHead) => string,
): number {
  const byUpdate = newestFirst(updatedAt(a), updatedAt(b));
  if (byUpdate !== 0) return byUpdate;
  const byCreation = newestFirst(a.created_at, b.created_at);
  if (byCreation !== 0) return byCreation;
  return a.id < b.id ? 1 : a.id > b.id ? -1 : 0;
}

export function deployedReport(): StatusReport {
  return { activity_status: 'deployed', error_status: 'none' };
}

const REMOVAL_NOTES: Partial<Record<ReportReason, string>> = {
  not_ours: 'file left in place: it is not recorded as written by this agent',
  replaced_by_owner: 'file kept: another instance now owns this path',
};

export function removedReport(reason?: ReportReason): StatusReport {
  const note = reason === undefined ? undefined : REMOVAL_NOTES[reason];
  return note === undefined
    ? { activity_status: 'removed', error_status: 'none' }
    : { activity_status: 'removed', error_status: 'none', message: note };
}

export function errorReport(
  activity: ConfigInstanceActivityStatus,
  error: Exclude<ErrorStatus, 'none'>,
  message: string,
): StatusReport {
  return { activity_status: activity, error_status: error, message: statusMessage(message) };
}

/**
 * A report's message cut to what the service takes (STATUS_MESSAGE_MAX UTF-16 units), never in the middle of a
 * surrogate pair: messages quote ids and paths from the service, and a lone surrogate is not valid Unicode (a
 * strict JSON parser rejects it, and a rejected report is dropped).
 */
export function statusMessage(text: string): string {
  if (text.length <= STATUS_MESSAGE_MAX) return text;
  const cut = text.slice(0, STATUS_MESSAGE_MAX);
  const last = cut.charCodeAt(cut.length - 1);
  return last >= 0xd800 && last <= 0xdbff ? cut.slice(0, -1) : cut;
}
