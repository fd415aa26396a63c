// Durable writer, the rare branches: races on the path, failures at every step, what a power cut keeps, pruning,
// sweeping and the state-file writer. Asserts on what is left on disk and on the values returned or thrown.
import { execFileSync } from 'node:child_process';
import { constants, mkdtempSync, rmSync } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Volume } from 'memfs';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { memfsPort } from '../../test/helpers/memfs.js';
import { PowerCutFs } from '../../test/helpers/power-cut-fs.js';
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

type Op =
  | 'open'
  | 'mkdir'
  | 'rmdir'
  | 'unlink'
  | 'readdir'
  | 'rename'
  | 'stat'
  | 'lstat'
  | 'sync'
  | 'stat-handle'
  | 'chmod-handle'
  | 'chown-handle'
  | 'readFile-handle'
  | 'writeFile-handle';

interface Call {
  op: Op;
  /** Absolute path of the call, or of the file the handle was opened on. */
  path: string;
  /** open: the flags; a handle's call: the flags it was opened with. */
  flags: number;
}

/**
 * A FsPort whose every call first runs `hook`: the hook may throw (an injected fault) or change the disk
 * behind the writer's back (a race), then the real call runs.
 */
function intercepted(base: FsPort, hook: (call: Call) => void | Promise<void>): FsPort {
  const wrapHandle = (handle: FileHandle, file: string, flags: number): FileHandle =>
    new Proxy(handle, {
      get(target, property, receiver) {
        const value = Reflect.get(target, property, receiver) as unknown;
        if (typeof value !== 'function') return value;
        const bound = (value as (...args: unknown[]) => unknown).bind(target);
        const op =
          (
            { sync: 'sync', stat: 'stat-handle', chmod: 'chmod-handle', chown: 'chown-handle' } as Record<
              string | symbol,
              Op
            >
          )[property] ??
          (property === 'readFile' || property === 'read'
            ? 'readFile-handle'
            : property === 'writeFile' || property === 'write'
              ? 'writeFile-handle'
              : undefined);
        if (op === undefined) return bound;
        return async (...args: unknown[]) => {
          await hook({ op, path: file, flags });
          return bound(...args);
        };
      },
    });
  const plain = <K extends 'mkdir' | 'rmdir' | 'unlink' | 'readdir' | 'rename' | 'stat' | 'lstat'>(op: K) =>
    (async (...args: unknown[]) => {
      await hook({ op, path: path.resolve(String(args[0])), flags: 0 });
      return (base[op] as (...a: unknown[]) => Promise<unknown>)(...args);
    }) as FsPort[K];
  return {
    ...base,
    open: (async (file: string, flags: number, mode?: number) => {
      const absolute = path.resolve(String(file));
      await hook({ op: 'open', path: absolute, flags });
      return wrapHandle(await base.open(file, flags, mode), absolute, flags);
    }) as FsPort['open'],
    mkdir: plain('mkdir'),
    rmdir: plain('rmdir'),
    unlink: plain('unlink'),
    readdir: plain('readdir'),
    rename: plain('rename'),
    stat: plain('stat'),
    lstat: plain('lstat'),
  };
}

function fault(code: string): Error {
  return Object.assign(new Error(`${code}: injected fault`), { code });
}

/** Throws `code` from the first call matching `when` (and only the first). */
function failOnce(base: FsPort, when: (call: Call) => boolean, code: string): FsPort {
  let done = false;
  return intercepted(base, (call) => {
    if (!done && when(call)) {
      done = true;
      throw fault(code);
    }
  });
}

const isDirOpen = (call: Call) => (call.flags & constants.O_DIRECTORY) !== 0;
const isTemp = (call: Call) => path.basename(call.path).startsWith(TEMP_PREFIX);
const at = (relative: string) => (call: Call) => call.path === path.join(ROOT, relative);

type MemVolume = InstanceType<typeof Volume>;

/** The volumes of the running test: after it, none may hold an open descriptor (every handle is closed). */
const volumes: MemVolume[] = [];
afterEach(() => {
  const open = volumes.map((vol) => (vol as unknown as { _core: { openFiles: number } })._core.openFiles);
  volumes.length = 0;
  expect(
    open.every((count) => count === 0),
    `open descriptors left: ${open.join(', ')}`,
  ).toBe(true);
});

function memfs(files: Record<string, string> = {}): { fs: FsPort; vol: MemVolume } {
  const vol = Volume.fromJSON({ [`${ROOT}/.keep`]: '', '/outside/.keep': '', ...files });
  volumes.push(vol);
  return { fs: memfsPort(vol), vol };
}

/** Every entry under `dir`, not following symlinks: path → 'dir <mode>', 'symlink', or '<mode> <content>'. */
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
      } else if (stats.isFile()) out[full] = `${mode} ${(await fs.readFile(full)).toString('utf8')}`;
      else out[full] = 'special';
    }
  };
  await walk(dir);
  return out;
}

const temps = (tree: Record<string, string>) =>
  Object.keys(tree).filter((p) => path.basename(p).startsWith(TEMP_PREFIX));

const request = (relativePath: string, text: string, mode = 0o644) => ({
  rootDir: ROOT,
  relativePath,
  data: Buffer.from(text),
  mode,
  dirMode: 0o750,
});

const caught = (promise: Promise<unknown>): Promise<unknown> =>
  promise.then(
    (value) => ({ resolved: value }),
    (error: unknown) => error,
  );

/** A real temp dir, for what memfs does not model (ELOOP from O_DIRECTORY|O_NOFOLLOW, FIFOs). */
const REAL_BASE = mkdtempSync(path.join(os.tmpdir(), 'config-agent-dw-mutants-'));
afterAll(() => rmSync(REAL_BASE, { recursive: true, force: true }));
let realCount = 0;
async function realRoot(): Promise<{ root: string; outside: string }> {
  realCount += 1;
  const base = path.join(REAL_BASE, String(realCount));
  await nodeFs.mkdir(path.join(base, 'root'), { recursive: true });
  await nodeFs.mkdir(path.join(base, 'outside'), { recursive: true });
  return { root: path.join(base, 'root'), outside: path.join(base, 'outside') };
}

