// What state.json holds, record by record: a persist whose state equals it has nothing to write.
import type {
  HookProcessLeftBehind,
  InstanceRecord,
  LocalState,
  ManagedFile,
  OwedHookPaths,
} from './state.js';

/**
 * The records state.json holds, by reference: records are replaced in the state's maps, never changed in place
 * (record.ts, report.ts), so a record that is still the same object needs no comparison, and one replaced by an
 * equal copy is compared field by field.
 */
export interface StateSnapshot {
  deviceId: string;
  rootDir: string;
  files: ReadonlyMap<string, ManagedFile>;
  instances: ReadonlyMap<string, InstanceRecord>;
  pendingHookPaths: ReadonlySet<string>;
  /** By reference: replaced whole when it changes (state.ts `OwedHookPaths`). */
  owedHookPaths?: readonly OwedHookPaths[];
  /** By reference, as owedHookPaths (state.ts `HookProcessLeftBehind`). */
  hookProcessesLeftBehind?: readonly HookProcessLeftBehind[];
  /** The former root's directory and its count of records: they only ever go, so the count tells a change. */
  formerRoot?: { rootDir: string; size: number };
}

/** The state as it is now; taken in the same synchronous step as its serialisation. */
export function snapshotState(state: LocalState): StateSnapshot {
  return {
    deviceId: state.deviceId,
    rootDir: state.rootDir,
    files: new Map(state.files),
    instances: new Map(state.instances),
    pendingHookPaths: new Set(state.pendingHookPaths),
    ...(state.owedHookPaths === undefined ? {} : { owedHookPaths: state.owedHookPaths }),
    ...(state.hookProcessesLeftBehind === undefined
      ? {}
      : { hookProcessesLeftBehind: state.hookProcessesLeftBehind }),
    ...(state.formerRoot === undefined
      ? {}
      : { formerRoot: { rootDir: state.formerRoot.rootDir, size: state.formerRoot.files.size } }),
  };
}

/** Whether `state` serialises to what `snapshot` does: the same keys, and records equal as JSON values. */
export function sameAsSnapshot(state: LocalState, snapshot: StateSnapshot): boolean {
  return (
    state.deviceId === snapshot.deviceId &&
    state.rootDir === snapshot.rootDir &&
    sameEntries(state.files, snapshot.files) &&
    sameEntries(state.instances, snapshot.instances) &&
    state.pendingHookPaths.size === snapshot.pendingHookPaths.size &&
    [...state.pendingHookPaths].every((path) => snapshot.pendingHookPaths.has(path)) &&
    sameOwed(state.owedHookPaths ?? [], snapshot.owedHookPaths ?? []) &&
    sameOwed(state.hookProcessesLeftBehind ?? [], snapshot.hookProcessesLeftBehind ?? []) &&
    state.formerRoot?.rootDir === snapshot.formerRoot?.rootDir &&
    state.formerRoot?.files.size === snapshot.formerRoot?.size
  );
}

/** Owed hook paths equal as written: none and an empty list alike (neither is written). */
function sameOwed<T>(current: readonly T[], persisted: readonly T[]): boolean {
  return (
    current === persisted || (current.length === 0 && persisted.length === 0) || sameJson(current, persisted)
  );
}

function sameEntries<T>(current: ReadonlyMap<string, T>, persisted: ReadonlyMap<string, T>): boolean {
  if (current.size !== persisted.size) return false;
  for (const [key, value] of current) {
    const before = persisted.get(key);
    if (before === undefined || !sameJson(value, before)) return false;
  }
  return true;
}

/**
 * Equal as JSON.stringify writes them: a field holding `undefined` is no field, the order of fields aside
 * (JSON.parse gives them back either way). Records hold strings, numbers, arrays of strings and one nested
 * object (`reportEcho`); anything else is unequal, so the state is written.
 */
export function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  // Plain loops, no callbacks: a pass compares every record, and `--once` runs this code cold.
  const aIsArray = Array.isArray(a);
  const bIsArray = Array.isArray(b);
  if (aIsArray || bIsArray) {
    if (!aIsArray || !bIsArray || a.length !== b.length) return false;
    for (let index = 0; index < a.length; index += 1) if (!sameJson(a[index], b[index])) return false;
    return true;
  }
  const left = a as Record<string, unknown>;
  const right = b as Record<string, unknown>;
  let fields = 0;
  for (const key of Object.keys(left)) {
    const value = left[key];
    if (value === undefined) continue;
    fields += 1;
    if (!Object.hasOwn(right, key) || !sameJson(value, right[key])) return false;
  }
  for (const key of Object.keys(right)) if (right[key] !== undefined) fields -= 1;
  return fields === 0;
}
