// A state.json of 150,000 managed files loads whole, walked a record at a time as the whole text parses: nothing in loading is bounded by the call stack (integration tier: seconds of CPU).
import { createFsFromVolume, Volume } from 'memfs';
import { describe, expect, it } from 'vitest';
import { comparable } from '../../test/helpers/record-walk-oracle.js';
import type { FsPort } from '../lib/fs-port.js';
import { sha256Hex } from '../lib/hash.js';
import { silentLogger } from '../lib/logger.js';
import {
  emptyState,
  loadLocalState,
  quickStateFile,
  STATE_FILE,
  saveLocalState,
  WALKED_BYTES,
} from './state.js';

const STATE_DIR = '/var/lib/config-agent';
const SHA_A = sha256Hex(Buffer.from('a'));

function memfs(): { fs: FsPort } {
  const vol = Volume.fromJSON({});
  vol.mkdirSync(STATE_DIR, { recursive: true });
  return { fs: createFsFromVolume(vol).promises as unknown as FsPort };
}

describe('a large state at start-up', () => {
  // Seconds on an idle machine, but 118 s was seen at a load of 35: a bound for a hung test, not a speed check.
  it('loads 150,000 managed files (more than V8 takes as spread arguments) without any call-stack bound', {
    timeout: 600_000,
  }, async () => {
    const { fs } = memfs();
    const saved = emptyState('dvc_1');
    for (let i = 0; i < 150_000; i += 1) {
      saved.files.set(`f/${i}.json`, {
        instanceId: `cfg_${i}`,
        sha256: SHA_A,
        mode: 0o644,
        createdDirs: [],
        writtenAt: '2026-03-01T12:00:00.000Z',
      });
    }
    await saveLocalState(fs, STATE_DIR, saved);
    const { state, outcome } = await loadLocalState(fs, STATE_DIR, 'dvc_1', silentLogger());
    expect(outcome).toBe('loaded');
    expect(state.files.size).toBe(150_000);
    // Over WALKED_BYTES, so walked a record at a time: the records the whole text parses to, in its order.
    const text = (await fs.readFile(`${STATE_DIR}/${STATE_FILE}`, 'utf8')) as string;
    expect(text.length).toBeGreaterThan(WALKED_BYTES);
    expect(comparable(state.files)).toStrictEqual(comparable(quickStateFile(JSON.parse(text))?.files));
  });
});