describe('publishFile: arguments', () => {
  it.each([-1, 1.5, Number.NaN])('refuses gid %s before touching the disk, naming the field', async (gid) => {
    const { fs } = memfs();
    const before = await snapshot(fs, '/');
    const error = await caught(publishFile(fs, { ...request('a/x', 'x'), gid }));
    expect(error).toBeInstanceOf(RangeError);
    expect((error as Error).message).toBe(
      `PublishRequest.gid must be a non-negative integer, got ${String(gid)}`,
    );
    expect(await snapshot(fs, '/')).toEqual(before);
  });

  it('accepts gid 0 and gives the file that group', async () => {
    const { fs } = memfs();
    expect((await publishFile(fs, { ...request('x', 'x'), gid: 0 })).outcome).toBe('written');
    expect((await fs.stat(`${ROOT}/x`)).gid).toBe(0);
  });

  it('names dirMode and the value when it is not an integer', async () => {
    const { fs } = memfs();
    await expect(publishFile(fs, { ...request('x', 'x'), dirMode: 0.5 })).rejects.toThrow(
      'PublishRequest.dirMode must be an integer between 0 and 0o7777, got 0.5',
    );
    await expect(publishFile(fs, request('x', 'x', 0o10000))).rejects.toThrow(
      'PublishRequest.mode must be an integer between 0 and 0o7777, got 4096',
    );
  });
});

describe('a path that changes between the check and the open', () => {
  /** Swaps what is at `relative` (a regular file) for something else the first time the writer opens it. */
  const swapOnOpen = (fs: FsPort, relative: string, swap: () => void) => {
    let swapped = false;
    return intercepted(fs, (call) => {
      if (!swapped && call.op === 'open' && at(relative)(call) && !isDirOpen(call)) {
        swapped = true;
        swap();
      }
    });
  };

  it('a symlink swapped in for the file being read is refused as the target itself, and not read', async () => {
    const { fs, vol } = memfs({ [`${ROOT}/app.conf`]: 'mine', '/outside/secret': 'secret' });
    const racy = swapOnOpen(fs, 'app.conf', () => {
      vol.unlinkSync(`${ROOT}/app.conf`);
      vol.symlinkSync('/outside/secret', `${ROOT}/app.conf`);
    });
    const error = await caught(readRegularFile(racy, ROOT, 'app.conf'));
    expect(error).toBeInstanceOf(PathRejectedError);
    expect(error).toMatchObject({ rule: 'crosses_symlink', path: 'app.conf', retryable: true });
    expect((error as Error).message).toBe('path rejected: "app.conf" crosses a symlink (the target itself)');
  });

  it('a symlink swapped in for a same-size file being published is refused, and nothing is written through it', async () => {
    const { fs, vol } = memfs({ [`${ROOT}/app.conf`]: 'old!', '/outside/secret': 'keep' });
    const racy = swapOnOpen(fs, 'app.conf', () => {
      vol.unlinkSync(`${ROOT}/app.conf`);
      vol.symlinkSync('/outside/secret', `${ROOT}/app.conf`);
    });
    const error = await caught(publishFile(racy, request('app.conf', 'new!')));
    expect(error).toMatchObject({ code: 'path_rejected', rule: 'crosses_symlink' });
    const after = await snapshot(fs, '/');
    expect(after['/outside/secret']).toBe('666 keep');
    expect(after[`${ROOT}/app.conf`]).toBe('symlink');
    expect(temps(after)).toEqual([]);
  });

  it('a directory swapped in is refused as a directory, and left as it is', async () => {
    const { fs, vol } = memfs({ [`${ROOT}/app.conf`]: 'same' });
    const swap = () => {
      vol.unlinkSync(`${ROOT}/app.conf`);
      vol.mkdirSync(`${ROOT}/app.conf`);
      vol.writeFileSync(`${ROOT}/app.conf/inner`, 'theirs');
    };
    const readError = await caught(readRegularFile(swapOnOpen(fs, 'app.conf', swap), ROOT, 'app.conf'));
    expect(readError).toBeInstanceOf(PathRejectedError);
    expect(readError).toMatchObject({ rule: 'target_is_directory', path: 'app.conf' });
    expect((readError as Error).message).toBe('path rejected: "app.conf" names an existing directory');

    const again = memfs({ [`${ROOT}/app.conf`]: 'same' });
    const swapAgain = () => {
      again.vol.unlinkSync(`${ROOT}/app.conf`);
      again.vol.mkdirSync(`${ROOT}/app.conf`);
      again.vol.writeFileSync(`${ROOT}/app.conf/inner`, 'theirs');
    };
    const publishError = await caught(
      publishFile(swapOnOpen(again.fs, 'app.conf', swapAgain), request('app.conf', 'same')),
    );
    expect(publishError).toMatchObject({ rule: 'target_is_directory' });
    expect(await snapshot(again.fs, ROOT)).toEqual({
      [`${ROOT}/.keep`]: '666 ',
      [`${ROOT}/app.conf`]: 'dir 777',
      [`${ROOT}/app.conf/inner`]: '666 theirs',
    });
  });

  it('a FIFO swapped in is refused as not a regular file, without hanging on it', async () => {
    const { root } = await realRoot();
    const file = path.join(root, 'app.conf');
    await nodeFs.writeFile(file, 'same');
    let swapped = false;
    const racy = intercepted(nodeFs, (call) => {
      if (!swapped && call.op === 'open' && call.path === file) {
        swapped = true;
        rmSync(file);
        execFileSync('mkfifo', [file]);
      }
    });
    const error = await caught(readRegularFile(racy, root, 'app.conf'));
    expect(error).toBeInstanceOf(PathRejectedError);
    expect(error).toMatchObject({ rule: 'target_not_regular_file', path: 'app.conf' });
    expect((await nodeFs.lstat(file)).isFIFO()).toBe(true);
  });

  it('a file gone between the check and the open reads as absent, and a publish then writes it anew', async () => {
    const { fs, vol } = memfs({ [`${ROOT}/app.conf`]: 'same' });
    const gone = () => vol.unlinkSync(`${ROOT}/app.conf`);
    expect(await readRegularFile(swapOnOpen(fs, 'app.conf', gone), ROOT, 'app.conf')).toBeUndefined();
    vol.writeFileSync(`${ROOT}/app.conf`, 'same');
    const result = await publishFile(swapOnOpen(fs, 'app.conf', gone), request('app.conf', 'same', 0o640));
    expect(result.outcome).toBe('written');
    expect(await snapshot(fs, ROOT)).toMatchObject({ [`${ROOT}/app.conf`]: '640 same' });
  });

  it.each([
    ['open', 'open for reading'],
    ['stat-handle', 'fstat'],
    ['readFile-handle', 'read'],
  ] as Array<[Op, string]>)(
    'a %s failure reading the file is a DiskError naming the step and the path',
    async (op, operation) => {
      const { fs } = memfs({ [`${ROOT}/etc/app.conf`]: 'same' });
      const broken = failOnce(fs, (call) => call.op === op && at('etc/app.conf')(call), 'EIO');
      const error = await caught(readRegularFile(broken, ROOT, 'etc/app.conf'));
      expect(error).toBeInstanceOf(DiskError);
      expect(error).toMatchObject({
        code: 'disk_error',
        retryable: true,
        errno: 'EIO',
        operation,
        path: 'etc/app.conf',
      });
      expect((error as Error).message).toBe(
        `disk error: ${operation} failed for "etc/app.conf": EIO (input/output error)`,
      );
    },
  );

  it.each([
    ['open', 'open for reading'],
    ['stat-handle', 'fstat'],
    // A failed read of the bytes in place publishes a fresh file instead: durable-writer.unreadable.test.ts.
    ['chmod-handle', 'chmod'],
    ['sync', 'fsync'],
  ] as Array<[Op, string]>)(
    'a %s failure on the file in place fails the publish and changes nothing',
    async (op, operation) => {
      const { fs } = memfs({ [`${ROOT}/etc/app.conf`]: 'same' });
      const before = await snapshot(fs, '/');
      const broken = failOnce(fs, (call) => call.op === op && at('etc/app.conf')(call), 'EIO');
      const error = await caught(publishFile(broken, request('etc/app.conf', 'same', 0o600)));
      expect(error).toMatchObject({ code: 'disk_error', errno: 'EIO', operation, path: 'etc/app.conf' });
      // chmod and fsync come after the mode change started: only those may leave the new mode behind.
      const after = await snapshot(fs, '/');
      if (op === 'sync') expect(after).toEqual({ ...before, [`${ROOT}/etc/app.conf`]: '600 same' });
      else expect(after).toEqual(before);
    },
  );
});

