// Disk faults injected with strace into real `--once` runs (UV_THREADPOOL_SIZE=1, so "the Nth fsync" is the same
// call every time): the old file stays byte-identical, nothing is reported deployed that is not durable, no temp
// file is left, and the next run converges. The fault lands on the first call of its kind in the root; a twin
// world traced without faults tells which Nth call that is, and the trace confirms where it landed.
//
// strace's `when=N` counts per thread and strikes the Nth call of *every* thread, so this way only syscalls that
// the libuv pool thread alone makes (fsync, rename, fchmod) can be aimed at one call. write, close and openat are
// also made by the main thread (module loading, sockets, logs, eventfd wake-ups), so those faults are aimed by
// path instead: the run is preloaded with support/fixed-temp-names.mjs (temp files named 1, 2, 3...), strace's
// `-P` lists the temp paths the run can use in the root (or the state dir), and a fault with `when=1` strikes the
// first write, close or open of one of those files and nothing else.
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IN_MEMORY_FILE_BYTES } from '../../src/reconcile/spill.js';
import { TEMP_PREFIX } from '../../src/store/path-guard.js';
import { CANARY_KEY, Fleet } from './support/fleet.js';
import { runSeed, seededRandom } from './support/random.js';
import {
  fdPath,
  fixedTempPaths,
  injected,
  quoted,
  reportsBeforeDurable,
  reportsSent,
  runTraced,
  type Syscall,
  straceUnavailable,
  type TracedRun,
  whenFor,
} from './support/strace.js';

const SKIP = straceUnavailable();
const SEED = runSeed();
const MAX_ATTEMPTS = 5;

interface FaultCase {
  name: string;
  syscall: string;
  errno: string;
  /** Picks the call to fail, given the world's root and state dir. */
  target: (call: Syscall, dirs: { root: string; state: string }) => boolean;
  /** Whether the fault strikes before the rename, so the old file must still be there byte for byte. */
  beforeCommit: boolean;
  /** The fault strikes the directory fsync that makes a rename durable: that file must not be reported deployed. */
  afterRename?: boolean;
}

const isTempIn = (file: string | undefined, dir: string) =>
  file?.startsWith(`${dir}/`) === true && path.basename(file).startsWith(TEMP_PREFIX);

const CASES: FaultCase[] = [
  {
    name: 'fsync of the new file fails (EIO)',
    syscall: 'fsync',
    errno: 'EIO',
    target: (c, d) => isTempIn(fdPath(c.args), d.root),
    beforeCommit: true,
  },
  {
    name: 'fsync of the directory after the rename fails (EIO)',
    syscall: 'fsync',
    errno: 'EIO',
    target: (c, d) => {
      const dir = fdPath(c.args);
      return dir?.startsWith(`${d.root}/`) === true && !path.basename(dir).startsWith(TEMP_PREFIX);
    },
    beforeCommit: false,
    afterRename: true,
  },
  {
    name: 'rename fails (EXDEV)',
    syscall: 'rename',
    errno: 'EXDEV',
    target: (c, d) => isTempIn(quoted(c.args)[0], d.root),
    beforeCommit: true,
  },
  {
    // Disk full as delayed allocation, NFS and thin provisioning report it: at fsync, after every write succeeded.
    name: 'fsync of the new file reports a full disk (ENOSPC)',
    syscall: 'fsync',
    errno: 'ENOSPC',
    target: (c, d) => isTempIn(fdPath(c.args), d.root),
    beforeCommit: true,
  },
  {
    name: 'chmod of the new file fails (EPERM)',
    syscall: 'fchmod',
    errno: 'EPERM',
    target: (c, d) => isTempIn(fdPath(c.args), d.root),
    beforeCommit: true,
  },
  {
    name: 'fsync of a file in the state directory fails (EIO)',
    syscall: 'fsync',
    errno: 'EIO',
    target: (c, d) =>
      isTempIn(fdPath(c.args), d.state) || isTempIn(fdPath(c.args), path.join(d.state, 'cache')),
    beforeCommit: false,
  },
];

