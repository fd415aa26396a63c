// Durable writer on memfs: outcomes, modes, directories, injected disk faults and aborts, removal and sweep.
import { constants } from 'node:fs';
import path from 'node:path';
import { createFsFromVolume, Volume } from 'memfs';
import { describe, expect, it } from 'vitest';
import type { FileHandle, FsPort } from '../lib/fs-port.js';
import { sha256Hex } from '../lib/hash.js';
import {
  publishFile,
  readRegularFile,
  removeManagedFile,
  sweepTempFiles,
  syncDirectories,
  writeDurableJson,
} from './durable-writer.js';
import { DiskError, PathRejectedError } from './errors.js';
import { TEMP_PREFIX } from './path-guard.js';

const ROOT = '/srv/root';

function memfs(files: Record<string, string> = {}): { fs: FsPort; vol: Volume } {
  const vol = Volume.fromJSON({ [`${ROOT}/.keep`]: '', ...files });
  return { fs: createFsFromVolume(vol).promises as unknown as FsPort, vol };
}

/** Every entry under `dir` (no symlink following): path → file content, 'dir', or 'symlink -> target'. */
async function snapshot(fs: FsPort, dir: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const walk = async (current: string): Promise<void> => {
    for (const entry of await fs.readdir(current, { withFileTypes: true })) {
      const full = path.join(current, String(entry.name));
      const stats = await fs.lstat(full);
      const mode = (stats.mode & 0o7777).toString(8);
      if (stats.isSymbolicLink()) out[full] = 'symlink';
      else if (stats.isDirectory()) {
        out[full] = `dir ${mode}`;
        await walk(full);
      } else out[full] = `${mode} ${(await fs.readFile(full)).toString('utf8')}`;
    }
  };
  await walk(dir);
  return out;
}

function tempFilesIn(tree: Record<string, string>): string[] {
  return Object.keys(tree).filter((p) => path.basename(p).startsWith(TEMP_PREFIX));
}

const request = (relativePath: string, text: string, mode = 0o644) => ({
  rootDir: ROOT,
  relativePath,
  data: Buffer.from(text),
  mode,
  dirMode: 0o750,
});

function injected(code: string): Error {
  return Object.assign(new Error(`${code}: injected fault`), { code });
}

type Step = 'mkdir' | 'open-temp' | 'write' | 'chmod' | 'sync' | 'close' | 'rename' | 'dir-sync';

/**
 * Wraps a FsPort so that one step of the publish protocol misbehaves: it throws `code`, or, with `onStep`,
 * runs a hook (used to abort) before doing the real work. A failing write first writes half the bytes, as a
 * full disk does.
 */
function withFault(base: FsPort, fault: Step, options: { code?: string; onStep?: () => void } = {}): FsPort {
  const hit = (step: Step): void => {
    if (step !== fault) return;
    if (options.onStep) options.onStep();
    else throw injected(options.code ?? 'ENOSPC');
  };
  const wrapHandle = (handle: FileHandle, isTemp: boolean, isDir: boolean): FileHandle =>
    new Proxy(handle, {
      get(target, property, receiver) {
        const value = Reflect.get(target, property, receiver) as unknown;
        if (typeof value !== 'function') return value;
        const bound = (value as (...args: unknown[]) => unknown).bind(target);
        if (isTemp && property === 'write') {
          return async (data: Uint8Array, offset = 0, length = data.byteLength - offset, position = null) => {
            if (fault === 'write' && !options.onStep) {
              await target.write(data.subarray(offset, offset + Math.floor(length / 2)));
            }
            hit('write');
            return bound(data, offset, length, position);
          };
        }
        if (isTemp && (property === 'chmod' || property === 'sync' || property === 'close')) {
          return async (...args: unknown[]) => {
            if (property === 'close' && fault === 'close' && !options.onStep) {
              await bound();
              hit('close');
            }
            hit(property);
            return bound(...args);
          };
        }
        if (isDir && property === 'sync') {
          return async () => {
            hit('dir-sync');
            return bound();
          };
        }
        return bound;
      },
    });
  return {
    ...base,
    open: (async (file: string, flags: number, mode?: number) => {
      const isTemp = path.basename(String(file)).startsWith(TEMP_PREFIX);
      if (isTemp) hit('open-temp');
      const handle = await base.open(file, flags, mode);
      return wrapHandle(handle, isTemp, typeof flags === 'number' && (flags & constants.O_DIRECTORY) !== 0);
    }) as FsPort['open'],
    mkdir: (async (...args: Parameters<FsPort['mkdir']>) => {
      hit('mkdir');
      return base.mkdir(...args);
    }) as FsPort['mkdir'],
    rename: async (from, to) => {
      hit('rename');
      return base.rename(from, to);
    },
  };
}

