// heapReleaser: V8's gc reached without --expose-gc, run only once the heap grew enough; the growth policy with a fake heap.
import { getHeapStatistics } from 'node:v8';
import { describe, expect, it, vi } from 'vitest';
import {
  collectOnGrowth,
  type HeapControl,
  heapCheckpoint,
  heapReleaser,
  idleReleaseThreshold,
  RELEASE_EVERY_PASS_WAIT_PER_COST,
  RELEASE_MIN_WAITS_MS,
  releaseBeforeWaits,
} from './release-memory.js';

const MiB = 1024 * 1024;
const GARBAGE_ARRAYS = 400;

/**
 * ~400,000 short strings in 400 arrays: ~16 MiB of heap, twice the 8 MiB a collection must be seen to free (200,000
 * freed only 7.9 MiB on Node 24).
 */
function garbage(arrays = GARBAGE_ARRAYS): string[][] {
  return Array.from({ length: arrays }, (_, i) => Array.from({ length: 1000 }, (_, k) => `item ${i} ${k}`));
}

describe('heapReleaser', () => {
  it('collects garbage the program dropped, without --expose-gc on the command line', () => {
    const release = heapReleaser(() => 0);
    expect(release).toBeTypeOf('function');
    let dropped: string[][] | undefined = garbage();
    const held = process.memoryUsage().heapUsed;
    const made = dropped.length;
    dropped = undefined;
    release?.(1000);
    expect(made).toBe(GARBAGE_ARRAYS);
    expect(held - process.memoryUsage().heapUsed).toBeGreaterThan(8 * MiB);
  });

  it('does nothing until the heap grew by the given size, or the waits since its last collection add up', () => {
    const release = heapReleaser(() => 1024 * MiB, undefined, 60_000);
    release?.(1000);
    let dropped: string[][] | undefined = garbage();
    const held = process.memoryUsage().heapUsed;
    const made = dropped.length;
    dropped = undefined;
    release?.(30_000);
    expect(made).toBe(GARBAGE_ARRAYS);
    // Not collected: the heap did not grow by 1 GiB, and 30 s of waits are under the 60 s given.
    expect(held - process.memoryUsage().heapUsed).toBeLessThan(4 * MiB);
  });

  it('collects once the waits since its last collection add up to the least given, however little the heap grew', () => {
    const release = heapReleaser(() => 1024 * MiB, undefined, 60_000);
    release?.(1000);
    release?.(30_000);
    let dropped: string[][] | undefined = garbage();
    const held = process.memoryUsage().heapUsed;
    const made = dropped.length;
    dropped = undefined;
    release?.(30_000);
    expect(made).toBe(GARBAGE_ARRAYS);
    expect(held - process.memoryUsage().heapUsed).toBeGreaterThan(8 * MiB);
  });
});

/**
 * Of the strings kept, one in this many: the rest go. Node 20's plain collections (heapReleaser there) evacuate a
 * page only if more of it is free than a target V8 sets from the compaction speed it measured in the process's
 * recent collections (100 − 50 / (1 + page area / speed) %, at least 20 %; last-resort, Node 24's, takes any page
 * 20 % free). One in 20 kept left ~93 % of each page free: enough while the measured speed stays over ~40 KB/ms
 * (~160–600 KB/ms here when idle), not when a loaded machine slowed the unit tier's earlier collections in the
 * same worker (load ~17: 2 MiB given back of the 3 wanted). One in 100 leaves ~99 % free, enough down to ~7 KB/ms.
 * One plain collection still gives back none of it (measured: 0.0 MiB with either), so the test tells one from two.
 */
const KEPT_ONE_IN = 100;

/** ~15 MiB of strings promoted to the old generation, one in KEPT_ONE_IN kept: its pages left sparse once the rest goes. */
function sparseOldGeneration(collect: () => void): string[] {
  const all = garbage();
  collect();
  const kept: string[] = [];
  for (const strings of all)
    for (let k = 0; k < strings.length; k += KEPT_ONE_IN) kept.push(strings[k] as string);
  return kept;
}

