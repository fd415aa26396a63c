// The writer through a port's raw descriptor calls (production's node:fs callbacks): same files, same failures, no leaks.

import { readdirSync } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { nodeDescriptorCalls } from '../lib/descriptor-calls.js';
import type { DescriptorCalls, FsPort } from '../lib/fs-port.js';
import { publishFile, publishText, syncDirectories } from './durable-writer.js';
import { DiskError } from './errors.js';
import { TEMP_PREFIX } from './path-guard.js';

let base: string;
let root: string;

beforeEach(async () => {
  base = await mkdtemp(path.join(os.tmpdir(), 'writer-descriptors-'));
  root = path.join(base, 'root');
  await nodeFs.mkdir(root);
});

afterEach(async () => {
  await rm(base, { recursive: true, force: true });
});

const errno = (code: string) => Object.assign(new Error(code), { code });

/** The port production uses for the writer's descriptors, with `calls` in place of some of node's. */
function port(calls: Partial<DescriptorCalls> = {}): FsPort {
  return { ...nodeFs, descriptors: { ...nodeDescriptorCalls, ...calls } };
}

const request = (relativePath: string, text: string, mode = 0o640) => ({
  rootDir: root,
  relativePath,
  data: Buffer.from(text),
  mode,
  dirMode: 0o750,
});

const openDescriptors = () => readdirSync('/proc/self/fd').length;

/** Every name under the root, recursively, relative to it. */
async function tree(): Promise<string[]> {
  return (await readdir(root, { recursive: true })).map(String).sort();
}

describe('publishFile through raw descriptors', () => {
  it('writes the bytes with the exact mode into new directories, and leaves no temp file and no descriptor', async () => {
    const before = openDescriptors();
    const result = await publishFile(port(), request('a/b/app.conf', 'hello\n', 0o604));
    expect(result.outcome).toBe('written');
    expect(await readFile(path.join(root, 'a/b/app.conf'), 'utf8')).toBe('hello\n');
    expect((await stat(path.join(root, 'a/b/app.conf'))).mode & 0o7777).toBe(0o604);
    expect((await stat(path.join(root, 'a/b'))).mode & 0o7777).toBe(0o750);
    expect(await tree()).toEqual(['a', 'a/b', 'a/b/app.conf']);
    expect(openDescriptors()).toBe(before);
  });

  it('finishes a file the disk takes a byte per write', async () => {
    const fs = port({ write: (fd, buffer, offset) => nodeDescriptorCalls.write(fd, buffer, offset, 1) });
    await publishFile(fs, request('app.conf', 'several bytes'));
    expect(await readFile(path.join(root, 'app.conf'), 'utf8')).toBe('several bytes');
  });

  it('writes a text given in pieces, and its state-file group of calls', async () => {
    const pieces = () => ['{', '"a": 1', '}\n'];
    const result = await publishText(port(), { ...request('state.json', ''), pieces });
    expect(result.bytes).toBe(9);
    expect(await readFile(path.join(root, 'state.json'), 'utf8')).toBe('{"a": 1}\n');
  });

  const failures: Array<[string, Partial<DescriptorCalls>, string]> = [
    ['a write that takes no bytes (EIO)', { write: async () => 0 }, 'write temp file'],
    [
      'a full disk (ENOSPC) on the write',
      { write: async () => Promise.reject(errno('ENOSPC')) },
      'write temp file',
    ],
    ['a failing fchmod', { fchmod: async () => Promise.reject(errno('EPERM')) }, 'chmod temp file'],
    [
      'a failing fsync of the temp file',
      { fsync: async () => Promise.reject(errno('EIO')) },
      'fsync temp file',
    ],
    ['a failing create', { open: async () => Promise.reject(errno('EDQUOT')) }, 'create temp file'],
  ];
  for (const [name, calls, operation] of failures) {
    it(`keeps the old file whole after ${name}, with no temp file and no descriptor left`, async () => {
      await writeFile(path.join(root, 'app.conf'), 'old bytes');
      const before = openDescriptors();
      const error = await publishFile(port(calls), request('app.conf', 'new bytes')).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(DiskError);
      expect((error as DiskError).operation).toBe(operation);
      expect(await readFile(path.join(root, 'app.conf'), 'utf8')).toBe('old bytes');
      expect((await tree()).filter((name) => name.startsWith(TEMP_PREFIX))).toEqual([]);
      expect(openDescriptors()).toBe(before);
    });
  }

  it('names a failing close of the temp file and publishes nothing', async () => {
    await writeFile(path.join(root, 'app.conf'), 'old bytes');
    const before = openDescriptors();
    const fs = port({
      close: async (fd) => {
        await nodeDescriptorCalls.close(fd);
        throw errno('EIO');
      },
    });
    const error = await publishFile(fs, request('app.conf', 'new bytes')).catch((e: unknown) => e);
    expect((error as DiskError).operation).toBe('close temp file');
    expect(await readFile(path.join(root, 'app.conf'), 'utf8')).toBe('old bytes');
    expect(await tree()).toEqual(['app.conf']);
    expect(openDescriptors()).toBe(before);
  });

  it('fails a directory fsync the disk refuses, accepts one it cannot do (EINVAL), and leaks no descriptor', async () => {
    const before = openDescriptors();
    let directoryAnswer = 'EIO';
    const fs = port({
      fsync: async (fd) => {
        const isDirectory = (await nodeFs.stat(`/proc/self/fd/${fd}`)).isDirectory();
        if (isDirectory) throw errno(directoryAnswer);
        await nodeDescriptorCalls.fsync(fd);
      },
    });
    const error = await publishFile(fs, request('app.conf', 'new')).catch((e: unknown) => e);
    expect((error as DiskError).operation).toBe('fsync directory');
    // The rename is the commit point: the bytes are in place, not yet known durable, and the caller is told.
    expect(await readFile(path.join(root, 'app.conf'), 'utf8')).toBe('new');
    const failed = await syncDirectories(fs, root, ['']);
    expect(failed.get('')?.operation).toBe('fsync directory');
    directoryAnswer = 'EINVAL';
    expect((await publishFile(fs, request('app.conf', 'newer'))).outcome).toBe('written');
    expect((await syncDirectories(fs, root, [''])).size).toBe(0);
    expect(openDescriptors()).toBe(before);
  });
});

