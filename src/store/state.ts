// The agent's durable memory in stateDir: which files it wrote (and so may delete), and per-instance retries.
import { constants as bufferConstants } from 'node:buffer';
import { constants } from 'node:fs';
import path from 'node:path';
import * as z from 'zod';
import { ConfigInstanceActivityStatus, ErrorStatus } from '../api/schemas.js';
import type { WallClock } from '../lib/clock.js';
import { errnoCode } from '../lib/errors.js';
import type { FsPort } from '../lib/fs-port.js';
import {
  inObjectKeyOrder,
  isArrayIndexKey,
  JsonRecordWalker,
  type RecordShape,
} from '../lib/json-records.js';
import { JsonWeigher, type JsonWeight } from '../lib/json-weigher.js';
import type { Logger } from '../lib/logger.js';
import { writeDurableText } from './durable-writer.js';
import { StateDirError, StateFileOverweightError } from './errors.js';
import { validateRelativePath } from './path-guard.js';
import { sameRoot } from './same-root.js';
import type { StateSnapshot } from './state-snapshot.js';

export const STATE_FILE = 'state.json';
export const STATE_VERSION = 1;

/**
 * The instances whose records a file of stateDir is weighed for (`readStateDirFile`): a listing is refused past
 * 100,000 (ITERATOR_MAX_ITEMS, src/api/client.ts), and half as many again for the files of retired instances not
 * removed yet and the instances of earlier listings whose reports wait. Each file's bound is its records' most
 * tokens (every optional field written) times this: a file heavier than that was not written by the agent.
 */
export const WEIGHED_INSTANCES = 150_000;

/** How deep a file of stateDir may nest: the deepest the agent writes nest 4 levels; room for a newer agent. */
export const MAX_STATE_FILE_DEPTH = 8;

/**
 * state.json's bounds. Per instance, every optional field written: its file's record (`"path":{…}` with eight
 * members, two arrays and the comma after it: 20 tokens) with two directories made (2), its instance's record (seven
 * members and `reportEcho`'s four: 24), a former root's record (6) and a path waiting for its hooks (1): 53. Room for
 * hooks' owed paths (4,096 a hook, daemon/hooks.ts MAX_OWED_PATHS) of 64 hooks. A real state.json of 100,000
 * instances holds 3.1 million (31 each); parsed, it peaked at ~300 MB (docs/performance-history.md, weigh27).
 */
export const STATE_WEIGHT: JsonWeight = {
  maxTokens: 53 * WEIGHED_INSTANCES + 64 * 4096,
  maxDepth: MAX_STATE_FILE_DEPTH,
};

/**
 * A JSON object keyed by arbitrary strings, parsed into a Map. Not z.record: it builds a plain object, where a
 * key `__proto__` (a path the guard accepts, or an instance id) sets the prototype instead of a property and
 * is silently lost — its file would then never be removed. Object.entries of JSON.parse's output keeps it.
 */
function keyedBy<T extends z.ZodType, U = z.output<T>>(
  value: T,
  finish: (key: string, item: z.output<T>) => U | undefined = (_key, item) => item as U,
) {
  return z.unknown().transform((input, ctx): Map<string, U> => {
    const map = new Map<string, U>();
    if (typeof input !== 'object' || input === null || Array.isArray(input)) {
      ctx.addIssue({ code: 'custom', message: 'expected an object' });
      return map;
    }
    for (const [key, item] of Object.entries(input)) {
      const parsed = value.safeParse(item);
      const finished = parsed.success ? finish(key, parsed.data) : undefined;
      if (finished === undefined) {
        const message = parsed.success
          ? 'createdDepths names no directory above the file'
          : parsed.error.message;
        ctx.addIssue({ code: 'custom', path: [key], message });
        continue;
      }
      map.set(key, finished);
    }
    return map;
  });
}

/** Above this many characters, a record's made ancestors are written as `createdDepths`, not as paths. */
export const COMPACT_DIRS_OVER = 1024;

/**
 * A parsed record of `relative` as the agent holds it: `createdDepths` gone, each depth turned into its ancestor's
 * path (a slice of `relative`, which V8 keeps as a view of it: no copy) after the paths of `createdDirs`;
 * undefined when a depth names no directory above the file (a hand edit: the whole file is then judged corrupt,
 * like any malformed field).
 */
function withCreatedDepths<F extends { createdDirs: string[]; createdDepths?: number[] | undefined }>(
  relative: string,
  file: F,
): Omit<F, 'createdDepths'> | undefined {
  const { createdDepths, ...rest } = file;
  if (createdDepths === undefined) return rest;
  const ends: number[] = [];
  for (let slash = relative.indexOf('/'); slash !== -1; slash = relative.indexOf('/', slash + 1))
    ends.push(slash);
  const dirs = [...rest.createdDirs];
  for (let index = 0; index < createdDepths.length; index += 1) {
    const end = ends[createdDepths[index]! - 1];
    if (end === undefined) return undefined;
    dirs.push(relative.slice(0, end));
  }
  if (rest.createdDirs.length > 0) dirs.sort((a, b) => segmentCount(a) - segmentCount(b));
  rest.createdDirs = dirs;
  return rest;
}

function segmentCount(dir: string): number {
  let count = 1;
  for (let at = dir.indexOf('/'); at !== -1; at = dir.indexOf('/', at + 1)) count += 1;
  return count;
}

/**
 * The text of each record written with depths, made once per record object (records are replaced, never changed):
 * telling its directories above the file reads each path. Only those are kept: a text per record held an idle
 * daemon's state twice.
 */
const compactText = new WeakMap<ManagedFile, string>();

/**
 * `file`'s JSON text in state.json: as it is, unless its made directories' paths add up to more than
 * `COMPACT_DIRS_OVER` characters; then those above the file are written as `createdDepths`, the others (none
 * the agent makes, but a hand may write one) stay in `createdDirs`. A file 2,000 levels deep cost 4 MB of paths,
 * ~10 KB of depths now (adv27).
 */
export function persistedFile(relative: string, file: ManagedFile): string {
  let length = 0;
  for (const dir of file.createdDirs) length += dir.length;
  if (length <= COMPACT_DIRS_OVER) return JSON.stringify(file);
  const known = compactText.get(file);
  if (known !== undefined) return known;
  const createdDirs: string[] = [];
  const createdDepths: number[] = [];
  for (const dir of file.createdDirs) {
    const above =
      dir.length < relative.length && relative.charCodeAt(dir.length) === 0x2f && relative.startsWith(dir);
    if (above) createdDepths.push(segmentCount(dir));
    else createdDirs.push(dir);
  }
  createdDepths.sort((a, b) => a - b);
  const { createdDirs: _paths, ...rest } = file;
  const persisted: ManagedFile & { createdDepths?: number[] } = { ...rest, createdDirs };
  if (createdDepths.length > 0) persisted.createdDepths = createdDepths;
  const text = JSON.stringify(persisted);
  compactText.set(file, text);
  return text;
}

/**
 * The zod schemas of state.json, built on first use: a well-formed file passes the hand checks
 * (`quickStateFile`) and never needs them, and building them took ~1–3 ms of every start. They judge and name
 * whatever the hand checks leave to them.
 */
