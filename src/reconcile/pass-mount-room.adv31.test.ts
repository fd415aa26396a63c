// A full disk under rootDir judged by the file system the file goes to, not by rootDir's (adv31).
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import { enospc, movingClock, writeFaultFs } from '../../test/helpers/write-fault-fs.js';
import type { FsPort } from '../lib/fs-port.js';

const KIB = 1024;
const GIB = 1024 * 1024 * KIB;

/**
 * rootDir on a file system of `rootBytes` with another of `mountBytes` mounted at `<rootDir>/mnt`: the writes
 * there fail ENOSPC while `full.on`, and statfs answers for the file system holding the path it is given.
 */
function mountedFs(rootDir: string, rootBytes: number, mountBytes: number, full: { on: boolean }): FsPort {
  const mount = path.join(rootDir, 'mnt');
  return {
    ...writeFaultFs(mount, () => (full.on ? enospc() : undefined)),
    statfs: async (file: string) => {
      const bytes = file === mount || file.startsWith(`${mount}/`) ? mountBytes : rootBytes;
      return { blocks: bytes / 4096, bsize: 4096 };
    },
  };
}

let world: PassWorld | undefined;
afterEach(async () => {
  await world?.close();
  world = undefined;
});

/** Five passes an hour apart: cfg_big's action in each. */
async function fivePasses(clock: ReturnType<typeof movingClock>): Promise<string[]> {
  const actions: string[] = [];
  for (let n = 0; n < 5; n += 1) {
    const result = await world!.pass();
    actions.push(result.outcomes.find((o) => o.instanceId === 'cfg_big')?.action ?? 'none');
    clock.advance(3_600_000);
  }
  return actions;
}

describe('a full file system mounted below rootDir (adv31)', () => {
  it('counts attempts for a file larger than that whole file system, however large rootDir is', async () => {
    world = await createPassWorld({ name: 'adv31-mount-small', parent: '/dev/shm', open: false });
    world.put({ id: 'cfg_big', relative_filepath: 'mnt/big.json', content: { k: 'x'.repeat(20 * KIB) } });
    world.put({ id: 'cfg_other', relative_filepath: 'other.json', content: { port: 8080 } });
    await mkdir(path.join(world.rootDir, 'mnt')); // the mount point
    const clock = movingClock();
    await world.open({ deps: { fs: mountedFs(world.rootDir, GIB, 8 * KIB, { on: true }), clock } });

    const actions = await fivePasses(clock);
    // maxAttempts is 3 in this world: a file of 20 KiB never fits a file system of 8 KiB. Before, statfs of
    // rootDir (1 GiB) called it a full disk that clears: `retrying` for good.
    expect(actions.slice(0, 3)).toEqual(['retrying', 'retrying', 'failed']);
    expect(world.reports()).toContain('cfg_big queued/failed');
    expect(JSON.parse(await world.fileAt('other.json'))).toEqual({ port: 8080 });
    expect(await world.exists('mnt/big.json')).toBe(false);
  });

  it('waits for space (never `failed`) for a file that fits the mounted file system, however small rootDir is', async () => {
    world = await createPassWorld({ name: 'adv31-mount-large', parent: '/dev/shm', open: false });
    world.put({
      id: 'cfg_big',
      relative_filepath: 'mnt/data/big.json',
      content: { k: 'x'.repeat(20 * KIB) },
    });
    await mkdir(path.join(world.rootDir, 'mnt')); // the mount point; mnt/data is made by the write
    const full = { on: true };
    const clock = movingClock();
    await world.open({ deps: { fs: mountedFs(world.rootDir, 8 * KIB, GIB, full), clock } });

    // Before, statfs of rootDir (8 KiB) took the 20 KiB file for one that never fits: attempts, then `failed`
    // for good, though the mount it goes to holds a GiB and was only full for a while.
    expect(await fivePasses(clock)).toEqual(Array(5).fill('retrying'));
    expect(world.reports()).not.toContain('cfg_big queued/failed');

    full.on = false;
    expect((await world.pass()).converged).toBe(true);
    expect(JSON.parse(await world.fileAt('mnt/data/big.json'))).toEqual({ k: 'x'.repeat(20 * KIB) });
    expect(world.reports()).toContain('cfg_big deployed/none');
  });
});
