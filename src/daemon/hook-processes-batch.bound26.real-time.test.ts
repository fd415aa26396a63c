// The environ reader reads every pid asked at once in one process (bound26): fix33's reader cost two forks and two
// execs per pid. A stand-in /proc (regular files, a FIFO nobody writes for a read that hangs) and a spawnSync that
// counts the readers started.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { closeSync, constants, openSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { type ChildProcesses, environHolds, HOOK_RUN_RECORD, procProcessTable } from './hook-processes.js';

let dir: string | undefined;
const fifos: string[] = [];

afterEach(async () => {
  for (const fifo of fifos.splice(0)) {
    try {
      // The reader left in the FIFO's open gets its writer, and ends.
      closeSync(openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK));
    } catch {
      // No reader left on it.
    }
  }
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  dir = undefined;
});

/** A stand-in /proc: each pid's environ a file of the given text, or (null) a FIFO nobody writes. */
async function standInProc(environs: Record<number, string | null>): Promise<string> {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-bound26-environ-'));
  const procDir = path.join(dir, 'proc');
  for (const [pid, text] of Object.entries(environs)) {
    const file = path.join(procDir, pid, 'environ');
    await mkdir(path.dirname(file), { recursive: true });
    if (text !== null) await writeFile(file, text, 'latin1');
    else {
      expect(spawnSync('mkfifo', [file]).status).toBe(0);
      fifos.push(file);
    }
  }
  return procDir;
}

/** node:child_process with its spawnSync counted: the readers started. */
function counted(): { processes: ChildProcesses; started: () => number } {
  const real = process.getBuiltinModule('node:child_process');
  let started = 0;
  const spawn = ((...args: Parameters<typeof real.spawnSync>) => {
    started += 1;
    return real.spawnSync(...args);
  }) as typeof real.spawnSync;
  return { processes: () => ({ spawnSync: spawn }), started: () => started };
}

const MARKED = 'A=1\0CONFIG_AGENT_HOOK_RUN=x\0';

describe('the environ reader, batched (bound26)', () => {
  it('reads every pid asked in one reader, each its own bytes, a record never passing for another file', async () => {
    const procDir = await standInProc({
      4341: MARKED,
      // A record holding what the reader's output puts around records (a newline, a separator's and another
      // file's name): still one record of 4342's, never one of 4344's nor the end of a file.
      4342: `B=2\0C=x\n/proc/version:Linux\n${'/'}proc/4344/environ:CONFIG_AGENT_HOOK_RUN=x\0`,
      4343: '',
      4344: 'D=4\0',
    });
    const { processes, started } = counted();
    const table = procProcessTable(procDir, 2_000, processes);
    const read = table.environs?.([4341, 4342, 4343, 4344, 4345]);
    expect(started()).toBe(1);
    expect(read?.get(4341)?.toString('latin1')).toBe(MARKED);
    expect(read?.get(4342)?.toString('latin1')).toBe(
      'B=2\0C=x\n/proc/version:Linux\n/proc/4344/environ:CONFIG_AGENT_HOOK_RUN=x\0',
    );
    // Empty, and no such process: nothing known of either.
    expect(read?.get(4343)).toBeUndefined();
    expect(read?.get(4345)).toBeUndefined();
    expect(read?.get(4344)?.toString('latin1')).toBe('D=4\0');
    // One asked alone: one reader too.
    expect(table.environ(4344)?.toString('latin1')).toBe('D=4\0');
    expect(started()).toBe(2);
  });

  it('a read that hangs among them: the pids before and after it read, it alone unknown and not read again', async () => {
    const procDir = await standInProc({ 4341: MARKED, 4242: null, 4343: 'E=5\0' });
    const { processes, started } = counted();
    const table = procProcessTable(procDir, 400, processes);
    const read = table.environs?.([4341, 4242, 4343]);
    expect(read?.get(4341)?.toString('latin1')).toBe(MARKED);
    expect(read?.get(4242)).toBeUndefined();
    expect(read?.get(4343)?.toString('latin1')).toBe('E=5\0');
    // The one stuck, and one more for those after it.
    expect(started()).toBe(2);
    // Not read again while its read is stuck: no reader started for it.
    expect(table.environs?.([4242]).get(4242)).toBeUndefined();
    expect(started()).toBe(2);
  }, 20_000);

  it("real processes through GNU grep with HOOK_RUN_RECORD: only a whole record shaped as a hook run's mark (fix38)", async () => {
    const mark = `CONFIG_AGENT_HOOK_RUN=${randomUUID()}`;
    // 1.5 MiB of other variables beside the mark (the most a default 8 MiB stack lets exec take is 2 MiB).
    const big = Object.fromEntries(
      Array.from({ length: 12 }, (_, i) => [`V${i}`, 'x'.repeat(128 * 1024 - 8)]),
    );
    const started: ChildProcess[] = [
      { ...big, CONFIG_AGENT_HOOK_RUN: mark.slice(22) },
      { ...big, CONFIG_AGENT_HOOK_RUN: `${mark.slice(22)}x`, XCONFIG_AGENT_HOOK_RUN: mark.slice(22) },
      { CONFIG_AGENT_HOOK_RUN: mark.slice(22).toUpperCase(), A: mark },
    ].map((env) => spawn('/bin/sleep', ['30'], { env, stdio: 'ignore' }));
    try {
      const pids = started.map((child) => child.pid ?? 0);
      const read = procProcessTable('/proc', 2_000, undefined, HOOK_RUN_RECORD).environs?.(pids);
      expect(read?.get(pids[0] ?? 0)?.toString('latin1')).toBe(`${mark}\0`);
      expect(environHolds(read?.get(pids[0] ?? 0) ?? Buffer.alloc(0), mark)).toBe(true);
      // Near misses: a longer value, another name ending so, upper case, the mark inside another value.
      expect(read?.get(pids[1] ?? 0)).toBeUndefined();
      expect(read?.get(pids[2] ?? 0)).toBeUndefined();
    } finally {
      for (const child of started) child.kill('SIGKILL');
    }
  });
});
