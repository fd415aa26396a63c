// Power cuts with LazyFS: rootDir and stateDir on a filesystem that drops every unsynced byte on command. Cut at
// random moments of a pass and right after a clean exit 0; after each cut every file is a deployed version, every
// instance reported deployed has its bytes, and the restarted agent deletes nothing it cannot prove it wrote
// and converges. `npm run test:powercut -- --cuts 2000` is the long run.
import { mkdtemp, rm } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Fleet } from './support/fleet.js';
import { type KillLaneFigures, runKillLane, untilFromEnv } from './support/kill-loop.js';
import { LazyFsMount, lazyfsUnavailable } from './support/lazyfs.js';
import { countFromEnv, runSeed, seededRandom } from './support/random.js';
import { scratchParent } from './support/scratch.js';

const CUTS = countFromEnv('RELIABILITY_CUTS', 50);
/**
 * Independent worlds (a LazyFS mount, a mock service, an agent) cut in parallel: a cut's time is mostly waiting
 * (for a moment to cut at, for LazyFS, for the restarted run), so lanes multiply the cuts an hour gives.
 */
const LANES = Math.max(1, countFromEnv('RELIABILITY_CUT_LANES', 3));
const SEED = runSeed();
const UNTIL = untilFromEnv();
const SKIP = lazyfsUnavailable();

let base = '';
const mounts: LazyFsMount[] = [];
const fleets: Fleet[] = [];
beforeAll(async () => {
  if (SKIP !== undefined) return;
  // The backing store's own durability plays no part (LazyFS drops its cache itself): tmpfs keeps fsync cheap.
  const parent = await scratchParent();
  base = await mkdtemp(path.join(parent, 'config-agent-powercut-'));
});
afterAll(async () => {
  await Promise.all(fleets.map((fleet) => fleet.close()));
  await Promise.all(mounts.map((mount) => mount.stop()));
  if (base) await rm(base, { recursive: true, force: true });
});

/** One lane: its own LazyFS mount under `dir`, with rootDir and stateDir on it, cut `cuts` times. */
async function runCutLane(dir: string, lane: number, cuts: number): Promise<KillLaneFigures> {
  const disk = await LazyFsMount.mount(
    path.join(dir, 'backing'),
    path.join(dir, 'disk'),
    path.join(dir, 'control'),
  );
  mounts.push(disk);
  const fleet = await Fleet.create({
    dir: path.join(dir, 'agent'),
    rootDir: path.join(disk.mountPoint, 'root'),
    stateDir: path.join(disk.mountPoint, 'state'),
    bigFileBytes: 1024 * 1024,
    schemaSwaps: true,
  });
  fleets.push(fleet);
  let made = 0;
  return runKillLane(fleet, seededRandom(SEED + lane), {
    kills: cuts,
    finishEvery: 4,
    // Every tenth cut also unmounts and mounts again: a reboot.
    powerCut: () => {
      made += 1;
      return disk.powerCut({ reboot: made % 10 === 0 });
    },
    cutAfterFinish: true,
    label: `power-cut lane ${lane}`,
    progressEvery: 10,
    ...(UNTIL === undefined ? {} : { until: UNTIL }),
  });
}

describe.skipIf(SKIP !== undefined)('power cuts (LazyFS)', () => {
  it(`${CUTS} cuts during passes, plus one after every clean exit: no torn or lost file, converges`, {
    // A cut, a reboot now and then and the runs around it: seconds each on a loaded machine.
    timeout: Math.max(900_000, (CUTS / LANES) * 30_000),
  }, async () => {
    const lanes = Math.min(LANES, Math.max(1, CUTS));
    const results = await Promise.all(
      Array.from({ length: lanes }, (_, lane) =>
        runCutLane(
          path.join(base, `lane-${lane}`),
          lane,
          Math.floor(CUTS / lanes) + (lane < CUTS % lanes ? 1 : 0),
        ),
      ),
    );
    const sum = (
      field: 'kills' | 'killsOnEvent' | 'killsInsidePublish' | 'cutsAfterExit' | 'completedRuns',
    ) => results.reduce((total, figures) => total + figures[field], 0);
    const violations = results.flatMap((r, lane) => r.violations.map((v) => `lane ${lane}: ${v}`));
    const stoppedByTime = results.some((r) => r.stoppedByTime);
    process.stderr.write(
      `power-cut: seed ${SEED}, ${lanes} lanes, ${sum('kills')} cuts during runs (${sum('killsOnEvent')} timed by a ` +
        `filesystem event, ${sum('killsInsidePublish')} left a temp file), ${sum('cutsAfterExit')} cuts right ` +
        `after exit 0, ${sum('completedRuns')} finished runs (slowest per lane: ` +
        `${results.map((r) => `${(r.slowestRunMs / 1000).toFixed(1)} s`).join(', ')}), ` +
        `${violations.length} violations` +
        `${stoppedByTime ? `; stopped by the time budget (RELIABILITY_UNTIL) before ${CUTS}` : ''}\n`,
    );
    expect(violations, `seed ${SEED} (replay with RELIABILITY_SEED=${SEED})`).toEqual([]);
    if (!stoppedByTime) expect(sum('kills')).toBeGreaterThanOrEqual(CUTS);
    expect(sum('cutsAfterExit')).toBeGreaterThan(0);
  });
});

if (SKIP !== undefined) {
  describe('power cuts (LazyFS, skipped)', () => {
    it.skip(`skipped: ${SKIP}`, () => undefined);
  });
}
