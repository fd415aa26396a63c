// FileFingerprints on its own: what a lookup trusts, what a record keeps, the bytes save writes, what load accepts.
import * as nodeFs from 'node:fs/promises';
import { lstat, mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ITEM_RULES_VERSION } from '../api/list-page.js';
import { silentLogger } from '../lib/logger.js';
import {
  FINGERPRINTS_FILE,
  FileFingerprints,
  type FileIdentity,
  FULL_VERIFY_INTERVAL_MS,
  identityOf,
  RACY_MARGIN_MS,
  sameIdentity,
} from './fingerprints.js';

const ROOT = '/srv/config';
const SHA = 'a'.repeat(64);
const OTHER_SHA = 'b'.repeat(64);
/** A ctime of 1,700,000,000,000 ms and a few ns: the ns below the ms are cut, never rounded up. */
const CTIME_MS = 1_700_000_000_000;
const ID: FileIdentity = {
  dev: 2049n,
  ino: 131_077n,
  size: 8n,
  mtimeNs: 1_699_999_999_123_456_789n,
  ctimeNs: BigInt(CTIME_MS) * 1_000_000n + 999_999n,
};
/** The first wall-clock ms at which a file with identity ID is trusted. */
const SETTLED = CTIME_MS + RACY_MARGIN_MS;

let dir: string;
let stateDir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'fingerprints-test-'));
  stateDir = path.join(dir, 'state');
  await mkdir(stateDir);
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const load = (rootDir = ROOT) =>
  FileFingerprints.load(nodeFs, stateDir, rootDir, silentLogger(), { clock: { now: () => 0 } });
const fileText = () => readFile(path.join(stateDir, FINGERPRINTS_FILE), 'utf8');
const writeFingerprints = (value: unknown) =>
  writeFile(path.join(stateDir, FINGERPRINTS_FILE), JSON.stringify(value));

/** The entry `record(…, ID, SHA, SETTLED)` writes. */
const ENTRY = {
  dev: '2049',
  ino: '131077',
  size: '8',
  mtimeNs: '1699999999123456789',
  ctimeNs: '1700000000000999999',
  sha256: SHA,
  verifiedAt: SETTLED,
};
/** The same entry as version 2 writes it. */
const ENTRY_ARRAY = [
  ENTRY.dev,
  ENTRY.ino,
  ENTRY.size,
  ENTRY.mtimeNs,
  ENTRY.ctimeNs,
  ENTRY.sha256,
  ENTRY.verifiedAt,
];

describe('identityOf and sameIdentity', () => {
  it("takes dev, ino, size, mtime and ctime (ns) from a file's bigint stats", async () => {
    const file = path.join(dir, 'f');
    await writeFile(file, 'bytes');
    const stats = await lstat(file, { bigint: true });
    expect(identityOf(stats)).toEqual({
      dev: stats.dev,
      ino: stats.ino,
      size: 5n,
      mtimeNs: stats.mtimeNs,
      ctimeNs: stats.ctimeNs,
    });
  });

  it.each(['dev', 'ino', 'size', 'mtimeNs', 'ctimeNs'] as const)('differs when only %s differs', (field) => {
    expect(sameIdentity(ID, { ...ID })).toBe(true);
    expect(sameIdentity(ID, { ...ID, [field]: ID[field] + 1n })).toBe(false);
  });
});

describe('lookup', () => {
  it('answers the recorded sha256 for the same path and identity only', () => {
    const store = FileFingerprints.empty(ROOT);
    store.record('a.conf', ID, SHA, SETTLED);
    expect(store.lookup('a.conf', { ...ID }, SETTLED)).toBe(SHA);
    expect(store.lookup('b.conf', ID, SETTLED)).toBeUndefined();
    for (const field of ['dev', 'ino', 'size', 'mtimeNs', 'ctimeNs'] as const) {
      expect(store.lookup('a.conf', { ...ID, [field]: ID[field] + 1n }, SETTLED)).toBeUndefined();
    }
  });

  it('trusts a fingerprint from the moment it was read until just before a day later (FULL_VERIFY_INTERVAL_MS)', () => {
    const day = 24 * 60 * 60 * 1000;
    const store = FileFingerprints.empty(ROOT);
    store.record('a.conf', ID, SHA, SETTLED);
    expect(store.lookup('a.conf', ID, SETTLED)).toBe(SHA);
    expect(store.lookup('a.conf', ID, SETTLED + day - 1)).toBe(SHA);
    expect(store.lookup('a.conf', ID, SETTLED + day)).toBeUndefined();
    // The clock set back before the read: read again.
    expect(store.lookup('a.conf', ID, SETTLED - 1)).toBeUndefined();
  });
});

