// node:fs/promises whose writes under one directory can fail (a full or failing disk), and a clock a test moves.
import { readdirSync, statSync } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import path from 'node:path';
import type { Clock } from '../../src/lib/clock.js';
import type { FsPort } from '../../src/lib/fs-port.js';

/** The error a write to a full disk fails with. */
export function enospc(): Error {
  return Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
}

/**
 * node:fs/promises whose FileHandle writes to files opened under `dir` ask `refuse` first, with the write's length:
 * an error fails the write with it, undefined lets it through. Everything else is node:fs/promises as it is.
 */
export function writeFaultFs(dir: string, refuse: (length: number) => Error | undefined): FsPort {
  const open = async (...args: Parameters<typeof nodeFs.open>) => {
    const handle = await nodeFs.open(...args);
    if (!String(args[0]).startsWith(`${dir}/`)) return handle;
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
            const refusal = refuse(length);
            if (refusal !== undefined) return Promise.reject(refusal);
            return (value as (...a: unknown[]) => unknown).call(target, data, ...rest);
          };
        }
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
  };
  return { ...(nodeFs as unknown as FsPort), open: open as unknown as FsPort['open'] };
}

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

/** `dir` on a file system of `quota` bytes: a write fails ENOSPC once the files there and the write would hold more. */
export function quotaFs(dir: string, quota: number): FsPort {
  return writeFaultFs(dir, (length) => (bytesUnder(dir) + length > quota ? enospc() : undefined));
}

/** A clock a test moves by hand: past every hold-off between passes; its sleeps end at once. */
export function movingClock(): Clock & { advance(ms: number): void } {
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
