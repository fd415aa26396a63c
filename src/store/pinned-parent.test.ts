// A directory another local user can write, swapped for a symlink around the checks of a publish, a rollback
// or a removal: each still acts in the directory the walk found, never outside the root (real fs, /proc/self/fd).
import type { Dir } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import {
  chmod,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  rename,
  rm,
  symlink,
  unlink,
  writeFile,
} from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import { publishFile, removeManagedFile, sweepTempFiles, syncDirectories } from './durable-writer.js';
import { PathRejectedError } from './errors.js';
import { TEMP_PREFIX, VerifiedDirectories } from './path-guard.js';

let dir: string;
let root: string;
let outside: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-pinned-'));
  root = path.join(dir, 'root');
  outside = path.join(dir, 'outside');
  await mkdir(path.join(root, 'shared', 'app'), { recursive: true });
  await chmod(root, 0o755);
  // The directory another local user can write: they can swap its entries.
  await chmod(path.join(root, 'shared'), 0o777);
  await mkdir(outside, { mode: 0o755 });
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/**
 * The worst interleaving a racing user can hit: `victim` becomes a symlink to `outside` just before the temp
 * file is created, is a real directory again when the writer re-walks the path, and a symlink again just
 * before the rename.
 */
function racingFs(victim: string): FsPort & { swaps: () => number } {
  const target = path.join(root, victim);
  let swaps = 0;
  let isLink = false;
  const toLink = async () => {
    if (isLink) return;
    await rename(target, `${target}-real`);
    await symlink(outside, target);
    isLink = true;
    swaps += 1;
  };
  const toReal = async () => {
    if (!isLink) return;
    await unlink(target);
    await rename(`${target}-real`, target);
    isLink = false;
    swaps += 1;
  };
  const isTemp = (file: unknown) => path.basename(String(file)).startsWith(TEMP_PREFIX);
  const open = (async (file: string, ...rest: unknown[]) => {
    if (isTemp(file)) await toLink();
    return (nodeFs.open as (...args: unknown[]) => Promise<nodeFs.FileHandle>)(file, ...rest);
  }) as FsPort['open'];
  const lstat = (async (file: string, ...rest: unknown[]) => {
    if (String(file) === target && swaps === 1) await toReal();
    return (nodeFs.lstat as (...args: unknown[]) => Promise<unknown>)(file, ...rest);
  }) as FsPort['lstat'];
  const renameFile = (async (from: string, to: string) => {
    if (isTemp(from)) await toLink();
    return nodeFs.rename(from, to);
  }) as FsPort['rename'];
  return { ...nodeFs, open, lstat, rename: renameFile, swaps: () => swaps };
}

describe('publishFile under a directory another user can write', () => {
  it('lands in the directory the walk found: never outside the root, not even a temp file', async () => {
    for (const [victim, relativePath] of [
      ['shared/app', 'shared/app/config.json'],
      ['shared', 'shared/app/config.json'],
    ] as const) {
      const fs = racingFs(victim);
      const result = await publishFile(fs, {
        rootDir: root,
        relativePath,
        data: Buffer.from('{"v":1}\n'),
        mode: 0o644,
        dirMode: 0o755,
        verified: new VerifiedDirectories(process.geteuid?.() ?? 0),
      });
      expect(fs.swaps(), victim).toBe(3);
      expect(await readdir(outside), victim).toEqual([]);
      expect(result, victim).toMatchObject({ outcome: 'written' });
      // The real directory, now at `<victim>-real`: the file is there, whole.
      const real = path.join(root, `${victim}-real`, path.relative(victim, relativePath));
      expect(await readFile(real, 'utf8'), victim).toBe('{"v":1}\n');
      await unlink(path.join(root, victim));
      await rename(path.join(root, `${victim}-real`), path.join(root, victim));
      await rm(path.join(root, relativePath));
    }
  });
});

