// observeDisk with file fingerprints, on a real temp dir (nanosecond timestamps): when a recorded sha256 stands
// in for reading, and every way a file can change under it (forged mtime, rename, chmod, expiry, symlinks).

import { lstatSync } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import { chmod, lstat, mkdir, mkdtemp, rename, rm, symlink, utimes, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import { sha256Hex } from '../lib/hash.js';
import { silentLogger } from '../lib/logger.js';
import {
  FINGERPRINTS_FILE,
  FileFingerprints,
  FULL_VERIFY_INTERVAL_MS,
  identityOf,
  RACY_MARGIN_MS,
} from '../store/fingerprints.js';
import { validateRelativePath } from '../store/path-guard.js';
import { observeDisk, underRoot } from './observe.js';
import type { DiskObservation } from './plan.js';

const FILE = 'app/conf.json';
const BYTES = '{"a":1}\n';
/** A digest no file here has: seen in an observation, it proves the file was not read. */
const RECORDED = 'f'.repeat(64);

let dir: string;
let root: string;
let stateDir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'observe-test-'));
  root = path.join(dir, 'root');
  stateDir = path.join(dir, 'state');
  await mkdir(path.join(root, 'app'), { recursive: true });
  await mkdir(stateDir);
  await writeFile(path.join(root, FILE), BYTES, { mode: 0o644 });
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Wall-clock ms well past the file's ctime: its fingerprint is not racy. */
async function settled(): Promise<number> {
  const stats = await lstat(path.join(root, FILE), { bigint: true });
  return Number(stats.ctimeNs / 1_000_000n) + RACY_MARGIN_MS + 1_000;
}

async function observe(
  store: FileFingerprints,
  now: number,
  port: FsPort = nodeFs,
): Promise<DiskObservation | undefined> {
  const disk = await observeDisk(port, root, [{ relative_filepath: FILE }], {
    fingerprints: { store, now: () => now },
  });
  return disk.get(FILE);
}

/** A store holding RECORDED for the file as it is now. */
async function storeWithRecorded(now: number): Promise<FileFingerprints> {
  const store = FileFingerprints.empty(root);
  const stats = await lstat(path.join(root, FILE), { bigint: true });
  store.record(FILE, identityOf(stats), RECORDED, now);
  return store;
}

/** The promise lstat (a thread-pool round trip each), and the synchronous one the agent is given in production. */
const PORTS: [string, FsPort][] = [
  ['promise lstat', nodeFs],
  ['synchronous lstat', { ...nodeFs, lstatSync }],
];

