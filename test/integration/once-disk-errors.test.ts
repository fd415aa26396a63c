// `config-agent --once` on a failing disk: a full 64 KiB tmpfs, a read-only mount, EACCES; old files stay intact.
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { chmod, mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { skipWithoutRoot } from '../helpers/built-packages.js';
import {
  AgentHarness,
  leaksApiKey,
  snapshotTree,
  TEST_API_KEY,
  tryMount,
  unmount,
} from '../helpers/harness.js';
import { reachableInstall } from '../helpers/reachable-install.js';

// Vitest decides skipIf at collection time, so what this machine permits is probed here, on a scratch dir.
const PROBE = mkdtempSync(path.join(os.tmpdir(), 'config-agent-mount-probe-'));
function probe(...argSets: string[][]): string | undefined {
  const dir = path.join(PROBE, String(Math.random()).slice(2));
  mkdirSync(dir);
  let mounted = false;
  try {
    for (const args of argSets) {
      const reason = tryMount(args.map((arg) => (arg === '<dir>' ? dir : arg)));
      if (reason !== undefined) return reason;
      mounted = true;
    }
    return undefined;
  } finally {
    if (mounted) unmount(dir);
  }
}
// Under .ci/run as root a mount that fails throws (skipWithoutRoot) instead of skipping the tests that need it.
const whyNot = (reason: string | undefined) => (reason === undefined ? undefined : skipWithoutRoot(reason));
const tmpfsSkip = whyNot(probe(['-t', 'tmpfs', '-o', 'size=64k,mode=0755', 'tmpfs', '<dir>']));
const readOnlySkip = whyNot(probe(['--bind', '<dir>', '<dir>'], ['-o', 'remount,ro,bind', '<dir>']));
rmSync(PROBE, { recursive: true, force: true });
const isRoot = process.getuid?.() === 0;
const NOBODY = 65534;
const accessSkip = isRoot
  ? undefined
  : 'needs root to run the agent as uid 65534 against a root-owned root dir';
for (const [what, reason] of [
  ['ENOSPC (64 KiB tmpfs)', tmpfsSkip],
  ['EROFS (read-only bind mount)', readOnlySkip],
  ['EACCES (other uid)', accessSkip],
] as const) {
  if (reason !== undefined)
    process.stderr.write(`once-disk-errors.test: skipping the ${what} tests: ${reason}\n`);
}

const harnesses: AgentHarness[] = [];
const mounts: string[] = [];
const cleanups: Array<() => Promise<void>> = [];

async function harness(): Promise<AgentHarness> {
  const created = await AgentHarness.create({ registerDevice: true });
  harnesses.push(created);
  return created;
}

function mountOrThrow(...argSets: string[][]): void {
  for (const args of argSets) {
    const reason = tryMount(args);
    if (reason !== undefined) throw new Error(reason);
    const dir = args.at(-1)!;
    if (!mounts.includes(dir)) mounts.push(dir);
  }
}

function unmountAll(): void {
  // A bind mount can be stacked on itself; unmount in reverse order, and every time it was mounted.
  for (const dir of mounts.splice(0).reverse()) {
    unmount(dir);
    while (spawnSync('mountpoint', ['-q', dir]).status === 0) unmount(dir);
  }
}

afterEach(async () => {
  unmountAll();
  await Promise.all(harnesses.splice(0).map((h) => h.close()));
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

afterAll(() => {
  unmountAll();
});

/** Bigger than the whole 64 KiB tmpfs, so its temp file cannot be written. */
const BIG = { blob: 'x'.repeat(200_000) };
const SMALL = { version: 'A', limits: [1, 2, 3] };
const json = (content: unknown) => `${JSON.stringify(content, null, 2)}\n`;

async function fileIdentity(file: string): Promise<string> {
  const stats = await stat(file, { bigint: true });
  return `ino=${stats.ino} mtime=${stats.mtimeNs}`;
}

const statuses = async (h: AgentHarness, id: string) => {
  const instance = await h.instance(id);
  return [instance.target_status, instance.activity_status, instance.error_status];
};

describe('config-agent --once: disk full (ENOSPC)', () => {
  it.skipIf(tmpfsSkip !== undefined)(
    'a new version larger than the whole filesystem: retrying with ENOSPC, the old file byte-identical; maxAttempts 1 → failed',
    async () => {
      const h = await harness();
      await mkdir(h.rootDir);
      mountOrThrow(['-t', 'tmpfs', '-o', 'size=64k,mode=0755', 'tmpfs', h.rootDir]);
      const a = (await h.createAndDeploy({ relative_filepath: 'app/config.json', content: SMALL })).deploy;
      expect((await h.runOnce()).code).toBe(0);
      const b = await h.createInstance({ relative_filepath: 'app/config.json', content: BIG });
      await h.deploy(b.id);
      const before = await snapshotTree(h.rootDir);
      const fileBefore = await fileIdentity(h.rootPath('app/config.json'));

      const first = await h.runOnce(['--json']);

      expect(first.code).toBe(1);
      // Same names, bytes and modes (no temp file left behind in the full directory), same inode and mtime.
      // The directory's own mtime moves: the temp file was created in it and unlinked again.
      expect(await snapshotTree(h.rootDir)).toEqual(before);
      expect(await fileIdentity(h.rootPath('app/config.json'))).toEqual(fileBefore);
      expect(await readFile(h.rootPath('app/config.json'), 'utf8')).toBe(json(SMALL));
      expect(await statuses(h, b.id)).toEqual(['deployed', 'queued', 'retrying']);
      const [retrying] = await h.reportsFor(b.id);
      expect(retrying).toMatchObject({ activity_status: 'queued', error_status: 'retrying' });
      expect(retrying?.message).toMatch(/ENOSPC \(no space left on device\)/);
      expect(retrying?.message).toContain('"app/config.json"');
      const summary = JSON.parse(first.stdout) as {
        converged: boolean;
        reachable: boolean;
        counts: Record<string, number>;
        instances: { instanceId: string; action: string; message?: string }[];
      };
      expect(summary).toMatchObject({ converged: false, reachable: true });
      expect(summary.instances.find((i) => i.instanceId === b.id)).toMatchObject({ action: 'retrying' });
      // A took no disk change: B never made it, so A's bytes are what the device runs on.
      expect((await h.instance(a.id)).target_status).toBe('removed');
      expect(leaksApiKey(first)).toBe(false);

      await h.writeConfig({ retry: { maxAttempts: 1, baseDelaySeconds: 0.01, maxDelaySeconds: 1 } });
      const second = await h.runOnce();

      expect(second.code).toBe(1);
      expect(await snapshotTree(h.rootDir)).toEqual(before);
      expect(await fileIdentity(h.rootPath('app/config.json'))).toEqual(fileBefore);
      expect(await statuses(h, b.id)).toEqual(['deployed', 'queued', 'failed']);
      const failed = (await h.reportsFor(b.id)).at(-1);
      expect(failed?.error_status).toBe('failed');
      expect(failed?.message).toMatch(/ENOSPC/);
      expect(second.stdout).toMatch(/failed\s+app\/config\.json/);
      expect(second.stdout).toMatch(/ENOSPC/);

      // Failed is final: the next pass touches neither the disk nor the service for it.
      const reportCount = (await h.reports()).length;
      const third = await h.runOnce();
      expect(third.code).toBe(1);
      expect(await snapshotTree(h.rootDir)).toEqual(before);
      expect(await fileIdentity(h.rootPath('app/config.json'))).toEqual(fileBefore);
      expect(await h.reports()).toHaveLength(reportCount);
    },
  );

  it.skipIf(tmpfsSkip !== undefined)(
    'a full disk is no attempt: with maxAttempts 1 the new version stays retrying, naming the disk, until space returns',
    async () => {
      const h = await harness();
      await mkdir(h.rootDir);
      mountOrThrow(['-t', 'tmpfs', '-o', 'size=64k,mode=0755', 'tmpfs', h.rootDir]);
      await h.writeConfig({ retry: { maxAttempts: 1, baseDelaySeconds: 0.01, maxDelaySeconds: 1 } });
      await h.createAndDeploy({ relative_filepath: 'app/config.json', content: SMALL });
      expect((await h.runOnce()).code).toBe(0);
      // An operator's file fills the disk; the new version would fit on an empty one.
      await writeFile(h.rootPath('filler.bin'), Buffer.alloc(64 * 1024)).catch(() => undefined);
      const b = await h.createInstance({
        relative_filepath: 'app/config.json',
        content: { version: 'B', pad: 'y'.repeat(8_000) },
      });
      await h.deploy(b.id);

      for (let run = 0; run < 3; run += 1) {
        expect((await h.runOnce()).code).toBe(1);
        expect(await statuses(h, b.id)).toEqual(['deployed', 'queued', 'retrying']);
      }
      expect(await readFile(h.rootPath('app/config.json'), 'utf8')).toBe(json(SMALL));
      const told = await h.reportsFor(b.id);
      expect(told.map((r) => r.error_status)).not.toContain('failed');
      expect(told.at(-1)?.message).toMatch(
        /ENOSPC.*the disk holding rootDir is full: retried until space returns/,
      );

      await rm(h.rootPath('filler.bin'));
      expect((await h.runOnce()).code).toBe(0);
      expect(await readFile(h.rootPath('app/config.json'), 'utf8')).toBe(
        json({ version: 'B', pad: 'y'.repeat(8_000) }),
      );
      expect(await statuses(h, b.id)).toEqual(['deployed', 'deployed', 'none']);
    },
  );

  // Regression (fixed in d6d2cc8): the replaced instance's `removed` report used to be queued whether or not
  // the new owner's write succeeded, unlike the same-schema swap below, which waits for the replacement.
  it.skipIf(tmpfsSkip !== undefined)(
    'same path: while the replacement cannot be written, the instance whose bytes stay on disk is not reported removed',
    async () => {
      const h = await harness();
      await mkdir(h.rootDir);
      mountOrThrow(['-t', 'tmpfs', '-o', 'size=64k,mode=0755', 'tmpfs', h.rootDir]);
      const a = (await h.createAndDeploy({ relative_filepath: 'app.json', content: SMALL })).deploy;
      expect((await h.runOnce()).code).toBe(0);
      const b = await h.createInstance({ relative_filepath: 'app.json', content: BIG });
      await h.deploy(b.id);

      const result = await h.runOnce();

      expect(result.code).toBe(1);
      expect(await readFile(h.rootPath('app.json'), 'utf8')).toBe(json(SMALL));
      expect(await statuses(h, b.id)).toEqual(['deployed', 'queued', 'retrying']);
      // The device runs A's bytes: the service must not be told A is gone.
      expect((await h.reportsFor(a.id)).map((r) => r.activity_status)).toEqual(['deployed']);
      expect(await statuses(h, a.id)).toEqual(['removed', 'deployed', 'none']);
    },
  );

  it.skipIf(tmpfsSkip !== undefined)(
    'a failed swap rolls back: the instance it displaced (same schema) is restored from the content cache',
    async () => {
      const h = await harness();
      await mkdir(h.rootDir);
      mountOrThrow(['-t', 'tmpfs', '-o', 'size=64k,mode=0755', 'tmpfs', h.rootDir]);
      const a = (
        await h.createAndDeploy({
          relative_filepath: 'motion.json',
          content: SMALL,
          config_schema_id: 'cfs_swap',
        })
      ).deploy;
      expect((await h.runOnce()).code).toBe(0);
      const b = await h.createInstance({
        relative_filepath: 'motion-v2.json',
        content: BIG,
        config_schema_id: 'cfs_swap',
      });
      await h.deploy(b.id);
      const before = await snapshotTree(h.rootDir);

      const result = await h.runOnce(['--json']);

      expect(result.code).toBe(1);
      // Names, bytes and modes as before: the removed file is back, the new one is absent, no temp file.
      expect(await snapshotTree(h.rootDir)).toEqual(before);
      expect(await readFile(h.rootPath('motion.json'), 'utf8')).toBe(json(SMALL));
      expect(await statuses(h, b.id)).toEqual(['deployed', 'queued', 'retrying']);
      expect((await h.reportsFor(b.id))[0]?.message).toMatch(/ENOSPC/);
      // A is still on disk, so it is not reported removed.
      expect((await h.reportsFor(a.id)).map((r) => r.activity_status)).toEqual(['deployed']);
      expect(await statuses(h, a.id)).toEqual(['removed', 'deployed', 'none']);
      const summary = JSON.parse(result.stdout) as { instances: { instanceId: string; message?: string }[] };
      expect(summary.instances.find((i) => i.instanceId === a.id)?.message).toMatch(/kept/);
    },
  );
});

describe('config-agent --once: rootDir cannot be created on a full disk', () => {
  it.skipIf(tmpfsSkip !== undefined)(
    'no inode left where rootDir goes (ENOSPC): exit 1, not 78 (a disk that may clear, not a configuration to fix); the next run converges',
    async () => {
      const h = await harness();
      const full = path.join(h.dir, 'full');
      await mkdir(full);
      // nr_inodes=1: the mount's own directory takes the only inode, so mkdir of rootDir fails with ENOSPC.
      mountOrThrow(['-t', 'tmpfs', '-o', 'size=64k,nr_inodes=1,mode=0755', 'tmpfs', full]);
      const rootDir = path.join(full, 'root');
      await h.writeConfig({ rootDir });
      const a = (await h.createAndDeploy({ relative_filepath: 'app/config.json', content: SMALL })).deploy;

      const first = await h.runOnce();

      expect(first.stderr).toMatch(/rootDir: cannot create .*ENOSPC/);
      expect(first.code).toBe(1);
      expect(await statuses(h, a.id)).toEqual(['deployed', 'queued', 'none']);
      unmountAll();
      const second = await h.runOnce();
      expect(second.code).toBe(0);
      expect(await readFile(path.join(rootDir, 'app/config.json'), 'utf8')).toBe(json(SMALL));
      expect(leaksApiKey(first)).toBe(false);
    },
  );
});

describe('config-agent --once: read-only root (EROFS)', () => {
  it.skipIf(readOnlySkip !== undefined)(
    'writes and removals are retrying with EROFS, files intact; once writable again the next pass converges',
    async () => {
      const h = await harness();
      const a = (await h.createAndDeploy({ relative_filepath: 'app/config.json', content: SMALL })).deploy;
      const c = (await h.createAndDeploy({ relative_filepath: 'old/gone.yaml', content: { c: 1 } })).deploy;
      expect((await h.runOnce()).code).toBe(0);
      mountOrThrow(['--bind', h.rootDir, h.rootDir], ['-o', 'remount,ro,bind', h.rootDir]);
      const b = await h.createInstance({ relative_filepath: 'app/config.json', content: { version: 'B' } });
      await h.deploy(b.id);
      await h.removeInstance(c.id);
      const before = await snapshotTree(h.rootDir, { identity: true });

      const first = await h.runOnce();

      expect(first.code).toBe(1);
      expect(await snapshotTree(h.rootDir, { identity: true })).toEqual(before);
      expect(await statuses(h, b.id)).toEqual(['deployed', 'queued', 'retrying']);
      expect((await h.reportsFor(b.id))[0]?.message).toMatch(/EROFS \(read-only file system\)/);
      expect(await statuses(h, c.id)).toEqual(['removed', 'deployed', 'retrying']);
      expect((await h.reportsFor(c.id)).at(-1)?.message).toMatch(/^remove failed: .*EROFS/);
      expect(first.stdout).toMatch(/retrying\s+app\/config\.json/);
      expect(first.stdout).toMatch(/retrying\s+old\/gone\.yaml/);
      expect((await h.instance(a.id)).target_status).toBe('removed');

      // Attempts reset on restart: with maxAttempts 2 a second process counts its first attempt again.
      await h.writeConfig({ retry: { maxAttempts: 2, baseDelaySeconds: 0.01, maxDelaySeconds: 1 } });
      expect((await h.runOnce()).code).toBe(1);
      expect((await h.runOnce()).code).toBe(1);
      expect(await statuses(h, b.id)).toEqual(['deployed', 'queued', 'retrying']);
      expect(await snapshotTree(h.rootDir, { identity: true })).toEqual(before);

      // Writable again as an operator makes it (remount rw): the bind mount stays, so rootDir is still the mount
      // point root-mount.json remembers (an unmount now leaves a bare mountpoint the agent refuses: 74c0d8c).
      mountOrThrow(['-o', 'remount,rw,bind', h.rootDir]);
      const second = await h.runOnce();

      expect(second.code).toBe(0);
      expect(await snapshotTree(h.rootDir)).toEqual({
        app: 'dir 755',
        'app/config.json': `file 644 ${Buffer.from(json({ version: 'B' })).toString('base64')}`,
      });
      expect(await statuses(h, b.id)).toEqual(['deployed', 'deployed', 'none']);
      expect(await statuses(h, c.id)).toEqual(['removed', 'removed', 'none']);
    },
  );

  it.skipIf(readOnlySkip !== undefined)(
    'a read-only root is no attempt: with maxAttempts 1 the instance stays retrying, then converges once writable',
    async () => {
      const h = await harness();
      await h.writeConfig({ retry: { maxAttempts: 1, baseDelaySeconds: 0.01, maxDelaySeconds: 1 } });
      await h.createAndDeploy({ relative_filepath: 'app/config.json', content: SMALL });
      expect((await h.runOnce()).code).toBe(0);
      mountOrThrow(['--bind', h.rootDir, h.rootDir], ['-o', 'remount,ro,bind', h.rootDir]);
      const b = await h.createInstance({ relative_filepath: 'app/config.json', content: { version: 'B' } });
      await h.deploy(b.id);
      const before = await snapshotTree(h.rootDir, { identity: true });

      for (let run = 0; run < 3; run += 1) {
        expect((await h.runOnce()).code).toBe(1);
        expect(await statuses(h, b.id)).toEqual(['deployed', 'queued', 'retrying']);
      }

      expect(await snapshotTree(h.rootDir, { identity: true })).toEqual(before);
      // Reported once: the same message each run, which the service already holds.
      const told = await h.reportsFor(b.id);
      expect(told.map((r) => r.error_status)).toEqual(['retrying']);
      expect(told[0]?.message).toMatch(
        /EROFS.*rootDir is on a read-only filesystem: retried until it is writable/,
      );
      mountOrThrow(['-o', 'remount,rw,bind', h.rootDir]);
      expect((await h.runOnce()).code).toBe(0);
      expect(await statuses(h, b.id)).toEqual(['deployed', 'deployed', 'none']);
    },
  );
});

describe('config-agent --once: permission denied (EACCES)', () => {
  it.skipIf(accessSkip !== undefined)(
    'an agent without write access to the root: retrying with EACCES, the old file byte-identical',
    async () => {
      const h = await harness();
      await h.createAndDeploy({ relative_filepath: 'app/config.json', content: SMALL });
      expect((await h.runOnce()).code).toBe(0);
      // The agent's own state stays its own; the root (and app/) belong to root, 0755: no writes for uid 65534.
      await chmod(h.dir, 0o755);
      spawnSync('chown', ['-R', `${NOBODY}:${NOBODY}`, h.stateDir]);
      const b = await h.createInstance({ relative_filepath: 'app/config.json', content: { version: 'B' } });
      await h.deploy(b.id);
      const before = await snapshotTree(h.rootDir, { identity: true });

      // A clone may sit where uid 65534 cannot traverse (a 0700 dir): it runs a copy of dist/ it can reach.
      const install = await reachableInstall();
      cleanups.push(install.remove);
      const result = await h.run(['--once'], {
        uid: NOBODY,
        gid: NOBODY,
        bin: install.dist('main.js'),
        node: install.node,
        cwd: install.dir,
        // The key file is root's 0600; the environment is the documented alternative.
        env: { CONFIG_AGENT_API_KEY: TEST_API_KEY },
      });

      expect(result.code).toBe(1);
      expect(await snapshotTree(h.rootDir, { identity: true })).toEqual(before);
      expect(await statuses(h, b.id)).toEqual(['deployed', 'queued', 'retrying']);
      expect((await h.reportsFor(b.id))[0]?.message).toMatch(/EACCES \(permission denied\)/);
      expect(leaksApiKey(result)).toBe(false);
    },
  );
});

describe("config-agent --once: another user's file in a sticky directory (EPERM, gaps19)", () => {
  it.skipIf(accessSkip !== undefined)(
    'the agent cannot replace it: `retrying` naming the path and its owner, never `failed`; written once it goes',
    async () => {
      const h = await harness();
      await h.writeConfig({ retry: { maxAttempts: 1, baseDelaySeconds: 1, maxDelaySeconds: 2 } });
      // An application's shared directory (uid 1001's, 1777) under the agent's root, and a file put at
      // the instance's path by another local user (uid 65533): the sticky bit keeps uid 65534 from replacing it.
      await chmod(h.dir, 0o755);
      const shared = h.rootPath('shared');
      await mkdir(shared, { recursive: true });
      await mkdir(h.stateDir, { recursive: true, mode: 0o700 });
      spawnSync('chown', ['1001:1001', shared]);
      await chmod(shared, 0o1777);
      await writeFile(h.rootPath('shared/app.json'), '{"planted": true}\n', { mode: 0o644 });
      spawnSync('chown', ['65533:65533', h.rootPath('shared/app.json')]);
      // rootDir itself is the agent's (as the package makes it): only the sticky directory refuses it.
      spawnSync('chown', [`${NOBODY}:${NOBODY}`, h.rootDir]);
      spawnSync('chown', ['-R', `${NOBODY}:${NOBODY}`, h.stateDir]);
      const b = (await h.createAndDeploy({ relative_filepath: 'shared/app.json', content: SMALL })).deploy;
      const install = await reachableInstall();
      cleanups.push(install.remove);
      const runAsNobody = () =>
        h.run(['--once'], {
          uid: NOBODY,
          gid: NOBODY,
          bin: install.dist('main.js'),
          node: install.node,
          cwd: install.dir,
          env: { CONFIG_AGENT_API_KEY: TEST_API_KEY },
        });

      // Two runs with maxAttempts 1: before, the first was `failed` for good at the service (an attempt).
      for (let run = 0; run < 2; run += 1) {
        const result = await runAsNobody();
        expect(result.code).toBe(1);
        expect(await statuses(h, b.id)).toEqual(['deployed', 'queued', 'retrying']);
        expect(leaksApiKey(result)).toBe(false);
      }
      expect((await h.reportsFor(b.id)).at(-1)?.message).toMatch(
        /EPERM.*"shared\/app\.json" belongs to uid 65533, another user, and the directory "shared" is sticky \(mode 1777\)/,
      );
      expect(await readFile(h.rootPath('shared/app.json'), 'utf8')).toBe('{"planted": true}\n');

      // Its owner takes it away: the next run writes the instance.
      await rm(h.rootPath('shared/app.json'));
      expect((await runAsNobody()).code).toBe(0);
      expect(await readFile(h.rootPath('shared/app.json'), 'utf8')).toBe(json(SMALL));
      expect(await statuses(h, b.id)).toEqual(['deployed', 'deployed', 'none']);
    },
  );
});