describe('publishFile making parents under a directory another user can write', () => {
  it('never makes a directory outside the root when the way is swapped just before the mkdir', async () => {
    const shared = path.join(root, 'shared');
    let swapped = false;
    let leaked = false;
    const mkdirFs: FsPort = {
      ...nodeFs,
      mkdir: (async (file: string, ...rest: unknown[]) => {
        if (!swapped) {
          swapped = true;
          await rename(shared, `${shared}-real`);
          await symlink(outside, shared);
        }
        const made = await (nodeFs.mkdir as (...args: unknown[]) => Promise<unknown>)(file, ...rest);
        // A rollback may remove it again: what counts is that it was ever made there (a kill -9 keeps it).
        if ((await readdir(outside)).length > 0) leaked = true;
        return made;
      }) as FsPort['mkdir'],
    };
    const result = await publishFile(mkdirFs, {
      rootDir: root,
      relativePath: 'shared/new/deeper/config.json',
      data: Buffer.from('{"v":1}\n'),
      mode: 0o644,
      dirMode: 0o755,
    }).catch((error: unknown) => error);
    expect(swapped).toBe(true);
    expect(leaked).toBe(false);
    expect(await readdir(outside)).toEqual([]);
    // The swap is seen by the re-walk before the rename: refused (the directories made stay in the real one).
    expect(result).toBeInstanceOf(PathRejectedError);
  });
});

describe('a failed publish under a directory another user can write rolls back through descriptors', () => {
  it('removes the directories it made in the real directory, never an empty one of the same name in a symlink target', async () => {
    const shared = path.join(root, 'shared');
    // The other user's empty directories, named as the ones the publish will make: an rmdir by path through
    // the symlink swapped in for `shared` would remove them.
    await mkdir(path.join(outside, 'new', 'deeper'), { recursive: true });
    let swapped = false;
    const mkdirFs: FsPort = {
      ...nodeFs,
      mkdir: (async (file: string, ...rest: unknown[]) => {
        if (!swapped) {
          swapped = true;
          await rename(shared, `${shared}-real`);
          await symlink(outside, shared);
        }
        return (nodeFs.mkdir as (...args: unknown[]) => Promise<unknown>)(file, ...rest);
      }) as FsPort['mkdir'],
    };
    const result = await publishFile(mkdirFs, {
      rootDir: root,
      relativePath: 'shared/new/deeper/config.json',
      data: Buffer.from('{"v":1}\n'),
      mode: 0o644,
      dirMode: 0o755,
    }).catch((error: unknown) => error);
    // The re-walk before the rename sees the symlink: refused, and what the publish made is rolled back.
    expect(result).toBeInstanceOf(PathRejectedError);
    expect(await readdir(path.join(outside, 'new'))).toEqual(['deeper']);
    expect(await readdir(`${shared}-real`)).toEqual(['app']);
  });
});

describe('removeManagedFile under a directory another user can write', () => {
  /** `fs` whose first call of `name` swaps `shared` for a symlink to `outside` just before it runs. */
  const swapBefore = (name: 'unlink' | 'rmdir'): FsPort => {
    const shared = path.join(root, 'shared');
    let swapped = false;
    const call = (async (file: string) => {
      if (!swapped) {
        swapped = true;
        await rename(shared, `${shared}-real`);
        await symlink(outside, shared);
      }
      return name === 'unlink' ? nodeFs.unlink(file) : nodeFs.rmdir(file);
    }) as FsPort['unlink'] & FsPort['rmdir'];
    return { ...nodeFs, [name]: call };
  };

  it('unlinks the file it checked, never a file of the same name in a symlink target', async () => {
    await writeFile(path.join(root, 'shared/app/config.json'), 'ours');
    await mkdir(path.join(outside, 'app'));
    await writeFile(path.join(outside, 'app/config.json'), 'theirs');
    const outcome = await removeManagedFile(swapBefore('unlink'), {
      rootDir: root,
      relativePath: 'shared/app/config.json',
      pruneDirs: [],
    });
    expect(outcome).toBe('removed');
    expect(await readFile(path.join(outside, 'app/config.json'), 'utf8')).toBe('theirs');
    expect(await readdir(path.join(root, 'shared-real/app'))).toEqual([]);
  });

  it('prunes the directories it made, never an empty one of the same name in a symlink target', async () => {
    await mkdir(path.join(root, 'shared/new/deeper'), { recursive: true });
    await writeFile(path.join(root, 'shared/new/deeper/config.json'), 'ours');
    await mkdir(path.join(outside, 'new/deeper'), { recursive: true });
    const outcome = await removeManagedFile(swapBefore('rmdir'), {
      rootDir: root,
      relativePath: 'shared/new/deeper/config.json',
      pruneDirs: ['shared/new', 'shared/new/deeper'],
    });
    expect(outcome).toBe('removed');
    expect(await readdir(path.join(outside, 'new'))).toEqual(['deeper']);
    // The one removed before the swap was seen is gone; `new` stays: a symlink is now on the way to it.
    expect(await readdir(path.join(root, 'shared-real/new'))).toEqual([]);
  });
});