describe('the durable order through raw descriptors', () => {
  /**
   * A model of what a power cut would lose on the descriptor path: bytes written and not fsynced since, and
   * directories whose entries changed (a rename or mkdir into them) and were not fsynced since.
   */
  function watched() {
    const unsynced = new Set<string>();
    const pathOf = new Map<number, string>();
    const calls: DescriptorCalls = {
      ...nodeDescriptorCalls,
      open: async (file, flags, mode) => {
        const fd = await nodeDescriptorCalls.open(file, flags, mode);
        pathOf.set(fd, path.resolve(await nodeFs.readlink(`/proc/self/fd/${fd}`)));
        return fd;
      },
      write: async (fd, buffer, offset, length) => {
        unsynced.add(pathOf.get(fd) ?? '?');
        return nodeDescriptorCalls.write(fd, buffer, offset, length);
      },
      fsync: async (fd) => {
        await nodeDescriptorCalls.fsync(fd);
        unsynced.delete(pathOf.get(fd) ?? '?');
      },
      close: async (fd) => {
        pathOf.delete(fd);
        await nodeDescriptorCalls.close(fd);
      },
    };
    const rename = (async (from: string, to: string) => {
      await nodeFs.rename(from, to);
      const temp = path.resolve(await nodeFs.realpath(path.dirname(String(to))), path.basename(String(from)));
      const target = path.resolve(await nodeFs.realpath(path.dirname(String(to))), path.basename(String(to)));
      if (unsynced.delete(temp)) unsynced.add(target);
      unsynced.add(path.dirname(target));
    }) as FsPort['rename'];
    const mkdir = (async (dir: string, options?: { mode?: number }) => {
      await nodeFs.mkdir(dir, options);
      unsynced.add(await nodeFs.realpath(path.dirname(String(dir))));
      return undefined;
    }) as FsPort['mkdir'];
    return { unsynced, fs: { ...nodeFs, rename, mkdir, descriptors: calls } as FsPort };
  }

  it('has the file, its directory and every new directory durable when publishFile answers', async () => {
    const { unsynced, fs } = watched();
    await publishFile(fs, request('x/y/app.conf', 'durable'));
    expect([...unsynced]).toEqual([]);
    expect(await readFile(path.join(root, 'x/y/app.conf'), 'utf8')).toBe('durable');
  });

  it('leaves only the directory to syncDirectories when asked to, and syncDirectories makes it durable', async () => {
    const { unsynced, fs } = watched();
    await nodeFs.mkdir(path.join(root, 'd'));
    await publishFile(fs, { ...request('d/one.conf', '1'), syncDirectory: false });
    await publishFile(fs, { ...request('d/two.conf', '2'), syncDirectory: false });
    expect([...unsynced]).toEqual([await nodeFs.realpath(path.join(root, 'd'))]);
    expect((await syncDirectories(fs, root, ['d'])).size).toBe(0);
    expect([...unsynced]).toEqual([]);
  });
});
