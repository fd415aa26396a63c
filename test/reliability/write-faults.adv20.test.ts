// adv20: disk faults injected with strace into real `--once` writes at steps the other fault tests leave out: the
// rename of a new version failing with a full disk (ENOSPC, as btrfs reports full metadata) or a quota
// (EDQUOT), and the mkdir of a new directory failing with EDQUOT or ENOSPC (inodes). A full disk is the
// device's condition: never an attempt (so never `failed`, even with maxAttempts 1), the old file whole, no
// temp file, converged once the disk takes writes again.
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Fleet } from './support/fleet.js';
import { runSeed, seededRandom } from './support/random.js';
import { fdPath, fixedTempPaths, injected, quoted, runTraced, straceUnavailable } from './support/strace.js';

const SKIP = straceUnavailable();
const SEED = runSeed();

interface WriteFault {
  name: string;
  spec: string;
  /** The path the fault strikes, relative to the root: strace is narrowed to it (`-P`), or to its temp files. */
  aim: string;
  /** A rename is matched by its first path, the temp file: strace is narrowed to the temp names of aim's directory. */
  viaTemp?: true;
  /** The paths whose new version the fault keeps from landing in that run. */
  held: readonly string[];
  /** The first run of the world (every directory new) rather than an update of every path. */
  firstSync: boolean;
}

const FAULTS: WriteFault[] = [
  {
    name: 'rename of a new version: disk full (ENOSPC)',
    spec: 'rename:error=ENOSPC:when=1',
    aim: 'etc/db/pool.json',
    viaTemp: true,
    held: ['etc/db/pool.json'],
    firstSync: false,
  },
  {
    name: 'rename of a new version: quota exceeded (EDQUOT)',
    spec: 'rename:error=EDQUOT:when=1',
    aim: 'etc/db/pool.json',
    viaTemp: true,
    held: ['etc/db/pool.json'],
    firstSync: false,
  },
  {
    // A network filesystem's stale handle: libuv has no name for it either (Unknown system error -116).
    name: 'rename of a new version: stale file handle (ESTALE)',
    spec: 'rename:error=ESTALE:when=1',
    aim: 'etc/db/pool.json',
    viaTemp: true,
    held: ['etc/db/pool.json'],
    firstSync: false,
  },
  {
    // ext4's EFSCORRUPTED: the filesystem found itself corrupt (no libuv name either: Unknown system error -117).
    name: 'mkdir of a new directory: filesystem corrupt (EUCLEAN)',
    spec: 'mkdir:error=EUCLEAN:when=1',
    aim: 'opt',
    held: ['opt/vendor/a/b/c/deep.json'],
    firstSync: true,
  },
  {
    name: 'mkdir of a new directory: quota exceeded (EDQUOT)',
    spec: 'mkdir:error=EDQUOT:when=1',
    aim: 'opt',
    held: ['opt/vendor/a/b/c/deep.json'],
    firstSync: true,
  },
  {
    name: 'mkdir of a new directory: no inode left (ENOSPC)',
    spec: 'mkdir:error=ENOSPC:when=1',
    aim: 'opt',
    held: ['opt/vendor/a/b/c/deep.json'],
    firstSync: true,
  },
];

let base = '';
const fleets: Fleet[] = [];
beforeAll(async () => {
  base = await mkdtemp(path.join(os.tmpdir(), 'config-agent-write-faults-'));
  process.stderr.write(`write-faults.adv20.test: seed ${SEED} (RELIABILITY_SEED)\n`);
});
afterAll(async () => {
  await Promise.all(fleets.map((fleet) => fleet.close()));
  if (base) await rm(base, { recursive: true, force: true });
});

describe.skipIf(SKIP !== undefined)('writes under injected full-disk faults', { timeout: 120_000 }, () => {
  it.each(FAULTS)('$name: no attempt, old bytes whole, converges after', async (fault) => {
    const dir = path.join(base, fault.name.replace(/\W+/g, '-'));
    const fleet = await Fleet.create({
      dir,
      rootDir: path.join(dir, 'root'),
      stateDir: path.join(dir, 'state'),
      bigFileBytes: 0,
      config: { retry: { maxAttempts: 1, baseDelaySeconds: 0.01, maxDelaySeconds: 1 } },
    });
    fleets.push(fleet);
    const random = seededRandom(SEED);
    fleet.deployAll(random);
    if (!fault.firstSync) {
      const first = await fleet.runOnce();
      expect(first.code, first.stdout + first.stderr).toBe(0);
      for (const relativePath of fleet.paths) fleet.deployVersion(relativePath, random);
    }
    const before = new Map(fleet.paths.map((p) => [p, fleet.versionsAt(p)]));
    const bytesBefore = new Map<string, Buffer | undefined>();
    for (const p of fault.held) bytesBefore.set(p, await fleet.fileBytes(p));

    const run = await runTraced({
      configPath: fleet.configPath,
      args: ['--once'],
      traceFile: path.join(dir, 'fault.trace'),
      timeoutMs: 30_000,
      inject: [fault.spec],
      ...(fault.viaTemp === true
        ? {
            paths: fixedTempPaths([path.dirname(path.join(fleet.rootDir, fault.aim))], 96),
            fixedTempNames: true,
          }
        : { paths: [path.join(fleet.rootDir, fault.aim)] }),
    });
    const hits = run.calls.filter(injected);
    expect(hits.map((c) => `${c.name}(${c.args.slice(0, 160)})`)).toHaveLength(1);
    const target = path.join(fleet.rootDir, fault.aim);
    const hit = hits[0]!;
    expect(quoted(hit.args).includes(target) || fdPath(hit.args) === target, hit.args).toBe(true);
    expect(hit.name).toBe(fault.spec.split(':')[0]);
    expect(run.code, run.stderr.slice(-2000)).toBe(1);

    for (const p of fault.held) {
      const next = before.get(p)?.next;
      expect(next, p).toBeDefined();
      const instance = fleet.server.state.instances.get(next!)!;
      expect([instance.activity_status, instance.error_status], p).toEqual(['queued', 'retrying']);
      const told = fleet.server.state.reports.filter((r) => r.config_instance_id === next);
      expect(told.at(-1)?.message, p).toMatch(
        /is full|quota on rootDir's filesystem is used up|the disk holding rootDir fails/,
      );
      const now = await fleet.fileBytes(p);
      const then = bytesBefore.get(p);
      if (then === undefined) expect(now, p).toBeUndefined();
      else expect(now?.equals(then), p).toBe(true);
    }
    // Every other path landed in that run.
    for (const p of fleet.paths.filter((q) => !fault.held.includes(q))) {
      const next = before.get(p)?.next;
      if (next !== undefined)
        expect(fleet.server.state.instances.get(next)?.activity_status, p).toBe('deployed');
    }
    expect(await fleet.tempFiles()).toEqual([]);
    expect(await fleet.checkAnyMoment()).toEqual([]);

    const after = await fleet.runOnce();
    expect(after.code, after.stdout + after.stderr).toBe(0);
    expect(await fleet.checkConverged()).toEqual([]);
    for (const p of fault.held) {
      const next = before.get(p)?.next;
      expect(
        fleet.server.state.reports.filter((r) => r.config_instance_id === next).map((r) => r.error_status),
      ).not.toContain('failed');
    }
  });
});