/** Every `open` the writer makes through `base`: the path and the flags it passed. */
function recordingOpens(base: FsPort): { fs: FsPort; opens: Array<{ file: string; flags: number }> } {
  const opens: Array<{ file: string; flags: number }> = [];
  const fs: FsPort = {
    ...base,
    open: (async (file: string, flags: number, mode?: number) => {
      opens.push({ file: String(file), flags });
      return base.open(file, flags, mode);
    }) as FsPort['open'],
  };
  return { fs, opens };
}

/**
 * Records the durability-relevant events in the order they happen: a file's fsync, a rename into place, a
 * directory's fsync (as paths relative to the root). The order is the promise being tested.
 */
function recordingDurability(base: FsPort): { fs: FsPort; events: string[] } {
  const events: string[] = [];
  const relative = (file: string) => path.relative(ROOT, String(file)) || '.';
  const fs: FsPort = {
    ...base,
    open: (async (file: string, flags: number, mode?: number) => {
      const handle = await base.open(file, flags, mode);
      const isDir = (flags & constants.O_DIRECTORY) !== 0;
      return new Proxy(handle, {
        get(target, property, receiver) {
          const value = Reflect.get(target, property, receiver) as unknown;
          if (typeof value !== 'function') return value;
          const bound = (value as (...args: unknown[]) => unknown).bind(target);
          if (property !== 'sync') return bound;
          return async () => {
            await bound();
            events.push(`${isDir ? 'fsync-dir' : 'fsync-file'} ${relative(file)}`);
          };
        },
      });
    }) as FsPort['open'],
    rename: async (from, to) => {
      await base.rename(from, to);
      events.push(`rename ${relative(String(to))}`);
    },
  };
  return { fs, events };
}

const TEMP_NAME = new RegExp(`^${TEMP_PREFIX.replaceAll('.', '\\.')}[0-9a-f]{24,}$`);