function buildStateSchemas() {
  /** A file this agent published: the proof of ownership that removal requires. */
  const ManagedFile = z.object({
    instanceId: z.string().min(1),
    sha256: z.string().regex(/^[0-9a-f]{64}$/),
    mode: z.number().int().min(0).max(0o7777),
    /**
     * Directories this agent created for the file, parent-first: pruned when they become empty. In the file, those
     * that are ancestors of the file are written as `createdDepths` instead when their paths are long
     * (`persistedFile`); loaded, both are here, each ancestor a slice of the file's path.
     */
    createdDirs: z.array(z.string()),
    /**
     * The ancestors of the file this agent created, by depth (`a/b/c.json`: 1 is `a`, 2 is `a/b`), written instead
     * of their paths in `createdDirs` when those would cost more than `COMPACT_DIRS_OVER` characters: whole paths
     * cost the square of the depth (adv27). Older agents ignore it (they then prune none of these directories).
     */
    createdDepths: z.array(z.number().int().min(1)).optional(),
    writtenAt: z.string(),
    /**
     * The permission bits the file kept when the agent's fchmod to `mode` changed nothing (exFAT, vfat: the
     * mount's fmask): seen on disk, they are `mode` as far as this filesystem goes, not drift.
     */
    keptMode: z.number().int().min(0).max(0o7777).optional(),
    /**
     * The file's length as written (absent in records made before it was kept, and for files adopted from a
     * declaration): a file of another length at the path holds other bytes, so it is not read to tell (a sparse
     * file of a terabyte took the drift watcher and a removal's check most of an hour).
     */
    size: z.number().int().min(0).optional(),
  });

  /** What the agent last knows the service holds for an instance, and its local retry bookkeeping. */
  const InstanceRecord = z.object({
    relativePath: z.string(),
    activity: ConfigInstanceActivityStatus,
    error: ErrorStatus,
    message: z.string().optional(),
    attempts: z.number().int().min(0),
    /** Wall-clock time of the next attempt, for people reading status; the schedule itself is monotonic. */
    nextAttemptAt: z.string().optional(),
    /**
     * The `updated_at` our last report gave the instance, and the operator's `updated_at` before it. `awaiting`
     * (`activity/error`): the report's answer carried no echo, so `updatedAt` is still the one before it, and
     * the next listing showing the instance in exactly those statuses and of `version` (reconcile/report.ts
     * `listedVersion`, the instance as listed before the report; absent in records of older agents) gives the
     * echo.
     */
    reportEcho: z
      .object({
        updatedAt: z.string(),
        operatorUpdatedAt: z.string(),
        awaiting: z.string().optional(),
        version: z.string().optional(),
      })
      .optional(),
  });

  /** A file the agent wrote in its former root (`FormerRoot`): enough to tell whether its bytes are still there. */
  const FormerFile = z.object({
    instanceId: z.string().min(1),
    sha256: z.string().regex(/^[0-9a-f]{64}$/),
  });

  const LocalStateFile = z.object({
    version: z.literal(STATE_VERSION),
    deviceId: z.string(),
    /** The root the recorded paths are relative to: a record proves nothing about another root. */
    rootDir: z.string(),
    /** Keyed by relative path: a path has at most one owner at a time. */
    files: keyedBy(ManagedFile, withCreatedDepths),
    instances: keyedBy(InstanceRecord),
    /** Paths written or removed whose hooks have not run yet: replayed after a restart. */
    pendingHookPaths: z.array(z.string()).default([]),
    /**
     * Per hook, the paths its runs not started owe (`OwedHookPaths`); absent when none are. An older agent (before
     * hook28) ignores the field and drops it with its next write: those paths are then lost, as they were at a crash.
     */
    owedHookPaths: z
      .array(
        z.object({
          match: z.string(),
          run: z.array(z.string()).min(1),
          paths: z.array(z.string()),
          truncated: z.literal(true).optional(),
        }),
      )
      .optional(),
    /**
     * Per hook, its process given up on after SIGKILL and still there when recorded (`HookProcessLeftBehind`);
     * absent when none is. An older agent (before hook30) ignores the field and drops it with its next write.
     */
    hookProcessesLeftBehind: z
      .array(
        z.object({
          match: z.string(),
          run: z.array(z.string()).min(1),
          pid: z.number().int().positive(),
          startTime: z.string().min(1),
          bootId: z.string().min(1).optional(),
        }),
      )
      .optional(),
    /** The root the agent last recorded files in before rootDir moved (`FormerRoot`). Older agents ignore it. */
    formerRoot: z.object({ rootDir: z.string().min(1), files: keyedBy(FormerFile) }).optional(),
  });
  return { ManagedFile, InstanceRecord, FormerFile, LocalStateFile };
}
type StateSchemas = ReturnType<typeof buildStateSchemas>;
let builtStateSchemas: StateSchemas | undefined;
export function stateSchemas(): StateSchemas {
  builtStateSchemas ??= buildStateSchemas();
  return builtStateSchemas;
}

/** A record as the agent holds it: `createdDepths` of the file turned into paths (`withCreatedDepths`). */
export type ManagedFile = Omit<z.infer<StateSchemas['ManagedFile']>, 'createdDepths'>;
export type InstanceRecord = z.infer<StateSchemas['InstanceRecord']>;
export type FormerFile = z.infer<StateSchemas['FormerFile']>;

/**
 * The paths one hook's runs not started (refused: its process left behind on a hung mount, its program's check
 * not answering) owe its next run that starts (daemon/hooks.ts `OwedPaths`), kept in state.json so that a crash, an
 * OOM kill or a power cut does not lose them. Per hook (its glob and command): a path owed to one hook never runs
 * another again. Replaced whole when it changes, never changed in place (state-snapshot.ts compares it so).
 */
export interface OwedHookPaths {
  match: string;
  run: readonly string[];
  /** Sorted; at most daemon/hooks.ts MAX_OWED_PATHS. */
  paths: readonly string[];
  /** More were owed than were kept: the run is told its list is incomplete. */
  truncated?: true | undefined;
}

/**
 * A hook's process given up on after SIGKILL (uninterruptible sleep on a hung mount), kept in state.json so that an
 * agent started after a crash, an OOM kill or a power cut still holds that hook back while the process is there:
 * its pid and its start time (`/proc/<pid>/stat` field 22), so a pid handed out again is not taken for it
 * (daemon/hooks.ts `restoreLeftBehind`). Replaced whole when it changes (state-snapshot.ts compares it so).
 */
export interface HookProcessLeftBehind {
  match: string;
  run: readonly string[];
  pid: number;
  startTime: string;
  /**
   * The boot it was recorded in (`/proc/sys/kernel/random/boot_id`): no process outlives a reboot, so a record of
   * another boot is never a process still there, whatever pid and start time a process of this boot has.
   */
  bootId?: string | undefined;
}
type ParsedStateFile = z.infer<StateSchemas['LocalStateFile']>;

/**
 * The files the agent recorded in the root it used before `rootDir` truly moved (another directory, not another
 * spelling: `sameRoot`), by path under that root. The agent never deletes outside `rootDir`: an instance retired
 * since is reported `retrying`, naming `<rootDir>/<path>` there, while its bytes are there, and `removed` once they
 * are gone (former-root.ts). Records only go (never added or changed: state-snapshot.ts counts them); one former
 * root at a time: a second move makes the root it leaves the former one (when it recorded any file).
 */
export interface FormerRoot {
  rootDir: string;
  files: Map<string, FormerFile>;
}

/** The file as written: plain objects, whose own `__proto__` key JSON.stringify writes like any other. */
export type LocalStateFile = Omit<ParsedStateFile, 'files' | 'instances' | 'formerRoot'> & {
  files: Record<string, ManagedFile>;
  instances: Record<string, InstanceRecord>;
  formerRoot?: { rootDir: string; files: Record<string, FormerFile> };
};

