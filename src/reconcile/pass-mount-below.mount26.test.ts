// A filesystem mounted below rootDir that goes away is waited out, as rootDir's own mount is (mount26).
import * as nodeFs from 'node:fs/promises';
import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import { movingClock, writeFaultFs } from '../../test/helpers/write-fault-fs.js';
import type { FsPort } from '../lib/fs-port.js';
import { ROOT_MOUNT_FILE } from '../store/root-mount.js';

let world: PassWorld | undefined;
afterEach(async () => {
  await world?.close();
  world = undefined;
});

/**
 * The disk with a filesystem at `<rootDir>/data` while `mount.on`: its own `st_dev` there, and the mount table
 * (FsPort.mountsBelow, as cli/hang-safe-fs.ts reads it) listing it. Unmounted: a plain directory of rootDir's disk.
 */
function mountedBelowFs(rootDir: string, mount: { on: boolean; listed?: boolean }, base?: FsPort): FsPort {
  const at = path.join(rootDir, 'data');
  return {
    ...(base ?? (nodeFs as unknown as FsPort)),
    stat: (async (target: string, options?: unknown) => {
      const stats = await nodeFs.stat(target, options as never);
      if (mount.on && target === at) Object.assign(stats, { dev: Number(stats.dev) + 1 });
      return stats;
    }) as FsPort['stat'],
    mountsBelow: (dir: string) =>
      new Set(dir === rootDir && mount.on && mount.listed !== false ? ['data'] : []),
  };
}

function lastReportOf(id: string): { error_status: string; message?: string | undefined } | undefined {
  return world!.server.state.reports.filter((r) => r.config_instance_id === id).at(-1);
}

const json = (value: unknown) => `${JSON.stringify(value, null, 2)}\n`;

