// The content cache on memfs: entries named by their sha256, private modes, bytes checked on read, pruning.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import nodeFs, { mkdir, mkdtemp, rm, symlink } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { createFsFromVolume, Volume } from 'memfs';
import { describe, expect, it } from 'vitest';
import { PowerCutFs } from '../../test/helpers/power-cut-fs.js';
import type { FsPort } from '../lib/fs-port.js';
import { CACHE_DIR, ContentCache } from './content-cache.js';

const STATE = '/var/lib/config-agent';
const CACHE = `${STATE}/${CACHE_DIR}`;

function world() {
  const vol = Volume.fromJSON({});
  vol.mkdirSync(STATE, { recursive: true });
  const fs = createFsFromVolume(vol).promises as unknown as FsPort;
  return { vol, fs, cache: new ContentCache(fs, STATE) };
}

const sha = (text: string) => createHash('sha256').update(text).digest('hex');

describe('ContentCache', () => {
  it('put stores the bytes under their sha256 in a 0700 directory, as a 0600 file', async () => {
    const { vol, cache } = world();
    const name = await cache.put(Buffer.from('listen 80;\n'));
    expect(name).toBe(sha('listen 80;\n'));
    expect(vol.readFileSync(`${CACHE}/${name}`, 'utf8')).toBe('listen 80;\n');
    expect(vol.statSync(`${CACHE}/${name}`).mode & 0o777).toBe(0o600);
    expect(vol.statSync(CACHE).mode & 0o777).toBe(0o700);
    expect((await cache.get(name))?.toString()).toBe('listen 80;\n');
  });

  it('put replaces a torn entry (a crash while it was written) and leaves no temp file', async () => {
    const { vol, cache } = world();
    const text = '{"port": 8080}\n';
    const name = sha(text);
    vol.mkdirSync(CACHE, { recursive: true, mode: 0o700 });
    vol.writeFileSync(`${CACHE}/${name}`, text.slice(0, 5));
    expect(await cache.get(name)).toBeUndefined();
    expect(await cache.put(Buffer.from(text))).toBe(name);
    expect(vol.readFileSync(`${CACHE}/${name}`, 'utf8')).toBe(text);
    expect((await cache.get(name))?.toString()).toBe(text);
    // Nothing but the entry is left behind (no temp file), however often the same bytes are put.
    expect(vol.readdirSync(CACHE)).toEqual([name]);
    await cache.put(Buffer.from(text));
    expect(vol.readdirSync(CACHE)).toEqual([name]);
    expect((await cache.get(name))?.toString()).toBe(text);
  });

  it('put makes the directory again when it was removed since the last put', async () => {
    const { vol, cache } = world();
    await cache.put(Buffer.from('first'));
    vol.rmSync(CACHE, { recursive: true, force: true });
    const name = await cache.put(Buffer.from('second'));
    expect(vol.readFileSync(`${CACHE}/${name}`, 'utf8')).toBe('second');
    expect(vol.statSync(CACHE).mode & 0o777).toBe(0o700);
  });

  it('put refuses a symlink planted at an entry name and leaves its target alone', async () => {
    const { vol, cache } = world();
    vol.mkdirSync(CACHE, { recursive: true, mode: 0o700 });
    vol.writeFileSync('/elsewhere', 'precious');
    const name = sha('evil');
    vol.symlinkSync('/elsewhere', `${CACHE}/${name}`);
    expect(await cache.put(Buffer.from('evil'))).toBe(name);
    expect(vol.readFileSync('/elsewhere', 'utf8')).toBe('precious');
    // The symlink itself was replaced by the entry.
    expect(vol.lstatSync(`${CACHE}/${name}`).isFile()).toBe(true);
    expect((await cache.get(name))?.toString()).toBe('evil');
  });

  it('get answers undefined for an absent entry, for bytes that no longer hash to their name, and for non-names', async () => {
    const { vol, cache } = world();
    const good = await cache.put(Buffer.from('a'));
    expect(await cache.get(sha('never stored'))).toBeUndefined();
    vol.writeFileSync(`${CACHE}/${good}`, 'tampered');
    expect(await cache.get(good)).toBeUndefined();
    // The tampered entry is gone, so nothing (holds) can take it for the bytes again.
    expect(vol.existsSync(`${CACHE}/${good}`)).toBe(false);
    // A name that is not exactly 64 lowercase hex digits is never read, whatever the directory holds.
    const other = sha('b');
    for (const name of [`x${other}`, `${other}x`, other.toUpperCase(), '../state.json']) {
      vol.writeFileSync(`${CACHE}/${name.replace('../', '')}`, 'b');
      expect(await cache.get(name)).toBeUndefined();
    }
  });

  it('holds answers from one lstat: a regular file of that name and size, nothing else', async () => {
    const { vol, cache } = world();
    expect(await cache.holds(sha('abc'), 3)).toBe(false);
    const name = await cache.put(Buffer.from('abc'));
    expect(await cache.holds(name, 3)).toBe(true);
    expect(await cache.holds(name, 4)).toBe(false);
    expect(await cache.holds(name, 2)).toBe(false);
    expect(await cache.holds(sha('other'), 3)).toBe(false);
    // Not a name: never looked up, whatever is there.
    vol.writeFileSync(`${CACHE}/notes`, 'abc');
    expect(await cache.holds('notes', 3)).toBe(false);
    // A symlink or a directory at an entry name is not an entry.
    vol.writeFileSync('/elsewhere', 'xyz');
    vol.symlinkSync('/elsewhere', `${CACHE}/${sha('xyz')}`);
    expect(await cache.holds(sha('xyz'), 3)).toBe(false);
    vol.mkdirSync(`${CACHE}/${sha('dir')}`);
    expect(await cache.holds(sha('dir'), 0)).toBe(false);
  });

  it('holds is false when there is no cache directory, or a file in its place; other failures throw', async () => {
    const { vol, cache } = world();
    expect(await cache.holds(sha('a'), 1)).toBe(false);
    vol.writeFileSync(CACHE, 'a file where the directory should be');
    expect(await cache.holds(sha('a'), 1)).toBe(false);
    const fs = createFsFromVolume(vol).promises as unknown as FsPort;
    const denied = new ContentCache(
      {
        ...fs,
        lstat: (async () => {
          throw Object.assign(new Error('EACCES: simulated'), { code: 'EACCES' });
        }) as FsPort['lstat'],
      } as FsPort,
      STATE,
    );
    await expect(denied.holds(sha('a'), 1)).rejects.toMatchObject({ code: 'EACCES' });
  });

  it('get throws a read failure other than "absent"', async () => {
    const { vol, cache } = world();
    const name = sha('dir');
    vol.mkdirSync(`${CACHE}/${name}`, { recursive: true });
    await expect(cache.get(name)).rejects.toMatchObject({ code: 'EISDIR' });
  });

  it('prune deletes the entries not kept, leaves other names alone, and counts what it deleted', async () => {
    const { vol, cache } = world();
    const kept = await cache.put(Buffer.from('kept'));
    const dropped = [await cache.put(Buffer.from('old 1')), await cache.put(Buffer.from('old 2'))];
    // Names that merely contain a sha256 are not entries either.
    const others = ['notes.txt', `copy-${sha('z')}`, `${sha('z')}.bak`];
    for (const name of others) vol.writeFileSync(`${CACHE}/${name}`, 'not an entry');
    expect(await cache.prune(new Set([kept]))).toBe(2);
    expect(vol.readdirSync(CACHE)).toEqual([kept, ...others].sort());
    for (const name of dropped) expect(await cache.get(name)).toBeUndefined();
    expect(await cache.prune(new Set([kept]))).toBe(0);
  });

  it('prune with no cache directory deletes nothing; a cache path that is not a directory throws', async () => {
    const { vol, cache } = world();
    expect(await cache.prune(new Set())).toBe(0);
    vol.writeFileSync(CACHE, 'a file where the directory should be');
    await expect(cache.prune(new Set())).rejects.toMatchObject({ code: 'ENOTDIR' });
  });
});

