// Per-instance backoff across daemon passes: a write that failed on a read-only dir is retried when its cooldown ends.
// With the poll an hour away, the file landing at all shows the cooldown brought it (the wait itself: agent.test.ts).
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { mkdir, readFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { DaemonProcess, killAllDaemons } from '../helpers/daemon.js';
import { AgentHarness, tryMount, unmount } from '../helpers/harness.js';
import { waitFor } from '../helpers/wait-for.js';

// Vitest decides skipIf at collection time, so whether this machine permits a read-only bind mount is probed here.
function probeReadOnlyMount(): string | undefined {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'config-agent-mount-probe-'));
  let mounted = false;
  try {
    for (const args of [
      ['--bind', dir, dir],
      ['-o', 'remount,ro,bind', dir],
    ]) {
      const reason = tryMount(args);
      if (reason !== undefined) return reason;
      mounted = true;
    }
    return undefined;
  } finally {
    if (mounted) unmount(dir);
    rmSync(dir, { recursive: true, force: true });
  }
}
const readOnlySkip = probeReadOnlyMount();
if (readOnlySkip !== undefined) {
  process.stderr.write(`daemon-retry.test: skipping the read-only bind mount test: ${readOnlySkip}\n`);
}

/** An hour between polls: within the test's deadlines, only the per-instance cooldown can bring a retry. */
const INTERVAL_S = 3600;
/** A generous bound for a busy machine: the cooldown is at most 2 s (retry.maxDelaySeconds). */
const DEADLINE_MS = 60_000;

let harness: AgentHarness | undefined;
const mounts: string[] = [];

function unmountAll(): void {
  for (const dir of mounts.splice(0).reverse()) {
    unmount(dir);
    while (spawnSync('mountpoint', ['-q', dir]).status === 0) unmount(dir);
  }
}

afterEach(async () => {
  await killAllDaemons();
  unmountAll();
  await harness?.close();
  harness = undefined;
});

afterAll(() => {
  unmountAll();
});

describe('daemon: per-instance retries across passes', () => {
  it.skipIf(readOnlySkip !== undefined)(
    'a write refused by a read-only dir is retried when its cooldown ends, not at the next poll',
    async () => {
      const h = await AgentHarness.create({
        registerDevice: true,
        config: {
          // Attempts enough that the cooldowns outlast a slow machine. A read-only dir is a device condition:
          // tried again 30 s apart in the daemon whatever these say (DEVICE_WAIT_MIN_SECONDS), not at the poll.
          retry: { maxAttempts: 1000, baseDelaySeconds: 1, maxDelaySeconds: 2 },
          // A poll an hour away, no boot jitter and no drift watcher: only the cooldown brings a pass.
          poll: { intervalSeconds: INTERVAL_S, jitterRatio: 0, fullResyncSeconds: INTERVAL_S },
          drift: 'off',
        },
      });
      harness = h;
      const lockedDir = h.rootPath('locked');
      await mkdir(lockedDir, { recursive: true });
      for (const args of [
        ['--bind', lockedDir, lockedDir],
        ['-o', 'remount,ro,bind', lockedDir],
      ]) {
        const reason = tryMount(args);
        if (reason !== undefined) throw new Error(reason);
        if (!mounts.includes(lockedDir)) mounts.push(lockedDir);
      }
      const content = { listen: 8443, workers: 4 };
      const { deploy } = await h.createAndDeploy({ relative_filepath: 'locked/app.json', content });

      const daemon = DaemonProcess.start(h);
      await waitFor(async () => (await h.instance(deploy.id)).error_status === 'retrying', DEADLINE_MS, {
        what: 'the mock to see the instance retrying',
      });
      const [retrying] = await h.reportsFor(deploy.id);
      expect(retrying).toMatchObject({ activity_status: 'queued', error_status: 'retrying' });
      expect(retrying?.message).toMatch(/EROFS/);
      // The report goes out inside the pass, before its summary is logged.
      const [boot] = await daemon.waitForPasses(1, DEADLINE_MS);
      expect(boot).toMatchObject({ mode: 'full', converged: false });
      expect(boot?.counts.retrying).toBe(1);

      // Writable again: nothing on the service changes, so only the agent's own cooldown brings the retry. Remounted
      // read-write, not unmounted: a mount below rootDir that goes away is the device's condition (mount26), and
      // nothing is written into the bare directory it leaves.
      const writable = tryMount(['-o', 'remount,rw,bind', lockedDir]);
      if (writable !== undefined) throw new Error(writable);
      const target = h.rootPath('locked/app.json');
      await waitFor(() => readFile(target, 'utf8'), DEADLINE_MS, { what: 'the retried file on disk' });
      expect(await readFile(target, 'utf8')).toBe(`${JSON.stringify(content, null, 2)}\n`);
      await waitFor(
        async () => {
          const instance = await h.instance(deploy.id);
          return instance.activity_status === 'deployed' && instance.error_status === 'none';
        },
        DEADLINE_MS,
        { what: 'the mock to see deployed/none' },
      );

      // The pass that wrote it was a full one: a due retry asks for every instance and checks the disk.
      const writer = await daemon.waitForPasses(1, DEADLINE_MS, {
        predicate: (pass) => (pass.counts.written ?? 0) > 0,
      });
      expect(writer[0]).toMatchObject({ mode: 'full', converged: true });
      // Every pass after the boot pass was a retry (each full); none was a scheduled incremental poll.
      const passes = daemon.passes();
      expect(passes.length).toBeGreaterThanOrEqual(2);
      expect(passes.every((pass) => pass.mode === 'full')).toBe(true);
      expect((await h.reportsFor(deploy.id)).at(-1)).toMatchObject({
        activity_status: 'deployed',
        error_status: 'none',
      });
      expect(daemon.alive).toBe(true);
    },
    2 * DEADLINE_MS,
  );
});