describe('removeManagedFile under a directory another user can write: the edges', () => {
  const openFds = async () => (await readdir('/proc/self/fd')).length;

  it('a directory on the way gone before it is pinned: the file is absent, nothing thrown', async () => {
    await writeFile(path.join(root, 'shared/app/config.json'), 'ours');
    let removed = false;
    const fs: FsPort = {
      ...nodeFs,
      open: (async (file: string, ...rest: unknown[]) => {
        if (!removed && String(file).endsWith('/app')) {
          removed = true;
          await rm(path.join(root, 'shared/app'), { recursive: true });
        }
        return (nodeFs.open as (...args: unknown[]) => Promise<nodeFs.FileHandle>)(file, ...rest);
      }) as FsPort['open'],
    };
    const outcome = await removeManagedFile(fs, {
      rootDir: root,
      relativePath: 'shared/app/config.json',
      pruneDirs: ['shared/app'],
    });
    expect(removed).toBe(true);
    expect(outcome).toBe('absent');
    expect(await readdir(path.join(root, 'shared'))).toEqual([]);
  });

  it('a directory to prune whose parent is gone before it is pinned is skipped, nothing thrown', async () => {
    await mkdir(path.join(root, 'shared/gone/deeper'), { recursive: true });
    await writeFile(path.join(root, 'shared/app/config.json'), 'ours');
    let removed = false;
    const fs: FsPort = {
      ...nodeFs,
      open: (async (file: string, ...rest: unknown[]) => {
        if (!removed && String(file).endsWith('/gone')) {
          removed = true;
          await rm(path.join(root, 'shared/gone'), { recursive: true });
        }
        return (nodeFs.open as (...args: unknown[]) => Promise<nodeFs.FileHandle>)(file, ...rest);
      }) as FsPort['open'],
    };
    const outcome = await removeManagedFile(fs, {
      rootDir: root,
      relativePath: 'shared/app/config.json',
      pruneDirs: ['shared/app', 'shared/gone/deeper'],
    });
    expect(removed).toBe(true);
    expect(outcome).toBe('removed');
    expect(await readdir(path.join(root, 'shared'))).toEqual([]);
  });

  it('leaves no descriptor open: removed, pruned, refused', async () => {
    const before = await openFds();
    for (let i = 0; i < 20; i += 1) {
      await mkdir(path.join(root, `shared/n${i}/deeper`), { recursive: true });
      await writeFile(path.join(root, `shared/n${i}/deeper/config.json`), 'ours');
      const removal = { rootDir: root, relativePath: `shared/n${i}/deeper/config.json` };
      // Refused first (another file than the one recorded), then removed with its directories.
      const refused = await removeManagedFile(nodeFs, {
        ...removal,
        pruneDirs: [],
        expected: { dev: 0, ino: 0 },
      });
      const outcome = await removeManagedFile(nodeFs, {
        ...removal,
        pruneDirs: [`shared/n${i}`, `shared/n${i}/deeper`],
      });
      expect([refused, outcome]).toEqual(['refused', 'removed']);
    }
    expect(await readdir(path.join(root, 'shared'))).toEqual(['app']);
    // One leaked per removal would be 20 or 40 more.
    expect(await openFds()).toBeLessThan(before + 10);
  });
});

describe('syncDirectories for a batch under a directory another user can write', () => {
  it('a directory swapped for a symlink before its fsync fails it, never fsyncs the target instead', async () => {
    const verified = new VerifiedDirectories(process.geteuid?.() ?? 0);
    await publishFile(nodeFs, {
      rootDir: root,
      relativePath: 'shared/app/config.json',
      data: Buffer.from('{"v":1}\n'),
      mode: 0o644,
      dirMode: 0o755,
      syncDirectory: false,
      verified,
    });
    const shared = path.join(root, 'shared');
    await rename(shared, `${shared}-real`);
    await mkdir(path.join(outside, 'app'));
    await symlink(outside, shared);
    const failures = await syncDirectories(nodeFs, root, ['shared/app', ''], { verified });
    expect([...failures.keys()]).toEqual(['shared/app']);
  });
});

