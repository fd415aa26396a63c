// `config-agent --once` with a real tmpfs mounted below rootDir, lazily unmounted between runs (mount26).
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { mkdir, readdir, readFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { skipWithoutRoot } from '../helpers/built-packages.js';
import { AgentHarness, tryMount, unmount } from '../helpers/harness.js';

// Vitest decides skipIf at collection time: whether this machine lets us mount a tmpfs, probed on a scratch dir.
const PROBE = mkdtempSync(path.join(os.tmpdir(), 'config-agent-mount26-probe-'));
const probeDir = path.join(PROBE, 'm');
mkdirSync(probeDir);
const probeFailure = tryMount(['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', probeDir]);
if (probeFailure === undefined) unmount(probeDir);
rmSync(PROBE, { recursive: true, force: true });
// Under .ci/run as root a mount that fails throws (skipWithoutRoot) instead of skipping.
const tmpfsSkip = probeFailure === undefined ? undefined : skipWithoutRoot(probeFailure);
if (tmpfsSkip !== undefined) process.stderr.write(`once-mount-below.mount26.test: skipping: ${tmpfsSkip}\n`);

const harnesses: AgentHarness[] = [];
const mounts: string[] = [];

afterEach(async () => {
  for (const dir of mounts.splice(0).reverse()) {
    while (spawnSync('mountpoint', ['-q', dir]).status === 0) unmount(dir);
  }
  await Promise.all(harnesses.splice(0).map((h) => h.close()));
});

function mountTmpfs(dir: string, options = 'size=1m,mode=0755'): void {
  const failure = tryMount(['-t', 'tmpfs', '-o', options, 'tmpfs', dir]);
  if (failure !== undefined) throw new Error(failure);
  mounts.push(dir);
}

const json = (content: unknown) => `${JSON.stringify(content, null, 2)}\n`;

describe('config-agent --once: a tmpfs below rootDir gone (umount -l), another read-only', () => {
  // One agent and four runs for both cases (each run of the built agent costs seconds on a busy CI machine).
  it.skipIf(tmpfsSkip !== undefined)(
    'writes nothing into the bare directory, retrying naming the mount, never failed; mounted again: converges',
    async () => {
      const h = await AgentHarness.create({ registerDevice: true });
      harnesses.push(h);
      await h.writeConfig({ retry: { maxAttempts: 1, baseDelaySeconds: 0.01, maxDelaySeconds: 1 } });
      const data = path.join(h.rootDir, 'data');
      const ro = path.join(h.rootDir, 'ro');
      await mkdir(data, { recursive: true });
      await mkdir(ro);
      mountTmpfs(data);
      mountTmpfs(ro, 'size=64k,mode=0755,ro');
      await h.createAndDeploy({ relative_filepath: 'data/a.json', content: { a: 1 } });
      const x = (await h.createAndDeploy({ relative_filepath: 'ro/x.json', content: { x: 1 } })).deploy;
      await h.runOnce();
      expect(await readFile(path.join(data, 'a.json'), 'utf8')).toBe(json({ a: 1 }));
      // The read-only one is named, not rootDir.
      const roMessage = (await h.reportsFor(x.id)).at(-1)?.message ?? '';
      expect(roMessage).toContain(`the filesystem mounted at ${ro} (below rootDir) is read-only`);
      expect(roMessage).not.toContain('rootDir is on a read-only filesystem');

      // The card pulled: lazily unmounted, the bare directory on rootDir's disk is left.
      expect(spawnSync('umount', ['-l', data]).status).toBe(0);
      const b = (await h.createAndDeploy({ relative_filepath: 'data/b.json', content: { b: 2 } })).deploy;
      const top = (await h.createAndDeploy({ relative_filepath: 'top.json', content: { t: 3 } })).deploy;
      // maxAttempts 1: a run that counted an attempt would leave it `failed` for good.
      expect((await h.runOnce()).code).toBe(1);

      expect(await readdir(data)).toEqual([]);
      const instance = await h.instance(b.id);
      expect([instance.activity_status, instance.error_status]).toEqual(['queued', 'retrying']);
      expect((await h.reportsFor(b.id)).at(-1)?.message).toContain(`${data} is no mount point any more`);
      expect(await readFile(path.join(h.rootDir, 'top.json'), 'utf8')).toBe(json({ t: 3 }));
      expect((await h.instance(top.id)).activity_status).toBe('deployed');

      // Mounted again (a new, empty tmpfs: another device): the next run writes what is missing there.
      mountTmpfs(data);
      await h.runOnce();
      expect(await readFile(path.join(data, 'a.json'), 'utf8')).toBe(json({ a: 1 }));
      expect(await readFile(path.join(data, 'b.json'), 'utf8')).toBe(json({ b: 2 }));
      expect((await h.instance(b.id)).activity_status).toBe('deployed');
    },
  );
});
