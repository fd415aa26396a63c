// intent27: removals of declared writes no durable state.json records, marked in intent.json and told after a crash.
import { createHash } from 'node:crypto';
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readFile, rm, stat, symlink, unlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { INTENT_FILE, IntentJournal } from './intent-journal.js';
import { emptyState } from './state.js';

let dir: string;
let rootDir: string;
let stateDir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-intent27-'));
  rootDir = path.join(dir, 'root');
  stateDir = path.join(dir, 'state');
  await Promise.all([mkdir(path.join(rootDir, 'etc'), { recursive: true }), mkdir(stateDir)]);
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const BYTES = Buffer.from('{"v":1}\n');
const SHA = createHash('sha256').update(BYTES).digest('hex');
const SHA_B = 'b'.repeat(64);
const clock = { now: () => 0 };

const open = (fs: FsPort = nodeFs) => IntentJournal.open(fs, stateDir, rootDir, silentLogger(), clock);
const onDisk = async () =>
  JSON.parse(await readFile(path.join(stateDir, INTENT_FILE), 'utf8')) as {
    version: number;
    intents: { path: string; instanceId: string; removed?: true }[];
  };

/** Run 1: `relative` declared for cfg_a, its bytes renamed into place, no durable state.json since. */
async function writtenUnrecorded(relative = 'etc/a.json'): Promise<IntentJournal> {
  const run1 = await open();
  await run1.declare([{ path: relative, instanceId: 'cfg_a', sha256: SHA }]);
  await writeFile(path.join(rootDir, relative), BYTES);
  return run1;
}

/** A later run's adoption: the paths recorded, and those told removed. */
async function adoptIn(journal: IntentJournal) {
  const state = emptyState('dvc_1', rootDir);
  const removed: string[] = [];
  const adopted = await journal.adopt(state, 'now', undefined, (relative) => removed.push(relative));
  return { state, adopted, removed };
}