describe('record', () => {
  it('keeps a fingerprint read RACY_MARGIN_MS after the ctime (ns below the ms cut), not one read earlier', () => {
    const store = FileFingerprints.empty(ROOT);
    store.record('a.conf', ID, SHA, SETTLED);
    expect(store.size).toBe(1);
    const racy = FileFingerprints.empty(ROOT);
    racy.record('a.conf', ID, SHA, SETTLED - 1);
    expect(racy.size).toBe(0);
    expect(racy.lookup('a.conf', ID, SETTLED)).toBeUndefined();
  });

  it('a racy record forgets what was recorded for the path before; a later one replaces it', async () => {
    const store = FileFingerprints.empty(ROOT);
    store.record('a.conf', ID, SHA, SETTLED);
    store.record('b.conf', ID, SHA, SETTLED);
    store.record('a.conf', ID, OTHER_SHA, SETTLED - 1);
    expect(store.lookup('a.conf', ID, SETTLED)).toBeUndefined();
    expect(store.size).toBe(1);
    store.record('b.conf', ID, OTHER_SHA, SETTLED + 5);
    expect(store.lookup('b.conf', ID, SETTLED + 5)).toBe(OTHER_SHA);
  });
});

describe('a clock set back behind the ctimes of the files', () => {
  const HOUR = 60 * 60 * 1000;
  // The clock is an hour behind ID's ctime (set back since the file was written): the file is still fingerprinted.
  const BEHIND = CTIME_MS - HOUR;

  it('keeps the fingerprint of a file whose ctime is ahead of the clock, and trusts it while the clock stays clear of that ctime', () => {
    const store = FileFingerprints.empty(ROOT);
    store.record('a.conf', ID, SHA, BEHIND);
    expect(store.lookup('a.conf', ID, BEHIND)).toBe(SHA);
    expect(store.lookup('a.conf', ID, CTIME_MS - RACY_MARGIN_MS)).toBe(SHA);
    // Near the ctime a change could be stamped with it: read again, and recorded normally once the clock is past.
    expect(store.lookup('a.conf', ID, CTIME_MS - RACY_MARGIN_MS + 1)).toBeUndefined();
    expect(store.lookup('a.conf', ID, SETTLED + 10)).toBeUndefined();
    store.record('a.conf', ID, SHA, SETTLED);
    expect(store.lookup('a.conf', ID, SETTLED + 10)).toBe(SHA);
  });

  it('never keeps one whose ctime is within the margin ahead of the clock', () => {
    const store = FileFingerprints.empty(ROOT);
    store.record('a.conf', ID, SHA, CTIME_MS - RACY_MARGIN_MS + 1);
    expect(store.size).toBe(0);
    store.record('a.conf', ID, SHA, CTIME_MS - RACY_MARGIN_MS);
    expect(store.size).toBe(1);
  });

  it('survives a save and a load', async () => {
    const store = FileFingerprints.empty(ROOT);
    store.record('a.conf', ID, SHA, BEHIND);
    await store.save(nodeFs, stateDir);
    const loaded = await load();
    expect(loaded.lookup('a.conf', ID, BEHIND + 1)).toBe(SHA);
    expect(loaded.lookup('a.conf', ID, CTIME_MS)).toBeUndefined();
  });
});