describe('publishFile: a group changed in place', () => {
  it('a failed chown of the file in place is a DiskError naming the step, and changes nothing', async () => {
    const { fs } = memfs({ [`${ROOT}/etc/app.conf`]: 'same' });
    const before = await snapshot(fs, '/');
    const broken = failOnce(fs, (call) => call.op === 'chown-handle', 'EPERM');
    const error = await caught(publishFile(broken, { ...request('etc/app.conf', 'same', 0o666), gid: 4242 }));
    expect(error).toBeInstanceOf(DiskError);
    expect(error).toMatchObject({ errno: 'EPERM', operation: 'chown', path: 'etc/app.conf' });
    expect(await snapshot(fs, '/')).toEqual(before);
  });

  it.skipIf(process.getuid?.() !== 0)(
    'changes only the group, never the owner (skipped unless root: only root may chown to any group)',
    async () => {
      const { root } = await realRoot();
      const file = path.join(root, 'app.conf');
      const publish = (gid: number) =>
        publishFile(nodeFs, { ...request('app.conf', 'same', 0o640), rootDir: root, gid });
      expect((await publish(4242)).outcome).toBe('written');
      expect((await nodeFs.stat(file)).uid).toBe(0);
      expect((await publish(4243)).outcome).toBe('metadata');
      const stats = await nodeFs.stat(file);
      expect({ uid: stats.uid, gid: stats.gid, mode: stats.mode & 0o7777 }).toEqual({
        uid: 0,
        gid: 4243,
        mode: 0o640,
      });
    },
  );
});

