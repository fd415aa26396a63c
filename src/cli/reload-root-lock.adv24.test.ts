// SIGHUP to a rootDir another agent holds (adv24): the reload fails half-way (new deps made, the old state flushed), nothing of the new one is held, the running configuration goes on; once the holder ends, the reload takes it.
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { startReloadable, writeSilentConfig } from '../../test/helpers/reload-daemon.js';
import { holdRootName, killRootHolders } from '../../test/helpers/root-lock-holder.js';
import { LOCK_FILE } from '../store/lock.js';

const KEY = 'sk_test_reload_root_7e1f0a2b9c';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-reload-root-adv24-'));
});

afterEach(async () => {
  killRootHolders();
  await rm(dir, { recursive: true, force: true });
});

const writeConfig = (configPath: string, rootDir: string, stateDir: string) =>
  writeSilentConfig(configPath, { deviceId: 'dvc_reload_root', rootDir, stateDir });

it('SIGHUP to a rootDir another agent holds: refused naming it, the running configuration kept; taken once it ends', async () => {
  const configPath = path.join(dir, 'config.json');
  const oldRoot = path.join(dir, 'root');
  const newRoot = path.join(dir, 'root-new');
  const newState = path.join(dir, 'state-new');
  await mkdir(newRoot);
  await writeFile(
    path.join(newRoot, `.config-agent.tmp-${'cd'.repeat(12)}`),
    '{"other agent\'s write in flight',
  );
  await writeConfig(configPath, oldRoot, path.join(dir, 'state'));
  const daemon = await startReloadable(configPath, KEY);
  try {
    const holder = await holdRootName(newRoot);
    await writeConfig(configPath, newRoot, newState);
    daemon.hup();
    await daemon.logged('configuration reload failed', 'the failed reload');
    const failed =
      daemon
        .err()
        .split('\n')
        .find((line) => line.includes('configuration reload failed')) ?? '';
    expect(failed).toContain(newRoot);
    expect(failed).toContain(`pid ${holder.pid}`);
    expect(failed).toContain('/srv/other/state');
    // Nothing of the new configuration held, nothing of the other agent's swept.
    expect(existsSync(path.join(newState, LOCK_FILE))).toBe(false);
    expect(await readdir(newRoot)).toEqual([`.config-agent.tmp-${'cd'.repeat(12)}`]);
    expect(existsSync(path.join(dir, 'state', LOCK_FILE))).toBe(true);

    await holder.end();
    await rm(path.join(newRoot, `.config-agent.tmp-${'cd'.repeat(12)}`));
    daemon.hup();
    await daemon.logged('configuration reloaded', 'the reload');
    expect(existsSync(path.join(newState, LOCK_FILE))).toBe(true);
    expect(existsSync(path.join(dir, 'state', LOCK_FILE))).toBe(false);
  } finally {
    await daemon.stop();
  }
});
