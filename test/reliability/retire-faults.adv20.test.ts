// adv20: disk faults injected with strace into a real `--once` that retires files: the unlink of a retired file,
// and the fsync of its directory after the unlink. The service hears `removed` only for a removal that is
// durable; a file the run could not remove stays whole; the next run converges.
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Fleet } from './support/fleet.js';
import { runSeed, seededRandom } from './support/random.js';
import { fdPath, injected, quoted, runTraced, straceUnavailable } from './support/strace.js';

const SKIP = straceUnavailable();
const SEED = runSeed();
const STRUCK = 'etc/app/config.json';
const ALSO = 'etc/db/pool.json';

interface RetireFault {
  name: string;
  spec: string;
  /** The paths strace is narrowed to (`-P`), relative to the root: the fault strikes the first such call. */
  aim: string;
  /** Whether the struck file is still on disk after the faulted run. */
  fileStays: boolean;
}

const FAULTS: RetireFault[] = [
  {
    name: 'unlink of a retired file fails (EIO)',
    spec: 'unlink:error=EIO:when=1',
    aim: STRUCK,
    fileStays: true,
  },
  {
    name: 'unlink of a retired file: read-only filesystem (EROFS)',
    spec: 'unlink:error=EROFS:when=1',
    aim: STRUCK,
    fileStays: true,
  },
  {
    name: 'unlink of a retired file: busy (EBUSY, a mount point)',
    spec: 'unlink:error=EBUSY:when=1',
    aim: STRUCK,
    fileStays: true,
  },
  {
    name: 'fsync of its directory after the unlink fails (EIO)',
    spec: 'fsync:error=EIO:when=1',
    aim: path.dirname(STRUCK),
    fileStays: false,
  },
];

let base = '';
const fleets: Fleet[] = [];
beforeAll(async () => {
  base = await mkdtemp(path.join(os.tmpdir(), 'config-agent-retire-faults-'));
  process.stderr.write(`retire-faults.adv20.test: seed ${SEED} (RELIABILITY_SEED)\n`);
});
afterAll(async () => {
  await Promise.all(fleets.map((fleet) => fleet.close()));
  if (base) await rm(base, { recursive: true, force: true });
});

describe.skipIf(SKIP !== undefined)('retirements under injected disk faults', { timeout: 120_000 }, () => {
  it.each(FAULTS)('$name: removed is told only once it is durable; converges after', async (fault) => {
    const dir = path.join(base, fault.name.replace(/\W+/g, '-'));
    const fleet = await Fleet.create({
      dir,
      rootDir: path.join(dir, 'root'),
      stateDir: path.join(dir, 'state'),
      bigFileBytes: 0,
    });
    fleets.push(fleet);
    fleet.deployAll(seededRandom(SEED));
    const first = await fleet.runOnce();
    expect(first.code, first.stdout + first.stderr).toBe(0);
    const struck = fleet.versionsAt(STRUCK).deployed!;
    const also = fleet.versionsAt(ALSO).deployed!;
    const bytesBefore = await fleet.fileBytes(STRUCK);
    fleet.retire(struck);
    fleet.retire(also);

    const run = await runTraced({
      configPath: fleet.configPath,
      args: ['--once'],
      traceFile: path.join(dir, 'fault.trace'),
      timeoutMs: 30_000,
      inject: [fault.spec],
      paths: [path.join(fleet.rootDir, fault.aim)],
    });
    const hits = run.calls.filter(injected);
    expect(hits.map((c) => `${c.name}(${c.args.slice(0, 160)})`)).toHaveLength(1);
    const hit = hits[0]!;
    const target = path.join(fleet.rootDir, fault.aim);
    expect(quoted(hit.args)[0] === target || fdPath(hit.args) === target, hit.args).toBe(true);
    expect(run.code, run.stderr.slice(-2000)).toBe(1);

    const instance = (id: string) => fleet.server.state.instances.get(id)!;
    // The struck retirement is not told `removed`; the other one is, and its file is gone.
    expect(instance(struck).activity_status).toBe('deployed');
    expect(
      fleet.server.state.reports.filter((r) => r.config_instance_id === struck).map((r) => r.activity_status),
    ).not.toContain('removed');
    expect(instance(also).activity_status).toBe('removed');
    expect(await fleet.fileBytes(ALSO)).toBeUndefined();
    const after = await fleet.fileBytes(STRUCK);
    if (fault.fileStays) expect(after?.equals(bytesBefore!)).toBe(true);
    else expect(after).toBeUndefined();
    expect(await fleet.checkAnyMoment()).toEqual([]);

    const next = await fleet.runOnce();
    expect(next.code, next.stdout + next.stderr).toBe(0);
    expect(instance(struck).activity_status).toBe('removed');
    expect(await fleet.fileBytes(STRUCK)).toBeUndefined();
    expect(await fleet.checkConverged()).toEqual([]);
  });
});