describe('save', () => {
  it('writes nothing for a new empty store, nor for one loaded and left as it was', async () => {
    expect(await FileFingerprints.empty(ROOT).save(nodeFs, stateDir)).toBe(false);
    await expect(stat(path.join(stateDir, FINGERPRINTS_FILE))).rejects.toMatchObject({ code: 'ENOENT' });
    const store = FileFingerprints.empty(ROOT);
    store.record('a.conf', ID, SHA, SETTLED);
    expect(await store.save(nodeFs, stateDir)).toBe(true);
    expect(await (await load()).save(nodeFs, stateDir)).toBe(false);
  });

  it('writes version 2, root and every entry sorted by path, one array a line; then nothing until a change', async () => {
    const store = FileFingerprints.empty(ROOT);
    for (const name of ['c.conf', 'a.conf', 'd/e.conf', 'b.conf']) store.record(name, ID, SHA, SETTLED);
    expect(await store.save(nodeFs, stateDir)).toBe(true);
    const line = JSON.stringify(ENTRY_ARRAY);
    expect(await fileText()).toBe(
      `{"version":2,"rootDir":${JSON.stringify(ROOT)},"files":{\n` +
        `"a.conf":${line},\n"b.conf":${line},\n"c.conf":${line},\n"d/e.conf":${line}\n}}\n`,
    );
    expect(await store.save(nodeFs, stateDir)).toBe(false);
  });

  it('writes a path or an id named __proto__ like any other, and reads it back', async () => {
    const store = FileFingerprints.empty(ROOT);
    store.record('__proto__', ID, SHA, SETTLED);
    store.recordItem('__proto__', `${'k'.repeat(43)}=`, { sha256: SHA, size: 3 });
    await store.save(nodeFs, stateDir);
    expect(Object.keys(JSON.parse(await fileText()).files)).toEqual(['__proto__']);
    const loaded = await load();
    expect(loaded.lookup('__proto__', ID, SETTLED)).toBe(SHA);
    expect(loaded.lookupItem('__proto__', `${'k'.repeat(43)}=`)).toEqual({ sha256: SHA, size: 3 });
  });

  it('forgetting or dropping a path is a change; forgetting an unknown one and keeping everything are not', async () => {
    const store = FileFingerprints.empty(ROOT);
    store.record('a.conf', ID, SHA, SETTLED);
    store.record('b.conf', ID, SHA, SETTLED);
    await store.save(nodeFs, stateDir);

    store.forget('unknown.conf');
    store.retain(new Set(['a.conf', 'b.conf', 'c.conf']));
    expect(await store.save(nodeFs, stateDir)).toBe(false);

    store.retain(new Map([['b.conf', 1]]));
    expect(store.size).toBe(1);
    expect(await store.save(nodeFs, stateDir)).toBe(true);
    expect(Object.keys(JSON.parse(await fileText()).files)).toEqual(['b.conf']);

    store.forget('b.conf');
    expect(await store.save(nodeFs, stateDir)).toBe(true);
    expect(JSON.parse(await fileText()).files).toEqual({});
  });

  it('a racy record of a path never fingerprinted changes nothing', async () => {
    const store = FileFingerprints.empty(ROOT);
    store.record('a.conf', ID, SHA, SETTLED - 1);
    expect(await store.save(nodeFs, stateDir)).toBe(false);
  });
});

