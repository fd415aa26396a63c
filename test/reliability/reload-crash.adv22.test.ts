// adv22: a SIGHUP reload that moves stateDir (the operator copied it, as a move under a running daemon does,
// and pointed the configuration at the copy) while the service has changes for the device, the daemon killed
// (SIGKILL) at a spread of moments after the signal (the reload, the new stateDir's open, its pass). After each kill: nothing torn, no foreign file touched,
// nothing told `deployed` without its bytes; the agent restarted on the new configuration converges, retires
// what the service retired and reports every status.
import { spawnSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { collect } from '../helpers/harness.js';
import { waitFor } from '../helpers/wait-for.js';
import { Fleet } from './support/fleet.js';
import { countFromEnv, runSeed, seededRandom } from './support/random.js';

const SEED = runSeed();
const KILLS = countFromEnv('RELIABILITY_RELOAD_KILLS', 12);

let base = '';
beforeAll(async () => {
  base = await mkdtemp(path.join(os.tmpdir(), 'config-agent-reload-crash-'));
  process.stderr.write(`reload-crash.adv22.test: seed ${SEED} (RELIABILITY_SEED)\n`);
});
afterAll(async () => {
  if (base) await rm(base, { recursive: true, force: true });
});

describe('a reload that moves stateDir, killed after the signal', { timeout: 600_000 }, () => {
  it('leaves nothing torn or told early, and the next run on the new stateDir converges', async () => {
    const random = seededRandom(SEED);
    for (let kill = 0; kill < KILLS; kill += 1) {
      const dir = path.join(base, `kill-${kill}`);
      const fleet = await Fleet.create({
        dir,
        rootDir: path.join(dir, 'root'),
        stateDir: path.join(dir, 'state'),
        bigFileBytes: 0,
        config: { poll: { intervalSeconds: 3600, jitterRatio: 0, fullResyncSeconds: 3600 } },
      });
      try {
        fleet.deployAll(random);
        const daemon = fleet.spawnDaemon();
        const ended = collect(daemon, 120_000);
        await waitFor(async () => ((await fleet.checkConverged()).length === 0 ? true : undefined), 60_000);
        // The service's next change, then the move: a copy of the state directory, the config pointed at it.
        fleet.mutate(random, 0.5);
        const moved = path.join(dir, 'state-moved');
        // The running agent may still be writing into it (a temp file of its code cache or of state gone between
        // cp's listing and its copy): copied again until one copy is whole.
        let copy = spawnSync('cp', ['-a', fleet.stateDir, moved]);
        for (let again = 0; again < 5 && copy.status !== 0; again += 1) {
          spawnSync('rm', ['-rf', moved]);
          copy = spawnSync('cp', ['-a', fleet.stateDir, moved]);
        }
        expect(copy.status, String(copy.stderr)).toBe(0);
        await fleet.writeConfig(fleet.server.url, {
          stateDir: moved,
          poll: { intervalSeconds: 3600, jitterRatio: 0, fullResyncSeconds: 3600 },
        });
        daemon.kill('SIGHUP');
        // The reload and its pass take ~0.2 s on an idle machine: the kills are spread over that, and a little past.
        const delay = Math.floor((kill * 400) / KILLS + random() * 40);
        await new Promise((resolve) => setTimeout(resolve, delay));
        daemon.kill('SIGKILL');
        const end = await ended;
        const label = `kill ${kill}: ${end.stderr.slice(-1500)}`;
        expect(await fleet.checkAnyMoment(), label).toEqual([]);
        const next = await fleet.runOnce();
        expect(next.code, `${label}\nthe run after: ${next.stderr.slice(-1500)}`).toBe(0);
        expect(await fleet.checkConverged(), `${label}\n${next.stdout}${next.stderr.slice(-2000)}`).toEqual(
          [],
        );
      } finally {
        await fleet.close();
      }
    }
  });
});
