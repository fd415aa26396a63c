// Full passes with nothing to do, in-process against the mock on loopback and a real temp dir: once the files'
// fingerprints are recorded, such a pass writes nothing anywhere, and a drifted file is still restored.
import { createHash } from 'node:crypto';
import * as nodeFs from 'node:fs/promises';
import { lstat, readdir, readFile, utimes, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import type { Clock } from '../lib/clock.js';
import type { FsPort } from '../lib/fs-port.js';
import { FINGERPRINTS_FILE, RACY_MARGIN_MS } from '../store/fingerprints.js';

const COUNT = 20;

let world: PassWorld;
/** Wall clock ahead of the files' ctimes by more than the racy margin: what a later pass sees. */
let wallOffset: number;
/** When set, the wall clock stands still at this ms (a pass that runs the instant the files were written). */
let pinnedNow: number | undefined;

function clock(): Clock {
  return {
    now: () => pinnedNow ?? Date.now() + wallOffset,
    monotonic: () => performance.now(),
    sleep: async () => undefined,
  };
}

/** A run of `--once`: a Reconciler opened, one full pass, closed. */
const runPass = () => world.runOnce();

/** Every entry under `top` (files and directories): path → inode, size, mtime and ctime in ns. */
async function snapshot(top: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const name of await readdir(top, { recursive: true })) {
    const stats = await lstat(path.join(top, name), { bigint: true });
    out.set(name, `${stats.ino}:${stats.size}:${stats.mtimeNs}:${stats.ctimeNs}`);
  }
  return out;
}

/** The newest ctime (ms) of the entries under `top`. */
async function newestCtimeMs(top: string): Promise<number> {
  let newest = 0;
  for (const name of await readdir(top, { recursive: true })) {
    newest = Math.max(newest, (await lstat(path.join(top, name))).ctimeMs);
  }
  return Math.ceil(newest);
}

beforeEach(async () => {
  world = await createPassWorld({ name: 'prints', open: false, deps: { clock: clock() } });
  wallOffset = 0;
  pinnedNow = undefined;
  for (let i = 0; i < COUNT; i += 1) {
    world.put({
      id: `cfg_${i}`,
      relative_filepath: `d${i % 3}/conf${i}.json`,
      config_schema_id: `sch_${i}`,
      content: { index: i, enabled: i % 2 === 0 },
    });
  }
});

afterEach(() => world.close());

describe('a full pass with nothing to do', () => {
  it('records the fingerprints once, then writes nothing in the root or the state dir, with no report sent', async () => {
    const first = await runPass();
    expect(first.error).toBeUndefined();
    expect(first.converged).toBe(true);
    // The files were just written: within the racy margin, so none is fingerprinted yet. The clock stands at
    // the newest file's ctime, so however slowly this pass runs on a busy machine, it is within the margin.
    pinnedNow = await newestCtimeMs(path.join(world.dir, 'root'));
    await runPass();
    // The items are known by their text since the first pass; no file is fingerprinted yet.
    const racy = JSON.parse(await readFile(path.join(world.dir, 'state', FINGERPRINTS_FILE), 'utf8'));
    expect(Object.keys(racy.files)).toHaveLength(0);
    expect(Object.keys(racy.items.byId)).toHaveLength(COUNT);

    pinnedNow = undefined;
    wallOffset = RACY_MARGIN_MS + 1_000;
    await runPass();
    const prints = JSON.parse(await readFile(path.join(world.dir, 'state', FINGERPRINTS_FILE), 'utf8'));
    expect(Object.keys(prints.files)).toHaveLength(COUNT);

    const reports = world.server.state.reports.length;
    const before = [
      await snapshot(path.join(world.dir, 'root')),
      await snapshot(path.join(world.dir, 'state')),
    ];
    const idle = await runPass();
    expect(idle.converged).toBe(true);
    expect(idle.outcomes.every((o) => o.action === 'unchanged')).toBe(true);
    expect([
      await snapshot(path.join(world.dir, 'root')),
      await snapshot(path.join(world.dir, 'state')),
    ]).toEqual(before);
    expect(world.server.state.reports.length).toBe(reports);
  });

  it('still restores a fingerprinted file edited behind its back with the size and mtime kept', async () => {
    await runPass();
    wallOffset = RACY_MARGIN_MS + 1_000;
    await runPass();
    const file = path.join(world.dir, 'root', 'd1/conf1.json');
    const original = await readFile(file, 'utf8');
    const stats = await lstat(file);
    await writeFile(file, original.replace('"index": 1', '"index": 7'));
    await utimes(file, stats.atime, stats.mtime);
    expect((await lstat(file)).size).toBe(stats.size);

    const result = await runPass();
    expect(result.outcomes.find((o) => o.path === 'd1/conf1.json')?.action).toBe('written');
    expect(await readFile(file, 'utf8')).toBe(original);
  });
});

