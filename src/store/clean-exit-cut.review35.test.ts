// The clean-exit marker a start takes is gone durably before anything is written: a cut of stateDir's disk cannot bring it back.
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readdir, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PowerCutFs } from '../../test/helpers/power-cut-fs.js';
import { silentLogger } from '../lib/logger.js';
import { CLEAN_EXIT_FILE } from './clean-exit.js';
import { StateDir } from './state-dir.js';

let dir: string;
let settings: { stateDir: string; rootDir: string; deviceId: string };
const clock = { now: () => Date.UTC(2026, 10, 25, 12) };

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'clean-exit-cut-'));
  settings = { stateDir: path.join(dir, 'state'), rootDir: path.join(dir, 'root'), deviceId: 'dvc_cut' };
  await mkdir(settings.stateDir, { mode: 0o700 });
  await mkdir(settings.rootDir);
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('the clean-exit marker and a power cut (review35)', () => {
  it('taken at a start, it is not in what a cut of stateDir then leaves', async () => {
    const first = await StateDir.open(nodeFs, settings, silentLogger(), { clock });
    await first.close({ clean: true });
    expect(await readdir(settings.stateDir)).toContain(CLEAN_EXIT_FILE);
    const model = await PowerCutFs.over(nodeFs, settings.stateDir);
    expect(model.afterPowerCut()).toHaveProperty([CLEAN_EXIT_FILE]);
    // The start that skips the sweep on it: from here on its writes may leave temp files in rootDir.
    const second = await StateDir.open(model.fs, settings, silentLogger(), { clock });
    expect(await readdir(settings.stateDir)).not.toContain(CLEAN_EXIT_FILE);
    expect(model.afterPowerCut()).not.toHaveProperty([CLEAN_EXIT_FILE]);
    await second.close();
  });
});