describe('heapReleaser, pages', () => {
  it('gives back pages of an old generation it left sparse: the committed heap falls, as one collection does not', () => {
    const release = heapReleaser(() => 1024 * MiB);
    const promote = heapCheckpoint(0);
    expect(promote).toBeTypeOf('function');
    const kept = sparseOldGeneration(() => promote?.());
    const grown = getHeapStatistics().total_heap_size;
    release?.(1000);
    expect(kept.length).toBe(GARBAGE_ARRAYS * (1000 / KEPT_ONE_IN));
    // In a bare Node 20, one plain collection: 21.4 -> 21.4 MiB committed (4 used); two: 21.4 -> 6.4.
    // How many sparse pages V8 compacts depends on the speed it measured, so on the load: alone, two collections gave
    // back 14.8-15.5 MiB, under the full unit tier at a load of ~20 7.0; one collection 0.5-1.0.
    expect(grown - getHeapStatistics().total_heap_size).toBeGreaterThan(3 * MiB);
  });
});

describe('heapCheckpoint', () => {
  it('makes no V8 context for gc until a collection is due: none for a pass that never collects', async () => {
    vi.resetModules();
    const fresh = await import('./release-memory.js');
    const contexts = () => getHeapStatistics().number_of_native_contexts;
    const before = contexts();
    const check = fresh.heapCheckpoint();
    check();
    check();
    // The old generation grew by far less than 16 MiB: no collection, no context made to reach gc.
    expect(contexts()).toBe(before);
    // Due at once: gc is reached then (a context of its own, held with the function), and it collects.
    const collectNow = fresh.heapCheckpoint(0);
    let dropped: string[][] | undefined = garbage();
    const held = process.memoryUsage().heapUsed;
    const made = dropped.length;
    dropped = undefined;
    collectNow();
    expect(made).toBe(GARBAGE_ARRAYS);
    expect(held - process.memoryUsage().heapUsed).toBeGreaterThan(8 * MiB);
    expect(contexts()).toBe(before + 1);
  });

  it('collects garbage the program dropped once the old generation grew by the given bytes (0: at once)', () => {
    const check = heapCheckpoint(0);
    expect(check).toBeTypeOf('function');
    let dropped: string[][] | undefined = garbage();
    const held = process.memoryUsage().heapUsed;
    const made = dropped.length;
    dropped = undefined;
    check?.();
    expect(made).toBe(GARBAGE_ARRAYS);
    expect(held - process.memoryUsage().heapUsed).toBeGreaterThan(8 * MiB);
  });

  it('collects once the old generation grew past the bound since its first reading (1 MiB bound, 2 MiB held)', () => {
    const check = heapCheckpoint(1 * MiB);
    check?.();
    const kept = new Array<number>(256 * 1024).fill(0.5);
    let dropped: string[][] | undefined = garbage();
    const held = process.memoryUsage().heapUsed;
    const made = dropped.length;
    dropped = undefined;
    check?.();
    expect(made + kept.length).toBe(GARBAGE_ARRAYS + 256 * 1024);
    expect(held - process.memoryUsage().heapUsed).toBeGreaterThan(8 * MiB);
  });

  it('by default leaves garbage of the young generation alone: the old generation did not grow by 16 MiB', () => {
    const check = heapCheckpoint();
    check?.();
    // 2 MiB more in the old generation (an array this large is allocated there), held: growth, under the bound.
    const kept = new Array<number>(256 * 1024).fill(0.5);
    // Half the usual garbage: as it is made, most of it is promoted (~7 MiB old growth, with the 2 MiB held ~9,
    // well under 16); a collection would still free over 4 MiB of it.
    let dropped: string[][] | undefined = garbage(GARBAGE_ARRAYS / 2);
    const held = process.memoryUsage().heapUsed;
    const made = dropped.length;
    dropped = undefined;
    check?.();
    expect(made + kept.length).toBe(GARBAGE_ARRAYS / 2 + 256 * 1024);
    expect(held - process.memoryUsage().heapUsed).toBeLessThan(4 * MiB);
  });
});

