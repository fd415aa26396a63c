// A pass world whose rootDir was moved off a FUSE mount nobody serves (a dead NFS server): review32's and review33's.
import { type ChildProcess, spawnSync } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { hungFuseMount } from './hung-fuse.js';
import { createPassWorld, type PassWorld } from './pass-world.js';

export interface HungFormerRoot {
  /** The world: cfg_a written by a run in its rootDir, which now hangs. */
  readonly world: PassWorld;
  /** The mount's process (unserved for 60 s): its exitCode stays null while the mount hangs. */
  readonly hung: ChildProcess;
  /** `<dir>/moved`, made empty: the rootDir the operator moved to. */
  readonly moved: string;
}

/**
 * The worlds made by `make`, each ended by `close` (the mount's process killed, the mount detached, the world
 * closed): a test file calls `close` after each case.
 */
export function hungFormerRoots(): { make(name: string): Promise<HungFormerRoot>; close(): Promise<void> } {
  let world: PassWorld | undefined;
  let hung: ChildProcess | undefined;
  return {
    async make(name) {
      world = await createPassWorld({ name, open: false });
      world.put({ id: 'cfg_a' });
      await world.runOnce();
      // The old root's filesystem stops answering; the operator moves rootDir elsewhere.
      hung = await hungFuseMount(world.rootDir, 60_000);
      const moved = path.join(world.dir, 'moved');
      await mkdir(moved);
      return { world, hung, moved };
    },
    async close() {
      hung?.kill('SIGKILL');
      hung = undefined;
      if (world !== undefined) spawnSync('umount', ['-l', world.rootDir]);
      await world?.close();
      world = undefined;
    },
  };
}
