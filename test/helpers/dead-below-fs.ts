// An fs port over node:fs/promises whose calls under chosen directories never answer: mounts that do not answer.
import * as nodeFs from 'node:fs/promises';
import type { AskElsewhere } from '../../src/cli/doctor-bounds.js';
import type { FsPort } from '../../src/lib/fs-port.js';

/**
 * node:fs/promises, except that a call naming a path under one of `dead` never answers; counted by directory
 * (`calls`). `ask` stands for doctor's and init's asking of a mount from another process: never answering under
 * `dead`, at once elsewhere; counted by directory too (`asks`), and `ended` counts the askings given up at the end.
 */
export function deadBelow(dead: readonly string[]): {
  fs: FsPort;
  calls: Map<string, number>;
  ask: AskElsewhere;
  asks: Map<string, number>;
  ended: () => number;
} {
  const calls = new Map<string, number>();
  const asks = new Map<string, number>();
  let ended = 0;
  const deadAt = (first: unknown) =>
    dead.find((dir) => typeof first === 'string' && (first === dir || first.startsWith(`${dir}/`)));
  const fs = new Proxy(nodeFs as unknown as FsPort, {
    get(target, name, receiver) {
      const value: unknown = Reflect.get(target, name, receiver);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        const under = deadAt(args[0]);
        if (under === undefined) return Reflect.apply(value, target, args);
        calls.set(under, (calls.get(under) ?? 0) + 1);
        return new Promise(() => undefined);
      };
    },
  });
  const ask: AskElsewhere = (file) => {
    const under = deadAt(file);
    if (under === undefined) return { answered: Promise.resolve(), end: () => undefined };
    asks.set(under, (asks.get(under) ?? 0) + 1);
    return {
      answered: new Promise(() => undefined),
      end: () => {
        ended += 1;
      },
    };
  };
  return { fs, calls, ask, asks, ended: () => ended };
}
