// state.json and outbox.json read a record at a time (stateFileWalk, outboxFileWalk) against the whole text parsed: the same records, the same verdicts.
import * as nodeFs from 'node:fs/promises';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  comparable,
  outboxWalksAgree,
  stateWalkAgrees,
  stateWalksAgree,
} from '../../test/helpers/record-walk-oracle.js';
import { SHA } from '../../test/helpers/state-file-oracle.js';
import { silentLogger } from '../lib/logger.js';
import { StateFileOverweightError } from './errors.js';
import { OUTBOX_FILE, OUTBOX_WEIGHT, outboxFileWalk, StatusOutbox } from './outbox.js';
import {
  emptyState,
  type LocalState,
  loadLocalState,
  MAX_STATE_FILE_DEPTH,
  quickStateFile,
  readStateDirFile,
  readStateDirFileOrSetAside,
  STATE_FILE,
  STATE_WEIGHT,
  stateFilePieces,
  stateFileWalk,
  UNWEIGHED_BYTES,
  WALKED,
} from './state.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'state-walk-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A state with every kind of record the agent writes: depths, a former root, hooks owed, odd keys. */
function fullState(files: number): LocalState {
  const state = emptyState('dvc_walk', '/srv/root');
  const deep = Array.from({ length: 300 }, (_, i) => `d${i}`).join('/');
  for (let i = 0; i < files; i += 1) {
    const relative = i === 0 ? `${deep}/deep.json` : i === 1 ? '__proto__' : i === 2 ? '7' : `app/${i}.json`;
    const createdDirs =
      i === 0
        ? deep.split('/').map((_, n, all) => all.slice(0, n + 1).join('/'))
        : i % 7 === 0
          ? ['app']
          : [];
    state.files.set(relative, {
      instanceId: `cfg_${i}`,
      sha256: SHA,
      mode: 0o644,
      createdDirs,
      writtenAt: '2026-03-01T12:00:00.000Z',
      ...(i % 3 === 0 ? { size: i } : {}),
      ...(i % 5 === 0 ? { keptMode: 0o600 } : {}),
    });
    state.instances.set(i === 3 ? '0' : `cfg_${i}`, {
      relativePath: relative,
      activity: 'deployed',
      error: i % 4 === 0 ? 'retrying' : 'none',
      ...(i % 4 === 0 ? { message: `disk \u2028 full ${i}` } : {}),
      attempts: 0,
      ...(i % 2 === 0
        ? { reportEcho: { updatedAt: 'u', operatorUpdatedAt: 'o', ...(i % 6 === 0 ? { version: 'v' } : {}) } }
        : {}),
    });
  }
  state.pendingHookPaths = new Set(['app/7.json']);
  state.owedHookPaths = [{ match: 'app/**', run: ['/bin/true'], paths: ['app/14.json'], truncated: true }];
  state.hookProcessesLeftBehind = [{ match: '**', run: ['/bin/x'], pid: 42, startTime: '99', bootId: 'b' }];
  state.formerRoot = {
    rootDir: '/srv/old',
    files: new Map([
      ['1', { instanceId: 'cfg_x', sha256: SHA }],
      ['old/a.json', { instanceId: 'cfg_y', sha256: SHA }],
    ]),
  };
  return state;
}

function stateText(state: LocalState): string {
  return [...stateFilePieces(state)()].join('');
}

/** A state whose file is over UNWEIGHED_BYTES (so walked), made once. */
let made: { state: LocalState; text: string } | undefined;
function large(): { state: LocalState; text: string } {
  if (made === undefined) {
    // Few records of long messages: over UNWEIGHED_BYTES at little CPU.
    const state = fullState(300);
    for (const [id, record] of state.instances)
      state.instances.set(id, { ...record, message: `${id} `.repeat(600) });
    made = { state, text: stateText(state) };
  }
  return made;
}

