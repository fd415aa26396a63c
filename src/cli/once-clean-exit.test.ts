// `--once` end to end with the clean-exit marker: only a run that wrote nothing into rootDir lets the next skip the sweep.

import { readdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { onceInstance, onceWorldEachTest, readable } from '../../test/helpers/once-world.js';
import { startMockServer } from '../mock-server/server.js';
import { CLEAN_EXIT_FILE } from '../store/clean-exit.js';
import { TEMP_PREFIX } from '../store/path-guard.js';

const KEY = 'sk_test_clean_exit_0123456789';
const DEVICE = 'dvc_clean_exit';
const aJson = onceInstance(DEVICE, 'cfg_a', 'etc/a.json', { a: 1 });

// Its log is not asserted on: silent, which halves each run's time. The run that cannot reach the service
// retries from a 1 ms base instead of 500 ms (jittered: ~0.45 s of real waiting a run, a worker held).
const world = onceWorldEachTest(KEY, DEVICE, 'config-agent-clean-exit-', [aJson], {
  logLevel: 'silent',
  requestRetryBaseMs: 1,
});
const once = async (): Promise<number> => (await world().once()).code;
const planted = () => path.join(world().dir, 'root', 'etc', `${TEMP_PREFIX}planted`);
const hasMarker = async () => (await readdir(path.join(world().dir, 'state'))).includes(CLEAN_EXIT_FILE);
const exists = readable;

describe('--once and the clean-exit marker', () => {
  it('an idle run leaves it and the next skips the sweep; a run that writes leaves none, so the one after sweeps', async () => {
    expect(await once()).toBe(0);
    // That run wrote etc/a.json: no marker, whatever its end.
    expect(await hasMarker()).toBe(false);
    expect(await once()).toBe(0);
    expect(await hasMarker()).toBe(true);
    // Idle with the marker: rootDir is not swept (a temp-named file nobody's crash left stays), a marker again.
    await writeFile(planted(), 'not the agent’s');
    expect(await once()).toBe(0);
    expect(await exists(planted())).toBe(true);
    expect(await hasMarker()).toBe(true);
    // The file removed by hand: the run writes it back, so it leaves no marker and the next start sweeps.
    await rm(path.join(world().dir, 'root', 'etc', 'a.json'));
    expect(await once()).toBe(0);
    expect(JSON.parse(await readFile(path.join(world().dir, 'root', 'etc', 'a.json'), 'utf8'))).toEqual({
      a: 1,
    });
    expect(await hasMarker()).toBe(false);
    expect(await exists(planted())).toBe(true);
    expect(await once()).toBe(0);
    expect(await exists(planted())).toBe(false);
    expect(await hasMarker()).toBe(true);
  });

  it('a run that cannot reach the service leaves none', async () => {
    expect(await once()).toBe(0);
    expect(await once()).toBe(0);
    expect(await hasMarker()).toBe(true);
    await world().server.close();
    expect(await once()).not.toBe(0);
    expect(await hasMarker()).toBe(false);
    world().server = await startMockServer({
      apiKeys: [KEY],
      fixtures: { devices: [], config_instances: [] },
    });
  });
});
