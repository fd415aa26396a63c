// Full garbage collections that bound the heap: between polls (V8 alone keeps what a pass grew) and during a pass.
import { getHeapSpaceStatistics, getHeapStatistics, setFlagsFromString } from 'node:v8';

type GcFunction = (options?: { type: 'major'; execution: 'sync'; flavor: 'last-resort' }) => void;

const MiB = 1024 * 1024;

/**
 * The idle release runs only once V8's heap (committed) grew by at least this much since the last one. A poll
 * with nothing to do grows it by ~4 MiB (the young generation filling again): releasing after every poll kept
 * the idle daemon at 91 MiB instead of 99 but cost ~55 ms of CPU per poll instead of ~7 (Node 24, 1,000 managed).
 */
const RELEASE_AFTER_GROWTH_BYTES = 8 * MiB;

/**
 * …and by this fraction of the heap the last release left. With 10,000 managed the young generation alone grows
 * back by ~17 MiB after each release (27 → 44 MiB), so a fixed 8 MiB ran a release after every poll (~195 ms of
 * CPU per poll on Node 24). Node 24, 10,000 managed, 1 s polls: 0.75 gave 133 ms per poll and 131 MiB, 1 gave
 * 128 ms and 140 MiB, 0.5 released after every poll (docs/performance-history.md "Memory, fourth round").
 */
const RELEASE_AFTER_GROWTH_FRACTION = 0.75;

/**
 * The idle release runs whatever the heap grew once the waits since the last one, the wait ahead included, add up
 * to at least this: the daemon is then idle for most of that time (the default poll is 30 s), and what the polls
 * grew back is held until the next release. The growth rule alone left the idle daemon at 1,000 managed at 64.5 MiB
 * (Node 24, 30 s polls) and a release after every pass at 60.6 (docs/performance-history.md "Idle daemon, tenth round").
 * Short waits add up: at 1 s polls a release every few polls holds Node 24 at 60.5–61.4 MiB and Node 20 (two
 * collections, heapReleaser) at ~58.6, instead of 61.8–62.9 and 61.0–61.4 ("Idle daemon, twelfth round"); the cost
 * rule below sets how few.
 */
export const RELEASE_MIN_WAITS_MS = 1_000;

/**
 * …and at least this many times the CPU the last release between polls cost: the release takes at most 0.5 % of
 * a core. Its cost grows with the managed set (~20 ms on Node 20 and ~25 ms on Node 24 at 1,000; ~190 ms at 10,000
 * on Node 24), so at 1,000 managed a daemon polling every second releases every fourth or fifth poll, and one
 * polling every 30 s after every pass; at 10,000 every second 30 s poll
 * (docs/performance-history.md "Idle daemon, eleventh round" and "twelfth round").
 */
export const RELEASE_EVERY_PASS_WAIT_PER_COST = 200;

/**
 * During a pass, a full collection once the old generation grew this much since its lowest point after the
 * last one. V8 lets the old generation grow to about four times what was live between its own full collections
 * (a first sync of 10,000 made three); collecting sooner keeps the committed heap, and the RSS, nearer what is
 * live: peak RSS of that sync 194 → 166 MiB (median of 5), six full collections instead of three. Keyed on the
 * used heap as a whole, which swings with the young generation, it collected 13 times for the same peak and
 * ~3 s more CPU (docs/performance-history.md "Memory, fourth round").
 */
const COLLECT_AFTER_OLD_GROWTH_BYTES = 16 * MiB;

/** What a growth policy reads and does: V8 in production, fakes in tests. */
export interface HeapControl {
  /** The heap size the policy watches, in bytes. */
  size(): number;
  collect(): void;
}

/**
 * A function to call at quiet points: it runs `heap.collect()` once `heap.size()` exceeds its lowest reading
 * since the last collection (V8 may shrink the heap itself) by `threshold(that lowest reading)`, or whenever it
 * is called with `force`, and says whether it collected. Before any collection the base is `initialBase`, or
 * else the first reading.
 */
export function collectOnGrowth(
  heap: HeapControl,
  threshold: (base: number) => number,
  initialBase?: number,
): (force?: boolean) => boolean {
  let base = initialBase;
  return (force = false) => {
    const size = heap.size();
    if (base === undefined || size < base) base = size;
    if (!force && size < base + threshold(base)) return false;
    heap.collect();
    base = heap.size();
    return true;
  };
}

/** The idle release's threshold: a fraction of the heap its last release left, never under the floor. */
export function idleReleaseThreshold(
  base: number,
  floorBytes = RELEASE_AFTER_GROWTH_BYTES,
  fraction = RELEASE_AFTER_GROWTH_FRACTION,
): number {
  return Math.max(floorBytes, fraction * base);
}

let collector: GcFunction | null | undefined;

export interface ReleaseBeforeWaitsOptions {
  /** The least sum of waits since the last release that gets one whatever the heap grew (RELEASE_MIN_WAITS_MS). */
  minWaitsMs: number;
  /** …and the least multiple of the last release's CPU cost that sum must be (RELEASE_EVERY_PASS_WAIT_PER_COST). */
  waitPerCost: number;
  /** CPU time the process used, ms (user + system): a fake in tests. */
  cpuMs: () => number;
}