/**
 * FAT and exFAT keep no change time: the ctime the kernel gives is the mtime (or creation time) read back from disk,
 * so an edit with the size and mtime put back keeps every field of the identity once the inode was evicted. Here
 * that is forged in fingerprints.json: the edited file's entry gets its new identity with the old sha256.
 */
describe('a rootDir whose filesystem keeps no change time (FAT, exFAT, FUSE)', () => {
  async function editBehindItsBackKeepingTheIdentity(file: string, relative: string): Promise<string> {
    const original = await readFile(file, 'utf8');
    const stats = await lstat(file);
    await writeFile(file, original.replace('"index": 1', '"index": 7'));
    await utimes(file, stats.atime, stats.mtime);
    const edited = await lstat(file, { bigint: true });
    const printsFile = path.join(world.dir, 'state', FINGERPRINTS_FILE);
    const prints = JSON.parse(await readFile(printsFile, 'utf8'));
    const sha256 = createHash('sha256').update(original).digest('hex');
    // Verified after the edit's ctime by more than the racy margin, at a wall clock the next pass is past.
    const verifiedAt = Number(edited.ctimeNs / 1_000_000n) + RACY_MARGIN_MS + 1_000;
    prints.files[relative] = [
      edited.dev.toString(),
      edited.ino.toString(),
      edited.size.toString(),
      edited.mtimeNs.toString(),
      edited.ctimeNs.toString(),
      sha256,
      verifiedAt,
    ];
    await writeFile(printsFile, JSON.stringify(prints));
    wallOffset = 2 * (RACY_MARGIN_MS + 1_000) + 60_000;
    return original;
  }

  it('a fingerprint is trusted on a filesystem that keeps one: the forged identity hides the edit (why FAT needs more)', async () => {
    await runPass();
    wallOffset = RACY_MARGIN_MS + 1_000;
    await runPass();
    const file = path.join(world.dir, 'root', 'd1/conf1.json');
    const original = await editBehindItsBackKeepingTheIdentity(file, 'd1/conf1.json');
    const result = await runPass();
    expect(result.outcomes.find((o) => o.path === 'd1/conf1.json')?.action).toBe('unchanged');
    expect(await readFile(file, 'utf8')).not.toBe(original);
  });

  it('reads the bytes of every managed file each pass there: an edit with the identity kept is restored', async () => {
    await world.close();
    world = await createPassWorld({
      name: 'prints-fat',
      open: false,
      deps: { clock: clock(), fs: { ...nodeFs, keepsNoChangeTimeAt: () => true } as FsPort },
    });
    for (let i = 0; i < COUNT; i += 1) {
      world.put({
        id: `cfg_${i}`,
        relative_filepath: `d${i % 3}/conf${i}.json`,
        config_schema_id: `sch_${i}`,
        content: { index: i, enabled: i % 2 === 0 },
      });
    }
    await runPass();
    wallOffset = RACY_MARGIN_MS + 1_000;
    await runPass();
    const file = path.join(world.dir, 'root', 'd1/conf1.json');
    // Nothing is fingerprinted there: every file's bytes were read on each pass.
    const prints = JSON.parse(await readFile(path.join(world.dir, 'state', FINGERPRINTS_FILE), 'utf8'));
    expect(Object.keys(prints.files)).toHaveLength(0);
    const original = await editBehindItsBackKeepingTheIdentity(file, 'd1/conf1.json');

    const result = await runPass();
    expect(result.outcomes.find((o) => o.path === 'd1/conf1.json')?.action).toBe('written');
    expect(await readFile(file, 'utf8')).toBe(original);
  });
});