describe('publishFile: creating the parents', () => {
  it('a directory replaced by a symlink right after its mkdir is refused, and nothing goes through it', async () => {
    const { root, outside } = await realRoot();
    const a = path.join(root, 'a');
    let swapped = false;
    const racy = intercepted(nodeFs, (call) => {
      if (!swapped && call.op === 'open' && call.path === path.join(a, 'b')) {
        swapped = true;
        rmSync(path.join(a, 'b'), { recursive: true });
        execFileSync('ln', ['-s', outside, path.join(a, 'b')]);
      }
    });
    const error = await caught(publishFile(racy, { ...request('a/b/c/app.conf', 'x'), rootDir: root }));
    // Linux answers open(O_DIRECTORY|O_NOFOLLOW) on a symlink with ENOTDIR, not ELOOP.
    expect(error).toBeInstanceOf(PathRejectedError);
    expect(error).toMatchObject({ rule: 'not_a_directory', path: 'a/b/c/app.conf' });
    expect(await nodeFs.readdir(outside)).toEqual([]);
    // The rollback stops at the symlink it cannot rmdir: 'a' (made by this call) stays, holding it.
    expect((await nodeFs.lstat(path.join(a, 'b'))).isSymbolicLink()).toBe(true);
  });

  it('ELOOP opening a new directory (a symlink there, on systems that say so) is refused as crossing it', async () => {
    const { fs } = memfs();
    const before = await snapshot(fs, '/');
    const broken = failOnce(fs, (call) => call.op === 'open' && at('a/b')(call), 'ELOOP');
    const error = await caught(publishFile(broken, request('a/b/c/app.conf', 'x')));
    expect(error).toBeInstanceOf(PathRejectedError);
    expect(error).toMatchObject({ rule: 'crosses_symlink', path: 'a/b/c/app.conf' });
    expect((error as Error).message).toBe('path rejected: "a/b/c/app.conf" crosses a symlink (a/b)');
    expect(await snapshot(fs, '/')).toEqual(before);
  });

  it('a directory replaced by a file right after its mkdir is refused as not a directory', async () => {
    const { fs, vol } = memfs();
    let swapped = false;
    const racy = intercepted(fs, (call) => {
      if (!swapped && call.op === 'open' && at('a')(call)) {
        swapped = true;
        vol.rmdirSync(`${ROOT}/a`);
        vol.writeFileSync(`${ROOT}/a`, 'theirs');
      }
    });
    const error = await caught(publishFile(racy, request('a/b/app.conf', 'x')));
    expect(error).toMatchObject({ code: 'path_rejected', rule: 'not_a_directory', path: 'a/b/app.conf' });
    expect((error as Error).message).toBe(
      'path rejected: "a/b/app.conf" has a parent component that exists but is not a directory (a)',
    );
    expect(await snapshot(fs, ROOT)).toEqual({ [`${ROOT}/.keep`]: '666 ', [`${ROOT}/a`]: '666 theirs' });
  });

  it('a failure opening a new directory is a DiskError naming that directory, and the new dirs are removed', async () => {
    const { fs } = memfs();
    const before = await snapshot(fs, '/');
    const broken = failOnce(fs, (call) => call.op === 'open' && at('a/b')(call), 'EACCES');
    const error = await caught(publishFile(broken, request('a/b/c/app.conf', 'x')));
    expect(error).toBeInstanceOf(DiskError);
    expect(error).toMatchObject({
      errno: 'EACCES',
      operation: 'open directory',
      path: 'a/b',
      retryable: true,
    });
    expect(await snapshot(fs, '/')).toEqual(before);
  });

  it('a failure creating a directory names that directory', async () => {
    const { fs } = memfs({ [`${ROOT}/a/keep`]: 'k' });
    const before = await snapshot(fs, '/');
    const broken = failOnce(fs, (call) => call.op === 'mkdir' && at('a/b/c')(call), 'EROFS');
    const error = await caught(publishFile(broken, request('a/b/c/app.conf', 'x')));
    expect(error).toMatchObject({ errno: 'EROFS', operation: 'create directory', path: 'a/b/c' });
    expect(await snapshot(fs, '/')).toEqual(before);
  });

  it('a failure chmod-ing a new directory names it, and the new dirs are removed', async () => {
    const { fs } = memfs();
    const before = await snapshot(fs, '/');
    const broken = failOnce(fs, (call) => call.op === 'chmod-handle' && at('a/b')(call), 'EPERM');
    const error = await caught(publishFile(broken, request('a/b/app.conf', 'x')));
    expect(error).toMatchObject({ errno: 'EPERM', operation: 'chmod directory', path: 'a/b' });
    expect(await snapshot(fs, '/')).toEqual(before);
  });

  it('a new directory is never more open than dirMode, not even before its chmod', async () => {
    const { root } = await realRoot();
    const seen: number[] = [];
    const watching = intercepted(nodeFs, async (call) => {
      if (call.op === 'chmod-handle' && isDirOpen(call))
        seen.push((await nodeFs.lstat(call.path)).mode & 0o7777);
    });
    await publishFile(watching, { ...request('a/b/app.conf', 'x'), rootDir: root, dirMode: 0o700 });
    expect(seen).toHaveLength(2);
    for (const mode of seen) expect(mode & ~0o700).toBe(0);
    expect((await nodeFs.stat(path.join(root, 'a/b'))).mode & 0o7777).toBe(0o700);
  });

  it('a directory someone else creates meanwhile is used as it is: not reported, not chmod-ed, never removed', async () => {
    const { fs, vol } = memfs();
    let raced = false;
    const racy = intercepted(fs, (call) => {
      if (!raced && call.op === 'mkdir' && at('a')(call)) {
        raced = true;
        vol.mkdirSync(`${ROOT}/a`, { mode: 0o700 });
      }
    });
    const result = await publishFile(racy, request('a/b/app.conf', 'x'));
    expect(result.createdDirs).toEqual(['a/b']);
    expect((await fs.stat(`${ROOT}/a`)).mode & 0o7777).toBe(0o700);
    expect((await fs.stat(`${ROOT}/a/b`)).mode & 0o7777).toBe(0o750);

    // On a failure, the directory this call did not make stays.
    const fresh = memfs();
    let racedAgain = false;
    const racyThenBroken = intercepted(fresh.fs, (call) => {
      if (!racedAgain && call.op === 'mkdir' && at('a')(call)) {
        racedAgain = true;
        fresh.vol.mkdirSync(`${ROOT}/a`, { mode: 0o700 });
      }
      if (call.op === 'rename') throw fault('EIO');
    });
    await expect(publishFile(racyThenBroken, request('a/b/app.conf', 'x'))).rejects.toMatchObject({
      errno: 'EIO',
    });
    expect(await snapshot(fresh.fs, ROOT)).toEqual({ [`${ROOT}/.keep`]: '666 ', [`${ROOT}/a`]: 'dir 700' });
  });

  it('an abort between two directories removes the first one and creates nothing more', async () => {
    const { fs } = memfs();
    const before = await snapshot(fs, '/');
    const controller = new AbortController();
    const reason = new Error('stop');
    const racy = intercepted(fs, (call) => {
      if (call.op === 'sync' && at('')(call)) controller.abort(reason);
    });
    // The abort lands after 'a' is made and chmod-ed (its parent is fsynced only at the end): 'a/b' must not follow.
    const hooked = intercepted(racy, (call) => {
      if (call.op === 'chmod-handle' && at('a')(call)) controller.abort(reason);
    });
    const error = await caught(
      publishFile(hooked, { ...request('a/b/app.conf', 'x'), signal: controller.signal }),
    );
    expect(error).toBe(reason);
    expect(await snapshot(fs, '/')).toEqual(before);
  });

  it('the target swapped for a directory while the temp file was written is refused before the rename', async () => {
    const { fs, vol } = memfs({ [`${ROOT}/etc/app.conf`]: 'old' });
    let swapped = false;
    const racy = intercepted(fs, (call) => {
      if (!swapped && call.op === 'sync' && isTemp(call)) {
        swapped = true;
        vol.unlinkSync(`${ROOT}/etc/app.conf`);
        vol.mkdirSync(`${ROOT}/etc/app.conf`);
      }
    });
    const error = await caught(publishFile(racy, request('etc/app.conf', 'new content')));
    expect(error).toBeInstanceOf(PathRejectedError);
    expect(error).toMatchObject({ rule: 'target_is_directory', path: 'etc/app.conf' });
    expect(await snapshot(fs, `${ROOT}/etc`)).toEqual({ [`${ROOT}/etc/app.conf`]: 'dir 777' });
  });

  it.each([
    ['chown-handle', 'chown temp file'],
    ['writeFile-handle', 'write temp file'],
    ['open', 'create temp file'],
    ['chmod-handle', 'chmod temp file'],
    ['sync', 'fsync temp file'],
  ] as Array<[Op, string]>)(
    'a %s failure with a group removes the temp file and the new dirs',
    async (op, operation) => {
      const { fs } = memfs({ [`${ROOT}/keep/app.conf`]: 'old' });
      const before = await snapshot(fs, '/');
      for (const target of ['keep/app.conf', 'new/app.conf']) {
        const broken = failOnce(fs, (call) => call.op === op && isTemp(call), 'EPERM');
        const error = await caught(publishFile(broken, { ...request(target, 'new content'), gid: 0 }));
        expect(error).toMatchObject({ errno: 'EPERM', operation, path: target });
        expect(await snapshot(fs, '/')).toEqual(before);
      }
    },
  );
});