describe('publishFile', () => {
  it('writes the bytes with the requested mode and reports them', async () => {
    const { fs } = memfs();
    const result = await publishFile(fs, request('app.conf', 'hello', 0o640));
    expect(result).toEqual({
      outcome: 'written',
      sha256: sha256Hex(Buffer.from('hello')),
      bytes: 5,
      createdDirs: [],
      directory: '',
    });
    expect((await fs.readFile(`${ROOT}/app.conf`)).toString()).toBe('hello');
    expect((await fs.stat(`${ROOT}/app.conf`)).mode & 0o7777).toBe(0o640);
    expect(tempFilesIn(await snapshot(fs, ROOT))).toEqual([]);
  });

  it('replaces an existing file and leaves no temp file', async () => {
    const { fs } = memfs({ [`${ROOT}/etc/app.conf`]: 'old' });
    const result = await publishFile(fs, request('etc/app.conf', 'new content'));
    expect(result.outcome).toBe('written');
    expect(await snapshot(fs, `${ROOT}/etc`)).toEqual({ [`${ROOT}/etc/app.conf`]: '644 new content' });
  });

  it('writes an empty file', async () => {
    const { fs } = memfs();
    expect((await publishFile(fs, request('empty', ''))).bytes).toBe(0);
    expect((await fs.readFile(`${ROOT}/empty`)).byteLength).toBe(0);
  });

  it("reports 'unchanged' for identical bytes and mode without replacing the file", async () => {
    const { fs } = memfs();
    await publishFile(fs, request('app.conf', 'same', 0o600));
    const before = await fs.stat(`${ROOT}/app.conf`);
    await new Promise((resolve) => setTimeout(resolve, 5));
    const result = await publishFile(fs, request('app.conf', 'same', 0o600));
    const after = await fs.stat(`${ROOT}/app.conf`);
    expect(result).toEqual({
      outcome: 'unchanged',
      sha256: sha256Hex(Buffer.from('same')),
      bytes: 4,
      createdDirs: [],
      directory: '',
    });
    expect(after.ino).toBe(before.ino);
    expect(after.mtimeMs).toBe(before.mtimeMs);
    expect(after.ctimeMs).toBe(before.ctimeMs);
  });

  it('changes only the mode in place when the bytes are the same, and rewrites when same-size bytes differ', async () => {
    const { fs } = memfs();
    await publishFile(fs, request('app.conf', 'abcd', 0o644));
    const before = await fs.stat(`${ROOT}/app.conf`);
    expect((await publishFile(fs, request('app.conf', 'abcd', 0o600))).outcome).toBe('metadata');
    const after = await fs.stat(`${ROOT}/app.conf`);
    expect(after.mode & 0o7777).toBe(0o600);
    expect(after.ino).toBe(before.ino);
    expect((await publishFile(fs, request('app.conf', 'abcd', 0o600))).outcome).toBe('unchanged');
    expect((await publishFile(fs, request('app.conf', 'abce', 0o600))).outcome).toBe('written');
    expect((await fs.readFile(`${ROOT}/app.conf`)).toString()).toBe('abce');
  });

  it('a file grown huge between its lstat and the compare is never read whole: it is replaced', async () => {
    const { fs: base, vol } = memfs({ [`${ROOT}/app.conf`]: 'abcd' });
    const huge = 8 * 1024 * 1024;
    let largest = 0;
    const fs: FsPort = {
      ...base,
      open: (async (file: string, flags: number, mode?: number) => {
        // A local user grows the file right after the writer's lstat saw its size equal to the new bytes'.
        if (String(file).endsWith('/app.conf') && (flags & (constants.O_WRONLY | constants.O_RDWR)) === 0) {
          vol.truncateSync(String(file), huge);
        }
        const handle = await base.open(file, flags, mode);
        const readFile = handle.readFile.bind(handle);
        const read = handle.read.bind(handle);
        return Object.assign(handle, {
          readFile: async (...rest: unknown[]) => {
            const data = await (readFile as (...a: unknown[]) => Promise<Buffer>)(...rest);
            largest = Math.max(largest, data.length);
            return data;
          },
          read: async (...rest: unknown[]) => {
            const result = await (read as (...a: unknown[]) => Promise<{ bytesRead: number }>)(...rest);
            largest = Math.max(largest, result.bytesRead);
            return result;
          },
        });
      }) as FsPort['open'],
    };
    expect((await publishFile(fs, request('app.conf', 'abce', 0o644))).outcome).toBe('written');
    expect((await base.readFile(`${ROOT}/app.conf`)).toString()).toBe('abce');
    expect(largest).toBeLessThanOrEqual(5);
  });

  it('creates missing parents with dirMode and reports exactly the ones it created, parent-first', async () => {
    const { fs } = memfs({ [`${ROOT}/a/existing`]: 'x' });
    const result = await publishFile(fs, request('a/b/c/file.json', '{}'));
    expect(result.createdDirs).toEqual(['a/b', 'a/b/c']);
    expect((await fs.stat(`${ROOT}/a/b`)).mode & 0o7777).toBe(0o750);
    expect((await fs.stat(`${ROOT}/a/b/c`)).mode & 0o7777).toBe(0o750);
    expect((await publishFile(fs, request('a/b/c/other.json', '{}'))).createdDirs).toEqual([]);
  });

  it('rejects invalid modes before touching the disk', async () => {
    const { fs } = memfs();
    await expect(publishFile(fs, request('x', 'x', 0o10000))).rejects.toThrow(RangeError);
    await expect(publishFile(fs, { ...request('x', 'x'), dirMode: -1 })).rejects.toThrow(RangeError);
    expect(await snapshot(fs, ROOT)).toEqual({ [`${ROOT}/.keep`]: '666 ' });
  });

  it('accepts the bounds of a mode, 0 and 0o7777, and names the field it rejects', async () => {
    const { fs } = memfs();
    await publishFile(fs, request('zero', 'x', 0));
    await publishFile(fs, request('all', 'x', 0o7777));
    expect((await fs.stat(`${ROOT}/zero`)).mode & 0o7777).toBe(0);
    expect((await fs.stat(`${ROOT}/all`)).mode & 0o7777).toBe(0o7777);
    await expect(publishFile(fs, { ...request('y', 'y'), dirMode: 0o10000 })).rejects.toThrow(/dirMode/);
  });

  const faults: Array<[Step, string]> = [
    ['open-temp', 'EMFILE'],
    ['write', 'ENOSPC'],
    ['chmod', 'EPERM'],
    ['sync', 'EIO'],
    ['close', 'EIO'],
    ['rename', 'EBUSY'],
  ];

  it.each(faults)(
    'on a %s failure (%s) keeps the old file byte-identical and leaves no temp file',
    async (step, code) => {
      const { fs } = memfs({ [`${ROOT}/etc/app.conf`]: 'old content' });
      const before = await snapshot(fs, '/');
      const error = await publishFile(
        withFault(fs, step, { code }),
        request('etc/app.conf', 'new content!'),
      ).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(DiskError);
      expect(error).toMatchObject({ code: 'disk_error', retryable: true, errno: code, path: 'etc/app.conf' });
      expect(await snapshot(fs, '/')).toEqual(before);
    },
  );

  it.each([...faults, ['mkdir', 'ENOSPC'] as [Step, string]])(
    'on a %s failure (%s) for a new file removes the directories it created',
    async (step, code) => {
      const { fs } = memfs();
      const before = await snapshot(fs, '/');
      const error = await publishFile(withFault(fs, step, { code }), request('new/deep/file', 'x')).catch(
        (e: unknown) => e,
      );
      expect(error).toMatchObject({ code: 'disk_error', errno: code });
      expect(await snapshot(fs, '/')).toEqual(before);
    },
  );

  it('explains that EBUSY on rename means a bind-mounted single file', async () => {
    const { fs } = memfs({ [`${ROOT}/app.conf`]: 'old' });
    const error = await publishFile(
      withFault(fs, 'rename', { code: 'EBUSY' }),
      request('app.conf', 'new'),
    ).catch((e: unknown) => e);
    expect((error as DiskError).message).toMatch(/rename.*"app\.conf".*EBUSY.*bind-mount/);
  });

  it('reports a failed directory fsync after the rename, with the new file complete in place', async () => {
    const { fs } = memfs({ [`${ROOT}/app.conf`]: 'old' });
    const error = await publishFile(
      withFault(fs, 'dir-sync', { code: 'EIO' }),
      request('app.conf', 'new'),
    ).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'disk_error', errno: 'EIO', operation: 'fsync directory' });
    expect(await snapshot(fs, ROOT)).toEqual({ [`${ROOT}/.keep`]: '666 ', [`${ROOT}/app.conf`]: '644 new' });
  });

  it('accepts EINVAL from a directory fsync (filesystems that cannot fsync directories)', async () => {
    const { fs } = memfs();
    const result = await publishFile(
      withFault(fs, 'dir-sync', { code: 'EINVAL' }),
      request('a/app.conf', 'new'),
    );
    expect(result.outcome).toBe('written');
    expect((await fs.readFile(`${ROOT}/a/app.conf`)).toString()).toBe('new');
  });

  const abortCases: Array<[Step, string]> = [
    ['mkdir', 'fresh/dir/app.conf'],
    ...(['open-temp', 'write', 'chmod', 'sync', 'close'] as Step[]).flatMap(
      (step): Array<[Step, string]> => [
        [step, 'keep/app.conf'],
        [step, 'fresh/dir/app.conf'],
      ],
    ),
  ];

  it.each(abortCases)(
    'when aborted during %s of %s, rejects with the reason, keeps the old file, leaves no temp file or new dir',
    async (step, target) => {
      const { fs } = memfs({ [`${ROOT}/keep/app.conf`]: 'old' });
      const before = await snapshot(fs, '/');
      const controller = new AbortController();
      const reason = new Error('shutting down');
      const faulty = withFault(fs, step, { onStep: () => controller.abort(reason) });
      const error = await publishFile(faulty, { ...request(target, 'new'), signal: controller.signal }).catch(
        (e: unknown) => e,
      );
      expect(error).toBe(reason);
      expect(await snapshot(fs, '/')).toEqual(before);
    },
  );

  it('does nothing when the signal is already aborted', async () => {
    const { fs } = memfs();
    const before = await snapshot(fs, '/');
    await expect(publishFile(fs, { ...request('a/b', 'x'), signal: AbortSignal.abort() })).rejects.toThrow();
    expect(await snapshot(fs, '/')).toEqual(before);
  });

  it('refuses a symlink at the target and leaves what it points to untouched', async () => {
    const { fs, vol } = memfs({ '/outside/secret': 'precious' });
    vol.symlinkSync('/outside/secret', `${ROOT}/app.conf`);
    const before = await snapshot(fs, '/');
    const error = await publishFile(fs, request('app.conf', 'pwned')).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PathRejectedError);
    expect((error as PathRejectedError).message).toMatch(/crosses a symlink/);
    expect(await snapshot(fs, '/')).toEqual(before);
  });

  it('refuses a symlinked parent and creates nothing beside or through it', async () => {
    const { fs, vol } = memfs({ '/outside/keep': 'precious' });
    vol.symlinkSync('/outside', `${ROOT}/etc`);
    const before = await snapshot(fs, '/');
    for (const target of ['etc/app.conf', 'etc/new/dir/app.conf']) {
      const error = await publishFile(fs, request(target, 'pwned')).catch((e: unknown) => e);
      expect(error).toMatchObject({ code: 'path_rejected', rule: 'crosses_symlink' });
    }
    expect(await snapshot(fs, '/')).toEqual(before);
  });

  it('refuses hostile paths before touching the disk', async () => {
    const { fs } = memfs();
    const before = await snapshot(fs, '/');
    for (const hostile of ['../escape', '/abs', 'a/../../x', `${TEMP_PREFIX}x`, 'a//b']) {
      await expect(publishFile(fs, request(hostile, 'x'))).rejects.toBeInstanceOf(PathRejectedError);
    }
    expect(await snapshot(fs, '/')).toEqual(before);
  });

  it('creates the temp file with O_CREAT|O_EXCL|O_NOFOLLOW beside the target, never following or reusing one', async () => {
    const { fs: base } = memfs({ [`${ROOT}/etc/app.conf`]: 'old' });
    const { fs, opens } = recordingOpens(base);
    await publishFile(fs, request('etc/app.conf', 'new'));
    const temps = opens.filter((o) => path.basename(o.file).startsWith(TEMP_PREFIX));
    expect(temps).toHaveLength(1);
    const [temp] = temps;
    expect(path.dirname(temp!.file)).toBe(`${ROOT}/etc`);
    // O_EXCL: a file (or symlink) planted at the name makes the open fail instead of being written through.
    expect(temp!.flags & constants.O_EXCL).toBe(constants.O_EXCL);
    expect(temp!.flags & constants.O_NOFOLLOW).toBe(constants.O_NOFOLLOW);
    expect(temp!.flags & constants.O_CREAT).toBe(constants.O_CREAT);
    expect(temp!.flags & (constants.O_WRONLY | constants.O_RDWR)).toBe(constants.O_WRONLY);
  });

  it('gives every temp file an unguessable name: the reserved prefix and at least 24 random hex digits', async () => {
    const { fs: base } = memfs();
    const { fs, opens } = recordingOpens(base);
    await publishFile(fs, request('app.conf', 'first'));
    await publishFile(fs, request('app.conf', 'second'));
    await publishFile(fs, request('other.conf', 'third'));
    const names = opens.map((o) => path.basename(o.file)).filter((name) => name.startsWith(TEMP_PREFIX));
    expect(names).toHaveLength(3);
    for (const name of names) expect(name).toMatch(TEMP_NAME);
    expect(new Set(names).size).toBe(3);
    expect((await fs.readFile(`${ROOT}/app.conf`)).toString()).toBe('second');
  });

  it('refuses a directory at the target', async () => {
    const { fs } = memfs({ [`${ROOT}/app.conf/inner`]: 'x' });
    await expect(publishFile(fs, request('app.conf', 'x'))).rejects.toMatchObject({
      rule: 'target_is_directory',
    });
  });
});