export interface LocalState {
  deviceId: string;
  rootDir: string;
  files: Map<string, ManagedFile>;
  instances: Map<string, InstanceRecord>;
  /** Monotonic deadlines of per-instance cooldowns; never persisted, so attempts reset on restart. */
  cooldowns: Map<string, number>;
  /**
   * Per instance, the failures in a row the root's own condition caused (a full disk, a read-only mount):
   * they are not attempts, only the length of the wait before the next one (record.ts). Never persisted.
   */
  diskWaits?: Map<string, number>;
  pendingHookPaths: Set<string>;
  /** Absent or empty when no hook is owed paths. */
  owedHookPaths?: readonly OwedHookPaths[];
  /** Absent or empty when no hook's process is left behind. */
  hookProcessesLeftBehind?: readonly HookProcessLeftBehind[];
  formerRoot?: FormerRoot;
}

export function emptyState(deviceId: string, rootDir = ''): LocalState {
  return {
    deviceId,
    rootDir,
    files: new Map(),
    instances: new Map(),
    cooldowns: new Map(),
    pendingHookPaths: new Set(),
  };
}

const SHA256_HEX = /^[0-9a-f]{64}$/;
const ACTIVITIES: ReadonlySet<unknown> = new Set(ConfigInstanceActivityStatus.options);
const ERRORS: ReadonlySet<unknown> = new Set(ErrorStatus.options);

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function isCount(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) >= 0;
}

function isStringArray(value: unknown): value is string[] {
  if (!Array.isArray(value)) return false;
  // A loop, not `every`: a start checks every record's array, and this code runs cold.
  for (let index = 0; index < value.length; index += 1) if (typeof value[index] !== 'string') return false;
  return true;
}

/** ManagedFile checked by hand: what `ManagedFile.parse` returns (same fields, same order), or undefined. */
function quickManagedFile(value: unknown, held: HeldStrings, key: string): ManagedFile | undefined {
  if (!isPlainObject(value)) return undefined;
  const { instanceId, sha256, mode, createdDirs, writtenAt, keptMode, size, createdDepths } = value;
  if (
    typeof instanceId !== 'string' ||
    instanceId.length === 0 ||
    typeof sha256 !== 'string' ||
    !SHA256_HEX.test(sha256) ||
    !isCount(mode) ||
    mode > 0o7777 ||
    !isStringArray(createdDirs) ||
    typeof writtenAt !== 'string' ||
    (keptMode !== undefined && (!isCount(keptMode) || keptMode > 0o7777)) ||
    (size !== undefined && !isCount(size)) ||
    (createdDepths !== undefined && !isDepthArray(createdDepths))
  ) {
    return undefined;
  }
  // Optional fields added after, not spread in: the same fields in the same order, without an object per spread
  // (a start reads 1,000 records cold).
  const file: ManagedFile = { instanceId, sha256, mode, createdDirs, writtenAt: held(writtenAt) };
  if (keptMode !== undefined) file.keptMode = keptMode;
  if (size !== undefined) file.size = size;
  return createdDepths === undefined ? file : withCreatedDepths(key, { ...file, createdDepths });
}

function isDepthArray(value: unknown): value is number[] {
  if (!Array.isArray(value)) return false;
  for (let index = 0; index < value.length; index += 1) {
    if (!Number.isSafeInteger(value[index]) || (value[index] as number) < 1) return false;
  }
  return true;
}

/** InstanceRecord checked by hand: what `InstanceRecord.parse` returns (same fields, same order), or undefined. */
function quickInstanceRecord(value: unknown, held: HeldStrings): InstanceRecord | undefined {
  if (!isPlainObject(value)) return undefined;
  const { relativePath, activity, error, message, attempts, nextAttemptAt, reportEcho } = value;
  if (
    typeof relativePath !== 'string' ||
    !ACTIVITIES.has(activity) ||
    !ERRORS.has(error) ||
    (message !== undefined && typeof message !== 'string') ||
    !isCount(attempts) ||
    (nextAttemptAt !== undefined && typeof nextAttemptAt !== 'string')
  ) {
    return undefined;
  }
  let echo: InstanceRecord['reportEcho'];
  if (reportEcho !== undefined) {
    if (!isPlainObject(reportEcho)) return undefined;
    const { updatedAt, operatorUpdatedAt, awaiting, version } = reportEcho;
    if (typeof updatedAt !== 'string' || typeof operatorUpdatedAt !== 'string') return undefined;
    if (awaiting !== undefined && typeof awaiting !== 'string') return undefined;
    if (version !== undefined && typeof version !== 'string') return undefined;
    echo = {
      updatedAt: held(updatedAt),
      operatorUpdatedAt: held(operatorUpdatedAt),
      ...(awaiting === undefined ? {} : { awaiting }),
      ...(version === undefined ? {} : { version }),
    };
  }
  const activityStatus = activity as InstanceRecord['activity'];
  const errorStatus = error as InstanceRecord['error'];
  // Optional fields added after, not spread in: the same fields in the same order as zod's, without an object per
  // spread (a start reads 1,000 records cold).
  const record: InstanceRecord =
    message === undefined
      ? { relativePath: held(relativePath), activity: activityStatus, error: errorStatus, attempts }
      : { relativePath: held(relativePath), activity: activityStatus, error: errorStatus, message, attempts };
  if (nextAttemptAt !== undefined) record.nextAttemptAt = nextAttemptAt;
  if (echo !== undefined) record.reportEcho = echo;
  return record;
}

/**
 * One string per value among a load's records: JSON.parse makes a fresh string of every value, so without it an
 * idle daemon holds each path twice and its timestamps once per record (1,000 managed: ~0.3 MiB of heap;
 * docs/performance-history.md "Idle daemon, twelfth round").
 */
type HeldStrings = (value: string) => string;

function heldStrings(): HeldStrings {
  const held = new Map<string, string>();
  return (value) => {
    const same = held.get(value);
    if (same !== undefined) return same;
    held.set(value, value);
    return value;
  };
}

function quickKeyedBy<T>(
  value: unknown,
  quick: (item: unknown, held: HeldStrings, key: string) => T | undefined,
  held: HeldStrings,
): Map<string, T> | undefined {
  if (!isPlainObject(value)) return undefined;
  const map = new Map<string, T>();
  // for-in over own keys, not Object.entries: the same keys in the same order, a key named __proto__ kept (an
  // own property of JSON.parse's output, read as such), without an array per entry: Object.entries of the two
  // maps of a state of 1,000 cost ~2.9 ms of CPU cold against ~0.4 (docs/performance-history.md "`--once`, twelfth round").
  for (const key in value) {
    if (!Object.hasOwn(value, key)) continue;
    const name = held(key);
    const checked = quick(value[key], held, name);
    if (checked === undefined) return undefined;
    map.set(name, checked);
  }
  return map;
}

/**
 * The everyday state file checked by hand: zod costs ~0.1 ms per record, most of loading a state of 1,000
 * files. Returns what `LocalStateFile.parse` returns, or undefined whenever anything differs, for zod to judge
 * and name the problem. src/store/state.test.ts compares the two on generated files.
 */
