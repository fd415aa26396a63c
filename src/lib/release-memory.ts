// A full garbage collection that shrinks the heap, for the daemon between polls: V8 alone keeps what a pass grew.
import { getHeapStatistics, setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

type GcFunction = (options?: { type: 'major'; execution: 'sync'; flavor: 'last-resort' }) => void;

/**
 * A release runs only once V8's heap grew this much since the last one. A poll with nothing to do grows it by
 * ~4 MiB (the young generation filling again): releasing after every poll kept the idle daemon at 91 MiB
 * instead of 99 but cost ~55 ms of CPU per poll instead of ~7 (Node 24, 1,000 managed).
 */
export const RELEASE_AFTER_GROWTH_BYTES = 8 * 1024 * 1024;

let collector: GcFunction | null | undefined;

/**
 * V8's `gc` without `--expose-gc` on the command line: the flag set now applies to the contexts made after it,
 * so a new context has `gc`. From V8 12 (Node 22) it is asked for the `last-resort` flavor, V8's collection
 * under memory pressure, which also shrinks the young generation and returns the freed pages (Node 24, idle
 * daemon with 1,000 managed: 115 → 99 MiB, docs/performance.md "Idle daemon"). Node 20's V8 (11.3) takes no
 * flavor, and a `gc(options)` there leaves garbage a plain `gc()` collects: it gets the plain one, which
 * returns little (90 MiB either way). The releaser collects only once the heap (V8's committed size) grew by
 * `growthBytes` since its last collection. Undefined when the runtime refuses (memory is then left to V8).
 */
export function heapReleaser(
  growthBytes = RELEASE_AFTER_GROWTH_BYTES,
  v8Version = process.versions.v8,
): (() => void) | undefined {
  collector ??= exposeGc();
  const collect = collector;
  if (collect === null) return undefined;
  const lastResort = Number.parseInt(v8Version, 10) >= 12;
  let heapAfterLast = 0;
  return () => {
    if (getHeapStatistics().total_heap_size < heapAfterLast + growthBytes) return;
    if (lastResort) collect({ type: 'major', execution: 'sync', flavor: 'last-resort' });
    else collect();
    heapAfterLast = getHeapStatistics().total_heap_size;
  };
}

function exposeGc(): GcFunction | null {
  let gc: unknown = (globalThis as { gc?: unknown }).gc;
  try {
    if (typeof gc !== 'function') {
      setFlagsFromString('--expose-gc');
      gc = runInNewContext('gc');
    }
  } catch {
    return null;
  }
  return typeof gc === 'function' ? (gc as GcFunction) : null;
}
