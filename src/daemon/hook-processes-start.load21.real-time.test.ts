// The environ reader's bound is for the read, not for starting its process: a loaded device forks and execs slowly.
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { type ChildProcesses, procProcessTable } from './hook-processes.js';

let dir: string | undefined;
afterEach(async () => {
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  dir = undefined;
});

/** node:child_process whose readers take `startMs` to start (`sleep` before the reader's script), as under load. */
function slowToStart(startMs: number): ChildProcesses {
  const real = process.getBuiltinModule('node:child_process');
  const spawnSync = ((command: string, args: readonly string[], options: object) => {
    const [flag, script, ...rest] = args;
    return real.spawnSync(command, [flag ?? '-c', `sleep ${startMs / 1000}; ${script}`, ...rest], options);
  }) as typeof real.spawnSync;
  return () => ({ spawnSync });
}

// Before: the start counted against the 0.5 s bound; at a load of ~37 the readers of answering files ran out of it
// (hook27's, bound26's and hook-processes' tests failed so, and a hook's leftover process went unrecognised).
it("reads an answering environ whose reader took longer to start than the read's bound", async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-reader-start-'));
  const file = path.join(dir, 'proc', '4545', 'environ');
  await mkdir(path.dirname(file), { recursive: true });
  await writeFile(file, 'A=1\0CONFIG_AGENT_HOOK_RUN=x\0', 'latin1');
  const table = procProcessTable(path.join(dir, 'proc'), 300, slowToStart(600));
  expect(table.environ(4545)?.toString('latin1')).toBe('A=1\0CONFIG_AGENT_HOOK_RUN=x\0');
});