let base = '';
const fleets: Fleet[] = [];
beforeAll(async () => {
  base = await mkdtemp(path.join(os.tmpdir(), 'config-agent-diskfaults-'));
});
afterAll(async () => {
  await Promise.all(fleets.map((fleet) => fleet.close()));
  if (base) await rm(base, { recursive: true, force: true });
});

/** A world that converged on version 1 of every path and now has version 2 waiting: identical for one seed. */
async function worldWithUpdatesWaiting(name: string, bigFileBytes = 0): Promise<Fleet> {
  const dir = path.join(base, name);
  const fleet = await Fleet.create({
    dir,
    rootDir: path.join(dir, 'root'),
    stateDir: path.join(dir, 'state'),
    bigFileBytes,
  });
  fleets.push(fleet);
  const random = seededRandom(SEED);
  fleet.deployAll(random);
  const first = await fleet.runOnce();
  expect(first.code, first.stdout + first.stderr).toBe(0);
  for (const relativePath of fleet.paths) fleet.deployVersion(relativePath, random);
  return fleet;
}

function traced(
  fleet: Fleet,
  label: string,
  inject?: string,
  aim?: { paths: readonly string[] },
): Promise<TracedRun> {
  return runTraced({
    configPath: fleet.configPath,
    args: ['--once'],
    traceFile: path.join(fleet.dir, `${label}.trace`),
    timeoutMs: 30_000,
    ...(inject === undefined ? {} : { inject: [inject] }),
    ...(aim === undefined ? {} : { paths: aim.paths, fixedTempNames: true }),
  });
}

let calibration: TracedRun | undefined;
let calibrationDirs = { root: '', state: '' };