describe('what a power cut keeps', () => {
  async function model(files: Record<string, string> = {}) {
    const { fs, vol } = memfs(files);
    return { vol, base: fs, cut: await PowerCutFs.over(fs, ROOT) };
  }

  it('a published file in new directories survives with its bytes and mode, directories included', async () => {
    const { cut } = await model({ [`${ROOT}/etc/old.conf`]: 'old' });
    await publishFile(cut.fs, request('etc/a/b/app.conf', 'new', 0o640));
    await publishFile(cut.fs, request('top.conf', 'top', 0o600));
    expect(cut.afterPowerCut()).toEqual({
      '.keep': '666 ',
      etc: 'dir',
      'etc/old.conf': '666 old',
      'etc/a': 'dir',
      'etc/a/b': 'dir',
      'etc/a/b/app.conf': '640 new',
      'top.conf': '600 top',
    });
  });

  it('a replaced file is the old or the new one, never a torn one', async () => {
    const { cut } = await model({ [`${ROOT}/app.conf`]: 'old' });
    await publishFile(cut.fs, request('app.conf', 'brand new', 0o600));
    expect(cut.afterPowerCut()['app.conf']).toBe('600 brand new');
  });

  it('syncDirectory false: the rename is durable only once syncDirectories ran; new directories at once', async () => {
    const { cut } = await model({ [`${ROOT}/etc/old.conf`]: 'old' });
    const first = await publishFile(cut.fs, { ...request('etc/app.conf', 'one'), syncDirectory: false });
    const second = await publishFile(cut.fs, { ...request('new/dir/app.conf', 'two'), syncDirectory: false });
    expect([first.directory, second.directory]).toEqual(['etc', 'new/dir']);
    expect(cut.afterPowerCut()).toEqual({
      '.keep': '666 ',
      etc: 'dir',
      'etc/old.conf': '666 old',
      new: 'dir',
      'new/dir': 'dir',
    });
    expect((await syncDirectories(cut.fs, ROOT, [first.directory, second.directory])).size).toBe(0);
    expect(cut.afterPowerCut()).toMatchObject({ 'etc/app.conf': '644 one', 'new/dir/app.conf': '644 two' });
  });

  it('ensureDurable: bytes already in place but never fsynced are made durable before answering unchanged', async () => {
    const { cut, vol } = await model({ [`${ROOT}/etc/keep`]: 'k' });
    // The leftover of a write whose fsyncs never happened: on disk now, lost by a cut.
    vol.writeFileSync(`${ROOT}/etc/app.conf`, 'same', { mode: 0o644 });
    expect(cut.afterPowerCut()['etc/app.conf']).toBeUndefined();

    const plain = await publishFile(cut.fs, request('etc/app.conf', 'same'));
    expect(plain.outcome).toBe('unchanged');
    expect(cut.afterPowerCut()['etc/app.conf']).toBeUndefined();

    const durable = await publishFile(cut.fs, { ...request('etc/app.conf', 'same'), ensureDurable: true });
    expect(durable).toEqual({
      outcome: 'unchanged',
      sha256: sha256Hex(Buffer.from('same')),
      bytes: 4,
      createdDirs: [],
      directory: 'etc',
    });
    expect(cut.afterPowerCut()['etc/app.conf']).toBe('644 same');
  });

  it('ensureDurable with syncDirectory false: the bytes are durable, the entry once syncDirectories ran', async () => {
    const { cut, vol } = await model();
    vol.writeFileSync(`${ROOT}/app.conf`, 'same', { mode: 0o644 });
    const result = await publishFile(cut.fs, {
      ...request('app.conf', 'same'),
      ensureDurable: true,
      syncDirectory: false,
    });
    expect(result.outcome).toBe('unchanged');
    expect(cut.afterPowerCut()['app.conf']).toBeUndefined();
    expect((await syncDirectories(cut.fs, ROOT, [result.directory])).size).toBe(0);
    expect(cut.afterPowerCut()['app.conf']).toBe('644 same');
  });

  it('a mode changed in place is durable, and with ensureDurable so is the entry', async () => {
    const { cut, vol } = await model({ [`${ROOT}/app.conf`]: 'abcd' });
    expect((await publishFile(cut.fs, request('app.conf', 'abcd', 0o600))).outcome).toBe('metadata');
    expect(cut.afterPowerCut()['app.conf']).toBe('600 abcd');

    vol.writeFileSync(`${ROOT}/fresh.conf`, 'abcd', { mode: 0o644 });
    const fresh = await publishFile(cut.fs, { ...request('fresh.conf', 'abcd', 0o640), ensureDurable: true });
    expect(fresh.outcome).toBe('metadata');
    expect(cut.afterPowerCut()['fresh.conf']).toBe('640 abcd');
  });

  it('ensureDurable: a failed fsync of the bytes in place is a DiskError, not unchanged', async () => {
    const { base } = await model({ [`${ROOT}/app.conf`]: 'same' });
    const broken = failOnce(base, (call) => call.op === 'sync' && at('app.conf')(call), 'EIO');
    await expect(
      publishFile(broken, { ...request('app.conf', 'same', 0o666), ensureDurable: true }),
    ).rejects.toMatchObject({ errno: 'EIO', operation: 'fsync', path: 'app.conf' });
    const dirBroken = failOnce(base, (call) => call.op === 'sync' && isDirOpen(call), 'EIO');
    await expect(
      publishFile(dirBroken, { ...request('app.conf', 'same', 0o666), ensureDurable: true }),
    ).rejects.toMatchObject({ errno: 'EIO', operation: 'fsync directory', path: '' });
    // Without ensureDurable neither is attempted: identical bytes answer unchanged at once.
    const both = intercepted(base, (call) => {
      if (call.op === 'sync') throw fault('EIO');
    });
    expect((await publishFile(both, request('app.conf', 'same', 0o666))).outcome).toBe('unchanged');
  });

  it('durable: false keeps no fsync: a cut may lose the new file, its new directories and a mode change', async () => {
    const { cut } = await model({ [`${ROOT}/cache/old`]: 'abcd' });
    const fresh = await publishFile(cut.fs, {
      ...request('cache/x/y/entry', 'bytes', 0o600),
      durable: false,
    });
    expect(fresh).toMatchObject({
      outcome: 'written',
      createdDirs: ['cache/x', 'cache/x/y'],
      directory: 'cache/x/y',
    });
    const metadata = await publishFile(cut.fs, { ...request('cache/old', 'abcd', 0o600), durable: false });
    expect(metadata.outcome).toBe('metadata');
    expect(cut.afterPowerCut()).toEqual({ '.keep': '666 ', cache: 'dir', 'cache/old': '666 abcd' });
  });

  it('a removal survives, and so does the pruning of the directories it empties', async () => {
    const { cut } = await model();
    const { createdDirs } = await publishFile(cut.fs, request('a/b/c/app.conf', 'x'));
    await publishFile(cut.fs, request('a/keep.conf', 'k'));
    expect(
      await removeManagedFile(cut.fs, {
        rootDir: ROOT,
        relativePath: 'a/b/c/app.conf',
        pruneDirs: createdDirs,
      }),
    ).toBe('removed');
    expect(cut.afterPowerCut()).toEqual({ '.keep': '666 ', a: 'dir', 'a/keep.conf': '644 k' });

    await removeManagedFile(cut.fs, { rootDir: ROOT, relativePath: 'a/keep.conf', pruneDirs: ['a'] });
    expect(cut.afterPowerCut()).toEqual({ '.keep': '666 ' });
  });

  it('a removal from a directory that stays is durable', async () => {
    const { cut } = await model({
      [`${ROOT}/etc/app.conf`]: 'x',
      [`${ROOT}/etc/keep`]: 'k',
      [`${ROOT}/top`]: 't',
    });
    expect(
      await removeManagedFile(cut.fs, { rootDir: ROOT, relativePath: 'etc/app.conf', pruneDirs: ['etc'] }),
    ).toBe('removed');
    expect(await removeManagedFile(cut.fs, { rootDir: ROOT, relativePath: 'top', pruneDirs: [] })).toBe(
      'removed',
    );
    expect(cut.afterPowerCut()).toEqual({ '.keep': '666 ', etc: 'dir', 'etc/keep': '666 k' });
  });

  it('an absent file with directories to prune makes the pruning durable', async () => {
    const { cut, vol } = await model({ [`${ROOT}/x/y/.k`]: '' });
    vol.unlinkSync(`${ROOT}/x/y/.k`);
    await syncDirectories(cut.fs, ROOT, ['x/y']);
    expect(
      await removeManagedFile(cut.fs, { rootDir: ROOT, relativePath: 'x/y/f', pruneDirs: ['x/y'] }),
    ).toBe('absent');
    expect(cut.afterPowerCut()).toEqual({ '.keep': '666 ', x: 'dir' });
  });

  it('writeDurableJson with ensureDurable makes an unsynced identical state file durable', async () => {
    const { cut, vol } = await model();
    vol.writeFileSync(`${ROOT}/state.json`, `${JSON.stringify({ a: 1 }, null, 2)}\n`, { mode: 0o600 });
    expect((await writeDurableJson(cut.fs, ROOT, 'state.json', { a: 1 })).outcome).toBe('unchanged');
    expect(cut.afterPowerCut()['state.json']).toBeUndefined();
    const result = await writeDurableJson(cut.fs, ROOT, 'state.json', { a: 1 }, 0o600, {
      ensureDurable: true,
    });
    expect(result.outcome).toBe('unchanged');
    expect(cut.afterPowerCut()['state.json']).toBe('600 {\n  "a": 1\n}\n');
  });
});