describe.each(PORTS)('observeDisk with fingerprints, %s', (_name, port) => {
  it('reads a file once, then answers from its fingerprint while its identity holds', async () => {
    const now = await settled();
    const store = FileFingerprints.empty(root);
    const first = await observe(store, now, port);
    expect(first).toEqual({
      kind: 'file',
      sha256: sha256Hex(Buffer.from(BYTES)),
      mode: 0o644,
      gid: expect.any(Number),
    });
    expect(store.size).toBe(1);
    expect(await observe(store, now + 1000, port)).toEqual(first);

    // The recorded digest is what the observation gives: the file was not read.
    expect(await observe(await storeWithRecorded(now), now, port)).toMatchObject({
      kind: 'file',
      sha256: RECORDED,
    });
  });

  it('a parent directory moved away and replaced by a symlink to it: rejected, not answered from the fingerprint', async () => {
    const now = await settled();
    const store = FileFingerprints.empty(root);
    expect(await observe(store, now, port)).toMatchObject({ kind: 'file' });
    expect(store.size).toBe(1);
    // The file keeps its inode and times; only the way to it now crosses a symlink.
    await rename(path.join(root, 'app'), path.join(dir, 'app-elsewhere'));
    await symlink(path.join(dir, 'app-elsewhere'), path.join(root, 'app'));

    expect(await observe(store, now + 1000, port)).toMatchObject({ kind: 'rejected' });
  });

  it('a grandparent replaced by a symlink is caught too (each directory on the way is checked)', async () => {
    await mkdir(path.join(root, 'a', 'b'), { recursive: true });
    const deep = 'a/b/conf.json';
    await writeFile(path.join(root, deep), BYTES);
    const stats = await lstat(path.join(root, deep), { bigint: true });
    const now = Number(stats.ctimeNs / 1_000_000n) + RACY_MARGIN_MS + 1_000;
    const store = FileFingerprints.empty(root);
    const observeDeep = async () =>
      (
        await observeDisk(port, root, [{ relative_filepath: deep }], {
          fingerprints: { store, now: () => now },
        })
      ).get(deep);
    expect(await observeDeep()).toMatchObject({ kind: 'file' });
    await rename(path.join(root, 'a'), path.join(dir, 'a-elsewhere'));
    await symlink(path.join(dir, 'a-elsewhere'), path.join(root, 'a'));

    expect(await observeDeep()).toMatchObject({ kind: 'rejected' });
  });

  it('a fingerprint recorded for a hostile path (a tampered store) never stands in for judging the path', async () => {
    const outside = path.join(dir, 'outside.json');
    await writeFile(outside, BYTES);
    const stats = await lstat(outside, { bigint: true });
    const now = Number(stats.ctimeNs / 1_000_000n) + RACY_MARGIN_MS + 1_000;
    const store = FileFingerprints.empty(root);
    store.record('../outside.json', identityOf(stats), RECORDED, now);

    const disk = await observeDisk(port, root, [{ relative_filepath: '../outside.json' }], {
      fingerprints: { store, now: () => now },
    });

    expect(disk.get('../outside.json')?.kind).toBe('rejected');
  });

  it('a file whose identity changes while it is read is observed as read but not fingerprinted', async () => {
    const now = await settled();
    const store = FileFingerprints.empty(root);
    const target = path.join(root, FILE);
    // Someone touches the file while the agent reads it: same bytes, new ctime.
    const touching = {
      ...port,
      open: (async (file: string, ...rest: never[]) => {
        const handle = await nodeFs.open(file, ...rest);
        if (String(file) === target) await utimes(target, new Date(), new Date(Date.UTC(2001, 0, 1)));
        return handle;
      }) as typeof nodeFs.open,
    };

    const disk = await observeDisk(touching, root, [{ relative_filepath: FILE }], {
      fingerprints: { store, now: () => now },
    });

    expect(disk.get(FILE)).toMatchObject({ kind: 'file', sha256: sha256Hex(Buffer.from(BYTES)) });
    expect(store.size).toBe(0);
  });

  it('a file that appears after its lstat found it absent is observed absent (as of that lstat) and not fingerprinted', async () => {
    const now = await settled();
    const store = FileFingerprints.empty(root);
    const target = path.join(root, FILE);
    let first = true;
    const gone = (file: string) => {
      if (file !== target || !first) return false;
      first = false;
      return true;
    };
    const appearing: FsPort = {
      ...port,
      lstat: (async (file: string, ...rest: never[]) => {
        if (gone(String(file))) {
          throw Object.assign(new Error(`ENOENT: no such file, lstat '${target}'`), { code: 'ENOENT' });
        }
        return nodeFs.lstat(file, ...rest);
      }) as typeof nodeFs.lstat,
      ...(port.lstatSync === undefined
        ? {}
        : { lstatSync: (file, options) => (gone(file) ? undefined : lstatSync(file, options)) }),
    };

    const disk = await observeDisk(appearing, root, [{ relative_filepath: FILE }], {
      fingerprints: { store, now: () => now },
    });

    // What observePath would answer had it looked a moment earlier; the writer checks the path again itself.
    expect(disk.get(FILE)).toEqual({ kind: 'absent' });
    expect(store.size).toBe(0);
  });

  it('reads again after an edit of the same size whose mtime was forged back (utimes sets ctime)', async () => {
    const now = await settled();
    const store = await storeWithRecorded(now);
    const before = await lstat(path.join(root, FILE));
    await writeFile(path.join(root, FILE), '{"a":2}\n');
    await utimes(path.join(root, FILE), before.atime, before.mtime);
    const seen = await observe(store, now + 10_000, port);
    expect(seen).toMatchObject({ kind: 'file', sha256: sha256Hex(Buffer.from('{"a":2}\n')) });
  });

  it('reads again when another file was renamed into place, and sees a chmod at once', async () => {
    const now = await settled();
    const store = await storeWithRecorded(now);
    await writeFile(path.join(root, 'app/other'), BYTES);
    await rename(path.join(root, 'app/other'), path.join(root, FILE));
    expect(await observe(store, now + 10_000, port)).toMatchObject({ sha256: sha256Hex(Buffer.from(BYTES)) });

    const again = await storeWithRecorded(now + 10_000);
    await chmod(path.join(root, FILE), 0o600);
    expect(await observe(again, now + 10_000, port)).toMatchObject({
      mode: 0o600,
      sha256: sha256Hex(Buffer.from(BYTES)),
    });
  });

  it('never records a file changed within the racy margin, and re-reads once the full-verify interval is over', async () => {
    const stats = await lstat(path.join(root, FILE), { bigint: true });
    const ctimeMs = Number(stats.ctimeNs / 1_000_000n);
    const racy = FileFingerprints.empty(root);
    racy.record(FILE, identityOf(stats), RECORDED, ctimeMs + RACY_MARGIN_MS - 1);
    expect(racy.size).toBe(0);
    expect(await observe(racy, ctimeMs + 1, port)).toMatchObject({ sha256: sha256Hex(Buffer.from(BYTES)) });
    expect(racy.size).toBe(0);

    const now = await settled();
    const store = await storeWithRecorded(now);
    expect(await observe(store, now + FULL_VERIFY_INTERVAL_MS - 1, port)).toMatchObject({ sha256: RECORDED });
    expect(await observe(store, now + FULL_VERIFY_INTERVAL_MS, port)).toMatchObject({
      sha256: sha256Hex(Buffer.from(BYTES)),
    });
    // A clock set back before the record is not trusted either.
    const back = await storeWithRecorded(now);
    expect(await observe(back, now - 1, port)).toMatchObject({ sha256: sha256Hex(Buffer.from(BYTES)) });
  });

  it('judges symlinks, missing files and bad paths exactly as without fingerprints', async () => {
    const now = await settled();
    const store = await storeWithRecorded(now);
    await rename(path.join(root, 'app'), path.join(root, 'real'));
    await symlink(path.join(root, 'real'), path.join(root, 'app'));
    const instances = [
      { relative_filepath: FILE },
      { relative_filepath: 'gone/x' },
      { relative_filepath: '../x' },
    ];
    const withPrints = await observeDisk(port, root, instances, {
      fingerprints: { store, now: () => now },
    });
    const without = await observeDisk(port, root, instances);
    expect([...withPrints]).toEqual([...without]);
    expect(withPrints.get(FILE)?.kind).toBe('rejected');
    expect(withPrints.get('gone/x')).toEqual({ kind: 'absent' });
    expect(withPrints.get('../x')?.kind).toBe('rejected');
  });

  it('judges absent paths exactly as without fingerprints: missing file, missing directories, a file in the way, too long, no root', async () => {
    const now = await settled();
    // Past PATH_MAX once under the root: rejected, not absent, though nothing of it exists.
    const tooLong = `gone/${'d'.repeat(250)}/${'e'.repeat(250)}/${Array.from({ length: 16 }, () => 'f'.repeat(250)).join('/')}`;
    const instances = [
      { relative_filepath: 'app/missing.json' },
      { relative_filepath: 'gone/deeper/x.json' },
      { relative_filepath: `${FILE}/under-a-file` },
      { relative_filepath: tooLong },
    ];
    const judge = async () => {
      const store = FileFingerprints.empty(root);
      const withPrints = await observeDisk(port, root, instances, {
        fingerprints: { store, now: () => now },
      });
      const without = await observeDisk(port, root, instances);
      expect([...withPrints]).toEqual([...without]);
      return withPrints;
    };
    const seen = await judge();
    expect(seen.get('app/missing.json')).toEqual({ kind: 'absent' });
    expect(seen.get('gone/deeper/x.json')).toEqual({ kind: 'absent' });
    expect(seen.get(`${FILE}/under-a-file`)?.kind).toBe('rejected');
    expect(seen.get(tooLong)?.kind).toBe('rejected');
    await rm(root, { recursive: true });
    const rootless = await judge();
    expect(rootless.get('app/missing.json')).toEqual({ kind: 'absent' });
    expect(rootless.get(tooLong)?.kind).toBe('rejected');
  });
});

