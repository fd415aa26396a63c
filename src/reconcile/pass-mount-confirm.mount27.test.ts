// A file confirmed in place from its bytes is not confirmed while the mount holding it is gone (mount27).
import * as nodeFs from 'node:fs/promises';
import { mkdir, rm, writeFile } from 'node:fs/promises';
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

/**
 * The real fs with a filesystem at `<rootDir>/<below>` (or at rootDir itself, `below` '') while `mount.on`: its own
 * `st_dev` there, and the mount table (FsPort.mountsBelow) listing one below rootDir. Off: the bare directory.
 */
function mountedFs(rootDir: string, below: string, mount: { on: boolean }): FsPort {
  const at = below === '' ? rootDir : path.join(rootDir, below);
  return {
    ...(nodeFs as unknown as FsPort),
    stat: (async (target: string, options?: unknown) => {
      const stats = await nodeFs.stat(target, options as never);
      if (mount.on && target === at) Object.assign(stats, { dev: Number(stats.dev) + 1 });
      return stats;
    }) as FsPort['stat'],
    mountsBelow: (dir: string) => new Set(dir === rootDir && mount.on && below !== '' ? [below] : []),
  };
}

function lastReportOf(id: string): { error_status: string; message?: string | undefined } | undefined {
  return world!.server.state.reports.filter((r) => r.config_instance_id === id).at(-1);
}

const json = (value: unknown) => `${JSON.stringify(value, null, 2)}\n`;

describe('a stale copy with the right bytes in the bare directory of a gone mount (mount27)', () => {
  for (const below of ['data', '']) {
    const where = below === '' ? "rootDir's own mount" : 'a mount below rootDir';
    it(`${where}: never confirmed deployed from it, retrying naming the mount, no attempt; mounted again: deployed`, async () => {
      world = await createPassWorld({
        name: `mount27-confirm-${below || 'root'}`,
        parent: '/dev/shm',
        open: false,
      });
      const dataDir = path.join(world.rootDir, 'data');
      await mkdir(dataDir);
      const mount = { on: true };
      const clock = movingClock();
      await world.open({
        deps: { fs: mountedFs(world.rootDir, below, mount), clock },
        settings: { retry: { maxAttempts: 1, baseDelaySeconds: 10, maxDelaySeconds: 60 } },
      });
      world.put({ id: 'cfg_a', relative_filepath: 'data/a.json', content: { v: 1 } });
      world.put({ id: 'cfg_b', relative_filepath: 'data/b.json', content: { v: 2 } });
      expect((await world.pass()).converged).toBe(true);
      expect(lastReportOf('cfg_a')?.error_status).toBe('none');

      // `umount -l`; the bare mount point underneath holds old copies with the very bytes recorded (a backup
      // restored there, an image made with them): nothing of the mount's files is there.
      const mode = (await nodeFs.stat(path.join(dataDir, 'a.json'))).mode & 0o7777;
      mount.on = false;
      await rm(dataDir, { recursive: true });
      await mkdir(dataDir);
      await writeFile(path.join(dataDir, 'a.json'), json({ v: 1 }));
      await writeFile(path.join(dataDir, 'b.json'), json({ v: 2 }));
      for (const name of ['a.json', 'b.json']) await nodeFs.chmod(path.join(dataDir, name), mode);

      // The first pass finds them "in place" as the service has them (confirm), later ones with the service at
      // retrying (a `deployed` report due): neither is `deployed`. Each past every hold-off, maxAttempts 1.
      for (let n = 0; n < 3; n += 1) {
        expect((await world.pass()).converged).toBe(false);
        clock.advance(3_600_000);
      }
      expect(await world.reconciler.rootMountGone()).toBe(true);
      for (const id of ['cfg_a', 'cfg_b']) {
        expect(lastReportOf(id)?.error_status).toBe('retrying');
        expect(lastReportOf(id)?.message).toContain(
          `${below === '' ? world.rootDir : dataDir} is no mount point any more`,
        );
      }
      expect(world.reports().filter((r) => r.endsWith('/failed'))).toEqual([]);

      // Mounted again, with those bytes: confirmed then.
      mount.on = true;
      expect((await world.pass()).converged).toBe(true);
      for (const id of ['cfg_a', 'cfg_b']) expect(lastReportOf(id)?.error_status).toBe('none');
      expect(world.reports().filter((r) => r.endsWith('/failed'))).toEqual([]);
    });
  }
});
