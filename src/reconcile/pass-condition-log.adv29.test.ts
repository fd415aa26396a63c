// A full rootDir logs each waiting file once per episode at error, not once per retry: the journal is not flooded.
import { afterEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import { textSink } from '../../test/helpers/text-sink.js';
import { movingClock, writeFaultFs } from '../../test/helpers/write-fault-fs.js';
import type { FsPort } from '../lib/fs-port.js';
import { createLogger } from '../lib/logger.js';
import { createSecretRegistry } from '../lib/secrets.js';

/** node:fs/promises whose writes under `rootDir` fail with `disk.code` while it is set. */
function failingRootFs(rootDir: string, disk: { code: string | undefined }): FsPort {
  return writeFaultFs(rootDir, () => {
    const code = disk.code;
    return code === undefined ? undefined : Object.assign(new Error(`${code}: simulated, write`), { code });
  });
}

let world: PassWorld | undefined;
afterEach(async () => {
  await world?.close();
  world = undefined;
});

describe('the log of a rootDir condition that lasts (adv29)', () => {
  it('each waiting file at error once per condition, then at debug while it lasts', async () => {
    world = await createPassWorld({ name: 'condition-log', parent: '/dev/shm', open: false });
    const ids = ['cfg_a', 'cfg_b', 'cfg_c'];
    for (const id of ids) world.put({ id, relative_filepath: `${id}.json`, content: { id } });
    const disk: { code: string | undefined } = { code: 'ENOSPC' };
    const clock = movingClock();
    const sink = textSink();
    const logger = createLogger({
      level: 'debug',
      secrets: createSecretRegistry(),
      destination: sink.stream,
    });
    await world.open({ deps: { fs: failingRootFs(world.rootDir, disk), clock, logger } });
    const lines = () =>
      sink
        .text()
        .split('\n')
        .filter((line) => line.includes('"write failed: '))
        .map((line) => JSON.parse(line) as { level: string; msg: string; instanceId: string });

    // A day of a full disk, a pass past every hold-off (5 minutes at most): 12 passes.
    for (let n = 0; n < 12; n += 1) {
      await world.pass();
      clock.advance(300_001);
    }
    const full = lines();
    expect(
      full
        .filter((l) => l.level === 'error')
        .map((l) => l.instanceId)
        .sort(),
    ).toEqual(ids);
    expect(full.filter((l) => l.level === 'debug').length).toBe(ids.length * 11);

    // Another condition is told again, once.
    disk.code = 'EROFS';
    for (let n = 0; n < 3; n += 1) {
      await world.pass();
      clock.advance(300_001);
    }
    const readOnly = lines().slice(full.length);
    expect(readOnly.filter((l) => l.level === 'error').map((l) => `${l.instanceId} ${l.msg}`)).toEqual(
      expect.arrayContaining(ids.map((id) => `${id} write failed: read-only filesystem`)),
    );
    expect(readOnly.filter((l) => l.level === 'error').length).toBe(ids.length);

    // Written, then full again: a new episode, told again.
    disk.code = undefined;
    expect((await world.pass()).converged).toBe(true);
    world.put({ id: 'cfg_a', relative_filepath: 'cfg_a.json', content: { id: 'cfg_a', v: 2 } });
    disk.code = 'ENOSPC';
    const before = lines().length;
    await world.pass();
    const again = lines().slice(before);
    expect(again.map((l) => `${l.level} ${l.instanceId} ${l.msg}`)).toEqual([
      'error cfg_a write failed: disk full',
    ]);
  });
});
