// StateDir.open run by root on a stateDir another user owns: refused before anything is written there.

import * as nodeFs from 'node:fs/promises';
import { chown, mkdir, mkdtemp, readdir, rename, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { exitCodeForStartupError } from '../cli/exit-codes.js';
import { silentLogger } from '../lib/logger.js';
import { StateDirError } from './errors.js';
import { StateDir } from './state-dir.js';

const AGENT_UID = 65534;
const asRoot = process.geteuid?.() === 0;

let dir: string;
let settings: { stateDir: string; rootDir: string; deviceId: string };

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'state-dir-owner-'));
  settings = { stateDir: path.join(dir, 'state'), rootDir: path.join(dir, 'root'), deviceId: 'dvc_owner' };
  await mkdir(settings.stateDir, { mode: 0o700 });
  await mkdir(settings.rootDir);
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe.skipIf(!asRoot)('root on the agent user’s stateDir', () => {
  it('is refused (exit 78) and writes nothing there: no lock, no state.json, no outbox.json', async () => {
    await writeFile(path.join(settings.stateDir, 'state.json'), 'kept as it is');
    await chown(settings.stateDir, AGENT_UID, AGENT_UID);
    await chown(path.join(settings.stateDir, 'state.json'), AGENT_UID, AGENT_UID);

    const refused = await StateDir.open(nodeFs, settings, silentLogger(), { clock: { now: () => 0 } }).catch(
      (error: unknown) => error,
    );

    expect(refused).toBeInstanceOf(StateDirError);
    expect((refused as StateDirError).retryable).toBe(false);
    expect(exitCodeForStartupError(refused)).toBe(78);
    expect((refused as Error).message).toContain('refusing to run as root');
    expect((refused as Error).message).toContain(`it belongs to uid ${AGENT_UID}`);
    // What to do instead: run as that user, or ask the running agent; and why.
    expect((refused as Error).message).toContain(`sudo -u '#${AGENT_UID}'`);
    expect((refused as Error).message).toContain("'config-agent sync'");
    expect((refused as Error).message).toContain('the agent would no longer start');
    expect(await readdir(settings.stateDir)).toEqual(['state.json']);
  });

  it('a dry run (read-only) is not refused; nor is root on its own stateDir, nor the owner itself', async () => {
    await chown(settings.stateDir, AGENT_UID, AGENT_UID);
    await (
      await StateDir.open(nodeFs, settings, silentLogger(), { clock: { now: () => 0 }, readOnly: true })
    ).close();
    expect(await readdir(settings.stateDir)).toEqual([]);
    // The owner (its euid given; the files are still written by this root process, which is fine here).
    const owner = await StateDir.open(nodeFs, settings, silentLogger(), {
      clock: { now: () => 0 },
      euid: AGENT_UID,
    });
    await owner.persist();
    await owner.close();
    expect((await readdir(settings.stateDir)).sort()).toEqual(['outbox.json', 'state.json']);
    await chown(settings.stateDir, 0, 0);
    await (await StateDir.open(nodeFs, settings, silentLogger(), { clock: { now: () => 0 } })).close();
  });
});

describe.skipIf(!asRoot)('the agent user’s euid given to StateDir.open', () => {
  it('is the owner a symlinked outbox.json’s target must have for its reports to be kept', async () => {
    const first = await StateDir.open(nodeFs, settings, silentLogger(), {
      clock: { now: () => 0 },
      euid: AGENT_UID,
    });
    first.outbox.enqueue('cfg_a', { activity_status: 'deployed', error_status: 'none' }, new Date(0));
    await first.persist();
    await first.close();
    // outbox.json replaced by a symlink to the same bytes in a file the agent's user owns.
    const target = path.join(dir, 'outbox-elsewhere.json');
    await rename(path.join(settings.stateDir, 'outbox.json'), target);
    await chown(target, AGENT_UID, AGENT_UID);
    await symlink(target, path.join(settings.stateDir, 'outbox.json'));

    const second = await StateDir.open(nodeFs, settings, silentLogger(), {
      clock: { now: () => 0 },
      euid: AGENT_UID,
    });
    expect(second.outbox.pending().map((entry) => entry.instanceId)).toEqual(['cfg_a']);
    await second.close();
  });
});

describe('root (euid 0) on a stateDir it cannot stat', () => {
  it('is not refused as root: the lock that follows names the problem', async () => {
    await rm(settings.stateDir, { recursive: true });
    const failed = await StateDir.open(nodeFs, settings, silentLogger(), {
      clock: { now: () => 0 },
      euid: 0,
    }).catch((error: unknown) => error);
    expect(failed).toBeInstanceOf(Error);
    expect((failed as Error).message).not.toContain('refusing to run as root');
    expect((failed as Error).message).toContain('agent.lock');
  });
});
