// An older record of rootDir's data disk, the disk missing at the first start after the upgrade: judged by the fingerprints (mount27).
import * as nodeFs from 'node:fs/promises';
import { readFile, realpath, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import { movingClock } from '../../test/helpers/write-fault-fs.js';
import type { FsPort } from '../lib/fs-port.js';
import { FINGERPRINTS_FILE } from '../store/fingerprints.js';
import { ROOT_MOUNT_FILE } from '../store/root-mount.js';

let world: PassWorld | undefined;
afterEach(async () => {
  await world?.close();
  world = undefined;
});

const json = (value: unknown) => `${JSON.stringify(value, null, 2)}\n`;

/**
 * The packaged daemon's view in its unit after the upgrade: rootDir bound onto itself (ReadWritePaths=) in the mount
 * table; `moved`: rootDir and its parent on another device than the files were fingerprinted on (the bare directory
 * of a data disk that is missing), else on theirs (the very directory the older agent's self-bind record was of).
 */
async function unitFs(rootDir: string, moved: boolean): Promise<FsPort> {
  const real = await realpath(rootDir);
  const mountinfo = [
    '20 1 98:0 / / rw,relatime shared:1 - ext4 /dev/vda rw',
    `31 20 98:0 ${real} ${real} rw,relatime shared:9 - ext4 /dev/vda rw`,
    '',
  ].join('\n');
  return {
    ...(nodeFs as unknown as FsPort),
    readFile: (async (target: string, ...rest: never[]) =>
      target === '/proc/self/mountinfo' ? mountinfo : nodeFs.readFile(target, ...rest)) as FsPort['readFile'],
    stat: (async (target: string, options?: unknown) => {
      const stats = await nodeFs.stat(target, options as never);
      if (moved && (target === rootDir || target === `${rootDir}/..`))
        Object.assign(stats, { dev: Number(stats.dev) + 1 });
      return stats;
    }) as FsPort['stat'],
  };
}

/** A world whose older agent wrote `a.json` and fingerprinted it, then left its record of rootDir's mount. */
async function upgradedWorld(name: string): Promise<PassWorld> {
  const opened = await createPassWorld({ name, parent: '/dev/shm' });
  opened.put({ id: 'cfg_a', relative_filepath: 'a.json', content: { v: 1 } });
  expect((await opened.pass()).converged).toBe(true);
  expect((await opened.pass()).converged).toBe(true);
  const devices = await readFile(path.join(opened.stateDir, FINGERPRINTS_FILE), 'utf8');
  expect(devices).toContain(String((await stat(path.join(opened.rootDir, 'a.json'))).dev));
  await opened.reconciler.close();
  await writeFile(
    path.join(opened.stateDir, ROOT_MOUNT_FILE),
    JSON.stringify({ rootDir: opened.rootDir, mountPoint: true }),
  );
  opened.put({ id: 'cfg_n', relative_filepath: 'n.json', content: { v: 2 } });
  return opened;
}

describe("an older agent's record of rootDir's mount, rootDir bound onto itself at the first start after the upgrade (review34)", () => {
  it('files fingerprinted on another device than the bare directory: a mount gone, nothing written', async () => {
    world = await upgradedWorld('mount27-old-disk');
    await world.open({
      deps: { fs: await unitFs(world.rootDir, true), clock: movingClock() },
      settings: { retry: { maxAttempts: 1, baseDelaySeconds: 10, maxDelaySeconds: 60 } },
    });
    expect((await world.pass()).converged).toBe(false);
    expect(await world.exists('n.json')).toBe(false);
    const last = world.server.state.reports.filter((r) => r.config_instance_id === 'cfg_n').at(-1);
    expect(last?.error_status).toBe('retrying');
    expect(last?.message).toContain(path.join(world.stateDir, ROOT_MOUNT_FILE));
  });

  it('files fingerprinted on the bare directory itself (the self-bind it recorded): forgotten, written', async () => {
    world = await upgradedWorld('mount27-old-bind');
    await world.open({ deps: { fs: await unitFs(world.rootDir, false), clock: movingClock() } });
    expect((await world.pass()).converged).toBe(true);
    expect(await world.fileAt('n.json')).toBe(json({ v: 2 }));
    expect(
      JSON.parse(await readFile(path.join(world.stateDir, ROOT_MOUNT_FILE), 'utf8')) as unknown,
    ).toMatchObject({ mountPoint: false });
  });
});
