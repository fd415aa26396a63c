// publishFile's `durable: false` (the content cache's writes): whole files through temp + rename, nothing synced.
import path from 'node:path';
import { createFsFromVolume, Volume } from 'memfs';
import { describe, expect, it } from 'vitest';
import type { FileHandle, FsPort } from '../lib/fs-port.js';
import { publishFile } from './durable-writer.js';
import { TEMP_PREFIX } from './path-guard.js';

const ROOT = '/srv/root';

/**
 * memfs plus a model of what a power cut would lose: bytes written through a handle and not fsynced since, and
 * directories whose entries changed (a rename or mkdir into them) and were not fsynced since.
 */
function world() {
  const vol = Volume.fromJSON({ [`${ROOT}/.keep`]: '' });
  const base = createFsFromVolume(vol).promises as unknown as FsPort;
  const unsynced = new Set<string>();
  const open = (async (file: string, ...rest: unknown[]) => {
    const handle = (await (base.open as (...a: unknown[]) => Promise<FileHandle>)(
      file,
      ...rest,
    )) as FileHandle;
    return new Proxy(handle, {
      get(target, key) {
        const value = Reflect.get(target, key) as unknown;
        if (typeof value !== 'function') return value;
        if (key === 'writeFile' || key === 'write') {
          return (...args: unknown[]) => {
            unsynced.add(String(file));
            return (value as (...a: unknown[]) => unknown).apply(target, args);
          };
        }
        if (key === 'sync' || key === 'datasync') {
          return async () => {
            await (value as () => Promise<void>).apply(target);
            unsynced.delete(String(file));
          };
        }
        return (value as (...a: unknown[]) => unknown).bind(target);
      },
    });
  }) as FsPort['open'];
  const rename = (async (from: string, to: string) => {
    await base.rename(from, to);
    if (unsynced.delete(String(from))) unsynced.add(String(to));
    unsynced.add(path.dirname(String(to)));
  }) as FsPort['rename'];
  const mkdir = (async (dir: string, options?: unknown) => {
    const made = await (base.mkdir as (...a: unknown[]) => Promise<string | undefined>)(dir, options);
    unsynced.add(path.dirname(String(dir)));
    return made;
  }) as FsPort['mkdir'];
  return { vol, unsynced, fs: { ...base, open, rename, mkdir } as FsPort };
}

const request = (relativePath: string, text: string) => ({
  rootDir: ROOT,
  relativePath,
  data: Buffer.from(text),
  mode: 0o600,
  dirMode: 0o700,
});

describe('publishFile with durable: false', () => {
  it('lands the whole file with its mode and no temp file, and syncs nothing (what a power cut may lose)', async () => {
    const { vol, fs, unsynced } = world();

    const result = await publishFile(fs, { ...request('a/b/entry', 'cached bytes'), durable: false });

    expect(result).toMatchObject({ outcome: 'written', createdDirs: ['a', 'a/b'], directory: 'a/b' });
    expect(vol.readFileSync(`${ROOT}/a/b/entry`, 'utf8')).toBe('cached bytes');
    expect(vol.statSync(`${ROOT}/a/b/entry`).mode & 0o7777).toBe(0o600);
    expect(vol.readdirSync(`${ROOT}/a/b`)).toEqual(['entry']);
    expect([...unsynced].sort()).toEqual([ROOT, `${ROOT}/a`, `${ROOT}/a/b`, `${ROOT}/a/b/entry`]);
  });

  it('is the durable protocol by default: the file, its directory and every created directory are synced', async () => {
    const { vol, fs, unsynced } = world();

    await publishFile(fs, request('a/b/entry', 'managed bytes'));

    expect(vol.readFileSync(`${ROOT}/a/b/entry`, 'utf8')).toBe('managed bytes');
    expect([...unsynced]).toEqual([]);
  });

  it('overrides ensureDurable and syncDirectory: bytes already in place are left as they are, unsynced', async () => {
    const { vol, fs, unsynced } = world();
    await publishFile(fs, { ...request('entry', 'same'), durable: false });
    const inode = vol.statSync(`${ROOT}/entry`).ino;

    const again = await publishFile(fs, {
      ...request('entry', 'same'),
      durable: false,
      ensureDurable: true,
      syncDirectory: true,
    });

    expect(again.outcome).toBe('unchanged');
    expect(vol.statSync(`${ROOT}/entry`).ino).toBe(inode);
    expect([...unsynced].sort()).toEqual([ROOT, `${ROOT}/entry`]);
  });

  it('replaces other bytes at the name through a temp file; a mode change alone is made in place', async () => {
    const { vol, fs } = world();
    vol.writeFileSync(`${ROOT}/entry`, 'torn');
    vol.chmodSync(`${ROOT}/entry`, 0o644);

    expect((await publishFile(fs, { ...request('entry', 'whole'), durable: false })).outcome).toBe('written');
    expect(vol.readFileSync(`${ROOT}/entry`, 'utf8')).toBe('whole');
    vol.chmodSync(`${ROOT}/entry`, 0o644);
    const inode = vol.statSync(`${ROOT}/entry`).ino;

    expect((await publishFile(fs, { ...request('entry', 'whole'), durable: false })).outcome).toBe(
      'metadata',
    );
    expect(vol.statSync(`${ROOT}/entry`).mode & 0o7777).toBe(0o600);
    expect(vol.statSync(`${ROOT}/entry`).ino).toBe(inode);
    expect(vol.readdirSync(ROOT).filter((name) => String(name).startsWith(TEMP_PREFIX))).toEqual([]);
  });
});
