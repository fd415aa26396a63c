// mut24: state.json's createdDepths (state24) read back beside paths a hand left in createdDirs: one list, parent-first.
import { createFsFromVolume, Volume } from 'memfs';
import { describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import { sha256Hex } from '../lib/hash.js';
import { silentLogger } from '../lib/logger.js';
import { COMPACT_DIRS_OVER, emptyState, loadLocalState, STATE_FILE, saveLocalState } from './state.js';

const STATE_DIR = '/var/lib/config-agent';
const SHA = sha256Hex(Buffer.from('a'));

async function loaded(record: Record<string, unknown>) {
  const file = {
    version: 1,
    deviceId: 'dvc_1',
    rootDir: '/srv/config',
    files: {
      'a/b/c.json': { instanceId: 'cfg_1', sha256: SHA, mode: 0o640, writtenAt: 'w', ...record },
    },
    instances: {},
    pendingHookPaths: [],
  };
  const vol = Volume.fromJSON({ [`${STATE_DIR}/${STATE_FILE}`]: JSON.stringify(file) });
  const fs = createFsFromVolume(vol).promises as unknown as FsPort;
  return loadLocalState(fs, STATE_DIR, 'dvc_1', silentLogger(), '/srv/config');
}

describe('createdDepths read back (mut24)', () => {
  it('joins the depths with the paths of createdDirs, parent-first, whatever order the paths were written in', async () => {
    const { state, outcome } = await loaded({ createdDirs: ['x/y/z/w', 'q'], createdDepths: [1, 2] });
    expect(outcome).toBe('loaded');
    expect(state.files.get('a/b/c.json')?.createdDirs).toEqual(['q', 'a', 'a/b', 'x/y/z/w']);
  });

  it('a depth past the parent, 0 or not a whole number makes state.json unreadable', async () => {
    for (const createdDepths of [[3], [0], [1.5], ['1'], {}]) {
      const { state, outcome } = await loaded({ createdDirs: [], createdDepths });
      expect(outcome).toBe('corrupt');
      expect(state.files.size).toBe(0);
    }
    const { state } = await loaded({ createdDirs: [], createdDepths: [2] });
    expect(state.files.get('a/b/c.json')?.createdDirs).toEqual(['a/b']);
  });

  it('writes as depths only the directories above the file: a name it begins with, or one as long, stay paths', async () => {
    const segments = Array.from({ length: 40 }, (_, index) => `directory-${index}`);
    const relative = [...segments, 'x.json'].join('/');
    const above = segments.map((_, index) => segments.slice(0, index + 1).join('/'));
    // `directory-0` begins `directory-0x`'s path; `zzzzzzzzzzz` is as long as `directory-0`, a slash after both.
    const notAbove = ['directory-0x', 'directory', 'zzzzzzzzzzz', 'directory-0/directory-1/other'];
    const vol = Volume.fromJSON({});
    const fs = createFsFromVolume(vol).promises as unknown as FsPort;
    const state = emptyState('dvc_1', '/srv/config');
    const record = { instanceId: 'cfg_1', sha256: SHA, mode: 0o640, writtenAt: 'w' };
    state.files.set(relative, { ...record, createdDirs: [...above, ...notAbove] });
    // Long, but none above its file: no createdDepths at all.
    const lone = `${'n'.repeat(200)}/y.json`;
    state.files.set(lone, {
      ...record,
      createdDirs: Array.from({ length: 6 }, (_, i) => `${'m'.repeat(200)}${i}`),
    });
    await saveLocalState(fs, STATE_DIR, state);
    const written = JSON.parse(vol.readFileSync(`${STATE_DIR}/${STATE_FILE}`, 'utf8') as string).files;
    expect(written[relative].createdDirs).toEqual(notAbove);
    expect(written[relative].createdDepths).toEqual(above.map((_, index) => index + 1));
    expect(written[lone]).toEqual({ ...record, createdDirs: state.files.get(lone)?.createdDirs });
    const back = await loadLocalState(fs, STATE_DIR, 'dvc_1', silentLogger(), '/srv/config');
    expect(back.outcome).toBe('loaded');
    expect([...(back.state.files.get(relative)?.createdDirs ?? [])].sort()).toEqual(
      [...above, ...notAbove].sort(),
    );
  });

  it('writes paths adding up to exactly COMPACT_DIRS_OVER characters as paths, one more as depths', async () => {
    for (const [last, compact] of [
      [COMPACT_DIRS_OVER - 953, false],
      [COMPACT_DIRS_OVER - 952, true],
    ] as const) {
      // Parents of 250, 250 + 1 + 100 and 250 + 1 + 100 + 1 + `last` characters: 953 + `last` in all.
      const a = 'p'.repeat(250);
      const chain = [a, `${a}/${'b'.repeat(100)}`, `${a}/${'b'.repeat(100)}/${'c'.repeat(last)}`];
      const relative = `${chain[2]}/x.json`;
      const vol = Volume.fromJSON({});
      const fs = createFsFromVolume(vol).promises as unknown as FsPort;
      const state = emptyState('dvc_1', '/srv/config');
      state.files.set(relative, {
        instanceId: 'cfg_1',
        sha256: SHA,
        mode: 0o640,
        createdDirs: chain,
        writtenAt: 'w',
      });
      await saveLocalState(fs, STATE_DIR, state);
      const written = JSON.parse(vol.readFileSync(`${STATE_DIR}/${STATE_FILE}`, 'utf8') as string).files[
        relative
      ];
      expect(written.createdDirs).toEqual(compact ? [] : chain);
      expect(written.createdDepths).toEqual(compact ? [1, 2, 3] : undefined);
    }
  });

  it("the hand check refuses what zod refuses in a record's other fields: a mode or keptMode past 0o7777, an empty id", async () => {
    for (const wrong of [{ mode: 0o10000 }, { keptMode: 0o10000 }, { instanceId: '' }, { size: -1 }]) {
      const { state, outcome } = await loaded({ createdDirs: [], ...wrong });
      expect(outcome).toBe('corrupt');
      expect(state.files.size).toBe(0);
    }
    const { state } = await loaded({ createdDirs: [], mode: 0o7777, keptMode: 0o7777 });
    expect(state.files.get('a/b/c.json')).toMatchObject({ mode: 0o7777, keptMode: 0o7777 });
  });
});
