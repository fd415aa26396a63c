// The write journal's own mechanics: a settle's unlink never takes away the declaration queued after it.

import { createHash } from 'node:crypto';
import { lstatSync } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { INTENT_FILE, IntentJournal } from './intent-journal.js';
import { COMPACT_DIRS_OVER, emptyState, type ManagedFile } from './state.js';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-intents-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const SHA_A = 'a'.repeat(64);
const SHA_B = 'b'.repeat(64);

function recorded(pathName: string, instanceId: string, sha256: string): Map<string, ManagedFile> {
  return new Map([[pathName, { instanceId, sha256, mode: 0o644, createdDirs: [], writtenAt: 'now' }]]);
}

describe('IntentJournal', () => {
  it('a declaration that could not be published is taken back: not kept to be written with a later one', async () => {
    let failing = false;
    const fs: FsPort = {
      ...nodeFs,
      rename: async (from, to) => {
        if (failing && path.basename(String(to)) === INTENT_FILE)
          throw Object.assign(new Error('ENOSPC: simulated, rename'), { code: 'ENOSPC' });
        return nodeFs.rename(from, to);
      },
    };
    const journal = await IntentJournal.open(fs, dir, '/root', silentLogger(), { now: () => 0 });
    await journal.declare([{ path: 'a.json', instanceId: 'cfg_a', sha256: SHA_A }]);
    failing = true;
    await expect(
      journal.declare([
        { path: 'a.json', instanceId: 'cfg_a', sha256: SHA_A },
        { path: 'b.json', instanceId: 'cfg_b', sha256: SHA_B },
      ]),
    ).rejects.toThrow(/ENOSPC/);
    // a.json's earlier declaration is on disk and stays; b.json's never was.
    expect(journal.size).toBe(1);

    failing = false;
    await journal.declare([{ path: 'c.json', instanceId: 'cfg_c', sha256: SHA_A }]);
    const onDisk = JSON.parse(await readFile(path.join(dir, INTENT_FILE), 'utf8')) as {
      intents: { path: string }[];
    };
    expect(onDisk.intents.map((intent) => intent.path)).toEqual(['a.json', 'c.json']);
  });

  it('a settle whose unlink is slow never removes the declaration made after it (a persist beside the next batch)', async () => {
    let release: () => void = () => undefined;
    let waiting = false;
    const fs: FsPort = {
      ...nodeFs,
      // The unlink waits until the next declaration's rename has landed (or 50 ms, if that is held back).
      unlink: async (file) => {
        const gate = new Promise<void>((resolve) => {
          release = resolve;
        });
        waiting = true;
        const timer = setTimeout(release, 50);
        await gate;
        clearTimeout(timer);
        return nodeFs.unlink(file);
      },
      rename: async (from, to) => {
        await nodeFs.rename(from, to);
        if (waiting && path.basename(String(to)) === INTENT_FILE) release();
      },
    };
    const journal = await IntentJournal.open(fs, dir, '/root', silentLogger(), { now: () => 0 });
    await journal.declare([{ path: 'a.json', instanceId: 'cfg_a', sha256: SHA_A }]);
    const settled = journal.recordedIn(recorded('a.json', 'cfg_a', SHA_A));

    await Promise.all([
      journal.settle(settled),
      journal.declare([{ path: 'b.json', instanceId: 'cfg_b', sha256: SHA_B }]),
    ]);

    const text = await readFile(path.join(dir, INTENT_FILE), 'utf8');
    expect(JSON.parse(text)).toMatchObject({ intents: [{ path: 'b.json', instanceId: 'cfg_b' }] });
    expect(journal.size).toBe(1);
  });

  it('settled and empty: the journal is unlinked; another root directory proves nothing', async () => {
    const journal = await IntentJournal.open(nodeFs, dir, '/root', silentLogger(), { now: () => 0 });
    await journal.declare([{ path: 'a.json', instanceId: 'cfg_a', sha256: SHA_A }]);
    expect((await IntentJournal.open(nodeFs, dir, '/elsewhere', silentLogger(), { now: () => 0 })).size).toBe(
      0,
    );
    expect((await IntentJournal.open(nodeFs, dir, '/root', silentLogger(), { now: () => 0 })).size).toBe(1);

    await journal.settle(journal.recordedIn(recorded('a.json', 'cfg_a', SHA_A)));

    await expect(readFile(path.join(dir, INTENT_FILE))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('a write declared at a path after a published one that was never recorded leaves the first one provable', async () => {
    // Run 1 declares cfg_a at p and renames its bytes into place, then dies before state.json records it. Run 2
    // declares cfg_b at the same path and dies before its rename. Run 3 must still prove the bytes there cfg_a's.
    const rootDir = path.join(dir, 'root');
    const stateDir = path.join(dir, 'state');
    await Promise.all([mkdir(path.join(rootDir, 'motion'), { recursive: true }), mkdir(stateDir)]);
    const bytesA = Buffer.from('{"owner":"cfg_a"}\n');
    const shaA = createHash('sha256').update(bytesA).digest('hex');
    const run1 = await IntentJournal.open(nodeFs, stateDir, rootDir, silentLogger(), { now: () => 0 });
    await run1.declare([{ path: 'motion/right.json', instanceId: 'cfg_a', sha256: shaA }]);
    await writeFile(path.join(rootDir, 'motion/right.json'), bytesA);
    const run2 = await IntentJournal.open(nodeFs, stateDir, rootDir, silentLogger(), { now: () => 0 });
    await run2.declare([{ path: 'motion/right.json', instanceId: 'cfg_b', sha256: SHA_B }]);

    const run3 = await IntentJournal.open(nodeFs, stateDir, rootDir, silentLogger(), { now: () => 0 });
    const state = emptyState('dvc_1', rootDir);
    expect(await run3.adopt(state, 'now')).toEqual(['motion/right.json']);
    expect(state.files.get('motion/right.json')).toMatchObject({ instanceId: 'cfg_a', sha256: shaA });
    // cfg_b's rename never happened: its declaration is dropped, cfg_a's settles with the next state.json.
    await run3.settle(run3.recordedIn(state.files));
    expect(run3.size).toBe(0);
    await expect(readFile(path.join(stateDir, INTENT_FILE))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('a write recorded durably settles the writes declared at its path before it, not those after', async () => {
    const journal = await IntentJournal.open(nodeFs, dir, '/root', silentLogger(), { now: () => 0 });
    await journal.declare([{ path: 'p.json', instanceId: 'cfg_a', sha256: SHA_A }]);
    await journal.declare([{ path: 'p.json', instanceId: 'cfg_b', sha256: SHA_B }]);
    expect(journal.size).toBe(2);

    await journal.settle(journal.recordedIn(recorded('p.json', 'cfg_b', SHA_B)));
    expect(journal.size).toBe(0);

    await journal.declare([{ path: 'p.json', instanceId: 'cfg_c', sha256: SHA_A }]);
    await journal.declare([{ path: 'p.json', instanceId: 'cfg_d', sha256: SHA_B }]);
    // cfg_c recorded (the state saved between the two declarations): cfg_d, declared after, still stands.
    await journal.settle(journal.recordedIn(recorded('p.json', 'cfg_c', SHA_A)));
    expect(journal.size).toBe(1);
    const text = await readFile(path.join(dir, INTENT_FILE), 'utf8');
    expect(JSON.parse(text)).toMatchObject({ intents: [{ instanceId: 'cfg_c' }, { instanceId: 'cfg_d' }] });
  });

  describe('the directories a declared write made', () => {
    const bytes = Buffer.from('{"v":1}\n');
    const sha = createHash('sha256').update(bytes).digest('hex');
    const rootDir = () => path.join(dir, 'root');
    const stateDir = () => path.join(dir, 'state');

    /**
     * Run 1 declares `relative` (through `fs`), then `made` runs (the write's mkdirs), the bytes land, and the run
     * dies; run 2 adopts it (through `adoptFs`).
     */
    async function adoptedAfter(
      relative: string,
      made: () => Promise<void>,
      fs: FsPort = nodeFs,
      adoptFs: FsPort = nodeFs,
    ) {
      const run1 = await IntentJournal.open(fs, stateDir(), rootDir(), silentLogger(), { now: () => 0 });
      await run1.declare([{ path: relative, instanceId: 'cfg_a', sha256: sha }]);
      await made();
      await writeFile(path.join(rootDir(), relative), bytes);
      const run2 = await IntentJournal.open(adoptFs, stateDir(), rootDir(), silentLogger(), { now: () => 0 });
      const state = emptyState('dvc_1', rootDir());
      expect(await run2.adopt(state, 'now')).toEqual([relative]);
      return state.files.get(relative)?.createdDirs;
    }

    beforeEach(async () => {
      await Promise.all([mkdir(path.join(rootDir(), 'keep'), { recursive: true }), mkdir(stateDir())]);
    });

    it('are recorded: those missing at the declaration, never one that was there', async () => {
      const createdDirs = await adoptedAfter('keep/made/deeper/a.json', () =>
        mkdir(path.join(rootDir(), 'keep/made/deeper'), { recursive: true }).then(() => undefined),
      );
      expect(createdDirs).toEqual(['keep/made', 'keep/made/deeper']);
    });

    // 60 deep: its paths add up to 3,900 characters, past COMPACT_DIRS_OVER, and a path per level would be six times
    // what the journal may hold here. It was 300 deep (2 s of the unit tier's CPU: each level's mkdir, lstat and rm
    // walk the whole path, so the cost is the square of the depth); what it proves does not need that.
    it('a chain 60 deep is declared by its first depth (not a path per level), and claimed whole (state24)', async () => {
      const chain = Array.from({ length: 60 }, (_, index) => `keep/${'d/'.repeat(index + 1).slice(0, -1)}`);
      expect(chain.join('').length).toBeGreaterThan(COMPACT_DIRS_OVER);
      const relative = `${chain.at(-1)}/a.json`;
      let journal = '';
      const createdDirs = await adoptedAfter(relative, async () => {
        journal = await readFile(path.join(stateDir(), INTENT_FILE), 'utf8');
        await mkdir(path.join(rootDir(), chain.at(-1)!), { recursive: true });
      });
      const [entry] = (JSON.parse(journal) as { intents: Record<string, unknown>[] }).intents;
      expect(entry).toEqual({ path: relative, instanceId: 'cfg_a', sha256: sha, dirsFrom: 2 });
      // Its path and a few hundred bytes more (the instance, the hash, the JSON), whatever the depth; 3.9 KB as paths.
      expect(journal.length).toBeLessThan(relative.length + 512);
      expect(createdDirs).toEqual(chain);
    });

    it('the same through the synchronous lstat of a port that offers it', async () => {
      const fs: FsPort = { ...nodeFs, lstatSync: lstatSync as NonNullable<FsPort['lstatSync']> };
      const createdDirs = await adoptedAfter(
        'keep/other/a.json',
        () => mkdir(path.join(rootDir(), 'keep/other')).then(() => undefined),
        fs,
      );
      expect(createdDirs).toEqual(['keep/other']);
    });

    it('one whose absence cannot be told (lstat fails) counts as there: never claimed, nor any above it', async () => {
      const refused = path.join(rootDir(), 'keep/made');
      const eacces = () => Object.assign(new Error('EACCES: permission denied'), { code: 'EACCES' });
      const syncPort: FsPort = {
        ...nodeFs,
        lstatSync: ((file: string, options: Parameters<NonNullable<FsPort['lstatSync']>>[1]) => {
          if (file === refused) throw eacces();
          return lstatSync(file, options);
        }) as NonNullable<FsPort['lstatSync']>,
      };
      const asyncPort: FsPort = {
        ...nodeFs,
        lstat: ((file: string, options?: never) =>
          file === refused ? Promise.reject(eacces()) : nodeFs.lstat(file, options)) as FsPort['lstat'],
      };
      for (const [fs, relative] of [
        [syncPort, 'keep/made/deeper/a.json'],
        [asyncPort, 'keep/made/deeper/b.json'],
      ] as const) {
        const createdDirs = await adoptedAfter(
          relative,
          () => mkdir(path.join(rootDir(), 'keep/made/deeper'), { recursive: true }).then(() => undefined),
          fs,
        );
        expect(createdDirs).toEqual(['keep/made/deeper']);
        // The next round starts as this one did: nothing made, nothing declared.
        await rm(path.join(rootDir(), 'keep/made'), { recursive: true });
        await rm(path.join(stateDir(), INTENT_FILE));
      }
    });

    it("one not owned by the agent's user at adoption is never claimed", async () => {
      const euid = process.geteuid?.() ?? 0;
      const spy = vi.spyOn(process, 'geteuid').mockReturnValue(euid + 4242);
      try {
        const createdDirs = await adoptedAfter('keep/made/deeper/a.json', () =>
          mkdir(path.join(rootDir(), 'keep/made/deeper'), { recursive: true }).then(() => undefined),
        );
        expect(createdDirs).toEqual([]);
      } finally {
        spy.mockRestore();
      }
    });

    it('a directory another user made between the declaration and the write is theirs, and all below it', async () => {
      // `keep/made` as lstat shows a directory of another user's (what a chown would leave; any user runs this).
      const fs: FsPort = {
        ...nodeFs,
        lstat: (async (file: string, options?: never) => {
          const stats = await nodeFs.lstat(file, options);
          if (String(file).endsWith('/keep/made')) stats.uid += 4242;
          return stats;
        }) as FsPort['lstat'],
      };
      const createdDirs = await adoptedAfter(
        'keep/made/deeper/a.json',
        () => mkdir(path.join(rootDir(), 'keep/made/deeper'), { recursive: true }).then(() => undefined),
        nodeFs,
        fs,
      );
      // Not theirs, nor anything below it: a leftover empty directory is the lesser error.
      expect(createdDirs).toEqual([]);
    });
  });
});