export function quickStateFile(value: unknown): ParsedStateFile | undefined {
  if (!isPlainObject(value)) return undefined;
  const held = heldStrings();
  return quickStateTop(value, {
    files: () => quickKeyedBy(value.files, quickManagedFile, held),
    instances: () => quickKeyedBy(value.instances, quickInstanceRecord, held),
    formerFiles: (former) => quickKeyedBy(former.files, quickFormerFile, held),
  });
}

/** The records of a state file checked by hand (`quickStateFile`), or as a walk kept them (`stateFileWalk`). */
interface QuickRecords {
  files(): Map<string, ManagedFile> | undefined;
  instances(): Map<string, InstanceRecord> | undefined;
  formerFiles(former: Record<string, unknown>): Map<string, FormerFile> | undefined;
}

/** `quickStateFile` but for its records, which `records` gives checked. */
function quickStateTop(value: Record<string, unknown>, records: QuickRecords): ParsedStateFile | undefined {
  const { version, deviceId, rootDir, pendingHookPaths, formerRoot, owedHookPaths, hookProcessesLeftBehind } =
    value;
  if (
    version !== STATE_VERSION ||
    typeof deviceId !== 'string' ||
    typeof rootDir !== 'string' ||
    (pendingHookPaths !== undefined && !isStringArray(pendingHookPaths))
  ) {
    return undefined;
  }
  const files = records.files();
  const instances = records.instances();
  if (files === undefined || instances === undefined) return undefined;
  const parsed: ParsedStateFile = {
    version,
    deviceId,
    rootDir,
    files,
    instances,
    pendingHookPaths: pendingHookPaths ?? [],
  };
  if (owedHookPaths !== undefined) {
    const owed = quickOwedHookPaths(owedHookPaths);
    if (owed === undefined) return undefined;
    parsed.owedHookPaths = owed;
  }
  if (hookProcessesLeftBehind !== undefined) {
    const left = quickLeftBehind(hookProcessesLeftBehind);
    if (left === undefined) return undefined;
    parsed.hookProcessesLeftBehind = left;
  }
  if (formerRoot === undefined) return parsed;
  if (!isPlainObject(formerRoot) || typeof formerRoot.rootDir !== 'string' || formerRoot.rootDir === '') {
    return undefined;
  }
  const formerFiles = records.formerFiles(formerRoot);
  if (formerFiles === undefined) return undefined;
  parsed.formerRoot = { rootDir: formerRoot.rootDir, files: formerFiles };
  return parsed;
}

/**
 * Files of stateDir over this many bytes are walked (`StateFileWalk`), smaller ones parsed whole as before. Parsed
 * whole, a file costs ~2.2 bytes of peak memory a byte more than walked (~18 MB at 8 MiB, a state of ~17,000
 * instances), and its records' parse is cheaper cold: a state of 10,000 records (1.4 MB) took ~55 ms of CPU in a
 * fresh process parsed whole, ~190 ms walked (docs/performance-history.md, stream28).
 */
export const WALKED_BYTES = 8 * 1024 * 1024;

/**
 * A file of stateDir read by a walk as its bytes arrive (`readStateDirFile`): `walker` keeps each record as it
 * completes, `accept` (after the walker took the whole file) says whether what it kept is the file's value; when
 * the walker gives up, or `accept` refuses, the walk is `release`d and the file is read as text, as before.
 */
export interface StateFileWalk {
  /** Files of more bytes than this are walked; smaller ones are read as text (WALKED_BYTES). */
  readonly fromBytes: number;
  readonly walker: JsonRecordWalker;
  accept(): boolean;
  release(): void;
}

/**
 * state.json read a record at a time (`JsonRecordWalker`): each record of `files`, `instances` and
 * `formerRoot.files` parsed alone and checked by hand as `quickStateFile` checks it, only the checked record
 * kept. `parsed` is what `quickStateFile(JSON.parse(text))` gives; anything it would refuse (and a key twice)
 * gives the walk up, for the text to be parsed and judged as before (zod names the problem).
 * JSON.parse of the whole text held the text, its tree and the records together: a real state of 150,000
 * instances (69 MB) peaked at ~400 MB, ~190 MB walked (docs/performance-history.md, stream28).
 */
export function stateFileWalk(
  fromBytes = WALKED_BYTES,
): StateFileWalk & { parsed(): ParsedStateFile | undefined } {
  let held = heldStrings();
  let files = new Map<string, ManagedFile>();
  let instances = new Map<string, InstanceRecord>();
  let formerFiles = new Map<string, FormerFile>();
  const indices = { files: 0, instances: 0, formerFiles: 0 };
  let parsed: ParsedStateFile | undefined;
  function records<T>(
    map: () => Map<string, T>,
    kind: keyof typeof indices,
    quick: (item: unknown, held: HeldStrings, key: string) => T | undefined,
  ): RecordShape {
    return {
      kind: 'records',
      record: (key, value) => {
        const kept = map();
        if (kept.has(key)) return false;
        const name = held(key);
        const checked = quick(value, held, name);
        if (checked === undefined) return false;
        kept.set(name, checked);
        if (isArrayIndexKey(name)) indices[kind] += 1;
        return true;
      },
    };
  }
  const leaf: RecordShape = { kind: 'leaf' };
  const walker = new JsonRecordWalker({
    kind: 'object',
    members: new Map<string, RecordShape>([
      ['version', leaf],
      ['deviceId', leaf],
      ['rootDir', leaf],
      ['files', records(() => files, 'files', quickManagedFile)],
      ['instances', records(() => instances, 'instances', quickInstanceRecord)],
      ['pendingHookPaths', leaf],
      ['owedHookPaths', leaf],
      ['hookProcessesLeftBehind', leaf],
      [
        'formerRoot',
        {
          kind: 'object',
          members: new Map<string, RecordShape>([
            ['rootDir', leaf],
            ['files', records(() => formerFiles, 'formerFiles', quickFormerFile)],
          ]),
        },
      ],
    ]),
  });
  const release = () => {
    held = heldStrings();
    files = new Map();
    instances = new Map();
    formerFiles = new Map();
    parsed = undefined;
  };
  return {
    fromBytes,
    walker,
    release,
    parsed: () => parsed,
    accept() {
      const top = walker.top;
      const former = top.get('formerRoot') as Map<string, unknown> | undefined;
      const value: Record<string, unknown> = {
        version: top.get('version'),
        deviceId: top.get('deviceId'),
        rootDir: top.get('rootDir'),
        pendingHookPaths: top.get('pendingHookPaths'),
        owedHookPaths: top.get('owedHookPaths'),
        hookProcessesLeftBehind: top.get('hookProcessesLeftBehind'),
        formerRoot: former === undefined ? undefined : { rootDir: former.get('rootDir') },
      };
      parsed = quickStateTop(value, {
        files: () => (top.get('files') === true ? inObjectKeyOrder(files, indices.files) : undefined),
        instances: () =>
          top.get('instances') === true ? inObjectKeyOrder(instances, indices.instances) : undefined,
        formerFiles: () =>
          former?.get('files') === true ? inObjectKeyOrder(formerFiles, indices.formerFiles) : undefined,
      });
      return parsed !== undefined;
    },
  };
}

function quickOwedHookPaths(value: unknown): ParsedStateFile['owedHookPaths'] {
  if (!Array.isArray(value)) return undefined;
  const out: NonNullable<ParsedStateFile['owedHookPaths']> = [];
  for (const owed of value as unknown[]) {
    if (!isPlainObject(owed)) return undefined;
    const { match, run, paths, truncated } = owed;
    if (typeof match !== 'string' || !isStringArray(run) || run.length === 0 || !isStringArray(paths))
      return undefined;
    if (truncated !== undefined && truncated !== true) return undefined;
    out.push(truncated === true ? { match, run, paths, truncated } : { match, run, paths });
  }
  return out;
}

