// The built daemon when inotify fails it: instances or watches used up as it starts, its event queue overflowing, or
// the watches ending with rootDir's filesystem (unmounted, another mounted in its place).
import { spawnSync } from 'node:child_process';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { skipWithoutRoot } from '../helpers/built-packages.js';
import { DaemonProcess, killAllDaemons } from '../helpers/daemon.js';
import { AgentHarness, tryMount, unmount } from '../helpers/harness.js';
import { PATIENCE_MS, waitFor } from '../helpers/wait-for.js';

// The limits are set in a user namespace of the daemon's own (/proc/sys/user/max_inotify_*, per namespace since
// Linux 5.11), so the machine's other inotify users are untouched. Probed at collection time.
const probe = spawnSync('unshare', ['-Ur', 'sh', '-c', 'echo 0 > /proc/sys/user/max_inotify_instances'], {
  encoding: 'utf8',
});
const namespaceSkip =
  probe.status === 0
    ? undefined
    : skipWithoutRoot(
        `needs a user namespace whose inotify limits it may set (unshare -Ur: ${probe.stderr.trim()})`,
      );
if (namespaceSkip !== undefined)
  process.stderr.write(`daemon-inotify-limits.test: skipping: ${namespaceSkip}\n`);

const MANAGED = 'app/settings.json';
const BYTES = `${JSON.stringify({ port: 443 }, null, 2)}\n`;

let harness: AgentHarness | undefined;
const mounts: string[] = [];
afterEach(async () => {
  await killAllDaemons();
  for (const mount of mounts.splice(0)) unmount(mount);
  await harness?.close();
  harness = undefined;
});

describe('the daemon started while inotify is used up', () => {
  for (const knob of ['max_inotify_instances', 'max_inotify_watches']) {
    it.skipIf(namespaceSkip !== undefined)(
      `${knob} at 0: once raised, a file changed by hand is restored without waiting for a full pass`,
      async () => {
        const h = await AgentHarness.create({ registerDevice: true });
        harness = h;
        // A full pass only every 10 minutes: a restore within the test's patience is the drift watcher's.
        await h.writeConfig({
          drift: 'restore',
          poll: { intervalSeconds: 1, jitterRatio: 0.1, fullResyncSeconds: 600 },
        });
        await h.createAndDeploy({ relative_filepath: MANAGED, content: { port: 443 } });
        const wrapper = path.join(h.dir, 'in-namespace.sh');
        await writeFile(
          wrapper,
          `#!/bin/sh\nexec unshare -Ur sh -c 'echo 0 > /proc/sys/user/${knob} && exec "$0" "$@"' ${process.execPath} "$@"\n`,
        );
        await chmod(wrapper, 0o755);
        const daemon = DaemonProcess.start(h, undefined, { node: wrapper });
        await daemon.waitForPasses(1, PATIENCE_MS, { predicate: (p) => p.converged });
        expect(await readFile(h.rootPath(MANAGED), 'utf8')).toBe(BYTES);
        // Said once at error; each later attempt at debug, which test daemons log since cit24 (harness.ts).
        expect(
          daemon.logsWith(/could not watch the root directory/).filter((entry) => entry.level !== 'debug'),
        ).toHaveLength(1);

        // The other processes let go: the limit is raised inside the daemon's namespace.
        const raise = spawnSync(
          'nsenter',
          ['-U', '-t', String(daemon.child.pid), 'sh', '-c', `echo 8192 > /proc/sys/user/${knob}`],
          { encoding: 'utf8' },
        );
        expect(raise.status, raise.stderr).toBe(0);
        // Started again by the attempt after a pass: the one after the first pass may still be under way as the
        // limit is raised (it runs beside the loop), so no later pass is asked for here.
        await daemon.waitForLog((line) => /watching the root directory again/.test(line.msg), PATIENCE_MS);

        // Back and recorded; from here only the watcher, on the new filesystem, can see a change.
        await daemon.waitForPasses(1, PATIENCE_MS, { predicate: (p) => p.converged });
        await writeFile(h.rootPath(MANAGED), '{"port": 80}\n');
        await waitFor(
          async () => ((await readFile(h.rootPath(MANAGED), 'utf8')) === BYTES ? true : undefined),
          PATIENCE_MS,
          { what: `${MANAGED} restored` },
        );
        // Restored by the watcher: the first pass is the only full one.
        expect(daemon.passes().filter((p) => p.mode === 'full')).toHaveLength(1);
        expect(daemon.alive).toBe(true);
      },
    );
  }
});