/** A heap whose size the test sets; a collection brings it down to `live`. */
function fakeHeap(
  size: number,
  live: number,
): HeapControl & { size: () => number; set(bytes: number): void; collections: number } {
  const heap = {
    current: size,
    collections: 0,
    size: () => heap.current,
    collect: () => {
      heap.collections += 1;
      heap.current = live;
    },
    set: (bytes: number) => {
      heap.current = bytes;
    },
  };
  return heap;
}

describe('collectOnGrowth', () => {
  it('collects once the heap grew by the threshold over the base, then measures from what the collection left', () => {
    const heap = fakeHeap(20 * MiB, 20 * MiB);
    const check = collectOnGrowth(heap, () => 8 * MiB);
    expect(check()).toBe(false); // the first reading is the base
    heap.set(27 * MiB);
    expect(check()).toBe(false);
    heap.set(28 * MiB);
    expect(check()).toBe(true);
    expect(heap.collections).toBe(1);
    expect(heap.size()).toBe(20 * MiB);
    heap.set(27 * MiB);
    expect(check()).toBe(false);
    expect(heap.collections).toBe(1);
  });

  it('follows the heap down when V8 shrinks it by itself', () => {
    const heap = fakeHeap(40 * MiB, 10 * MiB);
    const check = collectOnGrowth(heap, () => 8 * MiB);
    check();
    heap.set(12 * MiB);
    expect(check()).toBe(false);
    heap.set(20 * MiB);
    expect(check()).toBe(true);
  });

  it('collects when forced, without growth, and measures from what that collection left', () => {
    const heap = fakeHeap(20 * MiB, 15 * MiB);
    const check = collectOnGrowth(heap, () => 8 * MiB);
    expect(check()).toBe(false);
    expect(check(true)).toBe(true);
    expect(heap.size()).toBe(15 * MiB);
    heap.set(22 * MiB);
    expect(check()).toBe(false);
    heap.set(23 * MiB);
    expect(check()).toBe(true);
    expect(heap.collections).toBe(2);
  });

  it('with an initial base of 0, the first call collects', () => {
    const heap = fakeHeap(30 * MiB, 12 * MiB);
    const check = collectOnGrowth(heap, (base) => idleReleaseThreshold(base), 0);
    expect(check()).toBe(true);
    expect(heap.collections).toBe(1);
  });

  it('gives the threshold the base it measures from', () => {
    const bases: number[] = [];
    const heap = fakeHeap(30 * MiB, 12 * MiB);
    const check = collectOnGrowth(
      heap,
      (base) => {
        bases.push(base);
        return MiB;
      },
      0,
    );
    check();
    heap.set(14 * MiB);
    check();
    expect(bases).toEqual([0, 12 * MiB]);
  });
});

describe('the idle release threshold', () => {
  it('is three quarters of the heap the last release left, never under 8 MiB', () => {
    expect(idleReleaseThreshold(0)).toBe(8 * MiB);
    expect(idleReleaseThreshold(5 * MiB)).toBe(8 * MiB);
    expect(idleReleaseThreshold(8 * MiB)).toBe(8 * MiB);
    expect(idleReleaseThreshold(28 * MiB)).toBe(21 * MiB);
    expect(idleReleaseThreshold(27 * MiB, 8 * MiB, 0.5)).toBe(13.5 * MiB);
  });

  it('at 10,000 managed, a poll that grows the young generation back does not release; the next real growth does', () => {
    // Node 24, 10,000 managed: 27 MiB after a release, 44 MiB at the next poll (docs/performance.md).
    const heap = fakeHeap(60 * MiB, 27 * MiB);
    const release = collectOnGrowth(heap, (base) => idleReleaseThreshold(base), 0);
    expect(release()).toBe(true);
    let releases = 0;
    for (const size of [44, 45, 44, 46, 45]) {
      heap.set(size * MiB);
      if (release()) releases += 1;
    }
    expect(releases).toBe(0);
    heap.set(54 * MiB);
    expect(release()).toBe(true);
  });

  it('with a small heap (7 MiB after a release), still releases after 8 MiB of growth', () => {
    const heap = fakeHeap(40 * MiB, 7 * MiB);
    const release = collectOnGrowth(heap, (base) => idleReleaseThreshold(base), 0);
    release();
    heap.set(14 * MiB);
    expect(release()).toBe(false);
    heap.set(15 * MiB);
    expect(release()).toBe(true);
  });
});

