// A full rootDir whose file system tells no size (statfs: 0 blocks, a FUSE one without statfs) is waited out.
import { afterEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import { enospc, movingClock, writeFaultFs } from '../../test/helpers/write-fault-fs.js';
import type { FsPort } from '../lib/fs-port.js';

/** node:fs/promises whose writes under `rootDir` fail ENOSPC while `full.on`, and whose statfs answers `blocks`. */
function fullRootFs(rootDir: string, full: { on: boolean }, blocks: number): FsPort {
  return {
    ...writeFaultFs(rootDir, () => (full.on ? enospc() : undefined)),
    // libfuse's answer for a file system that implements no statfs: a block size and nothing else.
    statfs: async () => ({ blocks, bsize: 512 }),
  };
}

let world: PassWorld | undefined;
afterEach(async () => {
  await world?.close();
  world = undefined;
});

describe('a full rootDir on a file system that tells no size (adv29)', () => {
  it('stays `retrying` (the disk condition), never an attempt nor `failed`, and is written once space returns', async () => {
    world = await createPassWorld({ name: 'statfs-unknown', parent: '/dev/shm', open: false });
    world.put({ id: 'cfg_b', relative_filepath: 'b.json', content: { port: 8080 } });
    const full = { on: true };
    const clock = movingClock();
    await world.open({ deps: { fs: fullRootFs(world.rootDir, full, 0), clock } });

    const actions: string[] = [];
    for (let n = 0; n < 5; n += 1) {
      const result = await world.pass();
      actions.push(result.outcomes.find((o) => o.instanceId === 'cfg_b')?.action ?? 'none');
      clock.advance(3_600_000);
    }
    // maxAttempts is 3 in this world: a write taken for one that never fits (larger than 0 bytes) was `failed`.
    expect(actions).toEqual(Array(5).fill('retrying'));
    expect(world.reports()).not.toContain('cfg_b queued/failed');

    full.on = false;
    const healed = await world.pass();
    expect(healed.converged).toBe(true);
    expect(JSON.parse(await world.fileAt('b.json'))).toEqual({ port: 8080 });
    expect(world.reports()).toContain('cfg_b deployed/none');
  });
});
