// A single file bind-mounted below rootDir is a mount there, not one gone (review34).
import * as nodeFs from 'node:fs/promises';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import { movingClock } from '../../test/helpers/write-fault-fs.js';
import type { FsPort } from '../lib/fs-port.js';

let world: PassWorld | undefined;
afterEach(async () => {
  await world?.close();
  world = undefined;
});

/** The real fs with a file of another device bound at `<rootDir>/secret.txt`, which the mount table lists. */
function fileMountFs(rootDir: string): FsPort {
  const at = path.join(rootDir, 'secret.txt');
  return {
    ...(nodeFs as unknown as FsPort),
    stat: (async (target: string, options?: unknown) => {
      const stats = await nodeFs.stat(target, options as never);
      if (target === at) Object.assign(stats, { dev: Number(stats.dev) + 1 });
      return stats;
    }) as FsPort['stat'],
    mountsBelow: (dir: string) => new Set(dir === rootDir ? ['secret.txt'] : []),
  };
}

describe('a file bind-mounted below rootDir (review34)', () => {
  it('is judged mounted: the drift watcher restores and adoption are not held back for good', async () => {
    // Before: `<file>/..` answered ENOTDIR, taken for "not there at all": that mount was gone from the first check
    // on and stayed in root-mount.json, so rootMountGone() held every local restore and adoption for good.
    world = await createPassWorld({ name: 'review34-file-mount', parent: '/dev/shm', open: false });
    await writeFile(path.join(world.rootDir, 'secret.txt'), 'bound here\n');
    await world.open({ deps: { fs: fileMountFs(world.rootDir), clock: movingClock() } });
    world.put({ id: 'cfg_a', relative_filepath: 'a.json', content: { v: 1 } });

    expect((await world.pass()).converged).toBe(true);
    expect((await world.pass()).converged).toBe(true);

    expect(await world.reconciler.rootMountGone()).toBe(false);
    expect(world.reports()).toContain('cfg_a deployed/none');
  });
});
