// ObservationAhead: paths observed while the listing arrives are judged exactly as observeDisk alone judges them.
import { lstatSync } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import { chmod, lstat, mkdir, mkdtemp, rename, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import { sha256Hex } from '../lib/hash.js';
import { FileFingerprints, identityOf, RACY_MARGIN_MS } from '../store/fingerprints.js';
import type { ObservedIdentity } from '../store/path-aliases.js';
import { ObservationAhead, observeDisk } from './observe.js';

const KNOWN = 'app/known.json';
const UNKNOWN = 'app/unknown.json';
const BYTES = '{"a":1}\n';
/** A digest no file here has: seen in an observation, it proves the file was not read. */
const RECORDED = 'f'.repeat(64);
/** Listed first: their directories are judged while they are observed. */
const FIRST = [UNKNOWN, 'gone/deeper/x.json', 'linked/conf.json'];
/** Listed once those directories are judged: observed without waiting where the lstat is synchronous. */
const THEN = [
  KNOWN,
  'app/missing.json',
  'gone/deeper/y.json',
  `${KNOWN}/under-a-file`,
  'linked/other.json',
  '../x',
  // Directories first seen now: judged on the spot, a real one, a symlink, a file, a missing one.
  'fresh/deep/conf.json',
  'also-linked/conf.json',
  'app/known.json/x/y.json',
  'nowhere/x/y.json',
];
const PATHS = [...FIRST, ...THEN];
const DIRECTORIES = ['', 'app', 'gone/deeper', 'linked'];

let dir: string;
let root: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'observe-ahead-test-'));
  root = path.join(dir, 'root');
  await mkdir(path.join(root, 'app'), { recursive: true });
  await mkdir(path.join(dir, 'elsewhere'));
  await writeFile(path.join(dir, 'elsewhere', 'conf.json'), BYTES);
  await symlink(path.join(dir, 'elsewhere'), path.join(root, 'linked'));
  await symlink(path.join(dir, 'elsewhere'), path.join(root, 'also-linked'));
  await mkdir(path.join(root, 'fresh', 'deep'), { recursive: true });
  await writeFile(path.join(root, 'fresh', 'deep', 'conf.json'), BYTES);
  for (const file of [KNOWN, UNKNOWN]) await writeFile(path.join(root, file), BYTES, { mode: 0o644 });
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Wall-clock ms well past the files' ctimes: their fingerprints are not racy. */
async function settled(): Promise<number> {
  const stats = await lstat(path.join(root, UNKNOWN), { bigint: true });
  return Number(stats.ctimeNs / 1_000_000n) + RACY_MARGIN_MS + 1_000;
}

/** A store holding RECORDED for KNOWN as it is now (UNKNOWN has no fingerprint). */
async function storeWithRecorded(now: number): Promise<FileFingerprints> {
  const store = FileFingerprints.empty(root);
  store.record(KNOWN, identityOf(await lstat(path.join(root, KNOWN), { bigint: true })), RECORDED, now);
  return store;
}

/** Deferred turns, run when the test says (the pager's waits for its pages). */
function turns() {
  const due: (() => void)[] = [];
  return {
    defer: (run: () => void) => due.push(run),
    runAll() {
      while (due.length > 0) due.shift()?.();
    },
  };
}

const PORTS: [string, FsPort][] = [
  ['promise lstat', nodeFs],
  ['synchronous lstat', { ...nodeFs, lstatSync }],
];