describe('load', () => {
  it('reads back what save wrote: each identity field and the read time', async () => {
    const store = FileFingerprints.empty(ROOT);
    store.record('a.conf', ID, SHA, SETTLED);
    await store.save(nodeFs, stateDir);
    const loaded = await load();
    expect(loaded.size).toBe(1);
    expect(loaded.lookup('a.conf', ID, SETTLED)).toBe(SHA);
    for (const field of ['dev', 'ino', 'size', 'mtimeNs', 'ctimeNs'] as const) {
      expect(loaded.lookup('a.conf', { ...ID, [field]: ID[field] + 1n }, SETTLED)).toBeUndefined();
    }
    expect(loaded.lookup('a.conf', ID, SETTLED - 1)).toBeUndefined();
    expect(loaded.lookup('a.conf', ID, SETTLED + FULL_VERIFY_INTERVAL_MS)).toBeUndefined();
  });

  it('loaded beside a state, keeps its own sha256s: the state’s where equal, its own where they differ', async () => {
    const key = `${'k'.repeat(43)}=`;
    await writeFingerprints({
      version: 2,
      rootDir: ROOT,
      files: { 'a.conf': ENTRY_ARRAY, 'b.conf': [...ENTRY_ARRAY.slice(0, 5), OTHER_SHA, SETTLED] },
      items: { rules: ITEM_RULES_VERSION, byId: { 'id-a': [key, SHA, 8], 'id-b': [key, OTHER_SHA, 8] } },
    });
    const state = {
      files: new Map([
        ['a.conf', { sha256: SHA }],
        ['b.conf', { sha256: SHA }],
      ]),
      instances: new Map([
        ['id-a', { relativePath: 'a.conf' }],
        ['id-b', { relativePath: 'b.conf' }],
      ]),
    };
    const loaded = await FileFingerprints.load(nodeFs, stateDir, ROOT, silentLogger(), {
      clock: { now: () => 0 },
      sharingWith: state,
    });
    expect(loaded.lookup('a.conf', ID, SETTLED)).toBe(SHA);
    expect(loaded.lookup('b.conf', ID, SETTLED)).toBe(OTHER_SHA);
    expect(loaded.lookupItem('id-a', key)).toEqual({ sha256: SHA, size: 8 });
    expect(loaded.lookupItem('id-b', key)).toEqual({ sha256: OTHER_SHA, size: 8 });
  });

  it('is empty when the file is missing, unreadable (a directory), of another root or version, or not a header', async () => {
    const valid = { version: 1, rootDir: ROOT, files: { 'a.conf': ENTRY } };
    await writeFingerprints(valid);
    expect((await load()).size).toBe(1);
    await writeFingerprints({ version: 2, rootDir: ROOT, files: { 'a.conf': ENTRY_ARRAY } });
    expect((await load()).size).toBe(1);

    expect((await load('/srv/other')).size).toBe(0);
    for (const header of [
      // Each version's entries only: objects under 2, arrays under 1; an unknown version is nothing.
      { ...valid, version: 2 },
      { ...valid, files: { 'a.conf': ENTRY_ARRAY } },
      { version: 3, rootDir: ROOT, files: { 'a.conf': ENTRY_ARRAY } },
      { version: '2', rootDir: ROOT, files: { 'a.conf': ENTRY_ARRAY } },
      { version: 2, rootDir: 7, files: { 'a.conf': ENTRY_ARRAY } },
      { version: 2, files: { 'a.conf': ENTRY_ARRAY } },
      { version: 2, rootDir: ROOT, files: [ENTRY_ARRAY] },
      { version: 2, rootDir: ROOT },
      [2, ROOT, { 'a.conf': ENTRY_ARRAY }],
      null,
      { version: 1, files: valid.files },
      { ...valid, rootDir: 7 },
      // An array of entries is not a map of paths (its indices would be read as paths).
      { ...valid, files: [ENTRY] },
      { ...valid, files: null },
      { version: 1, rootDir: ROOT },
    ]) {
      await writeFingerprints(header);
      expect((await load()).size, JSON.stringify(header)).toBe(0);
    }
    await writeFile(path.join(stateDir, FINGERPRINTS_FILE), '{"version":1,');
    expect((await load()).size).toBe(0);

    await rm(path.join(stateDir, FINGERPRINTS_FILE));
    expect((await load()).size).toBe(0);
    await mkdir(path.join(stateDir, FINGERPRINTS_FILE));
    const unreadable = await load();
    expect(unreadable.size).toBe(0);
    // Still usable: it starts over (and cannot save over a directory, which is the writer's business).
    expect(unreadable.lookup('a.conf', ID, SETTLED)).toBeUndefined();
  });

  it('drops each malformed entry and keeps the others', async () => {
    const bad: Record<string, unknown> = {
      'dev-suffix': { ...ENTRY, dev: '2049x' },
      'dev-prefix': { ...ENTRY, dev: 'x2049' },
      'dev-empty': { ...ENTRY, dev: '' },
      'dev-negative': { ...ENTRY, dev: '-2049' },
      'ino-suffix': { ...ENTRY, ino: '131077x' },
      'ino-prefix': { ...ENTRY, ino: 'x131077' },
      'ino-number': { ...ENTRY, ino: 131077 },
      'size-suffix': { ...ENTRY, size: '8x' },
      'size-prefix': { ...ENTRY, size: 'x8' },
      'size-empty': { ...ENTRY, size: '' },
      'mtime-suffix': { ...ENTRY, mtimeNs: '1699x' },
      'mtime-prefix': { ...ENTRY, mtimeNs: 'x1699' },
      'mtime-double-minus': { ...ENTRY, mtimeNs: '--1699' },
      'ctime-suffix': { ...ENTRY, ctimeNs: '1700x' },
      'ctime-prefix': { ...ENTRY, ctimeNs: 'x1700' },
      'ctime-double-minus': { ...ENTRY, ctimeNs: '--1700' },
      'sha-short': { ...ENTRY, sha256: SHA.slice(1) },
      'sha-upper': { ...ENTRY, sha256: SHA.toUpperCase() },
      'sha-prefix': { ...ENTRY, sha256: `x${SHA}` },
      'sha-suffix': { ...ENTRY, sha256: `${SHA}x` },
      'verified-string': { ...ENTRY, verifiedAt: String(SETTLED) },
      'not-an-object': 'a'.repeat(64),
    };
    const good = {
      'a.conf': ENTRY,
      'negative-times': { ...ENTRY, mtimeNs: '-1699', ctimeNs: '-1700' },
    };
    await writeFingerprints({ version: 1, rootDir: ROOT, files: { ...bad, ...good } });
    const loaded = await load();
    expect(loaded.size).toBe(2);
    expect(loaded.lookup('a.conf', ID, SETTLED)).toBe(SHA);
    expect(loaded.lookup('negative-times', { ...ID, mtimeNs: -1699n, ctimeNs: -1700n }, SETTLED)).toBe(SHA);

    // The same entries as version 2's arrays.
    const asArray = (value: unknown) =>
      typeof value === 'object' && value !== null ? Object.values(value) : value;
    const toArrays = (files: Record<string, unknown>) =>
      Object.fromEntries(Object.entries(files).map(([name, value]) => [name, asArray(value)]));
    await writeFingerprints({
      version: 2,
      rootDir: ROOT,
      files: {
        ...toArrays(bad),
        'too-short': ENTRY_ARRAY.slice(0, 6),
        'too-long': [...ENTRY_ARRAY, 1],
        'an-object': ENTRY,
        ...toArrays(good),
      },
    });
    const loaded2 = await load();
    expect(loaded2.size).toBe(2);
    expect(loaded2.lookup('a.conf', ID, SETTLED)).toBe(SHA);
    expect(loaded2.lookup('negative-times', { ...ID, mtimeNs: -1699n, ctimeNs: -1700n }, SETTLED)).toBe(SHA);
    // Loading version 2 drops them from memory only: nothing changed, nothing is written.
    expect(await loaded2.save(nodeFs, stateDir)).toBe(false);
  });

  it('migrates version 1: its entries and items are trusted as before, and the next save writes version 2', async () => {
    const KEY = `${'k'.repeat(43)}=`;
    const items = { rules: ITEM_RULES_VERSION, byId: { cfg_1: [KEY, OTHER_SHA, 12] } };
    const v1 = { version: 1, rootDir: ROOT, files: { 'b.conf': ENTRY, 'a.conf': ENTRY }, items };
    await writeFile(path.join(stateDir, FINGERPRINTS_FILE), `${JSON.stringify(v1, null, 2)}\n`);
    const loaded = await load();
    expect(loaded.lookup('a.conf', ID, SETTLED)).toBe(SHA);
    expect(loaded.lookup('b.conf', ID, SETTLED)).toBe(SHA);
    expect(loaded.lookupItem('cfg_1', KEY)).toEqual({ sha256: OTHER_SHA, size: 12 });
    expect(await loaded.save(nodeFs, stateDir)).toBe(true);
    const line = JSON.stringify(ENTRY_ARRAY);
    expect(await fileText()).toBe(
      `{"version":2,"rootDir":${JSON.stringify(ROOT)},"files":{\n"a.conf":${line},\n"b.conf":${line}\n},` +
        `"items":{"rules":${ITEM_RULES_VERSION},"byId":{\n"cfg_1":${JSON.stringify([KEY, OTHER_SHA, 12])}\n}}}\n`,
    );
    const again = await load();
    expect(again.lookup('a.conf', ID, SETTLED)).toBe(SHA);
    expect(again.lookupItem('cfg_1', KEY)).toEqual({ sha256: OTHER_SHA, size: 12 });
    expect(await again.save(nodeFs, stateDir)).toBe(false);
  });

  it('a version-1 file of another root is not migrated: empty, and nothing written', async () => {
    await writeFingerprints({ version: 1, rootDir: '/srv/other', files: { 'a.conf': ENTRY } });
    const loaded = await load();
    expect(loaded.size).toBe(0);
    expect(await loaded.save(nodeFs, stateDir)).toBe(false);
  });
});

