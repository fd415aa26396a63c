// RootMountWatch's mounts below rootDir judged one by one: nesting, bounds, bind mounts, mounts that may hang, stat errors, remounts (mount27).
import * as nodeFs from 'node:fs/promises';
import { mkdir, readFile, rename, stat, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { mountTableEachTest, ROOT_FS_MOUNT } from '../../test/helpers/mount-table-fs.js';
import type { FsPort } from '../lib/fs-port.js';
import { ROOT_MOUNT_FILE, RootMountWatch } from './root-mount.js';

const table = mountTableEachTest('config-agent-mount27-below-');

/** What the stand-in disk shows below rootDir; everything else is the real temp dir. */
interface Below {
  /** Mount points (relative to rootDir) of a filesystem of their own: `st_dev` the real one plus the number. */
  mounted: Map<string, number>;
  /** What the mount table lists below rootDir (FsPort.mountsBelow). */
  listed: Set<string>;
  /** Paths whose stat fails with this errno. */
  failing: Map<string, string>;
  /** Mount points on a filesystem that may hang (FsPort.mayHangAt): their stat fails EIO, it must not be asked. */
  mayHang: Set<string>;
  /** /proc/self/mountinfo; undefined: it cannot be read (no /proc). */
  mountinfo: string | undefined;
  /**
   * A directory a renewal left aside, put back by `asides.retry()` (store/directory-asides.ts), when `pending`;
   * `retries` holds each retry's promise, which the watch starts without awaiting it.
   */
  aside?: { from: string; to: string; pending: number; retries?: Promise<unknown>[] };
}

function world(): Below {
  return {
    mounted: new Map(),
    listed: new Set(),
    failing: new Map(),
    mayHang: new Set(),
    mountinfo: `${ROOT_FS_MOUNT}\n`,
  };
}

function belowFs(root: string, below: Below): FsPort {
  const fail = (code: string) => Object.assign(new Error(code), { code });
  const fs = {
    ...(nodeFs as unknown as FsPort),
    readFile: (async (target: string, ...rest: never[]) =>
      target !== '/proc/self/mountinfo'
        ? nodeFs.readFile(target, ...rest)
        : below.mountinfo === undefined
          ? Promise.reject(fail('ENOENT'))
          : Promise.resolve(below.mountinfo)) as FsPort['readFile'],
    stat: (async (target: string, options?: unknown) => {
      const normal = path.normalize(target);
      const relative = path.relative(root, normal);
      const code = below.failing.get(relative);
      if (code !== undefined || below.mayHang.has(relative)) throw fail(code ?? 'EIO');
      const more = below.mounted.get(relative);
      if (more === undefined) return nodeFs.stat(normal, options as never);
      const stats = await nodeFs.stat(root, options as never);
      return Object.assign(stats, { dev: Number(stats.dev) + more });
    }) as FsPort['stat'],
    mountsBelow: (of: string) => new Set(of === root ? below.listed : []),
    mayHangAt: (at: string) => below.mayHang.has(path.relative(root, at)),
  };
  const aside = below.aside;
  if (aside === undefined) return fs;
  const asides = {
    get pending() {
      return aside.pending;
    },
    retry: () => {
      const retried = rename(aside.from, aside.to).then(
        () => 0,
        () => 0,
      );
      aside.retries = [...(aside.retries ?? []), retried];
      return retried;
    },
  };
  return { ...fs, directorySyncs: { asides } as unknown as NonNullable<FsPort['directorySyncs']> };
}

const watchOf = (fs: FsPort, root = table.root, readOnly = false) =>
  new RootMountWatch(fs, root, { stateDir: table.stateDir, readOnly });
const recordPath = () => path.join(table.stateDir, ROOT_MOUNT_FILE);

/** Every one of `names` mounted and listed. */
function mountAll(below: Below, names: readonly string[]): void {
  for (const name of names) {
    below.mounted.set(name, 1);
    below.listed.add(name);
  }
}

describe('mounts below rootDir (mount27)', () => {
  it('names the deepest mount holding a path, a one-letter one too, and none for a path under none', async () => {
    const below = world();
    // The deeper one first: the last one met is not the one taken.
    mountAll(below, ['d/sub', 'd', 'data']);
    const watch = watchOf(belowFs(table.root, below));
    expect(await watch.check()).toBeUndefined();
    expect(watch.mountHolding('d/sub/x.json')).toBe(`${table.root}/d/sub`);
    expect(watch.mountHolding('d/x.json')).toBe(`${table.root}/d`);
    expect(watch.mountHolding('d')).toBe(`${table.root}/d`);
    expect(watch.mountHolding('data/x.json')).toBe(`${table.root}/data`);
    expect(watch.mountHolding('dx.json')).toBeUndefined();
    expect(watch.mountHolding('b.json')).toBeUndefined();
  });

  it('a mount listed at every check takes its bytes once: one listed later is still remembered; malformed ones never', async () => {
    const below = world();
    const long = 'x'.repeat(1_000);
    mountAll(below, [long]);
    below.listed.add('../escape');
    below.listed.add('a//b');
    const watch = watchOf(belowFs(table.root, below));
    for (let n = 0; n < 40; n += 1) await watch.check();
    mountAll(below, ['late']);
    await watch.check();
    expect(watch.mountHolding('late/f.json')).toBe(`${table.root}/late`);
    expect(watch.mountHolding('../escape/f.json')).toBeUndefined();
    expect(watch.mountHolding('a//b/f.json')).toBeUndefined();
    expect(JSON.parse(await readFile(recordPath(), 'utf8'))).toEqual({
      rootDir: table.root,
      mountPoint: false,
      below: [long, 'late'],
    });
  });

  it('remembers 256 at most, and at most 32 KiB of them as the record holds them, to the byte', async () => {
    const below = world();
    // 128 names of 253 characters: 128 x (253 + 2 quotes + 1) = 32,768 bytes, the bound exactly.
    const names = Array.from({ length: 128 }, (_, n) => `${String(n).padStart(3, '0')}${'n'.repeat(250)}`);
    mountAll(below, names);
    const watch = watchOf(belowFs(table.root, below));
    await watch.check();
    mountAll(below, ['z']);
    await watch.check();
    expect(watch.mountHolding(`${names.at(-1)}/f.json`)).toBe(`${table.root}/${names.at(-1)}`);
    expect(watch.mountHolding('z/f.json')).toBeUndefined();

    const many = world();
    mountAll(
      many,
      Array.from({ length: 257 }, (_, n) => `m${n}`),
    );
    const counted = new RootMountWatch(belowFs(table.root, many), table.root, {
      stateDir: path.join(table.dir, 'other'),
      readOnly: true,
    });
    await counted.check();
    expect(counted.mountHolding('m255/f.json')).toBe(`${table.root}/m255`);
    expect(counted.mountHolding('m256/f.json')).toBeUndefined();
  });

  it('rewrites the record only when it learns a mount, not at every check (nor for one past the bound); a read-only watch never', async () => {
    const below = world();
    const names = Array.from({ length: 128 }, (_, n) => `${String(n).padStart(3, '0')}${'n'.repeat(250)}`);
    mountAll(below, [...names, 'z']);
    const watch = watchOf(belowFs(table.root, below));
    await watch.check();
    const first = await stat(recordPath());
    await watch.check();
    await watch.check();
    expect((await stat(recordPath())).ino).toBe(first.ino);

    const readOnly = world();
    mountAll(readOnly, ['data']);
    await mkdir(path.join(table.dir, 'ro-state'));
    const dry = new RootMountWatch(belowFs(table.root, readOnly), table.root, {
      stateDir: path.join(table.dir, 'ro-state'),
      readOnly: true,
    });
    expect(await dry.check()).toBeUndefined();
    await expect(stat(path.join(table.dir, 'ro-state', ROOT_MOUNT_FILE))).rejects.toMatchObject({
      code: 'ENOENT',
    });
  });

  it("a bind mount below rootDir of its parent's filesystem is mounted while mountinfo lists it, through a symlinked rootDir too", async () => {
    await mkdir(path.join(table.root, 'bind'));
    const link = path.join(table.dir, 'link');
    await symlink(table.root, link);
    const real = await nodeFs.realpath(table.root);
    const bound = `${ROOT_FS_MOUNT}\n40 20 98:0 /srv/elsewhere ${real}/bind rw,relatime shared:2 - ext4 /dev/vda rw\n`;
    for (const root of [table.root, link]) {
      const below = world();
      below.listed.add('bind');
      below.mountinfo = bound;
      const watch = watchOf(belowFs(root, below), root);
      await watch.check();
      expect(watch.goneAt('bind/f.json')).toBeUndefined();
      // `umount -l`: the table (the kernel's and the agent's) no longer lists it.
      below.listed.delete('bind');
      below.mountinfo = `${ROOT_FS_MOUNT}\n`;
      await watch.check();
      expect(watch.goneAt('bind/f.json')?.mountGone).toContain(`${root}/bind is no mount point any more`);
    }
    // No /proc: a mount of its parent's device cannot be told, so it is gone (the check itself goes on).
    const below = world();
    below.listed.add('bind');
    below.mountinfo = undefined;
    const watch = watchOf(belowFs(table.root, below));
    await watch.check();
    expect(watch.goneAt('bind/f.json')).toBeDefined();
  });

  it('a mount that may hang is judged by the table as last read, never by a stat; one that does not, by its stat', async () => {
    const below = world();
    below.mayHang.add('nfs');
    below.listed.add('nfs');
    mountAll(below, ['fresh']);
    const watch = watchOf(belowFs(table.root, below));
    await watch.check();
    expect(watch.goneAt('nfs/f.json')).toBeUndefined();
    // The table read 10 s ago does not list `fresh` any more; its stat says it is mounted: it is.
    below.listed.delete('fresh');
    below.listed.delete('nfs');
    await watch.check();
    expect(watch.goneAt('fresh/f.json')).toBeUndefined();
    expect(watch.goneAt('nfs/f.json')?.mountGone).toContain(`${table.root}/nfs is no mount point any more`);
  });

  it('a mount point not there at all (ENOENT, ENOTDIR) is gone; one whose stat fails otherwise is left to the writes', async () => {
    const below = world();
    mountAll(below, ['gone', 'a/data', 'eio']);
    await writeFile(path.join(table.root, 'a'), 'a file now\n');
    const watch = watchOf(belowFs(table.root, below));
    await watch.check();
    below.mounted.clear();
    below.listed.clear();
    below.failing.set('eio', 'EIO');
    below.failing.set('gone', 'ENOENT');
    await watch.check();
    expect(watch.goneAt('gone/f.json')).toBeDefined();
    expect(watch.goneAt('a/data/f.json')).toBeDefined();
    expect(watch.goneAt('eio/f.json')).toBeUndefined();
  });

  it('says which: gone under this process with the st_dev it had; gone at a start with the record and its entry', async () => {
    const below = world();
    mountAll(below, ['data']);
    await mkdir(path.join(table.root, 'data'));
    const fs = belowFs(table.root, below);
    const watch = watchOf(fs);
    await watch.check();
    const dev = Number((await stat(table.root)).dev) + 1;
    below.mounted.clear();
    below.listed.clear();
    await watch.check();
    const running = watch.goneAt('data/f.json')?.mountGone ?? '';
    expect(running).toContain(`was one, st_dev ${dev}`);
    expect(running).not.toContain(ROOT_MOUNT_FILE);
    const restarted = watchOf(fs);
    await restarted.check();
    const recalled = restarted.goneAt('data/f.json')?.mountGone ?? '';
    expect(recalled).toContain(`was one when the agent last saw it (${recordPath()})`);
    expect(recalled).toContain('delete "data" from that file\'s "below"');
  });

  it('a mount below rootDir back after it was gone, or another device, has directories left aside put back; the same one not', async () => {
    await mkdir(path.join(table.root, 'data'));
    const from = path.join(table.dir, 'aside');
    const to = path.join(table.dir, 'put-back');
    const cases: { pending: number; steps: (below: Below) => void; back: boolean }[] = [
      { pending: 1, steps: (below) => below.mounted.set('data', 2), back: true },
      { pending: 1, steps: (below) => below.mounted.set('data', 1), back: false },
      { pending: 0, steps: (below) => below.mounted.set('data', 2), back: false },
      {
        pending: 1,
        steps: (below) => {
          below.mounted.delete('data');
        },
        back: false,
      },
    ];
    for (const { pending, steps, back } of cases) {
      await nodeFs.rm(to, { recursive: true, force: true });
      await mkdir(from, { recursive: true });
      const below = world();
      below.aside = { from, to, pending };
      mountAll(below, ['data']);
      const watch = watchOf(belowFs(table.root, below));
      await watch.check();
      steps(below);
      await watch.check();
      // The watch starts a retry in the background (a pass never waits on it): its rename, awaited here, is a
      // thread-pool round trip that one turn of the loop did not always see end (Node 24 in a CI rehearsal).
      await Promise.all(below.aside.retries ?? []);
      expect(
        await nodeFs.access(to).then(
          () => true,
          () => false,
        ),
      ).toBe(back);
    }
    // Gone, then mounted again on the very device it had: back.
    await nodeFs.rm(to, { recursive: true, force: true });
    await mkdir(from, { recursive: true });
    const below = world();
    below.aside = { from, to, pending: 1 };
    mountAll(below, ['data']);
    const watch = watchOf(belowFs(table.root, below));
    await watch.check();
    below.mounted.delete('data');
    await watch.check();
    below.mounted.set('data', 1);
    await watch.check();
    await Promise.all(below.aside.retries ?? []);
    expect(
      await nodeFs.access(to).then(
        () => true,
        () => false,
      ),
    ).toBe(true);
  });

  it('forgets a gone mount only when it is not there, unlisted and holds nothing; its bytes freed to the byte; the record keeps rootDir its own', async () => {
    const below = world();
    const names = Array.from({ length: 128 }, (_, n) => `${String(n).padStart(3, '0')}${'n'.repeat(250)}`);
    // rootDir a mount point itself ('' is rootDir), the 128 names filling the bound exactly.
    below.mounted.set('', 1);
    mountAll(below, names);
    const held = new Set([names[1]]);
    const watch = new RootMountWatch(belowFs(table.root, below), table.root, {
      stateDir: table.stateDir,
      readOnly: false,
      holdsManaged: (mountPoint) => held.has(mountPoint),
    });
    expect(await watch.check()).toBeUndefined();
    // names[0] and names[1] removed with their mounts, names[2] too but the table (read 10 s ago) still lists it.
    for (const name of names.slice(0, 3)) {
      below.mounted.delete(name);
      below.failing.set(name, 'ENOENT');
      if (name !== names[2]) below.listed.delete(name);
    }
    await watch.check();
    await watch.forgetUnheld();
    expect(watch.mountHolding(`${names[0]}/f.json`)).toBeUndefined();
    expect(watch.mountHolding(`${names[1]}/f.json`)).toBe(`${table.root}/${names[1]}`);
    expect(watch.mountHolding(`${names[2]}/f.json`)).toBe(`${table.root}/${names[2]}`);
    // Written at once without it, rootDir's own mount still in (a restart now would find rootDir's mount recorded).
    const forgotten = JSON.parse(await readFile(recordPath(), 'utf8')) as {
      mountPoint?: unknown;
      below?: unknown[];
    };
    expect(forgotten.mountPoint).toBe(true);
    expect(forgotten.below).not.toContain(names[0]);
    expect(forgotten.below).toContain(names[2]);
    // names[0]'s bytes are free again: one of the same length fits, nothing more.
    const again = `999${'n'.repeat(250)}`;
    mountAll(below, [again, 'z']);
    await watch.check();
    expect(watch.mountHolding(`${again}/f.json`)).toBe(`${table.root}/${again}`);
    expect(watch.mountHolding('z/f.json')).toBeUndefined();
    const record = JSON.parse(await readFile(recordPath(), 'utf8')) as {
      mountPoint?: unknown;
      below?: unknown[];
    };
    expect(record.mountPoint).toBe(true);
    expect(record.below).not.toContain(names[0]);
    expect(record.below).toContain(again);
  });

  it('keeps one whose stat fails otherwise (EIO); a read-only watch forgets in memory only', async () => {
    const below = world();
    mountAll(below, ['eio', 'gone']);
    await watchOf(belowFs(table.root, below)).check();
    const bytes = await readFile(recordPath(), 'utf8');
    // Both unmounted while the agent was down; eio's stat fails EIO, gone's directory is not there.
    below.mounted.clear();
    below.listed.clear();
    below.failing.set('eio', 'EIO');
    below.failing.set('gone', 'ENOENT');
    const readOnly = new RootMountWatch(belowFs(table.root, below), table.root, {
      stateDir: table.stateDir,
      readOnly: true,
      holdsManaged: () => false,
    });
    await readOnly.check();
    await readOnly.forgetUnheld();
    expect(readOnly.mountHolding('gone/f.json')).toBeUndefined();
    expect(readOnly.mountHolding('eio/f.json')).toBe(`${table.root}/eio`);
    expect(await readFile(recordPath(), 'utf8')).toBe(bytes);
  });

  it('a watch with no memory, or one without holdsManaged, judges mounts below and forgets none', async () => {
    const below = world();
    mountAll(below, ['data']);
    const bare = new RootMountWatch(belowFs(table.root, below), table.root);
    const noHolds = watchOf(belowFs(table.root, below));
    for (const watch of [bare, noHolds]) expect(await watch.check()).toBeUndefined();
    below.mounted.clear();
    below.listed.clear();
    below.failing.set('data', 'ENOENT');
    for (const watch of [bare, noHolds]) {
      await watch.check();
      await watch.forgetUnheld();
      expect(watch.goneAt('data/f.json')).toBeDefined();
    }
  });
});
