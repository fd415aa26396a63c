// Path guard edges that mutation testing found unpinned: what inspectPath reports, details in messages, odd roots.
import type { Stats } from 'node:fs';
import { createFsFromVolume, Volume } from 'memfs';
import { describe, expect, it } from 'vitest';
import { resolveInsideRoot } from '../../test/helpers/resolve-inside-root.js';
import type { FsPort } from '../lib/fs-port.js';
import { DiskError, PathRejectedError } from './errors.js';
import {
  assertRegularOrAbsent,
  checkRoot,
  inspectPath,
  lstatOrUndefined,
  validateRelativePath,
} from './path-guard.js';

function memfs(files: Record<string, string>): { fs: FsPort; vol: Volume } {
  const vol = Volume.fromJSON(files);
  return { fs: createFsFromVolume(vol).promises as unknown as FsPort, vol };
}

async function rejection(promise: Promise<unknown>): Promise<PathRejectedError> {
  const error = await promise.catch((e: unknown) => e);
  if (!(error instanceof PathRejectedError)) throw new Error(`expected a rejection, got ${String(error)}`);
  return error;
}

function syncRejection(run: () => void): PathRejectedError {
  try {
    run();
  } catch (error) {
    if (error instanceof PathRejectedError) return error;
    throw error;
  }
  throw new Error('expected a rejection');
}

describe('inspectPath', () => {
  it('counts the parents that exist and stops at the first missing one', async () => {
    const { fs } = memfs({ '/srv/root/a/keep': 'x' });
    const inspection = await inspectPath(fs, '/srv/root', 'a/b/c/d.conf');
    expect(inspection).toMatchObject({
      root: '/srv/root',
      absolute: '/srv/root/a/b/c/d.conf',
      segments: ['a', 'b', 'c', 'd.conf'],
      existingParents: 1,
      final: undefined,
    });
  });

  it('lstats the final path when every parent exists', async () => {
    const { fs } = memfs({ '/srv/root/a/b/d.conf': 'bytes' });
    const inspection = await inspectPath(fs, '/srv/root', 'a/b/d.conf');
    expect(inspection.existingParents).toBe(2);
    expect(inspection.final?.isFile()).toBe(true);
    expect(inspection.final?.size).toBe(5);
    const missing = await inspectPath(fs, '/srv/root', 'a/b/new.conf');
    expect(missing).toMatchObject({
      existingParents: 2,
      final: undefined,
      absolute: '/srv/root/a/b/new.conf',
    });
  });

  it('resolves a root given with dots and trailing slashes', async () => {
    const { fs } = memfs({ '/srv/root/f': 'x' });
    expect((await inspectPath(fs, '/srv/other/../root/', 'f')).root).toBe('/srv/root');
  });
});

describe('rejections name where the rule broke', () => {
  it('a symlinked or non-directory parent names the component; a symlinked target says so', async () => {
    const { fs, vol } = memfs({ '/srv/root/a/b/keep': 'x', '/srv/root/file': 'x', '/outside/f': 'y' });
    vol.symlinkSync('/outside', '/srv/root/a/b/c');
    vol.symlinkSync('/outside/f', '/srv/root/link.conf');
    expect((await rejection(resolveInsideRoot(fs, '/srv/root', 'a/b/c/f'))).message).toBe(
      'path rejected: "a/b/c/f" crosses a symlink (a/b/c)',
    );
    expect((await rejection(resolveInsideRoot(fs, '/srv/root', 'file/x'))).message).toBe(
      'path rejected: "file/x" has a parent component that exists but is not a directory (file)',
    );
    expect((await rejection(resolveInsideRoot(fs, '/srv/root', 'link.conf'))).message).toBe(
      'path rejected: "link.conf" crosses a symlink (the target itself)',
    );
  });

  it('lengths are counted in UTF-8 bytes and named in the message', () => {
    const twoByte = 'é'.repeat(128);
    expect(syncRejection(() => validateRelativePath(`a/${twoByte}`)).message).toBe(
      `path rejected: "a/${twoByte}" has a segment longer than 255 bytes (UTF-8) (256 bytes)`,
    );
    const long = `${'a/'.repeat(2047)}bb`;
    const error = syncRejection(() => validateRelativePath(long));
    expect(error.rule).toBe('path_too_long');
    expect(error.message.endsWith('" is longer than 4095 bytes (UTF-8) (4096 bytes)')).toBe(true);
  });
});

describe('roots and lstat failures', () => {
  it('a root that is a file is a DiskError ENOTDIR on "stat directory", naming the absolute root', async () => {
    const { fs } = memfs({ '/srv/root': 'not a directory' });
    const error = await checkRoot(fs, '/srv/x/../root').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DiskError);
    expect(error).toMatchObject({ errno: 'ENOTDIR', operation: 'stat directory', path: '/srv/root' });
  });

  it('an lstat failure other than ENOENT is a DiskError naming the relative path', async () => {
    const { fs } = memfs({ '/srv/root/file': 'x' });
    expect(await lstatOrUndefined(fs, '/srv/root/missing', 'missing')).toBeUndefined();
    const error = await lstatOrUndefined(fs, '/srv/root/file/x', 'file/x').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DiskError);
    expect(error).toMatchObject({ errno: 'ENOTDIR', operation: 'lstat', path: 'file/x' });
  });

  it('a target that is neither file, directory nor symlink (a FIFO, a socket) is not a regular file', () => {
    const fifo = { isFile: () => false, isSymbolicLink: () => false, isDirectory: () => false } as Stats;
    expect(syncRejection(() => assertRegularOrAbsent(fifo, 'run/pipe')).rule).toBe('target_not_regular_file');
    const file = { isFile: () => true, isSymbolicLink: () => false, isDirectory: () => false } as Stats;
    expect(() => assertRegularOrAbsent(file, 'etc/a')).not.toThrow();
    expect(() => assertRegularOrAbsent(undefined, 'etc/a')).not.toThrow();
  });
});
