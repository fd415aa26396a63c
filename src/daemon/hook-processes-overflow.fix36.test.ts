// A hook's leftover process is still found when a process read before it makes the environ reader's output pass
// its cap (an environ rewritten with NULs, or several 6 MiB environs): the files after it are read too (fix36).

import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  type ChildProcesses,
  environHolds,
  HOOK_RUN_RECORD,
  procProcessTable,
  READ_MAX_MARKS,
} from './hook-processes.js';

const MARK = 'CONFIG_AGENT_HOOK_RUN=0b5c1f3e-9c61-4f2e-8d0e-3f1a2b4c5d6e';
const PROC = '/fake/proc';
const VERSION = Buffer.from('Linux version 6\0');
const OSTYPE = Buffer.from('Linux\n\0');
const environ = (pid: number) => `${PROC}/${pid}/environ`;

/**
 * spawnSync as the reader's `sh` and grep would answer over `files` (each file's NUL-terminated records): every
 * record of each file as `<file>:<record>` and a NUL, up to grep's `-m` per file if the script gives one, each
 * followed by its separator's one record; past `maxBuffer`, the output cut there and ENOBUFS, as node answers.
 */
function greps(files: ReadonlyMap<string, Buffer>): { processes: ChildProcesses; readers: () => number } {
  let readers = 0;
  const spawnSync = (_command: string, args: readonly string[], options: { maxBuffer: number }) => {
    readers += 1;
    const max = Number(/-m ([0-9]+) /.exec(args[1] ?? '')?.[1] ?? Number.POSITIVE_INFINITY);
    // `-x -e '<basic regular expression>' ...`: only whole records one of them matches (fix38), as grep -z -x would
    // (its `.` taking a newline too).
    const basics = / -x /.test(args[1] ?? '') ? [...(args[1] ?? '').matchAll(/ -e '([^']*)'/g)] : undefined;
    const only = basics?.map(
      ([, basic]) => new RegExp(`^${(basic ?? '').replaceAll('\\{', '{').replaceAll('\\}', '}')}$`, 's'),
    );
    const pieces: Buffer[] = [];
    let length = 0;
    for (const file of args.slice(3)) {
      const bytes =
        file === '/proc/version'
          ? VERSION
          : file === '/proc/sys/kernel/ostype'
            ? OSTYPE
            : (files.get(file) ?? Buffer.alloc(0));
      let count = 0;
      for (
        let at = 0, end = bytes.indexOf(0);
        end >= 0 && count < max;
        at = end + 1, end = bytes.indexOf(0, at)
      ) {
        if (only !== undefined && !matches(only, bytes, at, end)) continue;
        count += 1;
        const prefix = Buffer.from(`${file}:`);
        pieces.push(prefix, bytes.subarray(at, end + 1));
        length += prefix.length + end + 1 - at;
        if (length > options.maxBuffer) {
          const stdout = Buffer.concat(pieces, options.maxBuffer);
          const error = Object.assign(new Error('spawnSync /bin/sh ENOBUFS'), { code: 'ENOBUFS' });
          return { stdout, stderr: Buffer.from('pid 1\n'), error, status: null, signal: 'SIGTERM' };
        }
      }
    }
    return { stdout: Buffer.concat(pieces), stderr: Buffer.from('pid 1\n'), status: 0, signal: null };
  };
  return { processes: () => ({ spawnSync }) as never, readers: () => readers };
}

/** Whether `bytes[at, end)` matches `only`: remembered per buffer and offset (the hostile environ is one buffer). */
const seen = new WeakMap<Buffer, Map<number, boolean>>();
function matches(only: readonly RegExp[], bytes: Buffer, at: number, end: number): boolean {
  const known = seen.get(bytes) ?? new Map<number, boolean>();
  seen.set(bytes, known);
  const answer = known.get(at) ?? only.some((pattern) => pattern.test(bytes.toString('latin1', at, end)));
  known.set(at, answer);
  return answer;
}

const leftover = Buffer.from(`PATH=/usr/bin\0${MARK}\0HOME=/\0`);