describe('deferred directory fsync', () => {
  it('syncDirectory false: the file is fsynced and renamed, its directory left to syncDirectories', async () => {
    const { fs: base } = memfs({ [`${ROOT}/a/old.conf`]: 'x' });
    const { fs, events } = recordingDurability(base);
    const results = [];
    for (const name of ['a/one.conf', 'a/two.conf', 'b/c/three.conf']) {
      results.push(await publishFile(fs, { ...request(name, name), syncDirectory: false }));
    }
    // The new directories' own entries are made durable at once: only the targets' directories wait.
    expect(events.filter((event) => event.startsWith('fsync-dir'))).toEqual(['fsync-dir .', 'fsync-dir b']);
    expect(results.map((result) => result.directory)).toEqual(['a', 'a', 'b/c']);

    const failures = await syncDirectories(
      fs,
      ROOT,
      results.map((result) => result.directory),
    );

    expect(failures.size).toBe(0);
    const dirSyncs = events.filter((event) => event.startsWith('fsync-dir'));
    expect(dirSyncs.slice(2).sort()).toEqual(['fsync-dir a', 'fsync-dir b/c']);
    // Every rename precedes the fsync of its directory.
    for (const file of ['a/one.conf', 'a/two.conf', 'b/c/three.conf']) {
      const dir = path.posix.dirname(file);
      expect(events.indexOf(`rename ${file}`)).toBeLessThan(events.lastIndexOf(`fsync-dir ${dir}`));
      expect(events.indexOf(`fsync-file ${file}`)).toBe(-1);
    }
    expect((await base.readFile(`${ROOT}/b/c/three.conf`)).toString()).toBe('b/c/three.conf');
  });

  it('syncDirectories returns the DiskError of each directory that could not be fsynced', async () => {
    const { fs } = memfs({ [`${ROOT}/a/x.conf`]: 'x' });
    const failures = await syncDirectories(withFault(fs, 'dir-sync', { code: 'EIO' }), ROOT, ['a', 'a', '']);
    expect([...failures.keys()].sort()).toEqual(['', 'a']);
    expect(failures.get('a')).toMatchObject({
      code: 'disk_error',
      errno: 'EIO',
      operation: 'fsync directory',
    });
  });

  it('syncDirectories rejects a directory name that is not a canonical relative path', async () => {
    const { fs } = memfs();
    const failures = await syncDirectories(fs, ROOT, ['../etc']);
    expect(failures.get('../etc')).toBeInstanceOf(DiskError);
  });
});

