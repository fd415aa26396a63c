// An fs port over node:fs/promises whose calls under chosen directories never answer: mounts that do not answer.
import * as nodeFs from 'node:fs/promises';
import type { FsPort } from '../../src/lib/fs-port.js';

/** node:fs/promises, except that a call naming a path under one of `dead` never answers; counted by directory. */
export function deadBelow(dead: readonly string[]): { fs: FsPort; calls: Map<string, number> } {
  const calls = new Map<string, number>();
  const fs = new Proxy(nodeFs as unknown as FsPort, {
    get(target, name, receiver) {
      const value: unknown = Reflect.get(target, name, receiver);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        const first = args[0];
        const under = dead.find(
          (dir) => typeof first === 'string' && (first === dir || first.startsWith(`${dir}/`)),
        );
        if (under === undefined) return Reflect.apply(value, target, args);
        calls.set(under, (calls.get(under) ?? 0) + 1);
        return new Promise(() => undefined);
      };
    },
  });
  return { fs, calls };
}
