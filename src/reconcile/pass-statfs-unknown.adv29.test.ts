// A full rootDir whose file system tells no size (statfs: 0 blocks, a FUSE one without statfs) is waited out.
import * as nodeFs from 'node:fs/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import type { Clock } from '../lib/clock.js';
import type { FsPort } from '../lib/fs-port.js';

/** node:fs/promises whose writes under `rootDir` fail ENOSPC while `full.on`, and whose statfs answers `blocks`. */
function fullRootFs(rootDir: string, full: { on: boolean }, blocks: number): FsPort {
  const enospc = () => Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
  const open = async (...args: Parameters<typeof nodeFs.open>) => {
    const handle = await nodeFs.open(...args);
    if (!String(args[0]).startsWith(`${rootDir}/`)) return handle;
    return new Proxy(handle, {
      get(target, key) {
        const value = Reflect.get(target, key, target);
        if (key === 'write' || key === 'writeFile') {
          return (...rest: unknown[]) =>
            full.on ? Promise.reject(enospc()) : (value as (...a: unknown[]) => unknown).apply(target, rest);
        }
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
  };
  return {
    ...(nodeFs as unknown as FsPort),
    open: open as unknown as FsPort['open'],
    // libfuse's answer for a file system that implements no statfs: a block size and nothing else.
    statfs: async () => ({ blocks, bsize: 512 }),
  };
}

/** A clock a test moves: past every hold-off between passes. */
function movingClock(): Clock & { advance(ms: number): void } {
  let at = 1_000;
  return {
    now: () => Date.parse('2026-06-01T00:00:00.000Z') + at,
    monotonic: () => at,
    sleep: async () => undefined,
    advance(ms: number) {
      at += ms;
    },
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