describe('ContentCache put when the disk fails', () => {
  function failing(vol: InstanceType<typeof Volume>, fail: { mkdir?: number; open?: number; code: string }) {
    const fs = createFsFromVolume(vol).promises as unknown as FsPort;
    const error = () => Object.assign(new Error(`${fail.code}: simulated`), { code: fail.code });
    let mkdirs = fail.mkdir ?? 0;
    let opens = fail.open ?? 0;
    return {
      ...fs,
      mkdir: (async (...args: Parameters<FsPort['mkdir']>) => {
        if (mkdirs > 0) {
          mkdirs -= 1;
          throw error();
        }
        return fs.mkdir(...args);
      }) as FsPort['mkdir'],
      open: (async (...args: Parameters<FsPort['open']>) => {
        if (opens > 0 && String(args[0]).startsWith(`${CACHE}/`)) {
          opens -= 1;
          throw error();
        }
        return fs.open(...args);
      }) as FsPort['open'],
    } as FsPort;
  }

  it('a directory that could not be made is made on the next put', async () => {
    const vol = Volume.fromJSON({});
    vol.mkdirSync(STATE, { recursive: true });
    const cache = new ContentCache(failing(vol, { mkdir: 1, code: 'EACCES' }), STATE);
    await expect(cache.put(Buffer.from('a'))).rejects.toMatchObject({ code: 'EACCES' });
    expect(await cache.put(Buffer.from('a'))).toBe(sha('a'));
    expect(vol.readFileSync(`${CACHE}/${sha('a')}`, 'utf8')).toBe('a');
  });

  it('a failure other than a vanished directory is not retried: the put fails, the next one succeeds', async () => {
    const vol = Volume.fromJSON({});
    vol.mkdirSync(STATE, { recursive: true });
    const cache = new ContentCache(failing(vol, { open: 1, code: 'ENOSPC' }), STATE);
    await expect(cache.put(Buffer.from('a'))).rejects.toMatchObject({ code: 'disk_error', errno: 'ENOSPC' });
    expect(vol.readdirSync(CACHE)).toEqual([]);
    expect(await cache.put(Buffer.from('a'))).toBe(sha('a'));
  });

  it('a directory that vanishes again after being made again: the put fails after that one retry', async () => {
    const vol = Volume.fromJSON({});
    vol.mkdirSync(STATE, { recursive: true });
    const cache = new ContentCache(failing(vol, { open: 2, code: 'ENOENT' }), STATE);
    await expect(cache.put(Buffer.from('a'))).rejects.toMatchObject({ code: 'disk_error', errno: 'ENOENT' });
    expect(await cache.put(Buffer.from('a'))).toBe(sha('a'));
  });
});