describe('readRegularFile', () => {
  it('returns bytes, mode, sha256 and which file it read, or undefined when absent', async () => {
    const { fs, vol } = memfs();
    await publishFile(fs, request('a/app.conf', 'content', 0o640));
    const { dev, ino } = vol.statSync(`${ROOT}/a/app.conf`);
    expect(await readRegularFile(fs, ROOT, 'a/app.conf')).toEqual({
      data: Buffer.from('content'),
      mode: 0o640,
      sha256: sha256Hex(Buffer.from('content')),
      gid: process.getgid?.() ?? 0,
      identity: { dev, ino },
    });
    expect(await readRegularFile(fs, ROOT, 'a/missing')).toBeUndefined();
    expect(await readRegularFile(fs, ROOT, 'missing/dir/file')).toBeUndefined();
  });

  it('rejects symlinks and directories instead of reading through them', async () => {
    const { fs, vol } = memfs({ '/outside/secret': 'x', [`${ROOT}/dir/f`]: 'y' });
    vol.symlinkSync('/outside/secret', `${ROOT}/link`);
    await expect(readRegularFile(fs, ROOT, 'link')).rejects.toMatchObject({ rule: 'crosses_symlink' });
    await expect(readRegularFile(fs, ROOT, 'dir')).rejects.toMatchObject({ rule: 'target_is_directory' });
  });
});

