// A mount below rootDir that is gone holds back only the files under it, and one holding none is forgotten (fix34).
import { createHash } from 'node:crypto';
import * as nodeFs from 'node:fs/promises';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import { movingClock } from '../../test/helpers/write-fault-fs.js';
import { DriftWatcher } from '../daemon/drift-watcher.js';
import { SingleFlight } from '../daemon/single-flight.js';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { ROOT_MOUNT_FILE } from '../store/root-mount.js';
import type { PassResult } from './pass-runner.js';

let world: PassWorld | undefined;
let watcher: DriftWatcher | undefined;
afterEach(async () => {
  await watcher?.close();
  watcher = undefined;
  await world?.close();
  world = undefined;
});

/**
 * The disk with a filesystem at `<rootDir>/<name>` for each name in `mounted`: its own `st_dev` there, and the mount
 * table (FsPort.mountsBelow) listing it. A name taken out: a plain directory of rootDir's disk again.
 */
function mountsBelowFs(rootDir: string, mounted: Set<string>): FsPort {
  return {
    ...(nodeFs as unknown as FsPort),
    stat: (async (target: string, options?: unknown) => {
      const stats = await nodeFs.stat(target, options as never);
      const relative = path.relative(rootDir, target);
      if (mounted.has(relative)) Object.assign(stats, { dev: Number(stats.dev) + 1 });
      return stats;
    }) as FsPort['stat'],
    mountsBelow: (dir: string) => new Set(dir === rootDir ? mounted : []),
  };
}

const json = (value: unknown) => `${JSON.stringify(value, null, 2)}\n`;
const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/** `umount -l` of `<rootDir>/<name>`: the bare mount point underneath, empty. */
async function unmount(rootDir: string, mounted: Set<string>, name: string): Promise<void> {
  mounted.delete(name);
  await rm(path.join(rootDir, name), { recursive: true });
  await mkdir(path.join(rootDir, name));
}

async function recordedBelow(stateDir: string): Promise<unknown> {
  return (JSON.parse(await readFile(path.join(stateDir, ROOT_MOUNT_FILE), 'utf8')) as { below?: unknown })
    .below;
}

describe('a mount below rootDir gone, judged by path (fix34)', () => {
  it('holds back restores and adoption only under itself; one holding no managed file is forgotten; health names the other', async () => {
    world = await createPassWorld({ name: 'fix34-scope', parent: '/dev/shm', open: false });
    const { rootDir, stateDir } = world;
    await mkdir(path.join(rootDir, 'data'));
    await mkdir(path.join(rootDir, 'tmp'));
    const mounted = new Set(['data', 'tmp']);
    const clock = movingClock();
    const deps = { fs: mountsBelowFs(rootDir, mounted), clock };
    world.put({ id: 'cfg_a', relative_filepath: 'data/a.json', content: { v: 1 } });
    world.put({ id: 'cfg_b', relative_filepath: 'b.json', content: { v: 2 } });
    await world.open({ deps });
    expect((await world.pass()).converged).toBe(true);
    expect(await recordedBelow(stateDir)).toEqual(['data', 'tmp']);

    // Both gone while the agent was down (a USB stick at tmp pulled, the data disk too); a run before it died after
    // renaming old.json (its instance retired since) and data/x.json into place, before state.json recorded them.
    await world.reconciler.close();
    await unmount(rootDir, mounted, 'data');
    // The stick's automounter removes its mount point: only a mount point not there at all is forgotten (mount27).
    mounted.delete('tmp');
    await rm(path.join(rootDir, 'tmp'), { recursive: true });
    const old = json({ old: true });
    await writeFile(path.join(rootDir, 'old.json'), old, { mode: 0o640 });
    await writeFile(path.join(rootDir, 'data/x.json'), old, { mode: 0o640 });
    await writeFile(
      path.join(stateDir, 'intent.json'),
      JSON.stringify({
        version: 1,
        rootDir,
        intents: [
          { path: 'old.json', instanceId: 'cfg_old', sha256: sha256(old) },
          { path: 'data/x.json', instanceId: 'cfg_x', sha256: sha256(old) },
        ],
      }),
    );
    world.put({
      id: 'cfg_old',
      relative_filepath: 'old.json',
      content: { old: true },
      target_status: 'removed',
    });
    await world.open({ deps });
    expect((await world.pass()).converged).toBe(false);

    // Adopted where no gone mount holds it, so its retired instance's file is removed; data/x.json waits, declared.
    expect(await world.exists('old.json')).toBe(false);
    expect(world.reports()).toContain('cfg_old removed/none');
    expect(await world.fileAt('data/x.json')).toBe(old);
    expect(await readFile(path.join(stateDir, 'intent.json'), 'utf8')).toContain('data/x.json');
    // tmp held nothing the agent manages: forgotten, in the record too; data holds data/a.json: still waited for.
    expect(await recordedBelow(stateDir)).toEqual(['data']);
    expect(world.reconciler.mountsGoneBelow()).toEqual([
      expect.stringContaining(`${rootDir}/data is no mount point any more`),
    ]);
    // The drift watcher's restores ask per path: segment by segment, only data's files are held.
    expect(await world.reconciler.rootMountGone('data/a.json')).toBe(true);
    expect(await world.reconciler.rootMountGone('b.json')).toBe(false);
    expect(await world.reconciler.rootMountGone('database.json')).toBe(false);
    expect(await world.reconciler.rootMountGone('tmp/t.json')).toBe(false);

    // A local drift: b.json restored from the cache without a pass; data/a.json in the bare directory left alone.
    const reconciler = world.reconciler;
    const passes = new SingleFlight<PassResult>(() => reconciler.runPass({ mode: 'full' }));
    const askedForPass: string[] = [];
    watcher = new DriftWatcher({
      fs: deps.fs,
      rootDir,
      policy: 'restore',
      logger: silentLogger(),
      managedFiles: () => reconciler.state.files,
      passes,
      onDrift: (paths) => askedForPass.push(...paths),
      restore: {
        stateDir,
        dirMode: 0o750,
        clock,
        minHoldOffMs: 1_000,
        maxHoldOffMs: 30_000,
        onRestored: () => undefined,
        rootMountGone: (relative) => reconciler.rootMountGone(relative),
      },
      debounceMs: 1,
    });
    await writeFile(path.join(rootDir, 'b.json'), '{"tampered": 1}\n');
    await writeFile(path.join(rootDir, 'data/a.json'), '{"bare": 1}\n');
    watcher.noticeChange(path.join(rootDir, 'b.json'));
    watcher.noticeChange(path.join(rootDir, 'data/a.json'));
    await watcher.judgeNow();
    await passes.idle();
    expect(await world.fileAt('b.json')).toBe(json({ v: 2 }));
    expect(await world.fileAt('data/a.json')).toBe('{"bare": 1}\n');
    expect(askedForPass).toEqual(['data/a.json']);

    // A restart remembers data only; mounted again, the wait ends.
    await world.open({ deps });
    expect(await world.reconciler.rootMountGone('data/a.json')).toBe(true);
    mounted.add('data');
    await writeFile(path.join(rootDir, 'data/a.json'), json({ v: 1 }));
    expect((await world.pass()).converged).toBe(true);
    expect(world.reconciler.mountsGoneBelow()).toEqual([]);
    expect(await recordedBelow(stateDir)).toEqual(['data']);
  });
});
