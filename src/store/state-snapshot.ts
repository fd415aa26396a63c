// What state.json holds, record by record: a persist whose state equals it has nothing to write.
import type { InstanceRecord, LocalState, ManagedFile } from './state.js';

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
}

/** The state as it is now; taken in the same synchronous step as its serialisation. */
export function snapshotState(state: LocalState): StateSnapshot {
  return {
    deviceId: state.deviceId,
    rootDir: state.rootDir,
    files: new Map(state.files),
    instances: new Map(state.instances),
    pendingHookPaths: new Set(state.pendingHookPaths),
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
    [...state.pendingHookPaths].every((path) => snapshot.pendingHookPaths.has(path))
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
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false;
    return a.every((item, index) => sameJson(item, b[index]));
  }
  const left = a as Record<string, unknown>;
  const right = b as Record<string, unknown>;
  const keys = Object.keys(left).filter((key) => left[key] !== undefined);
  if (keys.length !== Object.keys(right).filter((key) => right[key] !== undefined).length) return false;
  return keys.every((key) => Object.hasOwn(right, key) && sameJson(left[key], right[key]));
}