describe('FileFingerprints persistence', () => {
  it('saves only what changed, loads it back (a __proto__ path included), and ignores another root or a corrupt file', async () => {
    const now = await settled();
    const store = FileFingerprints.empty(root);
    await observeDisk(nodeFs, root, [{ relative_filepath: FILE }], {
      fingerprints: { store, now: () => now },
    });
    expect(await store.save(nodeFs, stateDir)).toBe(true);
    const written = await lstat(path.join(stateDir, FINGERPRINTS_FILE), { bigint: true });

    const loaded = await FileFingerprints.load(nodeFs, stateDir, root, silentLogger(), {
      clock: { now: () => 0 },
    });
    expect(await observe(loaded, now)).toMatchObject({ sha256: sha256Hex(Buffer.from(BYTES)) });
    // Nothing new: nothing written (same inode, same mtime).
    expect(await loaded.save(nodeFs, stateDir)).toBe(false);
    const after = await lstat(path.join(stateDir, FINGERPRINTS_FILE), { bigint: true });
    expect([after.ino, after.mtimeNs]).toEqual([written.ino, written.mtimeNs]);

    expect(
      (
        await FileFingerprints.load(nodeFs, stateDir, path.join(dir, 'elsewhere'), silentLogger(), {
          clock: { now: () => 0 },
        })
      ).size,
    ).toBe(0);
    await writeFile(path.join(stateDir, FINGERPRINTS_FILE), '{"version":1,"rootDir":');
    expect(
      (await FileFingerprints.load(nodeFs, stateDir, root, silentLogger(), { clock: { now: () => 0 } })).size,
    ).toBe(0);

    const proto = FileFingerprints.empty(root);
    const stats = await lstat(path.join(root, FILE), { bigint: true });
    proto.record('__proto__', identityOf(stats), RECORDED, now);
    await proto.save(nodeFs, stateDir);
    const back = await FileFingerprints.load(nodeFs, stateDir, root, silentLogger(), {
      clock: { now: () => 0 },
    });
    expect(back.lookup('__proto__', identityOf(stats), now)).toBe(RECORDED);
    back.retain(new Set(['other']));
    expect(back.size).toBe(0);
  });
});

describe('underRoot: joining a canonical path under a resolved root', () => {
  it('is path.join for every path validateRelativePath accepts, under / and under a deeper root', () => {
    const segment = fc
      .string({ unit: fc.constantFrom('a', 'b', '.', '-', ' ', 'é', '~'), minLength: 1, maxLength: 5 })
      .filter((text) => text !== '.' && text !== '..');
    const relative = fc.array(segment, { minLength: 1, maxLength: 5 }).map((segments) => segments.join('/'));
    const root = fc.constantFrom('/', '/srv', '/srv/config root', path.resolve('relative/root/'));
    fc.assert(
      fc.property(root, relative, (at, rel) => {
        validateRelativePath(rel);
        expect(underRoot(at, rel)).toBe(path.join(at, rel));
      }),
      { numRuns: 2_000 },
    );
  });
});