describe('items known by their exact text', () => {
  const KEY = `${'k'.repeat(43)}=`;
  const OTHER_KEY = `${'j'.repeat(43)}=`;

  it('answers the recorded file for the same id and key only, across a save and a load', async () => {
    const store = FileFingerprints.empty(ROOT);
    store.recordItem('cfg_1', KEY, { sha256: SHA, size: 12 });
    expect(store.lookupItem('cfg_1', KEY)).toEqual({ sha256: SHA, size: 12 });
    expect(store.lookupItem('cfg_1', OTHER_KEY)).toBeUndefined();
    expect(store.lookupItem('cfg_2', KEY)).toBeUndefined();
    expect(await store.save(nodeFs, stateDir)).toBe(true);
    const loaded = await load();
    expect(loaded.lookupItem('cfg_1', KEY)).toEqual({ sha256: SHA, size: 12 });
    expect(loaded.lookupItem('cfg_1', OTHER_KEY)).toBeUndefined();
    // The same record again is no change; another key for the id replaces it.
    loaded.recordItem('cfg_1', KEY, { sha256: SHA, size: 12 });
    expect(await loaded.save(nodeFs, stateDir)).toBe(false);
    loaded.recordItem('cfg_1', OTHER_KEY, { sha256: OTHER_SHA, size: 3 });
    expect(loaded.lookupItem('cfg_1', KEY)).toBeUndefined();
    expect(await loaded.save(nodeFs, stateDir)).toBe(true);
    expect((await load()).lookupItem('cfg_1', OTHER_KEY)).toEqual({ sha256: OTHER_SHA, size: 3 });
  });

  it('forgets the items of instances no longer recorded', async () => {
    const store = FileFingerprints.empty(ROOT);
    store.recordItem('cfg_1', KEY, { sha256: SHA, size: 1 });
    store.recordItem('cfg_2', KEY, { sha256: SHA, size: 1 });
    await store.save(nodeFs, stateDir);
    store.retainItems(new Set(['cfg_1', 'cfg_2', 'cfg_3']));
    expect(await store.save(nodeFs, stateDir)).toBe(false);
    store.retainItems(new Map([['cfg_2', {}]]));
    expect(await store.save(nodeFs, stateDir)).toBe(true);
    const loaded = await load();
    expect(loaded.lookupItem('cfg_1', KEY)).toBeUndefined();
    expect(loaded.lookupItem('cfg_2', KEY)).toEqual({ sha256: SHA, size: 1 });
  });

  it('knows none recorded under other item rules, and drops each malformed one', async () => {
    const good = [KEY, SHA, 5];
    const header = { version: 1, rootDir: ROOT, files: {} };
    await writeFingerprints({ ...header, items: { rules: ITEM_RULES_VERSION + 1, byId: { cfg_1: good } } });
    expect((await load()).lookupItem('cfg_1', KEY)).toBeUndefined();
    await writeFingerprints({ ...header, items: { byId: { cfg_1: good } } });
    expect((await load()).lookupItem('cfg_1', KEY)).toBeUndefined();
    const byId = {
      cfg_1: good,
      short: [KEY, SHA],
      badKey: ['not a key', SHA, 5],
      badSha: [KEY, 'A'.repeat(64), 5],
      badSize: [KEY, SHA, -1],
      fraction: [KEY, SHA, 1.5],
      object: { key: KEY, sha256: SHA, size: 5 },
    };
    await writeFingerprints({ ...header, items: { rules: ITEM_RULES_VERSION, byId } });
    const loaded = await load();
    expect(loaded.lookupItem('cfg_1', KEY)).toEqual({ sha256: SHA, size: 5 });
    for (const id of ['short', 'badSize', 'fraction', 'object', 'badSha']) {
      expect(loaded.lookupItem(id, KEY), id).toBeUndefined();
    }
    expect(loaded.lookupItem('badKey', 'not a key')).toBeUndefined();
  });
});