describe('ContentCache and power cuts', () => {
  it('an entry costs no fsync: a power cut right after a put may lose it (every read checks the bytes anyway)', async () => {
    const vol = Volume.fromJSON({});
    vol.mkdirSync(CACHE, { recursive: true, mode: 0o700 });
    const model = await PowerCutFs.over(createFsFromVolume(vol).promises as unknown as FsPort, STATE);
    const cache = new ContentCache(model.fs, STATE);
    const name = await cache.put(Buffer.from('listen 80;\n'));
    expect(vol.readFileSync(`${CACHE}/${name}`, 'utf8')).toBe('listen 80;\n');
    // Neither the entry's bytes nor the directory's new name were made durable.
    expect(model.afterPowerCut()).toEqual({ cache: 'dir' });
  });
});

describe('ContentCache: what a local user can plant at an entry name (real directory)', () => {
  it.each<[string, (entry: string) => Promise<void>]>([
    // A restore (or a pass's set-aside write) read it and waited for a writer forever: the daemon wedged.
    ['a FIFO', async (entry) => void execFileSync('mkfifo', [entry])],
    // Read through, /dev/zero never ends.
    ['a symlink to /dev/zero', (entry) => symlink('/dev/zero', entry)],
  ])(
    '%s is not an entry: get answers undefined without reading it, and put replaces it',
    async (_name, plant) => {
      const state = await mkdtemp(path.join(os.tmpdir(), 'config-agent-cache-'));
      try {
        const cache = new ContentCache(nodeFs, state);
        const name = sha('listen 80;\n');
        await mkdir(path.join(state, CACHE_DIR), { mode: 0o700 });
        await plant(path.join(state, CACHE_DIR, name));
        expect(await cache.get(name)).toBeUndefined();
        expect(await cache.put(Buffer.from('listen 80;\n'))).toBe(name);
        expect((await cache.get(name))?.toString()).toBe('listen 80;\n');
      } finally {
        await rm(state, { recursive: true, force: true });
      }
    },
  );
});
