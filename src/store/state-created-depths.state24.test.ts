// state24: the directories the agent made above a deep file are written to state.json by depth, not by path (a
// path per level cost the square of the depth, adv27), and read back as the same directories; version-1 readers
// (older agents) still read every record.
import { createFsFromVolume, Volume } from 'memfs';
import { describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import { sha256Hex } from '../lib/hash.js';
import { silentLogger } from '../lib/logger.js';
import { COMPACT_DIRS_OVER, emptyState, loadLocalState, STATE_FILE, saveLocalState } from './state.js';

const STATE_DIR = '/var/lib/config-agent';
const STATE_PATH = `${STATE_DIR}/${STATE_FILE}`;
const SHA = sha256Hex(Buffer.from('a'));

function memfs(files: Record<string, string> = {}) {
  const vol = Volume.fromJSON(files);
  return { fs: createFsFromVolume(vol).promises as unknown as FsPort, vol };
}

/** A file `depth` segments deep (`directory-0/.../x.json`) and its `depth - 1` ancestors, parent-first. */
function deep(depth: number): { relative: string; ancestors: string[] } {
  const segments = Array.from({ length: depth - 1 }, (_, index) => `directory-${index}`);
  const ancestors = segments.map((_, index) => segments.slice(0, index + 1).join('/'));
  return { relative: [...segments, 'x.json'].join('/'), ancestors };
}

function stateWith(relative: string, createdDirs: string[]) {
  const state = emptyState('dvc_1', '/srv/config');
  state.files.set(relative, { instanceId: 'cfg_1', sha256: SHA, mode: 0o640, createdDirs, writtenAt: 'w' });
  state.files.set('flat/a.json', {
    instanceId: 'cfg_2',
    sha256: SHA,
    mode: 0o640,
    createdDirs: ['flat'],
    writtenAt: 'w',
  });
  return state;
}

async function load(fs: FsPort) {
  return loadLocalState(fs, STATE_DIR, 'dvc_1', silentLogger(), '/srv/config');
}

describe('the directories made above a deep file', () => {
  it('are written as depths, read back as the same paths, and an unchanged state is not written again', async () => {
    const { relative, ancestors } = deep(300);
    // A record that also names a directory not above the file (a hand edit): kept as a path.
    const made = [...ancestors.slice(100), 'elsewhere'];
    const { fs, vol } = memfs();
    await saveLocalState(fs, STATE_DIR, stateWith(relative, made));
    const text = vol.readFileSync(STATE_PATH, 'utf8') as string;
    const written = JSON.parse(text).files;
    expect(written[relative].createdDirs).toEqual(['elsewhere']);
    expect(written[relative].createdDepths).toEqual(Array.from({ length: 199 }, (_, index) => index + 101));
    // Short ones as before: an older agent prunes them as ever.
    expect(written['flat/a.json']).toEqual({
      instanceId: 'cfg_2',
      sha256: SHA,
      mode: 0o640,
      createdDirs: ['flat'],
      writtenAt: 'w',
    });
    // About the path per level, not a path per level (~1.2 MB as paths).
    expect(text.length).toBeLessThan(10 * relative.length);

    const { state, outcome } = await load(fs);
    expect(outcome).toBe('loaded');
    expect(state.files.get(relative)?.createdDirs).toEqual(['elsewhere', ...ancestors.slice(100)]);
    expect(await saveLocalState(fs, STATE_DIR, state)).toBe(false);
  });

  it('up to COMPACT_DIRS_OVER characters of paths, a record is written as older agents wrote it', async () => {
    const { relative, ancestors } = deep(10);
    const total = ancestors.reduce((sum, dir) => sum + dir.length, 0);
    expect(total).toBeLessThanOrEqual(COMPACT_DIRS_OVER);
    const { fs, vol } = memfs();
    await saveLocalState(fs, STATE_DIR, stateWith(relative, ancestors));
    const written = JSON.parse(vol.readFileSync(STATE_PATH, 'utf8') as string).files;
    expect(written[relative].createdDirs).toEqual(ancestors);
    expect(written[relative]).not.toHaveProperty('createdDepths');
  });

  it('an older agent (which drops the field it does not know) still owns every file, pruning fewer directories', async () => {
    const { relative, ancestors } = deep(300);
    const { fs, vol } = memfs();
    await saveLocalState(fs, STATE_DIR, stateWith(relative, ancestors));
    const file = JSON.parse(vol.readFileSync(STATE_PATH, 'utf8') as string);
    expect(file.version).toBe(1);
    for (const record of Object.values(file.files) as Array<Record<string, unknown>>) {
      expect(
        Array.isArray(record.createdDirs) && record.createdDirs.every((d) => typeof d === 'string'),
      ).toBe(true);
      delete record.createdDepths;
    }
    const older = memfs({ [STATE_PATH]: JSON.stringify(file) });
    const { state, outcome } = await load(older.fs);
    expect(outcome).toBe('loaded');
    expect([...state.files].map(([path, record]) => [path, record.instanceId, record.sha256])).toEqual([
      [relative, 'cfg_1', SHA],
      ['flat/a.json', 'cfg_2', SHA],
    ]);
    expect(state.files.get(relative)?.createdDirs).toEqual([]);
  });

  it('a depth that names no directory above its file makes state.json unreadable (kept aside, nothing deleted)', async () => {
    const { relative, ancestors } = deep(300);
    const { fs, vol } = memfs();
    await saveLocalState(fs, STATE_DIR, stateWith(relative, ancestors));
    const file = JSON.parse(vol.readFileSync(STATE_PATH, 'utf8') as string);
    file.files[relative].createdDepths.push(300);
    const edited = memfs({ [STATE_PATH]: JSON.stringify(file) });
    const { state, outcome } = await load(edited.fs);
    expect(outcome).toBe('corrupt');
    expect(state.files.size).toBe(0);
  });
});