describe.each(PORTS)('ObservationAhead, %s', (_name, port) => {
  it('judges every kind of path as observeDisk alone does: fingerprinted, unknown, absent, rejected, symlinked', async () => {
    const now = await settled();
    const instances = PATHS.map((relative_filepath) => ({ relative_filepath }));
    const observeWith = async (ahead: 'ahead' | 'alone') => {
      const store = await storeWithRecorded(now);
      const fingerprints = { store, now: () => now };
      const identities = new Map<string, ObservedIdentity>();
      const deferred = turns();
      const early = new ObservationAhead(port, root, fingerprints, deferred.defer);
      if (ahead === 'ahead') {
        for (const relative of FIRST) early.add(relative);
        deferred.runAll();
        await Promise.all(DIRECTORIES.map((directory) => early.directories.state(directory)));
        for (const relative of THEN) early.add(relative);
        // A path listed twice (two instances) is observed once.
        early.add(KNOWN);
        deferred.runAll();
      }
      const disk = await observeDisk(port, root, instances, {
        fingerprints,
        identities,
        ...(ahead === 'ahead' ? { ahead: early } : {}),
      });
      // Maps: equal whatever order observeDisk's concurrent workers filled them in.
      return { disk, identities, prints: store.size };
    };
    const ahead = await observeWith('ahead');
    expect(ahead).toEqual(await observeWith('alone'));
    const disk = ahead.disk;
    expect(disk.get(KNOWN)).toMatchObject({ kind: 'file', sha256: RECORDED, mode: 0o644 });
    expect(disk.get(UNKNOWN)).toMatchObject({ kind: 'file', sha256: sha256Hex(Buffer.from(BYTES)) });
    expect(disk.get('app/missing.json')).toEqual({ kind: 'absent' });
    expect(disk.get('gone/deeper/x.json')).toEqual({ kind: 'absent' });
    expect(disk.get(`${KNOWN}/under-a-file`)?.kind).toBe('rejected');
    expect(disk.get('gone/deeper/y.json')).toEqual({ kind: 'absent' });
    expect(disk.get('linked/conf.json')?.kind).toBe('rejected');
    expect(disk.get('linked/other.json')?.kind).toBe('rejected');
    expect(disk.get('fresh/deep/conf.json')).toMatchObject({
      kind: 'file',
      sha256: sha256Hex(Buffer.from(BYTES)),
    });
    expect(disk.get('also-linked/conf.json')?.kind).toBe('rejected');
    expect(disk.get('app/known.json/x/y.json')?.kind).toBe('rejected');
    expect(disk.get('nowhere/x/y.json')).toEqual({ kind: 'absent' });
    expect(disk.get('../x')?.kind).toBe('rejected');
    // UNKNOWN and fresh/deep/conf.json read in full and fingerprinted, beside KNOWN.
    expect(ahead.prints).toBe(3);
  });

  it('a verdict stands as of its own lstat: a chmod after it is the next pass’s to see', async () => {
    const now = await settled();
    const store = await storeWithRecorded(now);
    const fingerprints = { store, now: () => now };
    const deferred = turns();
    const early = new ObservationAhead(port, root, fingerprints, deferred.defer);
    for (const relative of [UNKNOWN, KNOWN]) {
      // KNOWN's directory is judged before its turn: observed at once where the lstat is synchronous.
      early.add(relative);
      deferred.runAll();
      await early.directories.state('app');
    }
    // The listing is whole once its verdict is in (stop() gives the same verdicts to observeDisk).
    await early.stop().get(KNOWN);
    await chmod(path.join(root, KNOWN), 0o600);
    const disk = await observeDisk(port, root, [{ relative_filepath: KNOWN }], {
      fingerprints,
      ahead: early,
    });
    expect(disk.get(KNOWN)).toMatchObject({ kind: 'file', sha256: RECORDED, mode: 0o644 });
    // Observed again without it, the changed identity is read in full.
    const again = await observeDisk(port, root, [{ relative_filepath: KNOWN }], { fingerprints });
    expect(again.get(KNOWN)).toMatchObject({
      kind: 'file',
      sha256: sha256Hex(Buffer.from(BYTES)),
      mode: 0o600,
    });
  });

  it('paths whose turn never came, or came after the listing was whole, are observed by observeDisk', async () => {
    const now = await settled();
    const store = await storeWithRecorded(now);
    const fingerprints = { store, now: () => now };
    const deferred = turns();
    const early = new ObservationAhead(port, root, fingerprints, deferred.defer);
    early.add(UNKNOWN);
    // The file moves away before observeDisk: a turn run after it stopped must not have judged it absent early.
    const disk = await observeDisk(port, root, [{ relative_filepath: UNKNOWN }], {
      fingerprints,
      ahead: early,
    });
    await rename(path.join(root, UNKNOWN), path.join(root, 'app', 'moved.json'));
    deferred.runAll();
    expect(disk.get(UNKNOWN)).toMatchObject({ kind: 'file', sha256: sha256Hex(Buffer.from(BYTES)) });
    early.add(KNOWN);
    deferred.runAll();
    const later = await observeDisk(port, root, [{ relative_filepath: UNKNOWN }], { fingerprints });
    expect(later.get(UNKNOWN)).toEqual({ kind: 'absent' });
  });

  it('where the filesystem keeps no change time, a fingerprint observed ahead is not trusted: the bytes are read', async () => {
    const now = await settled();
    const store = await storeWithRecorded(now);
    const noChangeTime: FsPort = { ...port, keepsNoChangeTimeAt: () => true };
    const fingerprints = { store, now: () => now };
    const deferred = turns();
    const early = new ObservationAhead(noChangeTime, root, fingerprints, deferred.defer);
    for (const relative of [UNKNOWN, KNOWN]) {
      early.add(relative);
      deferred.runAll();
      await early.directories.state('app');
    }
    const disk = await observeDisk(noChangeTime, root, [{ relative_filepath: KNOWN }], {
      fingerprints,
      ahead: early,
    });
    expect(disk.get(KNOWN)).toMatchObject({ kind: 'file', sha256: sha256Hex(Buffer.from(BYTES)) });
  });

  it('an absent path observed ahead drops its fingerprint, as observeDisk does', async () => {
    const now = await settled();
    const store = await storeWithRecorded(now);
    await rm(path.join(root, KNOWN));
    const fingerprints = { store, now: () => now };
    const deferred = turns();
    const early = new ObservationAhead(port, root, fingerprints, deferred.defer);
    early.add(KNOWN);
    deferred.runAll();
    const disk = await observeDisk(port, root, [{ relative_filepath: KNOWN }], {
      fingerprints,
      ahead: early,
    });
    expect(disk.get(KNOWN)).toEqual({ kind: 'absent' });
    expect(store.size).toBe(0);
  });
});