/**
 * The release between polls as a policy, on any heap: before a wait of `waitMs` it collects once the heap grew by
 * `threshold` since the last collection (collectOnGrowth), or whatever it grew once the waits since the last
 * collection, this one included, add up to at least `minWaitsMs` and at least `waitPerCost` times what the last
 * collection after the first cost in CPU; says whether it collected. The first call collects (the first pass grew
 * the heap from nothing); its cost, the first pass's garbage, is not a poll's and is not kept. The waits are the
 * ones asked for: a poll woken early (a sync, a reload) counts its whole wait.
 */
export function releaseBeforeWaits(
  heap: HeapControl,
  threshold: (base: number) => number,
  options: ReleaseBeforeWaitsOptions,
): (waitMs: number) => boolean {
  let lastCostMs = 0;
  let collections = 0;
  let waitedMs = 0;
  const release = collectOnGrowth(
    {
      size: () => heap.size(),
      collect: () => {
        const started = options.cpuMs();
        heap.collect();
        collections += 1;
        if (collections > 1) lastCostMs = Math.max(0, options.cpuMs() - started);
      },
    },
    threshold,
    0,
  );
  return (waitMs) => {
    waitedMs += waitMs;
    const collected = release(waitedMs >= Math.max(options.minWaitsMs, lastCostMs * options.waitPerCost));
    if (collected) waitedMs = 0;
    return collected;
  };
}

/**
 * The daemon's release between polls (releaseBeforeWaits on V8's heap). V8's `gc` without `--expose-gc` on the
 * command line: the flag set now applies to the contexts made after it, so a new context has `gc`. From V8 12
 * (Node 22) it is asked for the `last-resort` flavor, V8's collection under memory pressure, which also shrinks
 * the young generation and returns the freed pages (Node 24, idle daemon with 1,000 managed: 115 → 99 MiB,
 * docs/performance-history.md "Idle daemon"). Node 20's V8 (11.3) takes no flavor, and a `gc(options)` there leaves
 * garbage a plain `gc()` collects: it gets two plain ones, as last-resort runs at least two; one gave back the pages
 * it left sparse only at the next release (idle daemon at 1 s polls: 61.0 MiB until then, 58.7–59.2 with two,
 * "Idle daemon, twelfth round"). It collects
 * only once the heap (V8's committed size) grew by `threshold` (`idleReleaseThreshold`) since its last
 * collection, or once the waits since it add up to at least `minWaitsMs` and RELEASE_EVERY_PASS_WAIT_PER_COST times
 * the last release's CPU; the first call collects. Undefined when the runtime refuses (memory is then left to V8).
 */
export function heapReleaser(
  threshold: (base: number) => number = idleReleaseThreshold,
  v8Version = process.versions.v8,
  minWaitsMs = RELEASE_MIN_WAITS_MS,
): ((waitMs: number) => void) | undefined {
  const collect = gcFunction();
  if (collect === null) return undefined;
  const lastResort = Number.parseInt(v8Version, 10) >= 12;
  const release = releaseBeforeWaits(
    {
      size: () => getHeapStatistics().total_heap_size,
      collect: () => {
        if (lastResort) collect({ type: 'major', execution: 'sync', flavor: 'last-resort' });
        else {
          // The second compacts the pages the first found sparse and gives them back (V8 picks the pages to
          // evacuate from the last sweep): one plain collection left them committed.
          collect();
          collect();
        }
      },
    },
    threshold,
    { minWaitsMs, waitPerCost: RELEASE_EVERY_PASS_WAIT_PER_COST, cpuMs: processCpuMs },
  );
  return (waitMs) => {
    release(waitMs);
  };
}

function processCpuMs(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1000;
}

/**
 * The pass's checkpoint (deps.heapCheckpoint): a plain full collection once the old generation's used bytes grew
 * by `growthBytes` since their lowest reading after the last one. `gc` is looked for at the first collection, not
 * here: without `--expose-gc` on the command line (as `--once` runs) that makes a new V8 context (~1 ms of CPU),
 * wasted on every pass that never collects, an idle `--once` among them. Where the runtime refuses `gc`, the
 * checkpoint only reads the heap.
 */
export function heapCheckpoint(growthBytes = COLLECT_AFTER_OLD_GROWTH_BYTES): () => void {
  const check = collectOnGrowth(
    { size: oldGenerationUsed, collect: () => gcFunction()?.() },
    () => growthBytes,
  );
  return () => {
    try {
      check();
    } catch {
      // A collection that fails leaves memory to V8; the pass goes on.
    }
  };
}

/**
 * The used bytes of every space but the young generation's: what only a full collection frees. The used heap
 * as a whole swings by the young generation's size (up to 16 MiB a semi-space) between scavenges.
 */
function oldGenerationUsed(): number {
  let used = 0;
  for (const space of getHeapSpaceStatistics()) {
    if (space.space_name !== 'new_space' && space.space_name !== 'new_large_object_space')
      used += space.space_used_size;
  }
  return used;
}

function gcFunction(): GcFunction | null {
  collector ??= exposeGc();
  return collector;
}

/**
 * `gc` as `--expose-gc` (the daemon's launcher) puts it on the global object, or else from a new context made after
 * setting the flag: that context then lives as long as the function (node:vm loaded only then).
 */
function exposeGc(): GcFunction | null {
  let gc: unknown = (globalThis as { gc?: unknown }).gc;
  try {
    if (typeof gc !== 'function') {
      setFlagsFromString('--expose-gc');
      gc = process.getBuiltinModule('node:vm').runInNewContext('gc');
    }
  } catch {
    return null;
  }
  return typeof gc === 'function' ? (gc as GcFunction) : null;
}