/** A fake heap whose collection costs `costMs()` of a fake CPU clock. */
function costedHeap(costMs: () => number) {
  const cpu = { ms: 0 };
  const heap = fakeHeap(40 * MiB, 30 * MiB);
  const collect = heap.collect;
  heap.collect = () => {
    cpu.ms += costMs();
    collect();
  };
  const release = releaseBeforeWaits(heap, idleReleaseThreshold, {
    minWaitsMs: RELEASE_MIN_WAITS_MS,
    waitPerCost: RELEASE_EVERY_PASS_WAIT_PER_COST,
    cpuMs: () => cpu.ms,
  });
  return { heap, release };
}

describe('the release once the waits add up, scaled by its own cost', () => {
  it('at ~50 ms a release (1,000 managed), releases before every wait of 10 s, and every tenth wait of 1 s', () => {
    const { heap, release } = costedHeap(() => 50);
    release(1000);
    const afterFirstPass = heap.collections;
    for (let poll = 0; poll < 5; poll += 1) {
      heap.set(31 * MiB);
      release(10_000);
    }
    expect(heap.collections - afterFirstPass).toBe(5);
    const released: number[] = [];
    for (let poll = 1; poll <= 25; poll += 1) {
      heap.set(31 * MiB);
      if (release(1000)) released.push(poll);
    }
    // 200 × 50 ms = 10 s of waits between releases.
    expect(released).toEqual([10, 20]);
    expect(heap.collections - afterFirstPass).toBe(7);
  });

  it('at ~190 ms a release (10,000 managed), 30 s waits release every second poll; growth still releases at once', () => {
    const { heap, release } = costedHeap(() => 190);
    release(30_000);
    // The first release after a pass is measured; then 200 × 190 ms = 38 s of waits: two 30 s waits.
    heap.set(31 * MiB);
    release(30_000);
    const measured = heap.collections;
    const released: number[] = [];
    for (let poll = 1; poll <= 6; poll += 1) {
      heap.set(31 * MiB);
      if (release(30_000)) released.push(poll);
    }
    expect(released).toEqual([2, 4, 6]);
    // The growth rule still applies after one wait: three quarters of the 30 MiB base.
    heap.set(30 * MiB + 23 * MiB);
    release(30_000);
    expect(heap.collections).toBe(measured + 4);
    heap.set(31 * MiB);
    release(60_000);
    expect(heap.collections).toBe(measured + 5);
  });

  it('never before the least sum of waits, however cheap', () => {
    const { heap, release } = costedHeap(() => 0);
    release(200);
    const released: number[] = [];
    for (let poll = 1; poll <= 10; poll += 1) {
      heap.set(31 * MiB);
      if (release(RELEASE_MIN_WAITS_MS / 5)) released.push(poll);
    }
    expect(released).toEqual([5, 10]);
  });

  it("follows the cost: once releases get cheap again, 30 s waits release again; the first pass's release does not count", () => {
    let cost = 5000;
    const { heap, release } = costedHeap(() => cost);
    // The first call's 5 s (the first pass's garbage) is not a poll's cost: the next wait releases.
    release(30_000);
    cost = 190;
    heap.set(31 * MiB);
    release(RELEASE_MIN_WAITS_MS);
    expect(heap.collections).toBe(2);
    heap.set(31 * MiB);
    release(30_000);
    expect(heap.collections).toBe(2);
    cost = 40;
    heap.set(60 * MiB);
    release(30_000);
    expect(heap.collections).toBe(3);
    heap.set(31 * MiB);
    release(30_000);
    expect(heap.collections).toBe(4);
  });
});
