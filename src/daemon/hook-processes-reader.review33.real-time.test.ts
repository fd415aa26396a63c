// review33: the environ reader (hook27) when it has no thread to read with, and after its stuck threads answer.
import { spawnSync } from 'node:child_process';
import { closeSync, constants, openSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { type ChildProcesses, MAX_STUCK_READERS, procProcessTable } from './hook-processes.js';

let dir: string | undefined;

afterEach(async () => {
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  dir = undefined;
});

const MARKED = 'A=1\0CONFIG_AGENT_HOOK_RUN=x\0';

/** A stand-in /proc: each pid's environ a regular file holding MARKED, or a FIFO nobody writes (a read that hangs). */
async function standInProc(regular: number[], hanging: number[]): Promise<string> {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-review33-environ-'));
  const procDir = path.join(dir, 'proc');
  for (const pid of regular) {
    await mkdir(path.join(procDir, String(pid)), { recursive: true });
    await writeFile(path.join(procDir, String(pid), 'environ'), MARKED);
  }
  for (const pid of hanging) {
    await mkdir(path.join(procDir, String(pid)), { recursive: true });
    expect(spawnSync('mkfifo', [path.join(procDir, String(pid), 'environ')]).status).toBe(0);
  }
  return procDir;
}

describe('the environ reader (review33)', () => {
  it('with no process to be had (EAGAIN) answers unknown, and reads once one can be had', async () => {
    const procDir = await standInProc([4343], []);
    const real = process.getBuiltinModule('node:child_process');
    let refuse = true;
    // What spawnSync answers when fork fails (EAGAIN: TasksMax= or RLIMIT_NPROC reached by a hook's processes).
    // (review33's case was a worker thread that could not start; fix33 reads in a process instead.)
    const threads: ChildProcesses = () =>
      refuse
        ? {
            spawnSync: (() => ({
              pid: 0,
              output: [],
              stdout: null,
              stderr: null,
              status: null,
              signal: null,
              error: Object.assign(new Error('spawnSync /bin/sh EAGAIN'), { code: 'EAGAIN' }),
            })) as unknown as typeof real.spawnSync,
          }
        : real;
    const table = procProcessTable(procDir, 2_000, threads);
    try {
      // Before: the throw left environ(), and the hook's 'exit' listener that asked, ending the agent.
      expect(table.environ(4343)).toBeUndefined();
      refuse = false;
      expect(table.environ(4343)?.toString('latin1')).toBe(MARKED);
    } finally {
      table.close?.();
    }
  });

  it('a process asked while readers are stuck is read once they have answered', async () => {
    const procDir = await standInProc([4343], [4242, 4244]);
    const table = procProcessTable(procDir, 400);
    const fifos = [4242, 4244].map((pid) => path.join(procDir, String(pid), 'environ'));
    try {
      expect(table.environ(4242)).toBeUndefined();
      expect(table.environ(4244)).toBeUndefined();
      // MAX_STUCK_READERS stuck: not read now.
      expect(MAX_STUCK_READERS).toBe(2);
      expect(table.environ(4343)).toBeUndefined();
      // The stuck reads answer (a writer comes), and their files are regular ones now.
      for (const fifo of fifos) {
        closeSync(openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK));
        await rm(fifo);
        await writeFile(fifo, MARKED);
      }
      // Each stuck pid is read again once its thread has ended (freed): then none is stuck.
      await vi.waitFor(
        () => {
          expect(table.environ(4242)?.toString('latin1')).toBe(MARKED);
          expect(table.environ(4244)?.toString('latin1')).toBe(MARKED);
        },
        { timeout: 10_000, interval: 20 },
      );
      // Before: 4343, asked while they were stuck, was taken as hung itself and never read again.
      expect(table.environ(4343)?.toString('latin1')).toBe(MARKED);
    } finally {
      table.close?.();
      for (const fifo of fifos) {
        try {
          closeSync(openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK));
        } catch {
          // A regular file already, or no reader left on it.
        }
      }
    }
  }, 20_000);
});