describe('a filesystem mounted below rootDir gone under the agent (mount26)', () => {
  it('writes and removes nothing in the bare directory, never an attempt; the rest lands; mounted again: converges', async () => {
    world = await createPassWorld({ name: 'mount26-running', parent: '/dev/shm', open: false });
    await mkdir(path.join(world.rootDir, 'data'));
    const mount = { on: true };
    const clock = movingClock();
    await world.open({
      deps: { fs: mountedBelowFs(world.rootDir, mount), clock },
      settings: { retry: { maxAttempts: 1, baseDelaySeconds: 10, maxDelaySeconds: 60 } },
    });
    world.put({ id: 'cfg_a', relative_filepath: 'data/a.json', content: { v: 1 } });
    world.put({ id: 'cfg_r', relative_filepath: 'data/r.json', content: { v: 9 } });
    world.put({ id: 'cfg_b', relative_filepath: 'b.json', content: { v: 2 } });
    expect((await world.pass()).converged).toBe(true);

    // `umount -l`: the bare mount point underneath is empty.
    mount.on = false;
    await rm(path.join(world.rootDir, 'data'), { recursive: true });
    await mkdir(path.join(world.rootDir, 'data'));
    world.put({ id: 'cfg_c', relative_filepath: 'data/sub/c.json', content: { v: 3 } });
    world.put({ id: 'cfg_d', relative_filepath: 'd.json', content: { v: 4 } });
    world.put({ ...world.server.state.instances.get('cfg_r')!, target_status: 'removed' });

    // Three passes, each past every hold-off: with maxAttempts 1 an attempt would be `failed` for good.
    for (let n = 0; n < 3; n += 1) {
      expect((await world.pass()).converged).toBe(false);
      clock.advance(3_600_000);
    }
    expect(await readdir(path.join(world.rootDir, 'data'))).toEqual([]);
    // The drift watcher's local restores ask the same rule: none while it is gone, a pass judges each path.
    expect(await world.reconciler.rootMountGone()).toBe(true);
    expect(world.reports().filter((r) => r.endsWith('/failed'))).toEqual([]);
    expect(world.reports().filter((r) => r.startsWith('cfg_r removed'))).toEqual([]);
    for (const id of ['cfg_a', 'cfg_c', 'cfg_r']) expect(lastReportOf(id)?.error_status).toBe('retrying');
    const message = lastReportOf('cfg_c')?.message ?? '';
    expect(message).toContain(`${world.rootDir}/data is no mount point any more`);
    expect(message).not.toContain('mounted on rootDir');
    // Elsewhere under rootDir the pass goes on.
    expect(await world.fileAt('d.json')).toBe(json({ v: 4 }));
    expect(lastReportOf('cfg_d')?.error_status).toBe('none');

    // Mounted again (another device would do as well): its files are back.
    mount.on = true;
    await writeFile(path.join(world.rootDir, 'data/a.json'), json({ v: 1 }));
    await writeFile(path.join(world.rootDir, 'data/r.json'), json({ v: 9 }));
    expect((await world.pass()).converged).toBe(true);
    expect(await world.reconciler.rootMountGone()).toBe(false);
    expect(await world.fileAt('data/sub/c.json')).toBe(json({ v: 3 }));
    expect(await world.exists('data/r.json')).toBe(false);
    expect(world.reports()).toContain('cfg_c deployed/none');
    expect(world.reports()).toContain('cfg_r removed/none');
    expect(world.reports().filter((r) => r.endsWith('/failed'))).toEqual([]);
  });

  it('remembers the mount across a restart; an operator gives it up by deleting it from the record', async () => {
    world = await createPassWorld({ name: 'mount26-restart', parent: '/dev/shm', open: false });
    await mkdir(path.join(world.rootDir, 'data'));
    const mount = { on: true };
    const clock = movingClock();
    world.put({ id: 'cfg_a', relative_filepath: 'data/a.json', content: { v: 1 } });
    await world.open({ deps: { fs: mountedBelowFs(world.rootDir, mount), clock } });
    expect((await world.pass()).converged).toBe(true);
    const recordPath = path.join(world.stateDir, ROOT_MOUNT_FILE);
    // rootDir is no mount point itself: an agent before `below` reads `mountPoint` only, and finds none.
    expect(JSON.parse(await readFile(recordPath, 'utf8'))).toEqual({
      rootDir: world.rootDir,
      mountPoint: false,
      below: ['data'],
    });

    // Gone while the agent was down; a new start finds neither the mount nor the table's line.
    mount.on = false;
    await rm(path.join(world.rootDir, 'data/a.json'));
    await world.open({ deps: { fs: mountedBelowFs(world.rootDir, mount), clock } });
    for (let n = 0; n < 4; n += 1) {
      expect((await world.pass()).converged).toBe(false);
      clock.advance(3_600_000);
    }
    expect(await readdir(path.join(world.rootDir, 'data'))).toEqual([]);
    expect(world.reports().filter((r) => r.endsWith('/failed'))).toEqual([]);
    expect(lastReportOf('cfg_a')?.message).toContain(recordPath);

    // Given up on purpose: its entry deleted from the record, the agent restarted.
    await writeFile(recordPath, JSON.stringify({ rootDir: world.rootDir, mountPoint: false, below: [] }));
    await world.open({ deps: { fs: mountedBelowFs(world.rootDir, mount), clock } });
    expect((await world.pass()).converged).toBe(true);
    expect(await world.fileAt('data/a.json')).toBe(json({ v: 1 }));
  });

  it('names the mount holding the file when it is read-only, not rootDir', async () => {
    world = await createPassWorld({ name: 'mount26-ro', parent: '/dev/shm', open: false });
    await mkdir(path.join(world.rootDir, 'data'));
    const erofs = () => Object.assign(new Error('EROFS: read-only file system, write'), { code: 'EROFS' });
    const base = writeFaultFs(path.join(world.rootDir, 'data'), erofs);
    await world.open({
      deps: { fs: mountedBelowFs(world.rootDir, { on: true }, base), clock: movingClock() },
    });
    world.put({ id: 'cfg_a', relative_filepath: 'data/a.json', content: { v: 1 } });
    world.put({ id: 'cfg_b', relative_filepath: 'b.json', content: { v: 2 } });

    expect((await world.pass()).converged).toBe(false);

    expect(lastReportOf('cfg_a')).toMatchObject({ error_status: 'retrying' });
    const message = lastReportOf('cfg_a')?.message ?? '';
    expect(message).toContain(`the filesystem mounted at ${world.rootDir}/data (below rootDir) is read-only`);
    expect(message).not.toContain('rootDir is on a read-only filesystem');
    expect(await world.fileAt('b.json')).toBe(json({ v: 2 }));
  });
});