function quickLeftBehind(value: unknown): ParsedStateFile['hookProcessesLeftBehind'] {
  if (!Array.isArray(value)) return undefined;
  const out: NonNullable<ParsedStateFile['hookProcessesLeftBehind']> = [];
  for (const left of value as unknown[]) {
    if (!isPlainObject(left)) return undefined;
    const { match, run, pid, startTime, bootId } = left;
    if (typeof match !== 'string' || !isStringArray(run) || run.length === 0) return undefined;
    if (typeof pid !== 'number' || !Number.isInteger(pid) || pid <= 0) return undefined;
    if (typeof startTime !== 'string' || startTime === '') return undefined;
    if (bootId !== undefined && (typeof bootId !== 'string' || bootId === '')) return undefined;
    out.push({ match, run, pid, startTime, ...(bootId === undefined ? {} : { bootId }) });
  }
  return out;
}

function quickFormerFile(value: unknown, held: HeldStrings): FormerFile | undefined {
  if (!isPlainObject(value)) return undefined;
  const { instanceId, sha256 } = value;
  if (typeof instanceId !== 'string' || instanceId.length === 0) return undefined;
  if (typeof sha256 !== 'string' || !SHA256_HEX.test(sha256)) return undefined;
  return { instanceId: held(instanceId), sha256 };
}

export type StateLoadOutcome = 'loaded' | 'missing' | 'corrupt' | 'other_device' | 'other_root';

/**
 * Reads state.json. A missing or corrupt state, or one of another device or root, yields an empty state: the
 * agent then owns nothing and so deletes nothing — it re-adopts files by rewriting them as the server asks.
 */
export async function loadLocalState(
  fs: FsPort,
  stateDir: string,
  deviceId: string,
  logger: Logger,
  rootDir = '',
): Promise<{ state: LocalState; outcome: StateLoadOutcome; persisted?: StateSnapshot }> {
  const empty = () => emptyState(deviceId, rootDir);
  const walk = stateFileWalk();
  const raw = await readStateDirFile(fs, stateDir, STATE_FILE, STATE_WEIGHT, walk);
  if (raw === undefined) return { state: empty(), outcome: 'missing' };
  let parsed: ParsedStateFile;
  try {
    const walked = raw === WALKED ? walk.parsed() : undefined;
    if (walked !== undefined) parsed = walked;
    else {
      const value = parseStateFile(raw as StateFileText);
      parsed = quickStateFile(value) ?? stateSchemas().LocalStateFile.parse(value);
    }
  } catch (error) {
    logger.error(
      { err: error, file: STATE_FILE },
      'local state is corrupt: starting empty, no file will be deleted',
    );
    return { state: empty(), outcome: 'corrupt' };
  }
  if (parsed.deviceId !== deviceId) {
    logger.warn(
      { stateDeviceId: parsed.deviceId, deviceId },
      'local state belongs to another device id: starting empty, no file will be deleted',
    );
    return { state: empty(), outcome: 'other_device' };
  }
  if (!(await sameRoot(fs, parsed.rootDir, rootDir))) {
    logger.warn(
      { stateRootDir: parsed.rootDir, rootDir },
      'local state was recorded for another root directory: starting empty, no file will be deleted',
    );
    const state = empty();
    const former = await formerRootAfterMove(fs, parsed, rootDir, logger);
    if (former !== undefined) state.formerRoot = former;
    return { state, outcome: 'other_root' };
  }
  const files = guardedFiles(parsed.files, logger);
  const instances = new Map<string, InstanceRecord>();
  for (const [id, record] of parsed.instances) {
    // Attempts reset on restart: an operator who fixed the cause expects an immediate retry.
    if (record.nextAttemptAt === undefined) {
      // One copy, not a rest object and a copy of it: most records wait for no attempt.
      instances.set(id, { ...record, attempts: 0 });
      continue;
    }
    const { nextAttemptAt: _dropped, ...rest } = record;
    instances.set(id, { ...rest, attempts: 0 });
  }
  const state: LocalState = {
    deviceId,
    rootDir,
    files,
    instances,
    cooldowns: new Map(),
    pendingHookPaths: guardedHookPaths(parsed.pendingHookPaths, logger),
  };
  const owed = guardedOwedHookPaths(parsed.owedHookPaths ?? [], logger);
  if (owed.length > 0) state.owedHookPaths = owed;
  const leftBehind = parsed.hookProcessesLeftBehind ?? [];
  if (leftBehind.length > 0) state.hookProcessesLeftBehind = leftBehind;
  // Counted before the guard: a record it drops is left out by the next persist.
  const formerSize = parsed.formerRoot?.files.size ?? 0;
  if (parsed.formerRoot !== undefined) state.formerRoot = guardedFormerRoot(parsed.formerRoot, logger);
  return {
    state,
    outcome: 'loaded',
    // What the file holds (attempts and nextAttemptAt as read): a state still equal to it has nothing to write.
    persisted: {
      deviceId: parsed.deviceId,
      rootDir: parsed.rootDir,
      files: new Map(parsed.files),
      instances: parsed.instances,
      pendingHookPaths: new Set(parsed.pendingHookPaths),
      ...(parsed.owedHookPaths === undefined ? {} : { owedHookPaths: parsed.owedHookPaths }),
      ...(parsed.hookProcessesLeftBehind === undefined
        ? {}
        : { hookProcessesLeftBehind: parsed.hookProcessesLeftBehind }),
      ...(parsed.formerRoot === undefined
        ? {}
        : { formerRoot: { rootDir: parsed.formerRoot.rootDir, size: formerSize } }),
    },
  };
}

/**
 * The former root of a state recorded for another root (a true move): the root it records, when it recorded any
 * file (the former root it held before, if any, is then dropped: one at a time, logged), else the former root it
 * held; none when that is the configured root again (a move back: its files are under rootDir, where a record of
 * another root proves nothing, as before).
 */
async function formerRootAfterMove(
  fs: FsPort,
  parsed: ParsedStateFile,
  rootDir: string,
  logger: Logger,
): Promise<FormerRoot | undefined> {
  let former: FormerRoot | undefined;
  if (parsed.files.size > 0 && parsed.rootDir !== '') {
    const files = new Map<string, FormerFile>();
    for (const [relative, file] of parsed.files)
      files.set(relative, { instanceId: file.instanceId, sha256: file.sha256 });
    former = { rootDir: parsed.rootDir, files };
    if (parsed.formerRoot !== undefined && parsed.formerRoot.files.size > 0) {
      logger.warn(
        {
          formerRootDir: parsed.formerRoot.rootDir,
          files: parsed.formerRoot.files.size,
          stateRootDir: parsed.rootDir,
        },
        'rootDir moved again: the records of the root before the last one are dropped (its retired files are reported removed, as not recorded)',
      );
    }
  } else former = parsed.formerRoot;
  if (former === undefined || (await sameRoot(fs, former.rootDir, rootDir))) return undefined;
  return guardedFormerRoot(former, logger);
}

/** The former root's records whose path the path guard accepts (as `guardedFiles`: a hand edit, dropped with an error). */
function guardedFormerRoot(former: FormerRoot, logger: Logger): FormerRoot {
  for (const relative of former.files.keys()) {
    try {
      validateRelativePath(relative);
    } catch (error) {
      former.files.delete(relative);
      logger.error(
        { err: error, file: STATE_FILE, path: relative, formerRootDir: former.rootDir },
        'a record of the former root in state.json names a path the path guard refuses: dropped',
      );
    }
  }
  return former;
}

