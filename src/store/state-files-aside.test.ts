// State files that are not regular files (a directory, FIFO, symlink at intent.json, outbox.json or
// fingerprints.json) are moved aside at start-up, through `--once` against the mock: they exited 78 for good.
import { execFileSync } from 'node:child_process';
import * as nodeFs from 'node:fs/promises';
import { lstat, mkdir, readdir, readFile, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { onceInstance, onceWorldEachTest } from '../../test/helpers/once-world.js';
import { silentLogger } from '../lib/logger.js';
import { StatusOutbox } from './outbox.js';
import { StateDir } from './state-dir.js';

const KEY = 'sk_test_state_files_aside_0123';
const DEVICE = 'dvc_aside';

const world = onceWorldEachTest(KEY, DEVICE, 'config-agent-aside-', [
  onceInstance(DEVICE, 'cfg_a', 'a.json', { a: 1 }),
  // Retired before this device's first run: no pass reports anything of it.
  onceInstance(DEVICE, 'cfg_gone', 'gone.json', {}, { target_status: 'removed', activity_status: 'removed' }),
]);
const once = () => world().once();
const stateDir = () => path.join(world().dir, 'state');

/** Plants `kind` at stateDir/name. */
async function plant(name: string, kind: 'directory' | 'FIFO' | 'dangling symlink'): Promise<void> {
  await mkdir(stateDir(), { recursive: true, mode: 0o700 });
  const at = path.join(stateDir(), name);
  if (kind === 'directory') await mkdir(path.join(at, 'inside'), { recursive: true });
  else if (kind === 'FIFO') execFileSync('mkfifo', [at]);
  else await symlink(path.join(world().dir, 'nowhere'), at);
}

async function expectSynced(name: string): Promise<void> {
  expect(JSON.parse(await readFile(path.join(world().dir, 'root', 'a.json'), 'utf8'))).toEqual({ a: 1 });
  expect(world().server.state.reports.map((r) => [r.config_instance_id, r.activity_status])).toContainEqual([
    'cfg_a',
    'deployed',
  ]);
  const entries = await readdir(stateDir());
  expect(entries.filter((entry) => entry.startsWith(`${name}.not-regular-`))).toHaveLength(1);
  // Whatever holds the name now is the agent's own regular file (or nothing).
  const now = await lstat(path.join(stateDir(), name)).catch(() => undefined);
  expect(now === undefined || now.isFile()).toBe(true);
}

describe('a state file that is not a regular file is moved aside; the agent starts and syncs', () => {
  for (const name of ['intent.json', 'renewal-asides.json', 'outbox.json', 'fingerprints.json']) {
    for (const kind of ['directory', 'FIFO', 'dangling symlink'] as const) {
      it(`${name} as a ${kind}`, async () => {
        await plant(name, kind);
        const { code, err } = await once();
        expect(code).toBe(0);
        expect(err).toContain(`${name} was not a regular file: moved aside`);
        await expectSynced(name);
        // The next run finds nothing to set aside.
        expect((await once()).code).toBe(0);
        expect((await readdir(stateDir())).filter((e) => e.includes('.not-regular-'))).toHaveLength(1);
      });
    }
  }
});

/** An outbox holding one queued report for cfg_gone, which the pass itself never reports. */
async function queuedOutbox(at: string, mode: number): Promise<void> {
  await writeFile(
    at,
    JSON.stringify({
      version: 1,
      nextSeq: 1,
      entries: [
        {
          seq: 0,
          instanceId: 'cfg_gone',
          report: { activity_status: 'removed', error_status: 'none', message: 'salvaged report' },
          queuedAt: '2026-11-23T00:00:00.000Z',
        },
      ],
    }),
    { mode },
  );
}

describe('outbox.json as a symlink to a regular file', () => {
  it("the agent's own 0600 file: its queued reports are kept and sent", async () => {
    await mkdir(stateDir(), { recursive: true, mode: 0o700 });
    const target = path.join(world().dir, 'own-outbox.json');
    await queuedOutbox(target, 0o600);
    await symlink(target, path.join(stateDir(), 'outbox.json'));
    const { code } = await once();
    expect(code).toBe(0);
    expect(world().server.state.reports.map((r) => r.message)).toContain('salvaged report');
    await expectSynced('outbox.json');
  });

  it("another user's file is not trusted: nothing of it is kept, the link is set aside", async () => {
    await mkdir(stateDir(), { recursive: true, mode: 0o700 });
    const target = path.join(world().dir, 'their-outbox.json');
    await queuedOutbox(target, 0o600);
    await symlink(target, path.join(stateDir(), 'outbox.json'));
    // The agent's user as StatusOutbox.open takes it: the file's owner is someone else (no chown, any user).
    const owner = (await lstat(target)).uid;
    const theirs = await StatusOutbox.open(
      nodeFs,
      stateDir(),
      silentLogger(),
      { now: () => 0 },
      owner + 4242,
    );
    expect(theirs.pending()).toEqual([]);
    const entries = await readdir(stateDir());
    expect(entries.filter((entry) => entry.startsWith('outbox.json.not-regular-'))).toHaveLength(1);
    // The same file, its owner the agent's user: kept (what tells the two apart is the owner alone).
    await symlink(target, path.join(stateDir(), 'outbox.json'));
    const own = await StatusOutbox.open(nodeFs, stateDir(), silentLogger(), { now: () => 0 }, owner);
    expect(own.pending().map((entry) => entry.report.message)).toEqual(['salvaged report']);
  });

  it('a file others can write is not trusted either', async () => {
    await mkdir(stateDir(), { recursive: true, mode: 0o700 });
    const target = path.join(world().dir, 'shared-outbox.json');
    await queuedOutbox(target, 0o600);
    execFileSync('chmod', ['0666', target]);
    await symlink(target, path.join(stateDir(), 'outbox.json'));
    expect((await once()).code).toBe(0);
    expect(world().server.state.reports.map((r) => r.message)).not.toContain('salvaged report');
    await expectSynced('outbox.json');
  });
});

describe('stateDir/cache that is not a real directory is moved aside', () => {
  for (const kind of ['file', 'FIFO', 'symlink to a directory'] as const) {
    it(`cache as a ${kind}: set aside, nothing written through it`, async () => {
      await mkdir(stateDir(), { recursive: true, mode: 0o700 });
      const at = path.join(stateDir(), 'cache');
      const elsewhere = path.join(world().dir, 'elsewhere');
      await mkdir(elsewhere);
      if (kind === 'file') await writeFile(at, 'x');
      else if (kind === 'FIFO') execFileSync('mkfifo', [at]);
      else await symlink(elsewhere, at);
      const { code, err } = await once();
      expect(code).toBe(0);
      expect(err).toContain('the content cache was not a directory: moved aside');
      const now = await lstat(at).catch(() => undefined);
      expect(now === undefined || now.isDirectory()).toBe(true);
      expect(await readdir(elsewhere)).toEqual([]);
      expect((await readdir(stateDir())).filter((e) => e.startsWith('cache.not-a-directory-'))).toHaveLength(
        1,
      );
    });
  }
});

describe('the time in a name set aside is the injected clock', () => {
  it("StateDir.open stamps every name it sets aside with deps.clock's wall time", async () => {
    await plant('intent.json', 'directory');
    await plant('outbox.json', 'FIFO');
    await plant('fingerprints.json', 'dangling symlink');
    await writeFile(path.join(stateDir(), 'cache'), 'x');
    await mkdir(path.join(world().dir, 'root'));
    const settings = { stateDir: stateDir(), rootDir: path.join(world().dir, 'root'), deviceId: DEVICE };
    const clock = { now: () => 1_732_412_345_678 };
    await (await StateDir.open(nodeFs, settings, silentLogger(), { clock })).close();
    const aside = (await readdir(stateDir())).filter((e) => e.includes('.not-')).sort();
    expect(aside).toEqual([
      'cache.not-a-directory-1732412345678',
      'fingerprints.json.not-regular-1732412345678',
      'intent.json.not-regular-1732412345678',
      'outbox.json.not-regular-1732412345678',
    ]);
  });
});
