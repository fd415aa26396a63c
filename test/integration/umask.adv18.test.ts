// The built agent, run as another user under a umask that takes the owner's bits (an `UMask=0777` drop-in): it converges.
import { spawnSync } from 'node:child_process';
import { chmod, mkdir, readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { AgentHarness, leaksApiKey, type RunResult, TEST_API_KEY } from '../helpers/harness.js';
import { type ReachableInstall, reachableInstall } from '../helpers/reachable-install.js';

const NOBODY = 65534;
const isRoot = process.getuid?.() === 0;

const harnesses: AgentHarness[] = [];
const installs: ReachableInstall[] = [];

afterEach(async () => {
  await Promise.all(harnesses.splice(0).map((h) => h.close()));
  await Promise.all(installs.splice(0).map((install) => install.remove()));
});

/** `h.run` as uid 65534, its process started under `umask` (a child takes its parent's umask at spawn). */
function runAs(h: AgentHarness, install: ReachableInstall, umask: number): Promise<RunResult> {
  const inherited = process.umask(umask);
  try {
    return h.run(['--once'], {
      uid: NOBODY,
      gid: NOBODY,
      bin: install.dist('main.js'),
      node: install.node,
      cwd: install.dir,
      // The key file is root's 0600; the environment is the documented alternative.
      env: { CONFIG_AGENT_API_KEY: TEST_API_KEY },
    });
  } finally {
    process.umask(inherited);
  }
}

describe('config-agent --once under a umask without the owner bits', () => {
  // Before: every new directory was made 0000 (mkdir's mode under the umask), which the agent, not being root,
  // could not open to chmod: each write failed with EACCES (`retrying`, an attempt, so `failed` for good once
  // maxAttempts ran out), and agent.lock, made unreadable, was taken for gone at every pass.
  it.skipIf(!isRoot)(
    '0777 and 0477: files written with their modes, the next run exits 0 and rewrites nothing',
    async () => {
      for (const umask of [0o777, 0o477]) {
        const h = await AgentHarness.create({ registerDevice: true });
        harnesses.push(h);
        await chmod(h.dir, 0o755);
        for (const dir of [h.rootDir, h.stateDir]) {
          await mkdir(dir, { mode: 0o700 });
          spawnSync('chown', [`${NOBODY}:${NOBODY}`, dir]);
        }
        const install = await reachableInstall();
        installs.push(install);
        const a = await h.createAndDeploy({ relative_filepath: 'app/deep/config.json', content: { v: 1 } });

        const first = await runAs(h, install, umask);
        expect(first.code, first.stderr).toBe(0);
        const file = path.join(h.rootDir, 'app/deep/config.json');
        expect(JSON.parse(await readFile(file, 'utf8'))).toEqual({ v: 1 });
        expect((await stat(file)).mode & 0o7777).toBe(0o644);
        expect((await stat(path.join(h.rootDir, 'app/deep'))).mode & 0o7777).toBe(0o755);
        const instance = await h.instance(a.deploy.id);
        expect([instance.activity_status, instance.error_status]).toEqual(['deployed', 'none']);
        const { ino } = await stat(file);

        const second = await runAs(h, install, umask);
        expect(second.code, second.stderr).toBe(0);
        expect(second.stderr).not.toMatch(/agent\.lock was gone/);
        expect((await stat(file)).ino).toBe(ino);
        expect(leaksApiKey(first) || leaksApiKey(second)).toBe(false);
      }
    },
  );
});