describe('state.json walked a record at a time', () => {
  it('a state the agent wrote with every kind of record (depths, a former root, hooks, __proto__ and index keys) walks to what the whole text parses to, in any chunks', () => {
    const value: unknown = JSON.parse(stateText(fullState(40)));
    for (const cuts of [[], [1, 2, 3, 500, 501, 9000], Array.from({ length: 400 }, (_, i) => i * 37)]) {
      expect(stateWalkAgrees(value, cuts, 0)).toBe('walked');
    }
  });

  it('agrees with the whole text on 200 generated state files, and walks every file the hand check takes', () => {
    // About one generated file in 29 is wholly valid (state-quick.scale.test.ts): the walked path's count is
    // bounded in json-records.scale.test.ts (2,000 files); the file the agent wrote above is always walked.
    const seen = stateWalksAgree(200);
    expect(seen.text).toBeGreaterThan(50);
  });

  it('read by readStateDirFile with a walk from UNWEIGHED_BYTES: WALKED, the records the whole text gives; one record the hand check refuses: the text, as before', async () => {
    const { text } = large();
    expect(text.length).toBeGreaterThan(UNWEIGHED_BYTES);
    await writeFile(path.join(dir, STATE_FILE), text);
    const walk = stateFileWalk(UNWEIGHED_BYTES);
    expect(await readStateDirFile(nodeFs, dir, STATE_FILE, STATE_WEIGHT, walk)).toBe(WALKED);
    expect(comparable(walk.parsed())).toStrictEqual(comparable(quickStateFile(JSON.parse(text))));

    const refused = text.replace('"mode":420', '"mode":-1');
    await writeFile(path.join(dir, STATE_FILE), refused);
    const again = stateFileWalk(UNWEIGHED_BYTES);
    expect(await readStateDirFile(nodeFs, dir, STATE_FILE, STATE_WEIGHT, again)).toBe(refused);
    expect(again.parsed()).toBeUndefined();
    // Under WALKED_BYTES, loadLocalState reads the text as before.
    expect((await loadLocalState(nodeFs, dir, 'dvc_walk', silentLogger(), '/srv/root')).outcome).toBe(
      'corrupt',
    );
  });

  it('a file past its weight is refused as before, walked or not', async () => {
    const { text } = large();
    await writeFile(path.join(dir, STATE_FILE), text);
    const light = { maxTokens: 1000, maxDepth: MAX_STATE_FILE_DEPTH };
    const over = await readStateDirFile(nodeFs, dir, STATE_FILE, light, stateFileWalk(UNWEIGHED_BYTES));
    expect(over).toBeInstanceOf(StateFileOverweightError);
  });
});

describe('outbox.json walked a report at a time', () => {
  it('agrees with the whole text (emptyOutboxFile, else zod) on 200 generated outbox files', () => {
    const seen = outboxWalksAgree(200);
    expect(seen.walked).toBeGreaterThan(10);
    expect(seen.text).toBeGreaterThan(10);
  });

  it('read with a walk from UNWEIGHED_BYTES: WALKED, every report in order as zod gives it; one bad report: the text, and the file sinks as before', async () => {
    // Few reports of long ids: over UNWEIGHED_BYTES at little CPU.
    const entries = Array.from({ length: 300 }, (_, i) => ({
      seq: i,
      instanceId: `cfg_${i}`.padEnd(4000, 'x'),
      report: { activity_status: 'deployed', error_status: 'none' },
      queuedAt: '2026-03-01T12:00:00.000Z',
      listedUpdatedAt: i % 2 === 0 ? 'x' : 7,
    }));
    const text = JSON.stringify({ version: 1, nextSeq: 3, entries });
    expect(text.length).toBeGreaterThan(UNWEIGHED_BYTES);
    await writeFile(path.join(dir, OUTBOX_FILE), text);
    const walk = outboxFileWalk(UNWEIGHED_BYTES);
    const options = { clock: { now: () => 0 }, weight: OUTBOX_WEIGHT, walk };
    expect(await readStateDirFileOrSetAside(nodeFs, dir, OUTBOX_FILE, silentLogger(), options)).toBe(WALKED);
    const pending = walk.parsed()?.entries ?? [];
    expect(pending).toHaveLength(300);
    expect(walk.parsed()?.nextSeq).toBe(3);
    expect(pending[1]).toStrictEqual({
      seq: 1,
      instanceId: 'cfg_1'.padEnd(4000, 'x'),
      report: { activity_status: 'deployed', error_status: 'none' },
      queuedAt: '2026-03-01T12:00:00.000Z',
      // What zod's `.catch(undefined)` makes of a malformed one, as before.
      listedUpdatedAt: undefined,
    });
    expect(pending[299]?.instanceId).toBe('cfg_299'.padEnd(4000, 'x'));

    const refused = text.replace('"seq":5,', '"seq":-5,');
    await writeFile(path.join(dir, OUTBOX_FILE), refused);
    const again = { ...options, walk: outboxFileWalk(UNWEIGHED_BYTES) };
    expect(await readStateDirFileOrSetAside(nodeFs, dir, OUTBOX_FILE, silentLogger(), again)).toBe(refused);
    expect((await StatusOutbox.open(nodeFs, dir, silentLogger(), { now: () => 0 })).size).toBe(0);
  });
});
