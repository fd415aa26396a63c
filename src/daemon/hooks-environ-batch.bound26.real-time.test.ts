// A hook's end reads the environ of every process that may carry its run's mark with one reader (bound26): fix33's
// reader was a process per pid (two forks and two execs each, ~12 ms of the agent's thread at load). Real hooks,
// real /proc, the readers started counted.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { strayPidsEachTest } from '../../test/helpers/stray-pids.js';
import { PATIENCE_MS } from '../../test/helpers/wait-for.js';
import { silentLogger } from '../lib/logger.js';
import { type ChildProcesses, procProcessTable } from './hook-processes.js';
import { runHooks } from './hooks.js';

const BASE = mkdtempSync(path.join(os.tmpdir(), 'config-agent-hooks-bound26-'));
const strays = strayPidsEachTest();
afterAll(() => rmSync(BASE, { recursive: true, force: true }));

/** Running and not a zombie. */
function isAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    return state !== 'Z' && state !== 'X';
  } catch {
    return false;
  }
}

describe('the environ reads at a hook end (bound26)', () => {
  it('finds three double-forked daemons with one reader', async () => {
    const real = process.getBuiltinModule('node:child_process');
    let readers = 0;
    const processes: ChildProcesses = () => ({
      spawnSync: ((...args: Parameters<typeof real.spawnSync>) => {
        readers += 1;
        return real.spawnSync(...args);
      }) as typeof real.spawnSync,
    });
    const pidFile = path.join(BASE, 'daemons');
    // Three daemons, each in a session of its own with its parent gone before the hook ends: only the run's mark
    // in their environment ties them to the hook.
    const script =
      'for n in 1 2 3; do (setsid sh -c \'echo $$ >> "$1"; exec sleep 1000\' daemon "$1" &); done; ' +
      'while [ "$(wc -l < "$1" 2>/dev/null || echo 0)" -lt 3 ]; do sleep 0.01; done';
    const [result] = await runHooks(
      [{ match: '**', run: ['sh', '-c', script, 'hook', pidFile], timeoutSeconds: 30 }],
      ['a.conf'],
      {
        cwd: BASE,
        env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
        logger: silentLogger(),
        killGraceMs: 300,
        processes: procProcessTable('/proc', 5_000, processes),
      },
    );
    const pids = readFileSync(pidFile, 'utf8').trim().split('\n').map(Number);
    strays.push(...pids);
    expect(result?.exitCode).toBe(0);
    expect(result?.leftovers.map((left) => left.pid).sort()).toEqual([...pids].sort());
    await vi.waitFor(() => expect(pids.filter(isAlive)).toEqual([]), {
      timeout: PATIENCE_MS,
      interval: 20,
    });
    // Before: a reader per process started since the hook outside its session (three at least).
    expect(readers).toBe(1);
  }, 30_000);
});