describe('a declared write removed before any durable state.json recorded it (intent27)', () => {
  it('marked before the unlink: the next run tells its path removed, once, and settles the mark with state.json', async () => {
    const run1 = await writtenUnrecorded();
    await run1.declareRemovals(['etc/a.json']);
    expect((await onDisk()).intents).toEqual([
      { path: 'etc/a.json', instanceId: 'cfg_a', sha256: SHA, removed: true },
    ]);
    await unlink(path.join(rootDir, 'etc/a.json'));

    const run2 = await open();
    const first = await adoptIn(run2);
    expect(first).toMatchObject({ adopted: [], removed: ['etc/a.json'] });
    expect(first.state.files.size).toBe(0);
    // A second pass of the same process: told already.
    expect((await adoptIn(run2)).removed).toEqual([]);
    // The persist of a state.json holding the path pending settles the mark: a run after it tells nothing.
    await run2.settle(run2.recordedIn(first.state.files));
    await expect(stat(path.join(stateDir, INTENT_FILE))).rejects.toMatchObject({ code: 'ENOENT' });
    expect((await adoptIn(await open())).removed).toEqual([]);
  });

  it('a run cut before the mark settles tells it again: each run that finds the mark and no file tells once', async () => {
    const run1 = await writtenUnrecorded();
    await run1.declareRemovals(['etc/a.json']);
    await unlink(path.join(rootDir, 'etc/a.json'));
    expect((await adoptIn(await open())).removed).toEqual(['etc/a.json']);
    expect((await adoptIn(await open())).removed).toEqual(['etc/a.json']);
  });

  it('a declaration without a mark whose file is absent tells nothing: its rename may never have happened', async () => {
    const run1 = await open();
    await run1.declare([{ path: 'etc/a.json', instanceId: 'cfg_a', sha256: SHA }]);
    const run2 = await open();
    expect(await adoptIn(run2)).toMatchObject({ adopted: [], removed: [] });
    expect(run2.size).toBe(0);
  });

  it('marked, and the cut came before the unlink: the file is recorded as any declared write, not told removed', async () => {
    const run1 = await writtenUnrecorded();
    await run1.declareRemovals(['etc/a.json']);
    const { adopted, removed, state } = await adoptIn(await open());
    expect(adopted).toEqual(['etc/a.json']);
    expect(removed).toEqual([]);
    expect(state.files.get('etc/a.json')).toMatchObject({ instanceId: 'cfg_a', sha256: SHA });
  });

  it('marked, and other bytes or a symlink at the path: no removal told (a removal that kept the file tells nothing)', async () => {
    const run1 = await writtenUnrecorded();
    await run1.declareRemovals(['etc/a.json']);
    await writeFile(path.join(rootDir, 'etc/a.json'), 'an operator edit\n');
    const other = await adoptIn(await open());
    expect(other).toMatchObject({ adopted: [], removed: [] });

    await unlink(path.join(rootDir, 'etc/a.json'));
    await symlink('/etc/passwd', path.join(rootDir, 'etc/a.json'));
    const run3 = await writtenUnrecordedAgain();
    expect(await adoptIn(run3)).toMatchObject({ adopted: [], removed: [] });
  });

  it('its whole directory pruned with it: absent, told', async () => {
    await mkdir(path.join(rootDir, 'made/deeper'), { recursive: true });
    const run1 = await writtenUnrecorded('made/deeper/a.json');
    await run1.declareRemovals(['made/deeper/a.json']);
    await rm(path.join(rootDir, 'made'), { recursive: true });
    expect((await adoptIn(await open())).removed).toEqual(['made/deeper/a.json']);
  });

  it('a removal of a path with no pending declaration writes nothing; only the declarations at the path are marked', async () => {
    const run1 = await open();
    await run1.declareRemovals(['etc/a.json']);
    await expect(stat(path.join(stateDir, INTENT_FILE))).rejects.toMatchObject({ code: 'ENOENT' });
    await run1.declare([
      { path: 'etc/a.json', instanceId: 'cfg_a', sha256: SHA },
      { path: 'etc/b.json', instanceId: 'cfg_b', sha256: SHA_B },
    ]);
    const before = await stat(path.join(stateDir, INTENT_FILE));
    await run1.declareRemovals(['etc/c.json']);
    expect((await stat(path.join(stateDir, INTENT_FILE))).ino).toBe(before.ino);
    await run1.declareRemovals(['etc/b.json']);
    expect((await onDisk()).intents.map((intent) => [intent.path, intent.removed])).toEqual([
      ['etc/a.json', undefined],
      ['etc/b.json', true],
    ]);
    // Marked once: marking again publishes nothing.
    const marked = await stat(path.join(stateDir, INTENT_FILE));
    await run1.declareRemovals(['etc/b.json']);
    expect((await stat(path.join(stateDir, INTENT_FILE))).ino).toBe(marked.ino);
  });

  it('a mark that could not be published is taken back and rejects; the next publish carries no mark', async () => {
    let failing = false;
    const fs: FsPort = {
      ...nodeFs,
      rename: async (from, to) => {
        if (failing && path.basename(String(to)) === INTENT_FILE)
          throw Object.assign(new Error('EIO: simulated, rename'), { code: 'EIO' });
        return nodeFs.rename(from, to);
      },
    };
    const journal = await open(fs);
    await journal.declare([{ path: 'etc/a.json', instanceId: 'cfg_a', sha256: SHA }]);
    failing = true;
    await expect(journal.declareRemovals(['etc/a.json'])).rejects.toThrow(/EIO/);
    failing = false;
    await journal.declare([{ path: 'etc/b.json', instanceId: 'cfg_b', sha256: SHA_B }]);
    expect((await onDisk()).intents.map((intent) => intent.removed)).toEqual([undefined, undefined]);
  });

  it('a mark settles with a state.json that still records its write; an older journal (no mark) loads as before', async () => {
    const run1 = await writtenUnrecorded();
    await run1.declareRemovals(['etc/a.json']);
    // A persist whose state was taken before the removal was recorded: the file still in it, so settled.
    const still = emptyState('dvc_1', rootDir);
    still.files.set('etc/a.json', {
      instanceId: 'cfg_a',
      sha256: SHA,
      mode: 0o640,
      createdDirs: [],
      writtenAt: 'now',
    });
    await run1.settle(run1.recordedIn(still.files));
    expect(run1.size).toBe(0);

    await writeFile(
      path.join(stateDir, INTENT_FILE),
      JSON.stringify({
        version: 1,
        rootDir,
        intents: [{ path: 'etc/a.json', instanceId: 'cfg_a', sha256: SHA }],
      }),
    );
    const older = await open();
    expect(older.size).toBe(1);
    expect(await adoptIn(older)).toMatchObject({ adopted: ['etc/a.json'], removed: [] });
  });
});

/** A journal marking etc/a.json removed, its file as the test left it. */
async function writtenUnrecordedAgain(): Promise<IntentJournal> {
  const run = await open();
  await run.declare([{ path: 'etc/a.json', instanceId: 'cfg_a', sha256: SHA }]);
  await run.declareRemovals(['etc/a.json']);
  return open();
}
