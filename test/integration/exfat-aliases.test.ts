// `config-agent --once` with rootDir on a real exFAT (exfat-fuse on a loop image): App.json and app.json are one
// file, and files keep the mount's permission bits whatever the agent asks.
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { lstat, mkdir, readdir, readFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { skipWithoutRoot } from '../helpers/built-packages.js';
import { AgentHarness, leaksApiKey, tryMount, unmount } from '../helpers/harness.js';

// The harness config's files.mode and dirMode (0644, 0755): exFAT keeps no modes, the mount's masks give them.
const MOUNT_OPTIONS = 'loop,fmask=0133,dmask=0022';

/** An exFAT image of 16 MiB in `dir`, mounted on `mountpoint`; the reason when this machine cannot. */
function mountExfat(dir: string, mountpoint: string, options = MOUNT_OPTIONS): string | undefined {
  const image = path.join(dir, 'exfat.img');
  const made = spawnSync('sh', ['-c', `truncate -s 16M "$1" && mkfs.exfat "$1"`, 'sh', image], {
    encoding: 'utf8',
  });
  if (made.error !== undefined || made.status !== 0) {
    return `mkfs.exfat failed (package exfatprogs): ${(made.stderr ?? made.error?.message ?? '').trim()}`;
  }
  return tryMount(['-t', 'exfat-fuse', '-o', options, image, mountpoint]);
}

// Vitest decides skipIf at collection time: probed here, once. Needs root (a loop device and a FUSE mount) and
// the Debian packages exfat-fuse and exfatprogs, which .ci/run installs.
const exfatSkip = (() => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'config-agent-exfat-probe-'));
  const mountpoint = path.join(dir, 'mnt');
  mkdirSync(mountpoint);
  try {
    const reason = mountExfat(dir, mountpoint);
    if (reason === undefined) unmount(mountpoint);
    // Under .ci/run as root a machine that cannot mount it throws instead of skipping.
    return reason === undefined ? undefined : skipWithoutRoot(reason);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
})();
if (exfatSkip !== undefined) process.stderr.write(`exfat-aliases.test: skipping: ${exfatSkip}\n`);

const harnesses: AgentHarness[] = [];
const mounts: string[] = [];

async function harness(options?: string): Promise<AgentHarness> {
  const created = await AgentHarness.create({ registerDevice: true });
  harnesses.push(created);
  await mkdir(created.rootDir);
  const reason = mountExfat(created.dir, created.rootDir, options);
  if (reason !== undefined) throw new Error(reason);
  mounts.push(created.rootDir);
  return created;
}

afterEach(async () => {
  for (const dir of mounts.splice(0)) unmount(dir);
  await Promise.all(harnesses.splice(0).map((h) => h.close()));
});

const json = (content: unknown) => `${JSON.stringify(content, null, 2)}\n`;
const status = async (h: AgentHarness, id: string) => {
  const instance = await h.instance(id);
  return `${instance.activity_status}/${instance.error_status}`;
};

/** The one file in `dir` of the exFAT root (whatever spelling it was last written under) and its bytes. */
async function theOneFile(h: AgentHarness, dir: string): Promise<string> {
  const names = (await readdir(h.rootPath(dir))).filter((name) => !name.startsWith('.'));
  expect(names).toHaveLength(1);
  return readFile(h.rootPath(path.join(dir, names[0]!)), 'utf8');
}

describe('config-agent --once on exFAT: two spellings of one name', () => {
  it.skipIf(exfatSkip !== undefined)(
    'App.json and app.json targeted by two instances: the later one deployed with its bytes, the other retrying; the next run changes nothing',
    async () => {
      const h = await harness();
      const older = (
        await h.createAndDeploy({ relative_filepath: 'etc/app.json', content: { who: 'older' } })
      ).deploy;
      const newer = (
        await h.createAndDeploy({ relative_filepath: 'etc/App.json', content: { who: 'newer' } })
      ).deploy;

      const first = await h.runOnce();

      expect(first.code).not.toBe(0);
      expect(leaksApiKey(first)).toBe(false);
      expect(await theOneFile(h, 'etc')).toBe(json({ who: 'newer' }));
      expect(await status(h, newer.id)).toBe('deployed/none');
      expect(await status(h, older.id)).toBe('queued/retrying');
      const refusal = (await h.reportsFor(older.id)).at(-1);
      expect(refusal?.message).toContain('relative_filepath "etc/app.json" names the same file');

      const reports = (await h.reports()).length;
      await h.runOnce();
      expect(await theOneFile(h, 'etc')).toBe(json({ who: 'newer' }));
      expect(await h.reports()).toHaveLength(reports);
      expect(await status(h, newer.id)).toBe('deployed/none');
    },
  );

  it.skipIf(exfatSkip !== undefined)(
    'an instance at app.json retired while one with the same bytes is deployed at App.json: that file stays',
    async () => {
      const h = await harness();
      const x = (await h.createAndDeploy({ relative_filepath: 'app.json', content: { same: true } })).deploy;
      expect((await h.runOnce()).code).toBe(0);
      const y = (await h.createAndDeploy({ relative_filepath: 'App.json', content: { same: true } })).deploy;
      await h.runOnce();
      await h.removeInstance(x.id);

      await h.runOnce();

      expect(await theOneFile(h, '')).toBe(json({ same: true }));
      expect(await status(h, y.id)).toBe('deployed/none');
      expect(await status(h, x.id)).toBe('removed/none');
    },
  );
});

describe('config-agent --once on exFAT mounted without masks (every file 0777)', () => {
  it.skipIf(exfatSkip !== undefined)(
    'files.mode 0644 never taken: after the run that finds it out, a run changes nothing and counts nothing',
    async () => {
      const h = await harness('loop');
      await h.createAndDeploy({ relative_filepath: 'etc/a.json', content: { a: 1 } });
      expect((await h.runOnce()).code).toBe(0);
      expect((await h.runOnce()).code).toBe(0);
      const before = await lstat(h.rootPath('etc/a.json'));
      expect(before.mode & 0o777).toBe(0o777);

      const run = await h.runOnce(['--json']);

      expect(run.code).toBe(0);
      const summary = JSON.parse(run.stdout) as { instances: { action: string }[] };
      expect(summary.instances.map((i) => i.action)).toEqual(['unchanged']);
      const after = await lstat(h.rootPath('etc/a.json'));
      expect([after.ino, after.mtimeMs]).toEqual([before.ino, before.mtimeMs]);
      expect(await readFile(h.rootPath('etc/a.json'), 'utf8')).toBe(json({ a: 1 }));
    },
  );
});