describe('sweepTempFiles under a directory another user can write', () => {
  /** `victim` becomes a symlink to `outside` once `when` says so (after the listing that found it a directory). */
  function swappingFs(victim: string, when: () => boolean): FsPort {
    const target = path.join(root, victim);
    let swapped = false;
    const swap = async () => {
      if (swapped) return;
      swapped = true;
      await rename(target, `${target}-real`);
      await symlink(outside, target);
    };
    return {
      ...nodeFs,
      readdir: (async (file: string, options: unknown) => {
        const entries = await (nodeFs.readdir as (f: string, o: unknown) => Promise<unknown>)(file, options);
        if (when()) await swap();
        return entries;
      }) as FsPort['readdir'],
      // The sweep reads a listing a few entries at a time: the swap comes as soon as the listing gave `victim`.
      opendir: (async (file: string, options: unknown) => {
        const dir = await (nodeFs.opendir as (f: string, o: unknown) => Promise<Dir>)(file, options);
        const swapsAfterReading = when();
        return {
          read: async () => {
            const entry = await dir.read();
            if (swapsAfterReading) await swap();
            return entry;
          },
          close: () => dir.close(),
        };
      }) as unknown as NonNullable<FsPort['opendir']>,
    };
  }

  it('never lists or unlinks in a symlink target swapped in after its parent was listed', async () => {
    await writeFile(path.join(outside, `${TEMP_PREFIX}victim`), "not the agent's");
    await writeFile(path.join(root, 'shared', 'app', `${TEMP_PREFIX}ours`), 'torn');
    await writeFile(path.join(root, `${TEMP_PREFIX}top`), 'torn');
    let listings = 0;
    // The swap comes right after the sweep's second listing (the root's, then 'shared'), before 'shared/app'.
    const fs = swappingFs('shared/app', () => {
      listings += 1;
      return listings === 2;
    });
    const removed = await sweepTempFiles(fs, root);
    expect(await readdir(outside)).toEqual([`${TEMP_PREFIX}victim`]);
    expect(removed).toEqual([`${TEMP_PREFIX}top`]);
    // The real directory moved away keeps its temp file for the next start's sweep.
    expect(await readdir(path.join(root, 'shared', 'app-real'))).toEqual([`${TEMP_PREFIX}ours`]);
  });

  it('a directory swapped out after it was opened is still the one listed and swept', async () => {
    await writeFile(path.join(outside, `${TEMP_PREFIX}victim`), "not the agent's");
    await writeFile(path.join(root, 'shared', 'app', `${TEMP_PREFIX}ours`), 'torn');
    const shared = path.join(root, 'shared', 'app');
    let swapped = false;
    const fs: FsPort = {
      ...nodeFs,
      open: (async (file: string, flags: number) => {
        const handle = await nodeFs.open(file, flags);
        if (!swapped && String(file).endsWith('/app')) {
          swapped = true;
          await rename(shared, `${shared}-real`);
          await symlink(outside, shared);
        }
        return handle;
      }) as FsPort['open'],
    };
    expect(await sweepTempFiles(fs, root)).toEqual([`shared/app/${TEMP_PREFIX}ours`]);
    expect(swapped).toBe(true);
    expect(await readdir(outside)).toEqual([`${TEMP_PREFIX}victim`]);
    expect(await readdir(`${shared}-real`)).toEqual([]);
  });

  it('walks no deeper than a directory that could hold a temp file of a valid path', async () => {
    // 16 levels of a 250-byte name are 4,015 bytes (a temp file there can belong to a valid path: swept); the
    // 17th is 4,266 bytes, beyond the 4,095 a managed path may have (not walked). The tree is made and removed
    // through descriptors: its absolute path is longer than PATH_MAX.
    const segment = 'd'.repeat(250);
    const handles: nodeFs.FileHandle[] = [await nodeFs.open(root, 'r')];
    const at = (name: string) => `/proc/self/fd/${handles.at(-1)!.fd}/${name}`;
    try {
      for (let level = 1; level <= 17; level += 1) {
        await mkdir(at(segment));
        handles.push(await nodeFs.open(at(segment), 'r'));
        await writeFile(at(`${TEMP_PREFIX}level${level}`), 'torn');
      }
      const removed = await sweepTempFiles(nodeFs, root);
      const swept = Array.from({ length: 16 }, (_, index) =>
        [...Array.from({ length: index + 1 }, () => segment), `${TEMP_PREFIX}level${index + 1}`].join('/'),
      );
      expect(removed).toEqual(swept.sort());
      expect(await readdir(`/proc/self/fd/${handles.at(-1)!.fd}`)).toEqual([`${TEMP_PREFIX}level17`]);
    } finally {
      while (handles.length > 1) {
        for (const name of await readdir(at(''))) await unlink(at(name));
        await handles.pop()!.close();
        await nodeFs.rmdir(at(segment));
      }
      await handles.pop()!.close();
    }
  });
});