describe('syncDirectories', () => {
  it('returns every failing directory, however many and at any concurrency, once each', async () => {
    const dirs = Array.from({ length: 11 }, (_, index) => `d${index}`);
    const { fs } = memfs(Object.fromEntries(dirs.map((dir) => [`${ROOT}/${dir}/f`, 'x'])));
    const broken = intercepted(fs, (call) => {
      if (call.op === 'sync' && isDirOpen(call)) throw fault('EIO');
    });
    for (const concurrency of [undefined, 0, 1, 3, 100]) {
      const failures = await syncDirectories(
        broken,
        ROOT,
        [...dirs, ...dirs],
        concurrency === undefined ? {} : { concurrency },
      );
      expect([...failures.keys()].sort()).toEqual([...dirs].sort());
      for (const dir of dirs) {
        expect(failures.get(dir)).toMatchObject({ errno: 'EIO', operation: 'fsync directory', path: dir });
      }
    }
    expect((await syncDirectories(broken, ROOT, [])).size).toBe(0);
  });

  it('makes every directory durable at any concurrency', async () => {
    for (const concurrency of [0, 1, 2, 50]) {
      const { fs, vol } = memfs({ [`${ROOT}/a/.k`]: '', [`${ROOT}/b/.k`]: '', [`${ROOT}/c/.k`]: '' });
      const cut = await PowerCutFs.over(fs, ROOT);
      for (const dir of ['a', 'b', 'c', '']) vol.writeFileSync(path.join(ROOT, dir, 'new'), '');
      expect((await syncDirectories(cut.fs, ROOT, ['a', 'b', 'c', ''], { concurrency })).size).toBe(0);
      expect(
        Object.keys(cut.afterPowerCut())
          .filter((p) => p.endsWith('new'))
          .sort(),
      ).toEqual(['a/new', 'b/new', 'c/new', 'new']);
    }
  });

  it.each(['EINVAL', 'ENOTSUP'])(
    'a filesystem that cannot fsync directories (%s) is not a failure',
    async (code) => {
      const { fs } = memfs({ [`${ROOT}/a/f`]: 'x' });
      const unsupported = intercepted(fs, (call) => {
        if (call.op === 'sync' && isDirOpen(call)) throw fault(code);
      });
      expect((await syncDirectories(unsupported, ROOT, ['a', ''])).size).toBe(0);
      expect((await publishFile(unsupported, request('b/c/app.conf', 'x'))).outcome).toBe('written');
      expect(
        await removeManagedFile(unsupported, {
          rootDir: ROOT,
          relativePath: 'b/c/app.conf',
          pruneDirs: ['b/c', 'b'],
        }),
      ).toBe('removed');
      expect(await snapshot(fs, ROOT)).toEqual({
        [`${ROOT}/.keep`]: '666 ',
        [`${ROOT}/a`]: 'dir 777',
        [`${ROOT}/a/f`]: '666 x',
      });
    },
  );

  it('a directory that cannot be opened, or a name that is not a path, is a DiskError naming it', async () => {
    const { fs } = memfs({ [`${ROOT}/a/f`]: 'x' });
    const failures = await syncDirectories(fs, ROOT, ['missing', 'a', '../etc', 'a//b']);
    expect([...failures.keys()].sort()).toEqual(['../etc', 'a//b', 'missing']);
    expect(failures.get('missing')).toMatchObject({
      errno: 'ENOENT',
      operation: 'open directory',
      path: 'missing',
    });
    const rejected = failures.get('../etc');
    expect(rejected).toBeInstanceOf(DiskError);
    expect(rejected).toMatchObject({ operation: 'fsync directory', path: '../etc', retryable: true });
    expect(rejected?.cause).toBeInstanceOf(PathRejectedError);
  });
});

