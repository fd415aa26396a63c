// A gone mount below rootDir that holds no file yet is not forgotten under an instance the service lists there (review36).
import * as nodeFs from 'node:fs/promises';
import { mkdir, readdir, rm } from 'node:fs/promises';
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

/** `<rootDir>/<name>` of its own st_dev, listed by the mount table, for each name in `mounted` (fix34's stand-in). */
function mountsBelowFs(rootDir: string, mounted: Set<string>): FsPort {
  return {
    ...(nodeFs as unknown as FsPort),
    stat: (async (target: string, options?: unknown) => {
      const stats = await nodeFs.stat(target, options as never);
      if (mounted.has(path.relative(rootDir, target))) Object.assign(stats, { dev: Number(stats.dev) + 1 });
      return stats;
    }) as FsPort['stat'],
    mountsBelow: (dir: string) => new Set(dir === rootDir ? mounted : []),
  };
}

describe('a gone mount below rootDir and the first instance listed under it (review36)', () => {
  // fix34 forgets a gone mount that "holds no managed file, instance path or declared write", judged at the pass's
  // first check, before the listing is read: a data disk the agent has seen mounted, missing at a boot, whose first
  // instance the service adds meanwhile, was forgotten at that check and the instance written into the bare
  // directory on the root filesystem and reported deployed (what the mount's memory exists to prevent).
  it('the new instance waits, retrying, and nothing is written into the bare directory', async () => {
    world = await createPassWorld({ name: 'review36-mount-new', parent: '/dev/shm', open: false });
    const { rootDir } = world;
    await mkdir(path.join(rootDir, 'data'));
    const mounted = new Set(['data']);
    const deps = { fs: mountsBelowFs(rootDir, mounted), clock: movingClock() };
    world.put({ id: 'cfg_b', relative_filepath: 'b.json', content: { v: 2 } });
    await world.open({ deps });
    expect((await world.pass()).converged).toBe(true);

    // The data disk is not mounted at the next start: its bare mount point, empty, on rootDir's disk.
    await world.reconciler.close();
    mounted.delete('data');
    await rm(path.join(rootDir, 'data'), { recursive: true });
    await mkdir(path.join(rootDir, 'data'));
    world.put({ id: 'cfg_d', relative_filepath: 'data/d.json', content: { v: 3 } });
    await world.open({ deps });
    await world.pass();

    expect(await readdir(path.join(rootDir, 'data'))).toEqual([]);
    expect(world.reports()).not.toContain('cfg_d deployed/none');
    expect(world.reconciler.mountsGoneBelow()).toEqual([
      expect.stringContaining(`${rootDir}/data is no mount point any more`),
    ]);
  });
});
