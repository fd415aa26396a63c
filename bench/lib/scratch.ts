// Scratch trees of the bench, removed when the bench process exits instead of between runs: see removeAtExit.
import { rmSync } from 'node:fs';

const trees = new Set<string>();
let hooked = false;

/**
 * Removes `dir` when the process exits rather than now. This machine's `/` is ext4 without a journal, whose inode
 * allocator skips, one lookup each, every inode freed in the last 60 s (360 s while its table block is dirty): a
 * tree of 1,000 files removed between two runs made the next run's file creations slower and slower (system CPU
 * 0.41 -> 1.26 s over six back-to-back first syncs, performance-history.md "First sync, fifteenth round"), for
 * every contender alike but by how much each removal before it left. Kept until the end, no run pays for another's.
 */
export function removeAtExit(dir: string): void {
  trees.add(dir);
  if (hooked) return;
  hooked = true;
  process.on('exit', () => {
    for (const tree of trees) rmSync(tree, { recursive: true, force: true });
  });
}
