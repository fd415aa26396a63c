// heapReleaser: V8's gc reached without --expose-gc on the command line, run only once the heap grew enough.
import { describe, expect, it } from 'vitest';
import { heapReleaser } from './release-memory.js';

const MiB = 1024 * 1024;

/** ~200,000 short strings in 200 arrays: over 8 MiB of heap. */
function garbage(): string[][] {
  return Array.from({ length: 200 }, (_, i) => Array.from({ length: 1000 }, (_, k) => `item ${i} ${k}`));
}

describe('heapReleaser', () => {
  it('collects garbage the program dropped, without --expose-gc on the command line', () => {
    const release = heapReleaser(0);
    expect(release).toBeTypeOf('function');
    let dropped: string[][] | undefined = garbage();
    const held = process.memoryUsage().heapUsed;
    const made = dropped.length;
    dropped = undefined;
    release?.();
    expect(made).toBe(200);
    expect(held - process.memoryUsage().heapUsed).toBeGreaterThan(8 * MiB);
  });

  it('does nothing until the heap grew by the given size since its last collection', () => {
    const release = heapReleaser(1024 * MiB);
    release?.();
    let dropped: string[][] | undefined = garbage();
    const held = process.memoryUsage().heapUsed;
    const made = dropped.length;
    dropped = undefined;
    release?.();
    expect(made).toBe(200);
    // Not collected: the heap did not grow by 1 GiB since the first call's collection.
    expect(held - process.memoryUsage().heapUsed).toBeLessThan(4 * MiB);
  });
});
