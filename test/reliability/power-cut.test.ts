// Power cuts with LazyFS: rootDir and stateDir on a filesystem that drops every unsynced byte on command. Cut at
// random moments of a pass and right after a clean exit 0; after each cut every file is a deployed version, every
// instance reported deployed has its bytes, and the restarted agent deletes nothing it cannot prove it wrote
// and converges. `npm run test:powercut -- --cuts 2000` is the long run.
import { mkdtemp, rm } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Fleet } from './support/fleet.js';
import { runKillLane, untilFromEnv } from './support/kill-loop.js';
import { LazyFsMount, lazyfsUnavailable } from './support/lazyfs.js';
import { countFromEnv, runSeed, seededRandom } from './support/random.js';
import { scratchParent } from './support/scratch.js';

const CUTS = countFromEnv('RELIABILITY_CUTS', 50);
const SEED = runSeed();
const UNTIL = untilFromEnv();
const SKIP = lazyfsUnavailable();

let base = '';
let mount: LazyFsMount | undefined;
let fleet: Fleet | undefined;
beforeAll(async () => {
  if (SKIP !== undefined) return;
  // The backing store's own durability plays no part (LazyFS drops its cache itself): tmpfs keeps fsync cheap.
  const parent = await scratchParent();
  base = await mkdtemp(path.join(parent, 'config-agent-powercut-'));
});
afterAll(async () => {
  await fleet?.close();
  await mount?.stop();
  if (base) await rm(base, { recursive: true, force: true });
});

describe.skipIf(SKIP !== undefined)('power cuts (LazyFS)', () => {
  it(`${CUTS} cuts during passes, plus one after every clean exit: no torn or lost file, converges`, {
    // A cut, a reboot now and then and the runs around it: seconds each on a loaded machine.
    timeout: Math.max(900_000, CUTS * 30_000),
  }, async () => {
    const disk = await LazyFsMount.mount(
      path.join(base, 'backing'),
      path.join(base, 'disk'),
      path.join(base, 'control'),
    );
    mount = disk;
    fleet = await Fleet.create({
      dir: path.join(base, 'agent'),
      rootDir: path.join(disk.mountPoint, 'root'),
      stateDir: path.join(disk.mountPoint, 'state'),
      bigFileBytes: 1024 * 1024,
    });
    let cuts = 0;
    const figures = await runKillLane(fleet, seededRandom(SEED), {
      kills: CUTS,
      finishEvery: 4,
      // Every tenth cut also unmounts and mounts again: a reboot.
      powerCut: () => {
        cuts += 1;
        return disk.powerCut({ reboot: cuts % 10 === 0 });
      },
      cutAfterFinish: true,
      label: 'power-cut',
      progressEvery: 10,
      ...(UNTIL === undefined ? {} : { until: UNTIL }),
    });
    process.stderr.write(
      `power-cut: seed ${SEED}, ${figures.kills} cuts during runs (${figures.killsOnEvent} timed by a filesystem ` +
        `event, ${figures.killsInsidePublish} left a temp file), ${figures.cutsAfterExit} cuts right after exit 0, ` +
        `${figures.completedRuns} finished runs (slowest ${(figures.slowestRunMs / 1000).toFixed(1)} s), ` +
        `${figures.violations.length} violations` +
        `${figures.stoppedByTime ? `; stopped by the time budget (RELIABILITY_UNTIL) before ${CUTS}` : ''}\n`,
    );
    expect(figures.violations, `seed ${SEED} (replay with RELIABILITY_SEED=${SEED})`).toEqual([]);
    if (!figures.stoppedByTime) expect(figures.kills).toBeGreaterThanOrEqual(CUTS);
    expect(figures.cutsAfterExit).toBeGreaterThan(0);
  });
});

if (SKIP !== undefined) {
  describe('power cuts (LazyFS, skipped)', () => {
    it.skip(`skipped: ${SKIP}`, () => undefined);
  });
}
