// rootDir and stateDir on one full disk: the daemon's own content cache gives way to the files it copies.

import { readdirSync, statSync } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import type { Clock } from '../lib/clock.js';
import type { FsPort } from '../lib/fs-port.js';

/** Bytes of the regular files under `dir`, walked synchronously (a small tree). */
function bytesUnder(dir: string): number {
  let total = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const at = path.join(dir, entry.name);
    if (entry.isDirectory()) total += bytesUnder(at);
    else if (entry.isFile()) total += statSync(at).size;
  }
  return total;
}

/**
 * node:fs/promises with `dir` (rootDir and stateDir both) on a file system of `quota` bytes: a write to a file
 * opened under it fails ENOSPC once the files there and the write would hold more.
 */
function quotaFs(stateDir: string, quota: number): FsPort {
  const full = () => Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
  const open = async (...args: Parameters<typeof nodeFs.open>) => {
    const handle = await nodeFs.open(...args);
    if (!String(args[0]).startsWith(`${stateDir}/`)) return handle;
    return new Proxy(handle, {
      get(target, key) {
        const value = Reflect.get(target, key, target);
        if (key === 'write' || key === 'writeFile') {
          return (data: Uint8Array | string, ...rest: unknown[]) => {
            const length =
              typeof data === 'string'
                ? Buffer.byteLength(data)
                : typeof rest[1] === 'number'
                  ? rest[1]
                  : data.byteLength;
            if (bytesUnder(stateDir) + length > quota) return Promise.reject(full());
            return (value as (...a: unknown[]) => unknown).call(target, data, ...rest);
          };
        }
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
  };
  return { ...(nodeFs as unknown as FsPort), open: open as unknown as FsPort['open'] };
}

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
    // Written by the second pass (the first one's copies raced the files), then left alone: before, every pass
    // put the copies again beside the files and no file was ever written.
    expect(outcomes[1]).toBe('cfg_k1:written cfg_k2:written cfg_k3:written');
    expect((await world.pass()).converged).toBe(true);
  });
});
