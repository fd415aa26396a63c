// A burst of drifted files restored locally reads the mount table once for the batch, not once per path, and still
// holds back only the paths under a gone mount (fix34's scoping; fix36).
import * as nodeFs from 'node:fs/promises';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import { movingClock } from '../../test/helpers/write-fault-fs.js';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import type { PassResult } from '../reconcile/pass-runner.js';
import { DriftWatcher } from './drift-watcher.js';
import { SingleFlight } from './single-flight.js';

let world: PassWorld | undefined;
let watcher: DriftWatcher | undefined;
afterEach(async () => {
  await watcher?.close();
  watcher = undefined;
  await world?.close();
  world = undefined;
});

/** rootDir's disk with a filesystem at `<rootDir>/<name>` for each name in `mounted`; the mount table's reads counted. */
function countedMountsFs(rootDir: string, mounted: Set<string>): { fs: FsPort; reads: () => number } {
  let reads = 0;
  const fs: FsPort = {
    ...(nodeFs as unknown as FsPort),
    stat: (async (target: string, options?: unknown) => {
      const stats = await nodeFs.stat(target, options as never);
      if (mounted.has(path.relative(rootDir, target))) Object.assign(stats, { dev: Number(stats.dev) + 1 });
      return stats;
    }) as FsPort['stat'],
    mountsBelow: (dir: string) => {
      reads += 1;
      return new Set(dir === rootDir ? mounted : []);
    },
  };
  return { fs, reads: () => reads };
}

const json = (value: unknown) => `${JSON.stringify(value, null, 2)}\n`;
const COUNT = 60;

describe('local restores of a burst of drifted files (fix36)', () => {
  it('read the mount table once for the batch; files under a gone mount wait for a pass, the rest are restored', async () => {
    world = await createPassWorld({ name: 'fix36-reads', parent: '/dev/shm', open: false });
    const { rootDir, stateDir } = world;
    await mkdir(path.join(rootDir, 'data'));
    const mounted = new Set(['data']);
    const clock = movingClock();
    const { fs, reads } = countedMountsFs(rootDir, mounted);
    const names = Array.from({ length: COUNT }, (_, index) => `f${index}.json`);
    for (const name of names) world.put({ id: `cfg_${name}`, relative_filepath: name, content: { name } });
    world.put({ id: 'cfg_data', relative_filepath: 'data/a.json', content: { v: 1 } });
    await world.open({ deps: { fs, clock } });
    expect((await world.pass()).converged).toBe(true);

    // The data disk unmounted (its bare directory left) and every managed file changed by someone else.
    mounted.delete('data');
    await rm(path.join(rootDir, 'data'), { recursive: true });
    await mkdir(path.join(rootDir, 'data'));
    await writeFile(path.join(rootDir, 'data/a.json'), '{"bare": 1}\n');
    const reconciler = world.reconciler;
    const passes = new SingleFlight<PassResult>(() => reconciler.runPass({ mode: 'full' }));
    const askedForPass: string[] = [];
    watcher = new DriftWatcher({
      fs,
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
        // As the daemon gives it (agent.ts).
        rootMountsGone: async () => (await reconciler.rootMountJudge?.()) ?? (() => false),
      },
      debounceMs: 1,
    });
    for (const name of names) {
      await writeFile(path.join(rootDir, name), '{"tampered": 1}\n');
      watcher.noticeChange(path.join(rootDir, name));
    }
    watcher.noticeChange(path.join(rootDir, 'data/a.json'));
    const before = reads();
    await watcher.judgeNow();
    await passes.idle();

    // One check of the mounts for the batch (it reads the table once per mount point it knows).
    expect(reads() - before).toBe(1);
    for (const name of names) expect(await world.fileAt(name)).toBe(json({ name }));
    expect(await world.fileAt('data/a.json')).toBe('{"bare": 1}\n');
    expect(askedForPass).toEqual(['data/a.json']);
  });
});