describe('removeManagedFile', () => {
  const remove = (fs: FsPort, relativePath: string, pruneDirs: readonly string[] = []) =>
    removeManagedFile(fs, { rootDir: ROOT, relativePath, pruneDirs });

  it("a file gone between the check and the unlink is 'absent', and its directories are still pruned", async () => {
    const { fs, vol } = memfs({ [`${ROOT}/a/b/app.conf`]: 'x' });
    const racy = intercepted(fs, (call) => {
      if (call.op === 'unlink' && at('a/b/app.conf')(call)) vol.unlinkSync(`${ROOT}/a/b/app.conf`);
    });
    expect(await remove(racy, 'a/b/app.conf', ['a', 'a/b'])).toBe('absent');
    expect(await snapshot(fs, ROOT)).toEqual({ [`${ROOT}/.keep`]: '666 ' });
  });

  it('a failed unlink is a DiskError naming the file, and nothing is pruned', async () => {
    const { fs } = memfs({ [`${ROOT}/a/app.conf`]: 'x' });
    const before = await snapshot(fs, '/');
    const broken = failOnce(fs, (call) => call.op === 'unlink', 'EPERM');
    const error = await caught(remove(broken, 'a/app.conf', ['a']));
    expect(error).toBeInstanceOf(DiskError);
    expect(error).toMatchObject({ errno: 'EPERM', operation: 'unlink', path: 'a/app.conf', retryable: true });
    expect(await snapshot(fs, '/')).toEqual(before);
  });

  it("a FIFO at the path is 'refused' and left alone", async () => {
    const { root } = await realRoot();
    execFileSync('mkfifo', [path.join(root, 'app.conf')]);
    expect(await removeManagedFile(nodeFs, { rootDir: root, relativePath: 'app.conf', pruneDirs: [] })).toBe(
      'refused',
    );
    expect((await nodeFs.lstat(path.join(root, 'app.conf'))).isFIFO()).toBe(true);
  });

  it.each(['EEXIST', 'ENOENT', 'EBUSY', 'ENOTEMPTY'])(
    'a prune dir whose rmdir fails with %s is kept, and the others are still pruned',
    async (code) => {
      const { fs } = memfs({ [`${ROOT}/a/b/app.conf`]: 'x', [`${ROOT}/c/.k`]: '' });
      await fs.unlink(`${ROOT}/c/.k`);
      const broken = failOnce(fs, (call) => call.op === 'rmdir' && at('a/b')(call), code);
      expect(await remove(broken, 'a/b/app.conf', ['a/b', 'a', 'c'])).toBe('removed');
      expect(await snapshot(fs, ROOT)).toEqual({
        [`${ROOT}/.keep`]: '666 ',
        [`${ROOT}/a`]: 'dir 777',
        [`${ROOT}/a/b`]: 'dir 777',
      });
    },
  );

  it('any other rmdir failure is a DiskError naming the directory; deeper ones were pruned first', async () => {
    const { fs } = memfs({ [`${ROOT}/a/b/app.conf`]: 'x' });
    const broken = failOnce(fs, (call) => call.op === 'rmdir' && at('a')(call), 'EIO');
    const error = await caught(remove(broken, 'a/b/app.conf', ['a', 'a/b']));
    expect(error).toBeInstanceOf(DiskError);
    expect(error).toMatchObject({ errno: 'EIO', operation: 'remove directory', path: 'a', retryable: true });
    expect((error as Error).message).toBe(
      'disk error: remove directory failed for "a": EIO (input/output error)',
    );
    expect(await snapshot(fs, ROOT)).toEqual({ [`${ROOT}/.keep`]: '666 ', [`${ROOT}/a`]: 'dir 777' });
  });

  it('directories of one depth are pruned in reverse name order: a failure stops the ones after it', async () => {
    for (const given of [
      ['b', 'a', 'c'],
      ['a', 'b', 'c'],
      ['c', 'b', 'a'],
      ['a', 'c', 'b'],
    ]) {
      const { fs } = memfs({ [`${ROOT}/a/.k`]: '', [`${ROOT}/b/.k`]: '', [`${ROOT}/c/.k`]: '' });
      for (const dir of ['a', 'b', 'c']) await fs.unlink(`${ROOT}/${dir}/.k`);
      const broken = failOnce(fs, (call) => call.op === 'rmdir' && at('b')(call), 'EIO');
      await expect(remove(broken, 'x', given)).rejects.toMatchObject({ path: 'b' });
      expect(Object.keys(await snapshot(fs, ROOT)).sort()).toEqual([
        `${ROOT}/.keep`,
        `${ROOT}/a`,
        `${ROOT}/b`,
      ]);
    }
  });

  it('a prune dir that is a file, or absent, is skipped; a failing lstat on the way is a DiskError', async () => {
    const { fs } = memfs({ [`${ROOT}/a/b`]: 'a file now', [`${ROOT}/e/.k`]: '' });
    await fs.unlink(`${ROOT}/e/.k`);
    expect(await remove(fs, 'x', ['a/b', 'a', 'gone', 'e'])).toBe('absent');
    expect(await snapshot(fs, ROOT)).toEqual({
      [`${ROOT}/.keep`]: '666 ',
      [`${ROOT}/a`]: 'dir 777',
      [`${ROOT}/a/b`]: '666 a file now',
    });
    const broken = failOnce(fs, (call) => call.op === 'lstat' && at('a')(call), 'EACCES');
    await expect(remove(broken, 'x', ['a/b'])).rejects.toMatchObject({
      errno: 'EACCES',
      operation: 'lstat',
      path: 'a',
    });
  });

  it('a failed fsync of the parent after pruning is reported, with the directory gone', async () => {
    const { fs } = memfs({ [`${ROOT}/p/q/.k`]: '' });
    await fs.unlink(`${ROOT}/p/q/.k`);
    const broken = failOnce(fs, (call) => call.op === 'sync' && isDirOpen(call) && at('p')(call), 'EIO');
    await expect(remove(broken, 'x', ['p/q'])).rejects.toMatchObject({
      errno: 'EIO',
      operation: 'fsync directory',
      path: 'p',
    });
    expect(await snapshot(fs, ROOT)).toEqual({ [`${ROOT}/.keep`]: '666 ', [`${ROOT}/p`]: 'dir 777' });
  });
});