describe('the environ reader past its output cap (fix36)', () => {
  it('finds the leftover after a process whose 2 MiB environ was rewritten with NULs', () => {
    // 2 MiB of empty records: ~48 MiB of reader output whole (each record with its file's name).
    const files = new Map([
      [environ(200), Buffer.alloc(2 * 1024 * 1024)],
      [environ(300), leftover],
    ]);
    const table = procProcessTable(PROC, 500, greps(files).processes);
    const read = table.environs?.([200, 300]);
    expect(environHolds(read?.get(300) ?? Buffer.alloc(0), MARK)).toBe(true);
    // The hostile one is read too, up to its first 4096 records.
    expect(read?.get(200)?.length).toBe(4096);
  });

  it('finds the leftover after seven processes of 6 MiB environs, and reads each of them', () => {
    const big = Buffer.concat([Buffer.alloc(6 * 1024 * 1024 - 1, 'x'), Buffer.alloc(1)]);
    const pids = [201, 202, 203, 204, 205, 206, 207];
    const files = new Map<string, Buffer>([
      ...pids.map((pid) => [environ(pid), big] as const),
      [environ(300), leftover],
    ]);
    const { processes, readers } = greps(files);
    const table = procProcessTable(PROC, 500, processes);
    const read = table.environs?.([...pids, 300]);
    expect(environHolds(read?.get(300) ?? Buffer.alloc(0), MARK)).toBe(true);
    expect(pids.map((pid) => read?.get(pid)?.length)).toEqual(pids.map(() => big.length));
    // Bounded: the first reader and one more (five 6 MiB environs fit in 32 MiB of output).
    expect(readers()).toBe(2);
  });

  it('leaves unknown a file that alone passes the cap, and reads the one after it', () => {
    const files = new Map([
      [environ(200), Buffer.concat([Buffer.alloc(40 * 1024 * 1024, 'y'), Buffer.alloc(1)])],
      [environ(300), leftover],
    ]);
    const read = procProcessTable(PROC, 500, greps(files).processes).environs?.([200, 300]);
    expect(read?.get(200)).toBeUndefined();
    expect(environHolds(read?.get(300) ?? Buffer.alloc(0), MARK)).toBe(true);
  });

  it('starts no more than three readers in one look, however many processes pass the cap', () => {
    const big = Buffer.concat([Buffer.alloc(6 * 1024 * 1024 - 1, 'x'), Buffer.alloc(1)]);
    const pids = Array.from({ length: 20 }, (_, index) => 400 + index);
    const { processes, readers } = greps(new Map(pids.map((pid) => [environ(pid), big])));
    procProcessTable(PROC, 500, processes).environs?.(pids);
    expect(readers()).toBe(3);
  });
});

describe("the environ reader printing only records shaped as a hook run's mark (fix38)", () => {
  const mark = `CONFIG_AGENT_HOOK_RUN=${randomUUID()}`;
  const marked = Buffer.from(`PATH=/usr/bin\0${mark}\0HOME=/\0`);
  // 6 MiB of 128 KiB variables (the most one may hold), one of them a near miss of the mark's shape.
  const hostile = Buffer.concat([
    ...Array.from({ length: 48 }, () => Buffer.from(`V=${'x'.repeat(128 * 1024 - 3)}\0`)),
    Buffer.from(`${mark}x\0X${mark}\0CONFIG_AGENT_HOOK_RUN=x\0`),
  ]);

  it.each([16, 200])('finds the leftover after %i processes of 6 MiB environs, in one reader', (count) => {
    expect(hostile.length).toBeGreaterThan(6 * 1024 * 1024 - 1024);
    const pids = Array.from({ length: count }, (_, index) => 1000 + index);
    const { processes, readers } = greps(
      new Map<string, Buffer>([
        ...pids.map((pid) => [environ(pid), hostile] as const),
        [environ(300), marked],
      ]),
    );
    const read = procProcessTable(PROC, 500, processes, HOOK_RUN_RECORD).environs?.([...pids, 300]);
    expect(read?.get(300)?.toString('latin1')).toBe(`${mark}\0`);
    expect(environHolds(read?.get(300) ?? Buffer.alloc(0), mark)).toBe(true);
    // Nothing of theirs is shaped as a mark: no record answered, and the look took one reader (three before).
    expect(pids.filter((pid) => read?.get(pid) !== undefined)).toEqual([]);
    expect(readers()).toBe(1);
  });

  it('bounds what a process forging marks answers: READ_MAX_MARKS records, however many it holds', () => {
    // 6 MiB of records shaped as marks (other runs' ids) in each of 200 processes.
    const forged = Buffer.from(
      `CONFIG_AGENT_HOOK_RUN=${randomUUID()}\0`.repeat(Math.ceil((6 * 1024 * 1024) / 59)),
    );
    const pids = Array.from({ length: 200 }, (_, index) => 2000 + index);
    const { processes, readers } = greps(
      new Map<string, Buffer>([
        ...pids.map((pid) => [environ(pid), forged] as const),
        [environ(300), marked],
      ]),
    );
    const read = procProcessTable(PROC, 500, processes, HOOK_RUN_RECORD).environs?.([...pids, 300]);
    expect(environHolds(read?.get(300) ?? Buffer.alloc(0), mark)).toBe(true);
    expect(new Set(pids.map((pid) => read?.get(pid)?.length))).toEqual(new Set([READ_MAX_MARKS * 59]));
    expect(readers()).toBe(1);
  });

  it('reads whole records without the pattern, as before', () => {
    const read = procProcessTable(PROC, 500, greps(new Map([[environ(300), marked]])).processes).environs?.([
      300,
    ]);
    expect(read?.get(300)).toEqual(marked);
  });
});
