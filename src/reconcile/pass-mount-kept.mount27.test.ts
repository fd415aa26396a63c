// A gone mount below rootDir that held nothing managed is kept while its bare directory is there (review35, mount27).
import * as nodeFs from 'node:fs/promises';
import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import { movingClock } from '../../test/helpers/write-fault-fs.js';
import type { FsPort } from '../lib/fs-port.js';
import { ROOT_MOUNT_FILE } from '../store/root-mount.js';

let world: PassWorld | undefined;
afterEach(async () => {
  await world?.close();
  world = undefined;
});

/**
 * The disk with a filesystem at `<rootDir>/data` while `mount.on`: its own `st_dev` there and the mount table
 * (FsPort.mountsBelow) listing it; unmounted, whatever is at `data` is of rootDir's disk and the table is silent.
 */
function mountedBelowFs(rootDir: string, mount: { on: boolean }): FsPort {
  const at = path.join(rootDir, 'data');
  return {
    ...(nodeFs as unknown as FsPort),
    stat: (async (target: string, options?: unknown) => {
      const stats = await nodeFs.stat(target, options as never);
      if (mount.on && target === at) Object.assign(stats, { dev: Number(stats.dev) + 1 });
      return stats;
    }) as FsPort['stat'],
    mountsBelow: (dir: string) => new Set(dir === rootDir && mount.on ? ['data'] : []),
  };
}

const json = (value: unknown) => `${JSON.stringify(value, null, 2)}\n`;

function lastReportOf(id: string): { error_status: string; message?: string | undefined } | undefined {
  return world!.server.state.reports.filter((r) => r.config_instance_id === id).at(-1);
}

async function recordOf(stateDir: string): Promise<unknown> {
  return JSON.parse(await readFile(path.join(stateDir, ROOT_MOUNT_FILE), 'utf8'));
}

describe('a gone mount below rootDir that holds nothing managed, its bare directory left (review35)', () => {
  it('is kept: an instance placed under it later waits, retrying, across a restart; mounted again it lands', async () => {
    world = await createPassWorld({ name: 'mount27-kept', parent: '/dev/shm', open: false });
    const { rootDir, stateDir } = world;
    await mkdir(path.join(rootDir, 'data'));
    const mount = { on: true };
    const clock = movingClock();
    const open = () =>
      world!.open({
        deps: { fs: mountedBelowFs(rootDir, mount), clock },
        settings: { retry: { maxAttempts: 1, baseDelaySeconds: 10, maxDelaySeconds: 60 } },
      });
    await open();
    world.put({ id: 'cfg_b', relative_filepath: 'b.json', content: { v: 2 } });
    expect((await world.pass()).converged).toBe(true);
    expect(await recordOf(stateDir)).toEqual({ rootDir, mountPoint: false, below: ['data'] });

    // `umount -l` of the empty data disk: the bare directory stays, the table no longer lists it.
    mount.on = false;
    expect((await world.pass()).converged).toBe(true);
    clock.advance(3_600_000);
    expect((await world.pass()).converged).toBe(true);
    // Still remembered, and said (health and status show it as degraded).
    expect(await recordOf(stateDir)).toEqual({ rootDir, mountPoint: false, below: ['data'] });
    expect(world.reconciler.mountsGoneBelow()).toEqual([
      expect.stringContaining(`${rootDir}/data is no mount point any more`),
    ]);

    // Then the service places a new instance under it: nothing lands in the bare directory, never an attempt.
    world.put({ id: 'cfg_n', relative_filepath: 'data/n.json', content: { v: 3 } });
    for (let n = 0; n < 3; n += 1) {
      expect((await world.pass()).converged).toBe(false);
      clock.advance(3_600_000);
    }
    expect(await readdir(path.join(rootDir, 'data'))).toEqual([]);
    expect(lastReportOf('cfg_n')?.error_status).toBe('retrying');
    expect(lastReportOf('cfg_n')?.message).toContain(`${rootDir}/data is no mount point any more`);

    // A restart while it is gone: still waited for, the record named.
    await open();
    expect((await world.pass()).converged).toBe(false);
    expect(await readdir(path.join(rootDir, 'data'))).toEqual([]);
    expect(lastReportOf('cfg_n')?.message).toContain(path.join(stateDir, ROOT_MOUNT_FILE));
    expect(world.reports().filter((r) => r.endsWith('/failed'))).toEqual([]);

    // Mounted again, past the wait's hold-off: the file lands on the mount.
    mount.on = true;
    clock.advance(3_600_000);
    expect((await world.pass()).converged).toBe(true);
    expect(await world.fileAt('data/n.json')).toBe(json({ v: 3 }));
    expect(lastReportOf('cfg_n')?.error_status).toBe('none');
  });

  it('is given up by deleting its entry from the record: then written into the directory as it is', async () => {
    world = await createPassWorld({ name: 'mount27-given-up', parent: '/dev/shm', open: false });
    const { rootDir, stateDir } = world;
    await mkdir(path.join(rootDir, 'data'));
    const mount = { on: true };
    const clock = movingClock();
    const open = () => world!.open({ deps: { fs: mountedBelowFs(rootDir, mount), clock } });
    await open();
    expect((await world.pass()).converged).toBe(true);
    mount.on = false;
    expect((await world.pass()).converged).toBe(true);
    world.put({ id: 'cfg_n', relative_filepath: 'data/n.json', content: { v: 3 } });
    expect((await world.pass()).converged).toBe(false);
    expect(await readdir(path.join(rootDir, 'data'))).toEqual([]);

    await writeFile(
      path.join(stateDir, ROOT_MOUNT_FILE),
      JSON.stringify({ rootDir, mountPoint: false, below: [] }),
    );
    await open();
    expect((await world.pass()).converged).toBe(true);
    expect(await world.fileAt('data/n.json')).toBe(json({ v: 3 }));
  });

  it('one whose mount point is not there at all any more (an automounter removed it) is forgotten, as fix34 did', async () => {
    world = await createPassWorld({ name: 'mount27-removed', parent: '/dev/shm', open: false });
    const { rootDir, stateDir } = world;
    await mkdir(path.join(rootDir, 'data'));
    const mount = { on: true };
    const clock = movingClock();
    await world.open({ deps: { fs: mountedBelowFs(rootDir, mount), clock } });
    expect((await world.pass()).converged).toBe(true);
    mount.on = false;
    await rm(path.join(rootDir, 'data'), { recursive: true });
    expect((await world.pass()).converged).toBe(true);
    expect(await recordOf(stateDir)).toEqual({ rootDir, mountPoint: false });
    expect(world.reconciler.mountsGoneBelow()).toEqual([]);
  });
});