describe.skipIf(SKIP !== undefined)('disk faults injected with strace', { timeout: 120_000 }, () => {
  beforeAll(async () => {
    const twin = await worldWithUpdatesWaiting('calibration');
    calibration = await traced(twin, 'calibration');
    calibrationDirs = { root: twin.rootDir, state: twin.stateDir };
    expect(calibration.code, calibration.stdout).toBe(0);
  }, 120_000);

  it.each(CASES)(
    '$name: old file intact, nothing reported deployed early, converges after',
    async (fault) => {
      // strace counts every call of the kind (libuv's eventfd writes and socket closes too, and their number
      // varies from run to run), so the calibrated `when` can miss: the trace says where the fault landed, and a
      // miss is tried again in a fresh twin world with the count this run showed.
      const slug = fault.name.replace(/\W+/g, '-');
      let when = whenFor(calibration?.calls ?? [], fault.syscall, (c) => fault.target(c, calibrationDirs));
      let landed:
        | {
            fleet: Fleet;
            run: TracedRun;
            before: Map<string, ReturnType<Fleet['versionsAt']>>;
            reportsBefore: number;
          }
        | undefined;
      const misses: string[] = [];
      for (let attempt = 0; attempt < MAX_ATTEMPTS && landed === undefined; attempt += 1) {
        expect(
          when,
          `no ${fault.syscall} call matches the case in a fault-free run (${calibration?.calls.length} calls; ` +
            `${JSON.stringify(calibrationDirs)}; ${calibration?.calls
              .filter((c) => c.name === fault.syscall)
              .slice(0, 3)
              .map((c) => c.args.slice(0, 150))
              .join(' ; ')})`,
        ).toBeDefined();
        const candidate = await worldWithUpdatesWaiting(`${slug}-${attempt}`);
        const before = new Map(candidate.paths.map((p) => [p, candidate.versionsAt(p)]));
        const reportsBefore = candidate.server.state.reports.length;
        const attemptRun = await traced(
          candidate,
          `fault-${attempt}`,
          `${fault.syscall}:error=${fault.errno}:when=${String(when)}`,
        );
        const dirsNow = { root: candidate.rootDir, state: candidate.stateDir };
        const hits = attemptRun.calls.filter(injected);
        if (hits.length === 1 && fault.target(hits[0]!, dirsNow)) {
          landed = { fleet: candidate, run: attemptRun, before, reportsBefore };
        } else {
          misses.push(hits.map((c) => `${c.name}(${c.args.slice(0, 120)})`).join(', ') || 'nothing');
          when = whenFor(attemptRun.calls, fault.syscall, (c) => fault.target(c, dirsNow)) ?? when;
        }
      }
      expect(
        landed,
        `the fault never landed on its target in ${MAX_ATTEMPTS} worlds; it hit: ${misses.join(' | ')}`,
      ).toBeDefined();
      const { fleet, run, before, reportsBefore } = landed!;
      const dirs = { root: fleet.rootDir, state: fleet.stateDir };
      const hit = run.calls.filter(injected);
      expect(hit.length, `strace injected ${hit.length} faults`).toBe(1);
      const call = hit[0]!;
      expect(fault.target(call, dirs), `the fault landed on ${call.name}(${call.args.slice(0, 200)})`).toBe(
        true,
      );
      expect(run.code === 0 || run.code === 1, `exit ${String(run.code)}: ${run.stderr.slice(-2000)}`).toBe(
        true,
      );
      expect(`${run.stdout}${run.stderr}`.includes(CANARY_KEY)).toBe(false);

      const reports = fleet.server.state.reports.slice(reportsBefore);
      const reportedDeployed = (id: string | undefined) =>
        reports.some((r) => r.config_instance_id === id && r.activity_status === 'deployed');
      expect(await fleet.tempFiles(), 'temp files left by the failed publish').toEqual([]);
      expect(await fleet.checkAnyMoment()).toEqual([]);
      const pathOf = (id: string) => fleet.server.state.instances.get(id)?.relative_filepath;
      expect(reportsBeforeDurable(run.calls, fleet.rootDir, pathOf)).toEqual([]);

      // Each path holds its old bytes (and its new version was not reported deployed) or its new bytes.
      const kept: string[] = [];
      for (const relativePath of fleet.paths) {
        const { deployed: old, next } = before.get(relativePath) ?? {};
        const data = await fleet.fileBytes(relativePath);
        if (old !== undefined && data?.equals(fleet.bytesOf(old) ?? Buffer.alloc(0))) {
          kept.push(relativePath);
          expect(
            reportedDeployed(next),
            `${relativePath} holds its old bytes, yet ${next} was reported deployed`,
          ).toBe(false);
        } else {
          expect(
            data?.equals(fleet.bytesOf(next ?? '') ?? Buffer.alloc(0)),
            `${relativePath} is neither old nor new`,
          ).toBe(true);
        }
      }
      // The first publish in the root failed before its rename: at least that file kept its old bytes exactly.
      if (fault.beforeCommit) expect(kept.length, 'no file kept its old bytes').toBeGreaterThan(0);
      // Files renamed into the directory whose fsync failed are in place but not durable: none is deployed yet.
      const stranded: string[] = [];
      if (fault.afterRename === true) {
        const dir = fdPath(call.args) ?? '';
        for (const renamed of run.calls.filter((c) => c.name.startsWith('rename') && c.index < call.index)) {
          const target = quoted(renamed.args)[1];
          if (target === undefined || path.dirname(target) !== dir) continue;
          const relative = path.relative(fleet.rootDir, target);
          if (fleet.paths.includes(relative)) stranded.push(relative);
        }
        expect(
          stranded.length,
          `no managed file was renamed into ${dir} before its fsync failed`,
        ).toBeGreaterThan(0);
        for (const relative of stranded) {
          const { next } = before.get(relative) ?? {};
          expect(
            reportedDeployed(next),
            `${relative} reported deployed after its directory fsync failed`,
          ).toBe(false);
        }
      }

      // The next run finds those files already holding the new bytes. Adopting them as "unchanged" would report
      // them deployed with nothing ever synced: it must fsync the file and its directory before the report.
      const after = await traced(fleet, 'after');
      for (const relative of stranded) {
        const absolute = path.join(fleet.rootDir, relative);
        const { next } = before.get(relative) ?? {};
        const report = reportsSent(after.calls).find(
          (r) => r.instanceId === next && r.activity === 'deployed',
        );
        expect(report, `${relative}: ${next} never reported deployed after the fault`).toBeDefined();
        const synced = (file: string) =>
          after.calls.some(
            (c) =>
              c.index < (report?.index ?? 0) && c.name === 'fsync' && fdPath(c.args) === file && !injected(c),
          );
        const republished = after.calls.some(
          (c) =>
            c.index < (report?.index ?? 0) && c.name.startsWith('rename') && quoted(c.args)[1] === absolute,
        );
        expect(
          synced(absolute) || republished,
          `${relative}: reported deployed without an fsync of the file`,
        ).toBe(true);
        expect(
          synced(path.dirname(absolute)),
          `${relative}: reported deployed without an fsync of its directory`,
        ).toBe(true);
      }
      expect(after.code, `the run after the fault: ${after.stdout}${after.stderr.slice(-2000)}`).toBe(0);
      expect(await fleet.checkConverged()).toEqual([]);
      expect(await fleet.canaryHits([run.stdout, run.stderr, after.stdout, after.stderr])).toEqual([]);
    },
  );
});

