// mut24: intent.json's compact form of a declared write's missing parents (`dirsFrom`, state24) at its bounds:
// short chains stay paths, exactly COMPACT_DIRS_OVER characters stays paths, one more is a depth, a depth of 1.
import { createHash } from 'node:crypto';
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../lib/logger.js';
import { INTENT_FILE, IntentJournal } from './intent-journal.js';
import { COMPACT_DIRS_OVER, emptyState } from './state.js';

let dir: string;
const rootDir = () => path.join(dir, 'root');
const stateDir = () => path.join(dir, 'state');
const bytes = Buffer.from('{"v":1}\n');
const sha = createHash('sha256').update(bytes).digest('hex');

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-intents-mut24-'));
  await Promise.all([mkdir(rootDir()), mkdir(stateDir())]);
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Declares `relatives` in one run, reads intent.json, makes their parents and bytes, and adopts them in the next. */
async function declaredThenAdopted(relatives: string[]) {
  const run1 = await IntentJournal.open(nodeFs, stateDir(), rootDir(), silentLogger(), { now: () => 0 });
  await run1.declare(relatives.map((relative) => ({ path: relative, instanceId: 'cfg_a', sha256: sha })));
  const journal = JSON.parse(await readFile(path.join(stateDir(), INTENT_FILE), 'utf8')) as {
    intents: Record<string, unknown>[];
  };
  for (const relative of relatives) {
    await mkdir(path.join(rootDir(), path.posix.dirname(relative)), { recursive: true });
    await writeFile(path.join(rootDir(), relative), bytes);
  }
  const run2 = await IntentJournal.open(nodeFs, stateDir(), rootDir(), silentLogger(), { now: () => 0 });
  const state = emptyState('dvc_1', rootDir());
  expect((await run2.adopt(state, 'now')).sort()).toEqual([...relatives].sort());
  return {
    entries: journal.intents,
    createdDirs: (relative: string) => state.files.get(relative)?.createdDirs,
  };
}

/** `A/B/C/x.json` with segments of 250, 100 and `last` characters: its three parents add up to 953 + `last`. */
function threeDeep(last: number, letter: string) {
  const a = letter.repeat(250);
  const b = `${a}/${'b'.repeat(100)}`;
  const c = `${b}/${'c'.repeat(last)}`;
  return { relative: `${c}/x.json`, chain: [a, b, c] };
}

describe('a declared write in intent.json (mut24)', () => {
  it('names short missing parents by path, as before state24, and a file with none by nothing', async () => {
    const { entries, createdDirs } = await declaredThenAdopted(['made/deeper/a.json', 'top.json']);
    expect(entries).toEqual([
      { path: 'made/deeper/a.json', instanceId: 'cfg_a', sha256: sha, dirs: ['made', 'made/deeper'] },
      { path: 'top.json', instanceId: 'cfg_a', sha256: sha },
    ]);
    expect(createdDirs('made/deeper/a.json')).toEqual(['made', 'made/deeper']);
    expect(createdDirs('top.json')).toEqual([]);
  });

  it('keeps paths adding up to exactly COMPACT_DIRS_OVER characters, and writes one more as its first depth (1)', async () => {
    const exact = threeDeep(COMPACT_DIRS_OVER - 953, 'p');
    const over = threeDeep(COMPACT_DIRS_OVER - 952, 'q');
    expect(exact.chain.join('').length).toBe(COMPACT_DIRS_OVER);
    const { entries, createdDirs } = await declaredThenAdopted([exact.relative, over.relative]);
    expect(entries).toEqual([
      { path: exact.relative, instanceId: 'cfg_a', sha256: sha, dirs: exact.chain },
      { path: over.relative, instanceId: 'cfg_a', sha256: sha, dirsFrom: 1 },
    ]);
    expect(createdDirs(exact.relative)).toEqual(exact.chain);
    expect(createdDirs(over.relative)).toEqual(over.chain);
  });

  it('writes a missing parent alone, its path long, as the depth of the parent itself, and reads it back', async () => {
    const there = ['p', 'q', 'r', 's'].map((letter) => letter.repeat(250)).join('/');
    await mkdir(path.join(rootDir(), there), { recursive: true });
    const parent = `${there}/${'t'.repeat(100)}`;
    const relative = `${parent}/x.json`;
    const { entries, createdDirs } = await declaredThenAdopted([relative]);
    expect(entries).toEqual([{ path: relative, instanceId: 'cfg_a', sha256: sha, dirsFrom: 5 }]);
    expect(createdDirs(relative)).toEqual([parent]);
  });

  it('ignores a journal whose dirsFrom names no directory above its path (0, or deeper than the parent)', async () => {
    for (const dirsFrom of [0, 2, 1.5]) {
      await writeFile(
        path.join(stateDir(), INTENT_FILE),
        JSON.stringify({
          version: 1,
          rootDir: rootDir(),
          intents: [{ path: 'a/x.json', instanceId: 'cfg_a', sha256: sha, dirsFrom }],
        }),
      );
      const journal = await IntentJournal.open(nodeFs, stateDir(), rootDir(), silentLogger(), {
        now: () => 0,
      });
      expect(journal.size).toBe(0);
    }
    await writeFile(
      path.join(stateDir(), INTENT_FILE),
      JSON.stringify({
        version: 1,
        rootDir: rootDir(),
        intents: [{ path: 'a/x.json', instanceId: 'cfg_a', sha256: sha, dirsFrom: 1 }],
      }),
    );
    const journal = await IntentJournal.open(nodeFs, stateDir(), rootDir(), silentLogger(), { now: () => 0 });
    expect(journal.size).toBe(1);
  });
});
