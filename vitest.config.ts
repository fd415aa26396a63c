// Two test tiers (see test/README.md): `unit` runs in-process with no build; `integration` spawns the built dist/.
import { accessSync, constants, readFileSync, statfsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { defineConfig, type TestProjectInlineConfiguration } from 'vitest/config';

/**
 * In-process tests whose point is a size (150,000 managed files, 200,000 queued reports, a directory of a million
 * entries, items of megabytes, YAML wider than the emitter's chunks) or a count (300 generated documents per property
 * against the YAML oracle): seconds of CPU each, so they run with the integration tier, not the unit tier's 30 s
 * budget. Stryker still runs them (test/vitest.mutation.config.ts).
 */
export const SCALE = 'src/**/*.scale.test.ts';

/**
 * In-process tests that wait on the real clock by design: hooks run as real child processes and killed after their
 * real timeouts (process groups, setsid, /proc), a daemon over real 1 s polls running a hook program. Seconds of
 * waiting each, so they run with the integration tier; on Node 24 too (.ci/run).
 */
export const REAL_TIME = 'src/**/*.real-time.test.ts';

/**
 * In-process tests of the rootDir lock against real holders: other processes (as user nobody, on the other Node,
 * stopped with SIGSTOP) bound to the lock's abstract name, each judged after the 2 s the agent gives a holder to
 * answer. Seconds of waiting on real processes each (11 s of the unit tier's file time), so they run with the
 * integration tier; on Node 24 too (.ci/run). The lock's logic against stand-ins stays in the unit tier
 * (lock.test.ts, root-lock-legacy.lock25, root-lock-owns.lock25, ...), and so does root-lock-runtimes.lock24: its
 * names are its rootDir's st_dev:st_ino, and on the integration tier's temp dirs (ext4, where a freed inode is
 * handed out again at once) one case met the holder a case before it left on the same inode (the CI rehearsal at
 * 87deb42); the unit tier's are on tmpfs, whose inode numbers are not reused.
 */
export const LOCK_HOLDERS = [
  'src/store/root-lock-trust.lock24.test.ts',
  'src/store/root-lock-stopped.adv26.test.ts',
  'src/store/root-lock.review29.test.ts',
  'src/store/root-lock.adv24.test.ts',
  'src/store/root-lock.review30.test.ts',
];

/** Tests that spawn the compiled binaries (dist/), and the reliability tier that does the same. */
export const INTEGRATION = [
  'test/integration/**/*.test.ts',
  'test/reliability/**/*.test.ts',
  // Installs the built .deb under a real systemd: slow, needs dist/ and dist-pkg/.
  'test/systemd/deb.test.ts',
  // Builds the shipped bundle and runs it against the mock service: its V8 code cache.
  'test/packaging/code-cache.test.ts',
  // Builds the shipped bundle and runs --once --write-code-cache and first syncs: the install's V8 code cache.
  'test/packaging/install-code-cache.test.ts',
  // Builds the shipped bundle: without a proxy, --once and the ESM chunks never load undici.
  'test/packaging/transport-chunks.test.ts',
  // Builds the shipped bundle: its pino without transports, a daemon that logs and loads no worker_threads.
  'test/packaging/pino-bundle.test.ts',
  // The packages' entry (main.cjs) and shell launcher, each run as a process (the launcher on the bundled Node 24
  // that `npm run package` unpacks): child processes and timing of a whole start, not in-process tests.
  'test/packaging/front-door.test.ts',
  'test/packaging/launcher.test.ts',
  // Reads the .deb files and the bundle `npm run package` built, and runs the bundle's command lines.
  'test/systemd/package.test.ts',
  SCALE,
  REAL_TIME,
  ...LOCK_HOLDERS,
];

const TMPFS = '/dev/shm';
/** Room the unit tier may fill at once (two workers' temp dirs; items of megabytes): containers often give 64 MiB. */
const TMPFS_NEEDED_BYTES = 1024 ** 3;

/**
 * Where the unit tier's temp dirs go: a tmpfs when there is a roomy, writable, executable one and TMPDIR is not
 * set. Its tests write, fsync and rename for real; on the disk an fsync waits for the device, and on a shared
 * machine for everyone else's writes too (pass.test.ts, pass-wire and pass-known-items: 153 s on / and 74 s on
 * /dev/shm at a load of ~17). What an fsync makes durable is the reliability tier's (LazyFS, strace) and
 * PowerCutFs's to prove, not this tier's.
 */
function unitTempDir(): string | undefined {
  if ((process.env.TMPDIR ?? '') !== '') return undefined;
  try {
    const mount = readFileSync('/proc/self/mounts', 'utf8')
      .split('\n')
      .map((line) => line.split(' '))
      .filter((fields) => fields[1] === TMPFS)
      .at(-1);
    if (mount?.[2] !== 'tmpfs' || (mount[3] ?? '').split(',').includes('noexec')) return undefined;
    accessSync(TMPFS, constants.W_OK | constants.X_OK);
    const stats = statfsSync(TMPFS);
    return stats.bavail * stats.bsize >= TMPFS_NEEDED_BYTES ? TMPFS : undefined;
  } catch {
    return undefined;
  }
}

const unitTmp = unitTempDir();

/** In-process tests: memfs or a temp dir, the mock service on port 0, fake clocks. No build needed. */
export const unitTier: TestProjectInlineConfiguration = {
  extends: true,
  test: {
    name: 'unit',
    include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
    exclude: INTEGRATION,
    ...(unitTmp === undefined ? {} : { env: { TMPDIR: unitTmp } }),
    // Bounds for a failing test only: a passing unit test takes milliseconds, even on a busy machine.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    // One module graph per worker instead of one per file: halves the tier's time (importing is most of it).
    // Unit tests therefore leave no global state behind: no vi.mock, timers restored, servers closed.
    isolate: false,
    // Three workers even on two cores (vitest's default there is one): the tier waits on sockets, timers and
    // servers' deadlines as well as computing, so a second worker overlapped those waits (30 → 23 s) and a third
    // overlaps what is left; each worker imports the code once more (~2 s of CPU). test/README.md has the figures.
    maxWorkers: Math.max(3, availableParallelism() - 1),
    // V8 collects garbage on the worker's own thread: its parallel GC helpers, three workers' on two cores, cost
    // CPU to coordinate and, on a busy machine, made each collection wait for a helper not given a core (a set of
    // nine heavy files: 16.3–17.8 s of CPU against 19.7–20.7 s). The tier is CPU-bound when idle, so that is wall.
    execArgv: ['--single-threaded-gc'],
    // Projects with different worker counts need groups of their own: the unit tier runs first.
    sequence: { groupOrder: 0 },
  },
};

export const integrationTier: TestProjectInlineConfiguration = {
  extends: true,
  test: {
    name: 'integration',
    include: INTEGRATION,
    // Spawned agents on a busy 2-core machine: generous bounds (they only end a failing test); tests wait on
    // conditions, not on sleeps.
    testTimeout: 300_000,
    hookTimeout: 120_000,
    pool: 'forks',
    globalSetup: ['test/global-setup.ts'],
    sequence: { groupOrder: 1 },
  },
};

export default defineConfig({
  test: {
    // Each file's transform (TypeScript to JS, import analysis) kept under node_modules/.experimental-vitest-cache,
    // keyed by the file's content, vitest's version and this config: a run after the first transforms only what
    // changed (the unit tier's transforms: ~30 s of main-process time summed, ~6 s with the cache; several seconds
    // of its CPU). `npx vitest --clearCache` empties it. Experimental in vitest 4.1: off again if it misbehaves.
    experimental: { fsModuleCache: true },
    reporters: ['default', './test/plain-summary-reporter.ts'],
    projects: [unitTier, integrationTier],
  },
});