/**
 * The records of `files` whose path, and every directory they made, the path guard accepts (validateRelativePath).
 * The agent records only paths it wrote, so any other (`../x`, an absolute path, `a//b`) comes from a state.json
 * edited by someone: it is dropped with an error naming it, never written, removed or pruned, and the next persist
 * leaves it out. Kept, it was planned for removal at every full pass and refused there (`waiting`), so no pass
 * converged again and `--once` exited 1 for good.
 */
function guardedFiles(files: Map<string, ManagedFile>, logger: Logger): Map<string, ManagedFile> {
  let kept: Map<string, ManagedFile> | undefined;
  for (const [relative, file] of files) {
    try {
      validateRelativePath(relative);
      for (const dir of file.createdDirs) validateRelativePath(dir);
    } catch (error) {
      kept ??= new Map(files);
      kept.delete(relative);
      logger.error(
        { err: error, file: STATE_FILE, path: relative, instanceId: file.instanceId },
        'a record of state.json names a path the path guard refuses: dropped, that path is never written nor removed',
      );
    }
  }
  return kept ?? files;
}

/**
 * The paths waiting for their hooks whose form the path guard accepts (validateRelativePath), as `guardedFiles`
 * judges state.json's records. The agent records only paths it wrote; any other (`../x`, an absolute path, a
 * line break) comes from a state.json edited by someone and would reach operator hooks in CONFIG_AGENT_CHANGED:
 * dropped with an error naming it, and the next persist leaves it out. Nothing on disk is touched either way.
 */
/** Each hook's owed paths through the path guard (`guardedHookPaths`); a hook left with none is dropped. */
function guardedOwedHookPaths(owed: readonly OwedHookPaths[], logger: Logger): OwedHookPaths[] {
  const kept: OwedHookPaths[] = [];
  for (const hook of owed) {
    const paths = [...guardedHookPaths(hook.paths, logger)].sort();
    if (paths.length > 0) kept.push({ ...hook, paths });
  }
  return kept;
}

function guardedHookPaths(paths: readonly string[], logger: Logger): Set<string> {
  const kept = new Set<string>();
  for (const relative of paths) {
    try {
      validateRelativePath(relative);
      kept.add(relative);
    } catch (error) {
      logger.error(
        { err: error, file: STATE_FILE, path: relative },
        'a path of state.json waiting for its hooks is one the path guard refuses: dropped, no hook is told of it',
      );
    }
  }
  return kept;
}

/** A file of stateDir as read: its text, or why it was not read whole (parseStateFile throws it). */
export type StateFileText = string | StateFileOverweightError;

/** A file of stateDir taken whole by the walk given to `readStateDirFile` (`StateFileWalk`): no text was kept. */
export const WALKED: unique symbol = Symbol('walked');

/** The JSON of a file of stateDir as read; throws the refusal a weighed read returned, as JSON.parse throws. */
export function parseStateFile(text: StateFileText): unknown {
  if (typeof text !== 'string') throw text;
  return JSON.parse(text);
}

/**
 * A file of stateDir as text, undefined when it does not exist. Opened non-blocking and fstat-checked: a FIFO
 * or device in its place must not hang start-up. Any other failure names stateDir (StateDirError). With `weight`,
 * its bytes are weighed before they are kept (`readWeighed`): a file heavier than any the agent writes comes back
 * as a StateFileOverweightError, never parsed, which each caller takes as it takes a corrupt file. With `walk`
 * too, a file read weighed is walked as it is weighed (`readWeighed`): WALKED when the walk took it whole.
 */
export async function readStateDirFile(
  fs: FsPort,
  stateDir: string,
  name: string,
  weight?: JsonWeight,
): Promise<StateFileText | undefined>;
export async function readStateDirFile(
  fs: FsPort,
  stateDir: string,
  name: string,
  weight: JsonWeight,
  walk: StateFileWalk | undefined,
): Promise<StateFileText | typeof WALKED | undefined>;
export async function readStateDirFile(
  fs: FsPort,
  stateDir: string,
  name: string,
  weight?: JsonWeight,
  walk?: StateFileWalk,
): Promise<StateFileText | typeof WALKED | undefined> {
  let handle: Awaited<ReturnType<FsPort['open']>>;
  try {
    handle = await fs.open(path.join(stateDir, name), STATE_READ_FLAGS);
  } catch (error) {
    if (errnoCode(error) === 'ENOENT') return undefined;
    // A socket (or a device without its driver) cannot be opened at all: ENXIO, which also says a disk went away
    // (retried). Named by what is there, as a FIFO is below: "ENXIO" alone, retried for good, hid it (adv36).
    if (errnoCode(error) === 'ENXIO') await refuseNotRegular(fs, stateDir, name);
    throw new StateDirError(stateDir, `cannot read ${name}`, error);
  }
  try {
    const stats = await handle.stat();
    // Named by what is there: "EISDIR" alone misled operators who found a FIFO or a device at the name.
    if (!stats.isFile()) throw notRegular(stateDir, name, stats);
    // Longer than any text the agent writes (a string cannot be): a runaway or sparse file of a broken disk or a
    // hand's `truncate`. Read, it failed every start for good (over 2 GiB before reading, else after reading it
    // all), "stateDir is not usable"; refused unread it is unreadable like any that does not parse: state.json
    // kept aside as corrupt, the others started empty.
    if (stats.size > bufferConstants.MAX_STRING_LENGTH) return overLength(name);
    if (weight === undefined) return await handle.readFile({ encoding: 'utf8' });
    return await readWeighed(handle, name, stats.size, weight, walk);
  } catch (error) {
    if (error instanceof StateDirError) throw error;
    throw new StateDirError(stateDir, `cannot read ${name}`, error);
  } finally {
    await handle.close().catch(() => undefined);
  }
}

const STATE_READ_FLAGS = constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOFOLLOW;

/** The refusal of a state file that is not a regular file: for an operator to remove (exit 78), never retried. */
function notRegular(stateDir: string, name: string, stats: Parameters<typeof entryKind>[0]): StateDirError {
  return new StateDirError(
    stateDir,
    `cannot read ${name}`,
    Object.assign(new Error('not a regular file'), { code: 'EISDIR' }),
    `it is ${entryKind(stats)}, not a regular file (remove it or move it aside)`,
  );
}

/** Throws notRegular when what is at `name` (not followed) is not a regular file; returns when it is one, or gone. */
async function refuseNotRegular(fs: FsPort, stateDir: string, name: string): Promise<void> {
  const stats = await fs.lstat(path.join(stateDir, name)).catch(() => undefined);
  if (stats !== undefined && !stats.isFile()) throw notRegular(stateDir, name, stats);
}

function overLength(name: string): StateFileOverweightError {
  return new StateFileOverweightError(name, 'bytes', bufferConstants.MAX_STRING_LENGTH);
}

/** The bytes weighed at a time: a file refused is never held, whatever its size (one buffer of this). */
const WEIGH_CHUNK_BYTES = 256 * 1024;

/**
 * A file of at most this many bytes is parsed unweighed: whatever its shape, parsing it builds at most ~45 MB (the
 * worst per byte measured, `[[[[`, built ~43 bytes a byte: 32 MiB, 1.4 GB). Weighing a real state.json of 1,000
 * instances (440 KB) cost more CPU in a fresh process (~30 ms under load) than parsing it (2–5 ms).
 */