describe('the daemon while a flood of events overflows its inotify queue', () => {
  it('a file changed by hand among the lost events is restored without waiting for a full pass', async () => {
    const h = await AgentHarness.create({ registerDevice: true });
    harness = h;
    await h.writeConfig({
      drift: 'restore',
      poll: { intervalSeconds: 1, jitterRatio: 0.1, fullResyncSeconds: 600 },
    });
    await h.createAndDeploy({ relative_filepath: MANAGED, content: { port: 443 } });
    const daemon = DaemonProcess.start(h);
    await daemon.waitForPasses(1, PATIENCE_MS, { predicate: (p) => p.converged });
    await mkdir(h.rootPath('junk'));
    await daemon.waitForPasses(1, PATIENCE_MS);
    // The agent busy (stopped here, so nothing reads its queue): 24,000 events, more than the kernel's queue
    // holds (fs.inotify.max_queued_events, 16,384 by default), then the change to the managed file.
    const pid = daemon.child.pid as number;
    process.kill(pid, 'SIGSTOP');
    try {
      const flood = spawnSync(
        process.execPath,
        [
          '-e',
          `const fs = require('node:fs'); const [junk, file] = process.argv.slice(1);
           for (let n = 0; n < 12000; n += 1) { fs.writeFileSync(junk + '/f' + n, ''); fs.unlinkSync(junk + '/f' + n); }
           fs.writeFileSync(file, '{"port": 80}\\n');`,
          h.rootPath('junk'),
          h.rootPath(MANAGED),
        ],
        { encoding: 'utf8', timeout: 120_000 },
      );
      expect(flood.status, flood.stderr).toBe(0);
    } finally {
      process.kill(pid, 'SIGCONT');
    }
    await waitFor(
      async () => ((await readFile(h.rootPath(MANAGED), 'utf8')) === BYTES ? true : undefined),
      PATIENCE_MS,
      { what: `${MANAGED} restored` },
    );
    expect(daemon.passes().filter((p) => p.mode === 'full')).toHaveLength(1);
  });
});

const tmpfsProbe = spawnSync(
  'sh',
  ['-c', 'd=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs "$d" && umount "$d"; s=$?; rmdir "$d"; exit $s'],
  {
    encoding: 'utf8',
  },
);
const tmpfsSkip =
  tmpfsProbe.status === 0 ? undefined : skipWithoutRoot(`needs tmpfs mounts: ${tmpfsProbe.stderr.trim()}`);

describe('the daemon when rootDir is unmounted and a filesystem mounted anew on it', () => {
  it.skipIf(tmpfsSkip !== undefined)(
    'the new filesystem gets every managed file back, and a file changed there by hand is restored by the watcher',
    async () => {
      const h = await AgentHarness.create({ registerDevice: true });
      harness = h;
      await h.writeConfig({
        drift: 'restore',
        poll: { intervalSeconds: 1, jitterRatio: 0.1, fullResyncSeconds: 600 },
      });
      await mkdir(h.rootDir, { recursive: true });
      const mountRoot = () => {
        const reason = tryMount(['-t', 'tmpfs', '-o', 'size=1m,mode=0755', 'tmpfs', h.rootDir]);
        if (reason !== undefined) throw new Error(reason);
        mounts.push(h.rootDir);
      };
      mountRoot();
      await h.createAndDeploy({ relative_filepath: MANAGED, content: { port: 443 } });
      const daemon = DaemonProcess.start(h);
      await daemon.waitForPasses(1, PATIENCE_MS, { predicate: (p) => p.converged });

      // The card pulled and another (empty) put in: the old filesystem's watches end with it.
      unmount(h.rootDir);
      mounts.splice(0);
      await daemon.waitForPasses(2, PATIENCE_MS);
      mountRoot();
      await waitFor(
        async () => ((await readFile(h.rootPath(MANAGED), 'utf8')) === BYTES ? true : undefined),
        PATIENCE_MS,
        { what: `${MANAGED} back on the new filesystem` },
      );
      await writeFile(h.rootPath(MANAGED), '{"port": 80}\n');
      await waitFor(
        async () => ((await readFile(h.rootPath(MANAGED), 'utf8')) === BYTES ? true : undefined),
        PATIENCE_MS,
        { what: `${MANAGED} restored` },
      );
    },
  );
});
