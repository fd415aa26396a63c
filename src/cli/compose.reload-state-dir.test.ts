// A reload to another stateDir that fails leaves nothing of the new one held: its lock is not kept by the running agent.
import { existsSync } from 'node:fs';
import { mkdtemp, rename, rm, symlink } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { startReloadable, writeSilentConfig } from '../../test/helpers/reload-daemon.js';
import { LOCK_FILE } from '../store/lock.js';

const KEY = 'sk_test_reload_state_4c2d9e8f1a';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-reload-state-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const writeConfig = (configPath: string, stateDir: string) =>
  writeSilentConfig(configPath, { deviceId: 'dvc_reload_state', rootDir: path.join(dir, 'root'), stateDir });

it('SIGHUP to another stateDir while the old one cannot be flushed: the reload fails and the new stateDir is not locked', async () => {
  const configPath = path.join(dir, 'config.json');
  const oldState = path.join(dir, 'state');
  const newState = path.join(dir, 'state-new');
  await writeConfig(configPath, oldState);
  const daemon = await startReloadable(configPath, KEY);
  try {
    // The old stateDir swapped for a symlink under the running agent: its state is flushed nowhere (the lock check
    // refuses a stateDir that resolves elsewhere now), so the reload fails and the old configuration stays.
    await rename(oldState, `${oldState}.real`);
    await symlink(`${oldState}.real`, oldState);
    await writeConfig(configPath, newState);
    daemon.hup();
    await daemon.logged('configuration reload failed', 'the failed reload');
    // Before: the new stateDir was opened (and locked) before the old one was flushed, and left so: the running
    // agent held its lock, with a record of renewal asides read from it in place of the running one's.
    expect(existsSync(path.join(newState, LOCK_FILE))).toBe(false);
  } finally {
    await daemon.stop();
  }
});
