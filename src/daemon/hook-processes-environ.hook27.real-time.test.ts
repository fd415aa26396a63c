// Reading a process's environ (the hook run's mark) no longer holds the agent's thread when the read does not
// answer: a stand-in /proc whose environ is a FIFO nobody writes stands for a process whose mmap_lock is held.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { closeSync, constants, openSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { procProcessTable } from './hook-processes.js';

let dir: string | undefined;
let writer: ChildProcess | undefined;

afterEach(async () => {
  if (writer?.pid !== undefined && writer.exitCode === null) process.kill(writer.pid, 'SIGKILL');
  writer = undefined;
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  dir = undefined;
});

describe('/proc/<pid>/environ that does not answer (hook27)', () => {
  it('answers unknown within its bound, reads other processes after it, and is not read again', async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-proc-environ-'));
    const procDir = path.join(dir, 'proc');
    await mkdir(path.join(procDir, '4242'), { recursive: true });
    await mkdir(path.join(procDir, '4343'));
    const fifo = path.join(procDir, '4242', 'environ');
    expect(spawnSync('mkfifo', [fifo]).status).toBe(0);
    await writeFile(path.join(procDir, '4343', 'environ'), 'A=1\0CONFIG_AGENT_HOOK_RUN=x\0');
    // Bounds the test before the fix, whose read waited on this thread: a writer comes after 10 s, the read then
    // gives the empty environment. With the bound, the test lets the stuck reader go itself.
    writer = spawn('sh', ['-c', 'sleep 10; exec 3>"$1"', 'sh', fifo], { stdio: 'ignore' });

    const table = procProcessTable(procDir, 400);
    try {
      expect(table.environ(4242)).toBeUndefined();
      expect(table.environ(4343)?.toString('latin1')).toBe('A=1\0CONFIG_AGENT_HOOK_RUN=x\0');
      // Not read again: its reader would be stuck once more.
      expect(table.environ(4242)).toBeUndefined();
      expect(table.environ(4343)?.toString('latin1')).toBe('A=1\0CONFIG_AGENT_HOOK_RUN=x\0');
    } finally {
      table.close?.();
      // The reader left in the FIFO's open gets its writer, and ends.
      closeSync(openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK));
    }
  }, 20_000);
});
