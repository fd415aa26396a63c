// Names set aside in stateDir stay unique when the wall clock repeats (a device booting at 1970 before NTP):
// each boot's set-aside entry is kept, none replaces or blocks another.
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../lib/logger.js';
import { StateDir } from './state-dir.js';

let dir: string;
const stateDir = () => path.join(dir, 'state');

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-aside-names-'));
  await mkdir(stateDir(), { mode: 0o700 });
  await mkdir(path.join(dir, 'root'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** One boot: StateDir.open with a clock held at the epoch's first second, as an RTC-less device starts. */
async function boot(): Promise<void> {
  const settings = { stateDir: stateDir(), rootDir: path.join(dir, 'root'), deviceId: 'dvc_1970' };
  const clock = { now: () => 1_000 };
  await (await StateDir.open(nodeFs, settings, silentLogger(), { clock })).close();
}

describe('a set-aside name is unique when the clock repeats across boots', () => {
  it('a directory at intent.json on three boots at the same ms: three entries set aside, each kept whole', async () => {
    for (const boot_ of [1, 2, 3]) {
      await mkdir(path.join(stateDir(), 'intent.json'));
      await writeFile(path.join(stateDir(), 'intent.json', 'evidence'), `boot ${boot_}`);
      await boot();
    }
    const aside = (await readdir(stateDir())).filter((e) => e.startsWith('intent.json.not-regular-')).sort();
    expect(aside).toEqual([
      'intent.json.not-regular-1000',
      'intent.json.not-regular-1000-1',
      'intent.json.not-regular-1000-2',
    ]);
    const kept = await Promise.all(aside.map((e) => readFile(path.join(stateDir(), e, 'evidence'), 'utf8')));
    expect(kept).toEqual(['boot 1', 'boot 2', 'boot 3']);
  });

  it('a symlink at outbox.json after an earlier boot set one aside: the earlier one is not replaced', async () => {
    await symlink(path.join(dir, 'first-target'), path.join(stateDir(), 'outbox.json'));
    await boot();
    await symlink(path.join(dir, 'second-target'), path.join(stateDir(), 'outbox.json'));
    await boot();
    const aside = (await readdir(stateDir())).filter((e) => e.startsWith('outbox.json.not-regular-')).sort();
    expect(aside).toEqual(['outbox.json.not-regular-1000', 'outbox.json.not-regular-1000-1']);
    const targets = await Promise.all(aside.map((e) => nodeFs.readlink(path.join(stateDir(), e))));
    expect(targets).toEqual([path.join(dir, 'first-target'), path.join(dir, 'second-target')]);
  });

  it('cache as a file twice at the same ms: both set aside with their bytes, a cache directory after', async () => {
    for (const bytes of ['first', 'second']) {
      await writeFile(path.join(stateDir(), 'cache'), bytes);
      await boot();
    }
    const aside = (await readdir(stateDir())).filter((e) => e.startsWith('cache.not-a-directory-')).sort();
    expect(aside).toEqual(['cache.not-a-directory-1000', 'cache.not-a-directory-1000-1']);
    const kept = await Promise.all(aside.map((e) => readFile(path.join(stateDir(), e), 'utf8')));
    expect(kept).toEqual(['first', 'second']);
  });
});