interface AimedCase {
  name: string;
  syscall: 'write' | 'close' | 'openat';
  errno: string;
  /** Whose temp files the fault aims at: a managed file's publish in the root, state.json or outbox.json, a cache entry. */
  where: 'root' | 'state' | 'cache';
  /** EMFILE and the like are the agent's own trouble: no attempt counted, nothing reported for the instance. */
  resource?: boolean;
  /** Which of the aimed files' calls of that kind to strike (1 by default; strace's `when=`, `'1..2'` a range); the pool thread makes them in order. */
  when?: number | string;
  /** How many calls that strikes (1 by default). */
  strikes?: number;
  /** The state file's write is tried once more after the content cache is emptied (state-dir.ts), and that one lands. */
  landsOnRetry?: boolean;
  /** The state-dir file whose write the fault broke, as the agent's error names it. */
  failedFile?: string;
  /** A file of this size in the world (0: none). */
  bigFileBytes?: number;
  /** The batch's writes could not be declared (intent.json): every file keeps its old bytes, none reported deployed. */
  nothingWritten?: boolean;
}

const AIMED: AimedCase[] = [
  { name: 'write of the new file: disk full (ENOSPC)', syscall: 'write', errno: 'ENOSPC', where: 'root' },
  { name: 'close of the new file fails (EIO)', syscall: 'close', errno: 'EIO', where: 'root' },
  {
    name: 'open of the new file: out of descriptors (EMFILE)',
    syscall: 'openat',
    errno: 'EMFILE',
    where: 'root',
    resource: true,
  },
  {
    // intent.json (the batch's declared writes) is the first publish in the state dir. Undeclared, a file a
    // crash left behind would be provable by nothing: the batch is not written at all. A state file's write that
    // fails ENOSPC is tried once more after emptying the content cache (adv29, 334a1ce): both are struck here.
    name: 'write of intent.json: disk full (ENOSPC)',
    syscall: 'write',
    errno: 'ENOSPC',
    where: 'state',
    when: '1..2',
    strikes: 2,
    failedFile: 'intent.json',
    nothingWritten: true,
  },
  {
    // The same, the disk full for the first try only (the emptied cache made room): the batch is declared and
    // written as usual.
    name: 'write of intent.json: disk full once (ENOSPC), room made',
    syscall: 'write',
    errno: 'ENOSPC',
    where: 'state',
    failedFile: 'intent.json',
    landsOnRetry: true,
  },
  {
    // intent.json (the batch's declared writes) is published first, then state.json, then the outbox.
    name: 'write of state.json: disk full (ENOSPC)',
    when: 2,
    syscall: 'write',
    errno: 'ENOSPC',
    where: 'state',
    failedFile: 'state.json',
  },
  {
    // intent.json (the batch's declared writes) is published first, then state.json, then the outbox.
    name: 'close of state.json fails (EIO)',
    when: 2,
    syscall: 'close',
    errno: 'EIO',
    where: 'state',
    failedFile: 'state.json',
  },
  {
    // intent.json (the batch's declared writes) is published first, then state.json, then the outbox.
    name: 'open of state.json: out of descriptors (EMFILE)',
    when: 2,
    syscall: 'openat',
    errno: 'EMFILE',
    where: 'state',
    failedFile: 'state.json',
  },
  {
    // intent.json is written first, then state.json, then the outbox: the third write in the state dir.
    name: 'write of outbox.json: disk full (ENOSPC)',
    syscall: 'write',
    errno: 'ENOSPC',
    where: 'state',
    when: 3,
    failedFile: 'outbox.json',
  },
  {
    // `--once` copies no written file into the cache (only the daemon's drift watcher reads those copies): the
    // entry struck is a large file's bytes, set aside by the pull past its in-memory budget (reconcile/spill.ts).
    name: 'write of a content-cache entry: disk full (ENOSPC)',
    syscall: 'write',
    errno: 'ENOSPC',
    where: 'cache',
    bigFileBytes: IN_MEMORY_FILE_BYTES + 1024 * 1024,
  },
];