export const UNWEIGHED_BYTES = 1024 * 1024;

/**
 * The text of an open file of stateDir once its bytes weigh within `weight` (tokens and depth: what JSON.parse
 * would build, lib/json-weigher.ts), else why not; files of at most UNWEIGHED_BYTES are read at once. Read in two
 * passes over the one descriptor (positional reads): the first weighs a chunk at a time in one buffer, so a
 * refused file is never held (500 MiB of `[[[[` is refused at its ninth byte, of `[],` after 12 MB); the second
 * reads as many bytes as the first weighed into one buffer of their length, as readFile did. stateDir's files
 * are published by rename, never written in place, so both passes read the same bytes. Unweighed, 32 MiB of
 * `[[[[` cost 1.4 GB and 500 MiB many times any device's memory; the agent's own largest files cost what they
 * did (~290 MB at 100,000 instances: docs/performance-history.md, weigh27).
 * With `walk`, the first pass also hands each chunk weighed to the walk, which keeps each record as it
 * completes: a file it takes whole, within the weight, is WALKED and never held as text (a real state.json of
 * 150,000 instances peaked at ~400 MB parsed whole, ~190 MB walked: stream28). A walk that gives up is released
 * and the pass goes on weighing alone; then the text is read as without it. Refusals are the same either way:
 * the weight and length are judged on every byte before a walk is taken.
 */
async function readWeighed(
  handle: Awaited<ReturnType<FsPort['open']>>,
  name: string,
  size: number,
  weight: JsonWeight,
): Promise<StateFileText>;
async function readWeighed(
  handle: Awaited<ReturnType<FsPort['open']>>,
  name: string,
  size: number,
  weight: JsonWeight,
  walk: StateFileWalk | undefined,
): Promise<StateFileText | typeof WALKED>;
async function readWeighed(
  handle: Awaited<ReturnType<FsPort['open']>>,
  name: string,
  size: number,
  weight: JsonWeight,
  walk?: StateFileWalk,
): Promise<StateFileText | typeof WALKED> {
  if (size <= UNWEIGHED_BYTES) return await handle.readFile({ encoding: 'utf8' });
  const weigher = new JsonWeigher(weight);
  const chunk = Buffer.allocUnsafe(WEIGH_CHUNK_BYTES);
  let walking = walk !== undefined && size > walk.fromBytes ? walk : undefined;
  let total = 0;
  for (;;) {
    const { bytesRead } = await handle.read(chunk, 0, chunk.length, total);
    if (bytesRead === 0) break;
    const read = chunk.subarray(0, bytesRead);
    const over = weigher.add(read);
    if (over !== undefined) {
      walking?.release();
      return new StateFileOverweightError(name, over.over, over.bound);
    }
    if (walking !== undefined && !walking.walker.push(read)) {
      walking.release();
      walking = undefined;
    }
    total += bytesRead;
    if (total > bufferConstants.MAX_STRING_LENGTH) {
      walking?.release();
      return overLength(name);
    }
  }
  if (walking !== undefined) {
    if (walking.walker.end() && walking.accept()) return WALKED;
    walking.release();
  }
  const bytes = Buffer.allocUnsafe(total);
  let filled = 0;
  while (filled < total) {
    const { bytesRead } = await handle.read(bytes, filled, total - filled, filled);
    if (bytesRead === 0) break;
    filled += bytesRead;
  }
  return bytes.toString('utf8', 0, filled);
}

/** What a state file's name held instead of a regular file, in words for the log. */
function entryKind(stats: {
  isDirectory(): boolean;
  isSymbolicLink(): boolean;
  isFIFO(): boolean;
  isSocket(): boolean;
}): string {
  if (stats.isDirectory()) return 'a directory';
  if (stats.isSymbolicLink()) return 'a symlink';
  if (stats.isFIFO()) return 'a FIFO';
  if (stats.isSocket()) return 'a socket';
  return 'a device';
}

/** How `readStateDirFileOrSetAside` reads. */
interface SetAsideReadOptions {
  /** Stamps the name set aside (deps.clock). */
  clock: WallClock;
  /** The file's bounds (`readStateDirFile`); a symlink's target salvaged is weighed by them too. */
  weight: JsonWeight;
  setAside?: boolean;
  salvageSymlink?: { euid: number | undefined; maxBytes: number };
}

/**
 * A state file that may be lost without harm to a promise (the write journal, the outbox, the fingerprints) as
 * text, undefined when absent; anything but a regular file at its name (a directory, FIFO, socket, device, a
 * symlink — never followed, never opened blocking: lstat first) is renamed aside to `<name>.not-regular-<ms>`
 * (`-<n>` added when that name is taken: renameAsideUnique),
 * logged, and read as absent, as garbage inside such a file is. It stopped start-up with exit 78 for good.
 * `salvageSymlink`: a symlink's target is read (non-blocking) when it is a regular file of at most `maxBytes`
 * owned by `euid` and writable by nobody else — the agent's own bytes, e.g. queued reports; any other is not
 * trusted. `setAside: false` (dry runs) moves nothing. A failed rename fails as reading did (StateDirError).
 */
export async function readStateDirFileOrSetAside(
  fs: FsPort,
  stateDir: string,
  name: string,
  logger: Logger,
  options: SetAsideReadOptions,
): Promise<StateFileText | undefined>;
export async function readStateDirFileOrSetAside(
  fs: FsPort,
  stateDir: string,
  name: string,
  logger: Logger,
  options: SetAsideReadOptions & { walk: StateFileWalk },
): Promise<StateFileText | typeof WALKED | undefined>;
export async function readStateDirFileOrSetAside(
  fs: FsPort,
  stateDir: string,
  name: string,
  logger: Logger,
  options: SetAsideReadOptions & { walk?: StateFileWalk },
): Promise<StateFileText | typeof WALKED | undefined> {
  const file = path.join(stateDir, name);
  let stats: Awaited<ReturnType<FsPort['lstat']>>;
  try {
    stats = await fs.lstat(file);
  } catch (error) {
    if (errnoCode(error) === 'ENOENT') return undefined;
    throw new StateDirError(stateDir, `cannot read ${name}`, error);
  }
  if (stats.isFile()) {
    try {
      return await readStateDirFile(fs, stateDir, name, options.weight, options.walk);
    } catch (error) {
      // Swapped for something else between the lstat and the open: judged again below.
      const again = await fs.lstat(file).catch(() => undefined);
      if (again === undefined || again.isFile()) throw error;
      stats = again;
    }
  }
  const salvaged =
    stats.isSymbolicLink() && options.salvageSymlink !== undefined
      ? await readOwnedTarget(fs, file, name, options.salvageSymlink, options.weight)
      : undefined;
  if (options.setAside === false) return salvaged;
  let aside: string | undefined;
  try {
    aside = await renameAsideUnique(fs, file, `${file}.not-regular-${options.clock.now()}`);
  } catch (error) {
    throw new StateDirError(stateDir, `cannot move ${name} (${entryKind(stats)}) aside`, error);
  }
  if (aside === undefined) {
    const refusal = `${ASIDE_NAME_TRIES} entries already set aside under its name: remove them`;
    throw new StateDirError(stateDir, `cannot move ${name} (${entryKind(stats)}) aside`, undefined, refusal);
  }
  logger.warn(
    { file: name, found: entryKind(stats), aside, salvaged: salvaged !== undefined },
    `${name} was not a regular file: moved aside`,
  );
  return salvaged;
}

