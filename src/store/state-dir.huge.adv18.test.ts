// StateDir.open on state files longer than any string (sparse or runaway files): it opens, as for unreadable ones.
import { constants as bufferConstants } from 'node:buffer';
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readdir, rm, stat, truncate, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../lib/logger.js';
import { CORRUPT_STATE_FILE, StateDir } from './state-dir.js';

let dir: string;
let settings: { stateDir: string; rootDir: string; deviceId: string };

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'state-dir-huge-adv18-'));
  settings = { stateDir: path.join(dir, 'state'), rootDir: path.join(dir, 'root'), deviceId: 'dvc_huge' };
  await mkdir(settings.stateDir, { mode: 0o700 });
  await mkdir(settings.rootDir);
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const STATE_FILES = ['state.json', 'outbox.json', 'intent.json', 'fingerprints.json', 'renewal-asides.json'];

/** A sparse file of `size` bytes: no disk used, made in an instant. */
async function sparse(file: string, size: number): Promise<void> {
  await writeFile(file, '');
  await truncate(file, size);
}

describe('state files longer than any string', () => {
  // A sparse or runaway file (a broken disk, a hand's truncate) failed every start for good: "stateDir is not
  // usable: cannot read state.json: ERR_FS_FILE_TOO_LARGE" (over 2 GiB), or after reading it all ("Invalid string
  // length"), so neither --once nor the daemon ever ran again.
  it.each([
    ['3 GiB', 3 * 2 ** 30],
    ['one byte past the longest string', bufferConstants.MAX_STRING_LENGTH + 1],
  ])(
    '(%s) are read as unreadable: the state kept aside, every file started empty, the next persist whole',
    async (_what, size) => {
      for (const name of STATE_FILES) await sparse(path.join(settings.stateDir, name), size);

      const opened = await StateDir.open(nodeFs, settings, silentLogger(), { clock: { now: () => 0 } });
      expect(opened.state.files.size).toBe(0);
      await opened.persist();
      await opened.close();

      expect((await stat(path.join(settings.stateDir, CORRUPT_STATE_FILE))).size).toBe(size);
      expect((await stat(path.join(settings.stateDir, 'state.json'))).size).toBeLessThan(4096);
      // The next start reads what the persist wrote.
      const again = await StateDir.open(nodeFs, settings, silentLogger(), { clock: { now: () => 0 } });
      await again.close();
      expect(await readdir(settings.stateDir)).toContain(CORRUPT_STATE_FILE);
    },
  );
});