describe('pages known by their items’ text', () => {
  const KEY = `${'k'.repeat(43)}=`;
  const PAGE = `${'p'.repeat(43)}=`;
  const OTHER_PAGE = `${'q'.repeat(43)}=`;
  const ITEMS = `${'i'.repeat(43)}=`;
  const LENGTHS = [812, 2, 1024];

  it('keeps a page across a save and a load, and forgets the pages a full pull did not see', async () => {
    const store = FileFingerprints.empty(ROOT);
    store.recordItem('cfg_1', KEY, { sha256: SHA, size: 1 });
    store.recordPage(PAGE, ITEMS, LENGTHS);
    store.recordPage(OTHER_PAGE, ITEMS, LENGTHS);
    expect(store.itemKeyOf('cfg_1')).toBe(KEY);
    expect(await store.save(nodeFs, stateDir)).toBe(true);
    const loaded = await load();
    expect(loaded.lookupPage(PAGE)).toBe(ITEMS);
    expect(loaded.pageTextLengths(PAGE)).toEqual(LENGTHS);
    // Seen (looked up) since the load: kept; the other is gone, and the file says so.
    loaded.retainSeenPages();
    expect(await loaded.save(nodeFs, stateDir)).toBe(true);
    const again = await load();
    expect(again.lookupPage(PAGE)).toBe(ITEMS);
    expect(again.lookupPage(OTHER_PAGE)).toBeUndefined();
    // The same page recorded again, and seen: nothing to write.
    again.recordPage(PAGE, ITEMS, LENGTHS);
    again.retainSeenPages();
    expect(await again.save(nodeFs, stateDir)).toBe(false);
  });

  it('holds at most one page per item recorded and a few more', () => {
    const store = FileFingerprints.empty(ROOT);
    store.recordItem('cfg_1', KEY, { sha256: SHA, size: 1 });
    const pageKey = (n: number) => `${n.toString().padStart(43, 'p')}=`;
    for (let n = 0; n < 200; n += 1) store.recordPage(pageKey(n), ITEMS, LENGTHS);
    const kept = Array.from({ length: 200 }, (_, n) => store.lookupPage(pageKey(n))).filter(Boolean);
    expect(kept).toHaveLength(1 + 64);
  });

  it('knows none recorded under other item rules, and drops each malformed one', async () => {
    const header = { version: 2, rootDir: ROOT, files: {} };
    const byId = { cfg_1: [KEY, SHA, 5] };
    const pages = { [PAGE]: [ITEMS, ...LENGTHS] };
    await writeFingerprints({ ...header, items: { rules: ITEM_RULES_VERSION + 1, byId, pages } });
    expect((await load()).lookupPage(PAGE)).toBeUndefined();
    await writeFingerprints({
      ...header,
      items: {
        rules: ITEM_RULES_VERSION,
        byId,
        pages: { ...pages, [OTHER_PAGE]: ['not a key', ...LENGTHS], short: [ITEMS, ...LENGTHS] },
      },
    });
    const loaded = await load();
    expect(loaded.lookupPage(PAGE)).toBe(ITEMS);
    expect(loaded.lookupPage(OTHER_PAGE)).toBeUndefined();
    expect(loaded.lookupPage('short')).toBeUndefined();
  });

  it('reads a page with its text lengths; drops one recorded before they were kept, and malformed lengths', async () => {
    const header = { version: 2, rootDir: ROOT, files: {} };
    const byId = { cfg_1: [KEY, SHA, 5] };
    const page = (n: number) => `${n.toString().padStart(43, 'p')}=`;
    const pages = {
      [page(1)]: [ITEMS, ...LENGTHS],
      [page(2)]: ITEMS,
      [page(3)]: [ITEMS],
      [page(4)]: [ITEMS, 812, 1],
      [page(5)]: [ITEMS, 812, 2.5],
      [page(6)]: [ITEMS, '812'],
      [page(7)]: ['not a key', 812],
    };
    await writeFingerprints({ ...header, items: { rules: ITEM_RULES_VERSION, byId, pages } });
    const loaded = await load();
    expect([loaded.lookupPage(page(1)), loaded.pageTextLengths(page(1))]).toEqual([ITEMS, LENGTHS]);
    // A key alone (an older agent's record): not known; the next full pull that sees the page records it again,
    // its lengths bound into its key (api/list-page.ts pageItemsKey).
    for (const n of [2, 3, 4, 5, 6, 7]) {
      expect([n, loaded.lookupPage(page(n)), loaded.pageTextLengths(page(n))]).toEqual([
        n,
        undefined,
        undefined,
      ]);
    }
    // Recorded again: a change, written as the array form.
    loaded.recordPage(page(2), ITEMS, [40, 41]);
    expect(await loaded.save(nodeFs, stateDir)).toBe(true);
    expect((await load()).pageTextLengths(page(2))).toEqual([40, 41]);
  });
});