describe('removeManagedFile', () => {
  it('removes a regular file and prunes the empty dirs the agent created, deepest first', async () => {
    const { fs } = memfs();
    const { createdDirs } = await publishFile(fs, request('a/b/c/app.conf', 'x'));
    const outcome = await removeManagedFile(fs, {
      rootDir: ROOT,
      relativePath: 'a/b/c/app.conf',
      pruneDirs: createdDirs,
    });
    expect(outcome).toBe('removed');
    expect(await snapshot(fs, ROOT)).toEqual({ [`${ROOT}/.keep`]: '666 ' });
  });

  it('keeps a created dir that is no longer empty', async () => {
    const { fs } = memfs();
    const { createdDirs } = await publishFile(fs, request('a/b/app.conf', 'x'));
    await publishFile(fs, request('a/other.conf', 'y'));
    await removeManagedFile(fs, { rootDir: ROOT, relativePath: 'a/b/app.conf', pruneDirs: createdDirs });
    expect(await snapshot(fs, `${ROOT}/a`)).toEqual({ [`${ROOT}/a/other.conf`]: '644 y' });
  });

  it("is 'absent' for a missing file and still prunes (heals a crash between unlink and prune)", async () => {
    const { fs, vol } = memfs({ [`${ROOT}/x/y/.gone`]: '' });
    vol.unlinkSync(`${ROOT}/x/y/.gone`);
    expect(
      await removeManagedFile(fs, { rootDir: ROOT, relativePath: 'x/y/app', pruneDirs: ['x/y', 'x'] }),
    ).toBe('absent');
    expect(await snapshot(fs, ROOT)).toEqual({ [`${ROOT}/.keep`]: '666 ' });
    expect(await removeManagedFile(fs, { rootDir: ROOT, relativePath: 'nope/app', pruneDirs: [] })).toBe(
      'absent',
    );
  });

  it("is 'refused' for a symlink or a directory, and deletes nothing", async () => {
    const { fs, vol } = memfs({ '/outside/secret': 'precious', [`${ROOT}/dir/inner`]: 'z' });
    vol.symlinkSync('/outside/secret', `${ROOT}/link.conf`);
    vol.symlinkSync('/outside', `${ROOT}/dirlink`);
    const before = await snapshot(fs, '/');
    for (const relativePath of ['link.conf', 'dir', 'dirlink']) {
      expect(await removeManagedFile(fs, { rootDir: ROOT, relativePath, pruneDirs: ['dir'] })).toBe(
        'refused',
      );
    }
    expect(await snapshot(fs, '/')).toEqual(before);
  });

  it('never removes anything through a symlinked parent, nor prunes through one', async () => {
    const { fs, vol } = memfs({ '/outside/app.conf': 'precious', '/outside/empty/.k': '' });
    vol.unlinkSync('/outside/empty/.k');
    vol.symlinkSync('/outside', `${ROOT}/etc`);
    const before = await snapshot(fs, '/');
    await expect(
      removeManagedFile(fs, { rootDir: ROOT, relativePath: 'etc/app.conf', pruneDirs: [] }),
    ).rejects.toMatchObject({ rule: 'crosses_symlink' });
    expect(
      await removeManagedFile(fs, { rootDir: ROOT, relativePath: 'x', pruneDirs: ['etc/empty', 'etc'] }),
    ).toBe('absent');
    expect(await snapshot(fs, '/')).toEqual(before);
  });

  it('fsyncs the parent directory after the unlink: a failed directory fsync is a DiskError naming it', async () => {
    const { fs } = memfs({ [`${ROOT}/etc/app.conf`]: 'x', [`${ROOT}/etc/keep`]: 'k' });
    const error = await removeManagedFile(withFault(fs, 'dir-sync', { code: 'EIO' }), {
      rootDir: ROOT,
      relativePath: 'etc/app.conf',
      pruneDirs: [],
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DiskError);
    expect(error).toMatchObject({
      code: 'disk_error',
      retryable: true,
      errno: 'EIO',
      operation: 'fsync directory',
      path: 'etc',
    });
    // The unlink happened; only its durability could not be confirmed.
    expect(await snapshot(fs, `${ROOT}/etc`)).toEqual({ [`${ROOT}/etc/keep`]: '666 k' });
  });

  it('fsyncs the root itself for a file at the top level, and for an absent file too', async () => {
    const { fs: base, vol } = memfs({ [`${ROOT}/app.conf`]: 'x' });
    // A root nobody else can write (memfs makes it 0777): no descriptor is pinned to remove in it.
    vol.chmodSync(ROOT, 0o755);
    const { fs, opens } = recordingOpens(base);
    expect(await removeManagedFile(fs, { rootDir: ROOT, relativePath: 'app.conf', pruneDirs: [] })).toBe(
      'removed',
    );
    expect(
      opens.filter((o) => (o.flags & constants.O_DIRECTORY) !== 0).map((o) => path.resolve(o.file)),
    ).toEqual([ROOT]);
    // Already gone, maybe by an unlink of ours whose directory fsync a crash cut off: `absent` is reported
    // `removed` too, so the directory is made durable first, and a failing fsync is the removal's failure.
    await expect(
      removeManagedFile(withFault(base, 'dir-sync', { code: 'EIO' }), {
        rootDir: ROOT,
        relativePath: 'app.conf',
        pruneDirs: [],
      }),
    ).rejects.toBeInstanceOf(DiskError);
    expect(await removeManagedFile(base, { rootDir: ROOT, relativePath: 'app.conf', pruneDirs: [] })).toBe(
      'absent',
    );
  });

  it('rejects hostile prune dirs before removing anything', async () => {
    const { fs } = memfs({ [`${ROOT}/app.conf`]: 'x' });
    await expect(
      removeManagedFile(fs, { rootDir: ROOT, relativePath: 'app.conf', pruneDirs: ['..'] }),
    ).rejects.toBeInstanceOf(PathRejectedError);
    expect((await fs.readFile(`${ROOT}/app.conf`)).toString()).toBe('x');
  });
});

describe('sweepTempFiles', () => {
  it('removes leftover temp files anywhere under the root, and nothing else', async () => {
    const { fs, vol } = memfs({
      [`${ROOT}/${TEMP_PREFIX}aaa`]: 'torn',
      [`${ROOT}/a/b/${TEMP_PREFIX}bbb`]: 'torn',
      [`${ROOT}/a/b/app.conf`]: 'keep',
      [`${ROOT}/a/.config-agent.tmp`]: 'not our prefix',
      [`${ROOT}/${TEMP_PREFIX}dir/inner`]: 'a directory is never ours',
      [`/outside/${TEMP_PREFIX}ccc`]: 'outside the root',
    });
    vol.symlinkSync('/outside', `${ROOT}/link`);
    vol.symlinkSync('/outside/x', `${ROOT}/${TEMP_PREFIX}link`);
    const removed = await sweepTempFiles(fs, ROOT);
    expect(removed).toEqual([`${TEMP_PREFIX}aaa`, `a/b/${TEMP_PREFIX}bbb`]);
    const after = await snapshot(fs, '/');
    expect(tempFilesIn(after).sort()).toEqual(
      [`/outside/${TEMP_PREFIX}ccc`, `${ROOT}/${TEMP_PREFIX}dir`, `${ROOT}/${TEMP_PREFIX}link`].sort(),
    );
    expect(after[`${ROOT}/a/b/app.conf`]).toBe('666 keep');
    expect(after[`${ROOT}/a/.config-agent.tmp`]).toBe('666 not our prefix');
  });

  it('returns [] for a missing root', async () => {
    const { fs } = memfs();
    expect(await sweepTempFiles(fs, '/does/not/exist')).toEqual([]);
  });

  it('walks no directory too deep to hold a temp file of a valid path (4,095 bytes)', async () => {
    const segment = 'd'.repeat(250);
    const files: Record<string, string> = {};
    for (let level = 1; level <= 17; level += 1) {
      files[`${ROOT}/${Array(level).fill(segment).join('/')}/${TEMP_PREFIX}${level}`] = 'torn';
    }
    const { fs } = memfs(files);
    const removed = await sweepTempFiles(fs, ROOT);
    // 16 levels are 4,015 bytes; the 17th, 4,266, cannot be the directory of a managed file.
    expect(removed).toHaveLength(16);
    expect(removed).not.toContain(`${Array(17).fill(segment).join('/')}/${TEMP_PREFIX}17`);
  });
});

describe('writeDurableJson', () => {
  it('creates the state dir 0700 and a 0600 JSON file, and skips identical rewrites', async () => {
    const { fs } = memfs();
    const first = await writeDurableJson(fs, '/var/lib/agent', 'state.json', { a: 1 });
    expect(first.outcome).toBe('written');
    expect(JSON.parse((await fs.readFile('/var/lib/agent/state.json')).toString())).toEqual({ a: 1 });
    expect((await fs.stat('/var/lib/agent/state.json')).mode & 0o7777).toBe(0o600);
    expect((await fs.stat('/var/lib/agent')).mode & 0o7777).toBe(0o700);
    expect((await writeDurableJson(fs, '/var/lib/agent', 'state.json', { a: 1 })).outcome).toBe('unchanged');
    expect((await writeDurableJson(fs, '/var/lib/agent', 'state.json', { a: 2 }, 0o640)).outcome).toBe(
      'written',
    );
    expect((await fs.stat('/var/lib/agent/state.json')).mode & 0o7777).toBe(0o640);
  });

  it('refuses a value that is not JSON', async () => {
    const { fs } = memfs();
    await expect(writeDurableJson(fs, '/var/lib/agent', 'x.json', undefined)).rejects.toThrow(TypeError);
  });
});