describe('sweepTempFiles', () => {
  it('returns [] when the root is a file or under one, and throws a DiskError when it cannot be checked', async () => {
    const { fs } = memfs({ '/file': 'x' });
    expect(await sweepTempFiles(fs, '/file')).toEqual([]);
    expect(await sweepTempFiles(fs, '/file/below')).toEqual([]);
    const broken = failOnce(fs, (call) => call.op === 'stat', 'EACCES');
    await expect(sweepTempFiles(broken, ROOT)).rejects.toMatchObject({
      errno: 'EACCES',
      operation: 'stat directory',
    });
  });

  it('skips a directory that vanished or became a file while sweeping, and sweeps the rest', async () => {
    for (const [swap, code] of [
      ['vanish', 'ENOENT'],
      ['file', 'ENOTDIR'],
    ] as const) {
      const { fs, vol } = memfs({
        [`${ROOT}/a/${TEMP_PREFIX}1`]: 't',
        [`${ROOT}/b/${TEMP_PREFIX}2`]: 't',
        [`${ROOT}/${TEMP_PREFIX}3`]: 't',
      });
      const racy = intercepted(fs, (call) => {
        if (call.op === 'readdir' && at('a')(call)) {
          vol.rmSync(`${ROOT}/a`, { recursive: true });
          if (swap === 'file') vol.writeFileSync(`${ROOT}/a`, 'theirs');
        }
      });
      expect(await sweepTempFiles(racy, ROOT), code).toEqual([`${TEMP_PREFIX}3`, `b/${TEMP_PREFIX}2`]);
    }
  });

  it('skips a directory below the root it cannot read and sweeps the rest; the root itself and EMFILE still throw', async () => {
    for (const code of ['EACCES', 'EPERM', 'ENAMETOOLONG', 'ELOOP', 'EIO']) {
      const { fs } = memfs({
        [`${ROOT}/a/b/${TEMP_PREFIX}1`]: 't',
        [`${ROOT}/a/${TEMP_PREFIX}2`]: 't',
        [`${ROOT}/c/${TEMP_PREFIX}3`]: 't',
      });
      const broken = failOnce(fs, (call) => call.op === 'readdir' && at('a/b')(call), code);
      const skipped: unknown[] = [];
      expect(await sweepTempFiles(broken, ROOT, (skip) => skipped.push(skip)), code).toEqual([
        `a/${TEMP_PREFIX}2`,
        `c/${TEMP_PREFIX}3`,
      ]);
      expect(skipped).toEqual([{ path: 'a/b', operation: 'read directory', errno: code }]);
      expect(await snapshot(fs, `${ROOT}/a/b`)).toEqual({ [`${ROOT}/a/b/${TEMP_PREFIX}1`]: '666 t' });
    }
    const { fs } = memfs({ [`${ROOT}/a/b/${TEMP_PREFIX}1`]: 't' });
    const rootUnreadable = failOnce(fs, (call) => call.op === 'readdir' && call.path === ROOT, 'EACCES');
    expect(await caught(sweepTempFiles(rootUnreadable, ROOT))).toMatchObject({
      errno: 'EACCES',
      operation: 'read directory',
      path: '',
    });
    const outOfDescriptors = failOnce(fs, (call) => call.op === 'readdir' && at('a/b')(call), 'EMFILE');
    const error = await caught(sweepTempFiles(outOfDescriptors, ROOT));
    expect(error).toBeInstanceOf(DiskError);
    expect(error).toMatchObject({ errno: 'EMFILE', operation: 'read directory', path: 'a/b' });
  });

  it('a temp file gone before its unlink is not listed; one that cannot be removed is left, named, and the sweep goes on', async () => {
    const { fs, vol } = memfs({ [`${ROOT}/a/${TEMP_PREFIX}1`]: 't', [`${ROOT}/a/${TEMP_PREFIX}2`]: 't' });
    const racy = intercepted(fs, (call) => {
      if (call.op === 'unlink' && at(`a/${TEMP_PREFIX}1`)(call)) vol.unlinkSync(call.path);
    });
    expect(await sweepTempFiles(racy, ROOT)).toEqual([`a/${TEMP_PREFIX}2`]);
    expect(await snapshot(fs, `${ROOT}/a`)).toEqual({});

    for (const code of ['EPERM', 'EACCES', 'EROFS', 'EBUSY']) {
      vol.writeFileSync(`${ROOT}/a/${TEMP_PREFIX}3`, 't');
      vol.writeFileSync(`${ROOT}/a/${TEMP_PREFIX}4`, 't');
      const broken = failOnce(fs, (call) => call.op === 'unlink' && at(`a/${TEMP_PREFIX}3`)(call), code);
      const skipped: unknown[] = [];
      expect(await sweepTempFiles(broken, ROOT, (skip) => skipped.push(skip)), code).toEqual([
        `a/${TEMP_PREFIX}4`,
      ]);
      expect(skipped).toEqual([{ path: `a/${TEMP_PREFIX}3`, operation: 'unlink temp file', errno: code }]);
      expect(await snapshot(fs, `${ROOT}/a`)).toEqual({ [`${ROOT}/a/${TEMP_PREFIX}3`]: '666 t' });
      vol.unlinkSync(`${ROOT}/a/${TEMP_PREFIX}3`);
    }
    vol.writeFileSync(`${ROOT}/a/${TEMP_PREFIX}5`, 't');
    const outOfMemory = failOnce(fs, (call) => call.op === 'unlink', 'ENOMEM');
    const error = await caught(sweepTempFiles(outOfMemory, ROOT));
    expect(error).toBeInstanceOf(DiskError);
    expect(error).toMatchObject({
      errno: 'ENOMEM',
      operation: 'unlink temp file',
      path: `a/${TEMP_PREFIX}5`,
    });
  });

  it('returns what it removed sorted, across directories', async () => {
    const { fs } = memfs({
      [`${ROOT}/z/${TEMP_PREFIX}1`]: 't',
      [`${ROOT}/${TEMP_PREFIX}9`]: 't',
      [`${ROOT}/a/${TEMP_PREFIX}5`]: 't',
      [`${ROOT}/a/${TEMP_PREFIX}0`]: 't',
    });
    expect(await sweepTempFiles(fs, ROOT)).toEqual([
      `${TEMP_PREFIX}9`,
      `a/${TEMP_PREFIX}0`,
      `a/${TEMP_PREFIX}5`,
      `z/${TEMP_PREFIX}1`,
    ]);
  });
});

describe('writeDurableJson', () => {
  it('a state directory that cannot be created is a DiskError with an empty path', async () => {
    const { fs } = memfs();
    const broken = failOnce(fs, (call) => call.op === 'mkdir', 'EROFS');
    const error = await caught(writeDurableJson(broken, '/var/lib/agent', 'state.json', { a: 1 }));
    expect(error).toBeInstanceOf(DiskError);
    expect(error).toMatchObject({
      errno: 'EROFS',
      operation: 'create state directory',
      path: '',
      retryable: true,
    });
    expect((error as Error).message).toBe(
      'disk error: create state directory failed for "": EROFS (read-only file system)',
    );
  });

  it('names the file whose value is not JSON', async () => {
    const { fs } = memfs();
    await expect(writeDurableJson(fs, '/var/lib/agent', 'x.json', () => 1)).rejects.toThrow(
      'writeDurableJson: value for "x.json" is not JSON',
    );
    expect(await snapshot(fs, '/')).not.toHaveProperty('/var');
  });

  it('creates missing parents of the state directory 0700 and the file in its mode', async () => {
    const { fs } = memfs();
    const result = await writeDurableJson(fs, '/var/lib/agent', 'state.json', [1], 0o640);
    expect(result).toMatchObject({ outcome: 'written', createdDirs: [], directory: '' });
    expect((await fs.stat('/var/lib/agent')).mode & 0o7777).toBe(0o700);
    expect(await snapshot(fs, '/var/lib/agent')).toEqual({ '/var/lib/agent/state.json': '640 [\n  1\n]\n' });
  });
});
