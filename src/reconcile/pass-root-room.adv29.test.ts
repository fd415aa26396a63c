// rootDir and stateDir on one full disk: the daemon's own content cache gives way to the files it copies.

import { afterEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import { movingClock, quotaFs } from '../../test/helpers/write-fault-fs.js';

let world: PassWorld | undefined;
afterEach(async () => {
  await world?.close();
  world = undefined;
});

describe('rootDir and stateDir on one disk that the files fill (adv29)', () => {
  it("the daemon's copies of written files give way: the last file is written once, not never", async () => {
    world = await createPassWorld({ name: 'root-room', parent: '/dev/shm', open: false });
    const ids = ['cfg_k1', 'cfg_k2', 'cfg_k3'];
    for (const id of ids)
      world.put({ id, relative_filepath: `k/${id}.json`, content: { blob: id.repeat(5000) } });
    const clock = movingClock();
    // ~30 KiB a file: the three fit (with the state files), but not beside a copy of the first two.
    await world.open({
      deps: { fs: quotaFs(world.dir, 112 * 1024), clock },
      settings: { cacheWrittenFiles: true },
    });

    const outcomes: string[] = [];
    for (let n = 0; n < 4; n += 1) {
      const result = await world.pass();
      outcomes.push(result.outcomes.map((o) => `${o.instanceId}:${o.action}`).join(' '));
      clock.advance(300_001);
    }
    for (const id of ids) expect(await world.fileAt(`k/${id}.json`)).toContain(id.repeat(5000));
    expect(world.reports().filter((r) => r.endsWith('deployed/none')).length).toBe(ids.length);
    // Each written once (by the first pass or, where its copies raced the files for the room, the second: which
    // depends on how the writes interleave), then left alone: before, every pass put the copies again beside the
    // files and a file was never written.
    for (const id of ids)
      expect(
        outcomes
          .join(' ')
          .split(' ')
          .filter((outcome) => outcome === `${id}:written`),
      ).toHaveLength(1);
    expect(outcomes.slice(2).join(' ')).not.toContain(':written');
    expect((await world.pass()).converged).toBe(true);
  });
});
