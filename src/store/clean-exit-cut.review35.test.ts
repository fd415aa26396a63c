// The clean-exit marker a start takes is gone durably before anything is written: a cut of stateDir's disk cannot bring it back.
import * as nodeFs from 'node:fs/promises';
import { readdir } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { PowerCutFs } from '../../test/helpers/power-cut-fs.js';
import { tempDirEachTest } from '../../test/helpers/temp-dir.js';
import { silentLogger } from '../lib/logger.js';
import { CLEAN_EXIT_FILE } from './clean-exit.js';
import { StateDir } from './state-dir.js';

const temp = tempDirEachTest('clean-exit-cut-', { state: 0o700, root: undefined });
const settings = () => ({ stateDir: temp.at('state'), rootDir: temp.at('root'), deviceId: 'dvc_cut' });
const clock = { now: () => Date.UTC(2026, 10, 25, 12) };

describe('the clean-exit marker and a power cut (review35)', () => {
  it('taken at a start, it is not in what a cut of stateDir then leaves', async () => {
    const first = await StateDir.open(nodeFs, settings(), silentLogger(), { clock });
    await first.close({ clean: true });
    expect(await readdir(settings().stateDir)).toContain(CLEAN_EXIT_FILE);
    const model = await PowerCutFs.over(nodeFs, settings().stateDir);
    expect(model.afterPowerCut()).toHaveProperty([CLEAN_EXIT_FILE]);
    // The start that skips the sweep on it: from here on its writes may leave temp files in rootDir.
    const second = await StateDir.open(model.fs, settings(), silentLogger(), { clock });
    expect(await readdir(settings().stateDir)).not.toContain(CLEAN_EXIT_FILE);
    expect(model.afterPowerCut()).not.toHaveProperty([CLEAN_EXIT_FILE]);
    await second.close();
  });
});