/** More than the random names one run of these worlds uses (lock token, publishes, state and cache files). */
const TEMP_NAMES_PER_RUN = 96;

/** The file a traced call was made on: the path an fd argument was printed with, else the first path argument. */
const fileOf = (call: Syscall) => fdPath(call.args) ?? quoted(call.args)[0];

describe.skipIf(SKIP !== undefined)(
  'disk faults aimed at one publish with strace -P',
  { timeout: 120_000 },
  () => {
    it.each(AIMED)(
      '$name: old file intact, nothing reported deployed early, converges after',
      async (fault) => {
        const fleet = await worldWithUpdatesWaiting(
          `aimed-${fault.name.replace(/\W+/g, '-')}`,
          fault.bigFileBytes,
        );
        const dirs =
          fault.where === 'root'
            ? [...new Set(fleet.paths.map((p) => path.dirname(path.join(fleet.rootDir, p))))]
            : fault.where === 'state'
              ? [fleet.stateDir]
              : [path.join(fleet.stateDir, 'cache')];
        const aimedAt = fixedTempPaths(dirs, TEMP_NAMES_PER_RUN);
        const before = new Map(fleet.paths.map((p) => [p, fleet.versionsAt(p)]));
        const reportsBefore = fleet.server.state.reports.length;
        const run = await traced(
          fleet,
          'aimed',
          `${fault.syscall}:error=${fault.errno}:when=${fault.when ?? 1}`,
          {
            paths: aimedAt,
          },
        );

        // The fault struck exactly the calls it aimed at, of its kind, on the aimed temp files; nothing else was hit.
        const hits = run.calls.filter(injected);
        expect(hits.map((c) => `${c.name}(${c.args.slice(0, 160)})`)).toHaveLength(fault.strikes ?? 1);
        const hitFile = fileOf(hits[0]!) ?? '';
        for (const hit of hits) {
          expect(hit.name).toBe(fault.syscall);
          const struck = fileOf(hit) ?? '';
          expect(aimedAt, `the fault landed on ${struck}`).toContain(struck);
          // The temp file it struck was never renamed into place.
          expect(
            run.calls.some(
              (c) =>
                c.name.startsWith('rename') && quoted(c.args)[0] === struck && !c.result.startsWith('-1'),
            ),
            `${struck} was renamed after its ${fault.syscall} failed`,
          ).toBe(false);
        }
        if (fault.landsOnRetry === true)
          expect(run.stderr, 'the state file tried once more after emptying the cache').toContain(
            'emptied the content cache',
          );
        expect(run.code === 0 || run.code === 1, `exit ${String(run.code)}: ${run.stderr.slice(-2000)}`).toBe(
          true,
        );
        if (fault.failedFile !== undefined)
          expect(run.stderr, `the fault did not break ${fault.failedFile}`).toContain(
            `"path":"${fault.failedFile}"`,
          );

        expect(await fleet.tempFiles(), 'temp files left by the failed publish').toEqual([]);
        expect(await fleet.checkAnyMoment()).toEqual([]);
        const reports = fleet.server.state.reports.slice(reportsBefore);
        const kept: string[] = [];
        for (const relativePath of fleet.paths) {
          const { deployed: old, next } = before.get(relativePath) ?? {};
          const data = await fleet.fileBytes(relativePath);
          if (old !== undefined && data?.equals(fleet.bytesOf(old) ?? Buffer.alloc(0))) {
            kept.push(relativePath);
            const told = reports.filter((r) => r.config_instance_id === next).map((r) => r.activity_status);
            expect(
              told,
              `${relativePath} holds its old bytes, yet ${next} was reported deployed`,
            ).not.toContain('deployed');
            // The agent's own resource trouble is no attempt of the instance: the service hears nothing of it.
            if (fault.resource === true)
              expect(told, `${relativePath}: reports after ${fault.errno}`).toEqual([]);
          } else {
            expect(
              data?.equals(fleet.bytesOf(next ?? '') ?? Buffer.alloc(0)),
              `${relativePath} is neither old nor new`,
            ).toBe(true);
          }
        }
        if (fault.landsOnRetry === true)
          expect(kept, 'files left old though the retry declared them').toEqual([]);
        if (fault.nothingWritten === true) {
          expect(kept.sort(), 'files written though their declaration failed').toEqual(
            [...fleet.paths].sort(),
          );
          expect(reports.filter((r) => r.activity_status === 'deployed')).toEqual([]);
        }
        if (fault.where === 'root') {
          // The struck publish was a managed file's: that file, and only files whose publish failed, kept old bytes.
          expect(kept.length, 'no file kept its old bytes').toBeGreaterThan(0);
          const inDir = kept.filter(
            (p) => path.dirname(path.join(fleet.rootDir, p)) === path.dirname(hitFile),
          );
          expect(inDir.length, `no file in ${path.dirname(hitFile)} kept its old bytes`).toBeGreaterThan(0);
        }

        if (fault.where === 'state') {
          // The run reported files deployed whose record (state.json) it could not persist. The service now
          // retires them: the agent wrote them, so the next run must delete them, not keep them as someone else's.
          for (const relativePath of fleet.paths) {
            const { next } = before.get(relativePath) ?? {};
            const told = reports.some(
              (r) => r.config_instance_id === next && r.activity_status === 'deployed',
            );
            if (next !== undefined && told && relativePath.endsWith('.json'))
              fleet.server.state.removeInstance(next, new Date().toISOString());
          }
        }
        // The run after the fault converges, and tells the service nothing before it is durable.
        const after = await traced(fleet, 'after');
        expect(after.code, `the run after the fault: ${after.stdout}${after.stderr.slice(-2000)}`).toBe(0);
        const pathOf = (id: string) => fleet.server.state.instances.get(id)?.relative_filepath;
        expect(reportsBeforeDurable(after.calls, fleet.rootDir, pathOf)).toEqual([]);
        expect(await fleet.checkConverged()).toEqual([]);
        expect(await fleet.canaryHits([run.stdout, run.stderr, after.stdout, after.stderr])).toEqual([]);
      },
    );
  },
);

if (SKIP !== undefined) {
  describe('disk faults injected with strace (skipped)', () => {
    it.skip(`skipped: ${SKIP}`, () => undefined);
  });
}