/** Names after `<stamp>` tried before a rename aside gives up: `<stamp>-1` … `<stamp>-999`. */
export const ASIDE_NAME_TRIES = 1000;

/**
 * Renames `from` to `stamp` (`<name>.not-regular-<ms>` and the like), or to the first of `<stamp>-1`, `<stamp>-2`
 * … that nothing holds, and answers the name used; undefined when all of them are taken. The `<ms>` alone does not make a name unique: a device that
 * boots at 1970 (no RTC, before NTP) stamps the same ms each boot, and rename(2) replaced an earlier entry set
 * aside (a file: its evidence lost) or failed (a non-empty directory: start-up failed once). Judged by lstat
 * first (rename replaces a file silently); a name taken between the lstat and the rename is passed over too.
 * stateDir is the agent's alone under its lock, so that window is its own.
 */
export async function renameAsideUnique(
  fs: FsPort,
  from: string,
  stamp: string,
): Promise<string | undefined> {
  for (let n = 0; n < ASIDE_NAME_TRIES; n += 1) {
    const aside = n === 0 ? stamp : `${stamp}-${n}`;
    const taken = await fs.lstat(aside).then(
      () => true,
      (error: unknown) => {
        if (errnoCode(error) === 'ENOENT') return false;
        throw error;
      },
    );
    if (taken) continue;
    try {
      await fs.rename(from, aside);
      return aside;
    } catch (error) {
      const code = errnoCode(error);
      if (code !== 'EEXIST' && code !== 'ENOTEMPTY' && code !== 'ENOTDIR' && code !== 'EISDIR') throw error;
    }
  }
  return undefined;
}

async function readOwnedTarget(
  fs: FsPort,
  file: string,
  name: string,
  trust: { euid: number | undefined; maxBytes: number },
  weight: JsonWeight,
): Promise<StateFileText | undefined> {
  if (trust.euid === undefined) return undefined;
  let handle: Awaited<ReturnType<FsPort['open']>>;
  try {
    handle = await fs.open(file, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch {
    return undefined;
  }
  try {
    const target = await handle.stat();
    if (!target.isFile() || target.uid !== trust.euid || (target.mode & 0o022) !== 0) return undefined;
    if (target.size > trust.maxBytes) return undefined;
    return await readWeighed(handle, name, target.size, weight);
  } catch {
    return undefined;
  } finally {
    await handle.close().catch(() => undefined);
  }
}

/** Entries in code-unit order of their keys. */
function sortedEntries<T>(map: Map<string, T>): [string, T][] {
  return [...map.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

export function serializeLocalState(state: LocalState): LocalStateFile {
  return {
    version: STATE_VERSION,
    deviceId: state.deviceId,
    rootDir: state.rootDir,
    files: Object.fromEntries(
      sortedEntries(state.files).map(([relative, file]) => [
        relative,
        JSON.parse(persistedFile(relative, file)),
      ]),
    ),
    instances: Object.fromEntries(sortedEntries(state.instances)),
    pendingHookPaths: [...state.pendingHookPaths].sort(),
    ...(state.owedHookPaths === undefined || state.owedHookPaths.length === 0
      ? {}
      : { owedHookPaths: state.owedHookPaths.map(owedRecord) }),
    ...(state.hookProcessesLeftBehind === undefined || state.hookProcessesLeftBehind.length === 0
      ? {}
      : { hookProcessesLeftBehind: state.hookProcessesLeftBehind.map(leftBehindRecord) }),
    ...(state.formerRoot === undefined
      ? {}
      : {
          formerRoot: {
            rootDir: state.formerRoot.rootDir,
            files: Object.fromEntries(sortedEntries(state.formerRoot.files)),
          },
        }),
  };
}

/** A hook's owed paths as state.json holds them: its fields in one order, whatever object the agent built. */
function owedRecord(owed: OwedHookPaths): NonNullable<LocalStateFile['owedHookPaths']>[number] {
  const record = { match: owed.match, run: [...owed.run], paths: [...owed.paths] };
  return owed.truncated === true ? { ...record, truncated: true } : record;
}

/** A hook process left behind as state.json holds it: its fields in one order. */
function leftBehindRecord(
  left: HookProcessLeftBehind,
): NonNullable<LocalStateFile['hookProcessesLeftBehind']>[number] {
  return {
    match: left.match,
    run: [...left.run],
    pid: left.pid,
    startTime: left.startTime,
    ...(left.bootId === undefined ? {} : { bootId: left.bootId }),
  };
}

/**
 * state.json's text, a record at a time: `JSON.stringify(serializeLocalState(state))` without indentation
 * (which was ~30 % of its bytes), keys in code-unit order, then a newline. Any version's `JSON.parse` reads it
 * as before. The state is taken as it is now (its entries, whose records are replaced, never changed in
 * place); the text is made afresh on each call of the function returned, so that it is never held whole
 * (~4 MB at 10,000 managed files, ~5.6 MB indented before).
 */
export function stateFilePieces(state: LocalState): () => Iterable<string> {
  const head =
    `{"version":${STATE_VERSION},"deviceId":${JSON.stringify(state.deviceId)},` +
    `"rootDir":${JSON.stringify(state.rootDir)},"files":`;
  const files = sortedEntries(state.files);
  const instances = sortedEntries(state.instances);
  // Written only when some hook is owed paths: every other state.json keeps its bytes (no write at an upgrade).
  const owed = state.owedHookPaths ?? [];
  const leftBehind = state.hookProcessesLeftBehind ?? [];
  const hooks =
    `,"pendingHookPaths":${JSON.stringify([...state.pendingHookPaths].sort())}` +
    (owed.length === 0 ? '' : `,"owedHookPaths":${JSON.stringify(owed.map(owedRecord))}`) +
    (leftBehind.length === 0
      ? ''
      : `,"hookProcessesLeftBehind":${JSON.stringify(leftBehind.map(leftBehindRecord))}`);
  const former = state.formerRoot;
  const formerFiles = former === undefined ? [] : sortedEntries(former.files);
  return function* pieces() {
    yield head;
    yield* objectPieces(files, persistedFile);
    yield ',"instances":';
    yield* objectPieces(instances);
    yield hooks;
    if (former !== undefined) {
      yield `,"formerRoot":{"rootDir":${JSON.stringify(former.rootDir)},"files":`;
      yield* objectPieces(formerFiles);
      yield '}';
    }
    yield '}\n';
  };
}

function* objectPieces<T>(
  entries: readonly [string, T][],
  text: (key: string, value: T) => string = (_key, value) => JSON.stringify(value),
): Generator<string> {
  let separator = '{';
  for (const [key, value] of entries) {
    yield `${separator}${JSON.stringify(key)}:${text(key, value)}`;
    separator = ',';
  }
  yield separator === '{' ? '{}' : '}';
}

/**
 * Persists the state durably; returns false when the bytes were unchanged (no flash write). `compare: false`:
 * the caller knows the state changed since it last wrote the file, which is rewritten without a read-back.
 */
export async function saveLocalState(
  fs: FsPort,
  stateDir: string,
  state: LocalState,
  options: { ensureDurable?: boolean; compare?: boolean } = {},
): Promise<boolean> {
  const result = await writeDurableText(fs, stateDir, STATE_FILE, stateFilePieces(state), 0o600, options);
  return result.outcome === 'written';
}
