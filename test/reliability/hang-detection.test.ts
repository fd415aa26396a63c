// The kill loop's hung-run detector: a run that makes progress however slowly is never called hung (the 3 MB
// lane's "stall" was a niced run starved of CPU on a loaded machine, killed by a 60 s wall-clock deadline);
// a run that waits on nothing that will come, or spins, is caught, with where it was.
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type HangLimits, reportOnSignalEnv, watchRun } from './support/kill-loop.js';

let reports = '';
beforeAll(async () => {
  reports = await mkdtemp(path.join(os.tmpdir(), 'config-agent-hang-'));
});
afterAll(async () => {
  if (reports) await rm(reports, { recursive: true, force: true });
});

const LIMITS: HangLimits = { idleMs: 1_500, cpuMs: 2_000, wallMs: 60_000 };

function node(script: string) {
  return spawn(process.execPath, ['-e', script], {
    env: { PATH: process.env.PATH, ...reportOnSignalEnv(reports) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

describe('hung-run detection', { timeout: 60_000 }, () => {
  it('a slow run that keeps working (bursts of CPU with pauses, 3× the idle limit in all) is let finish', async () => {
    // 60 ms of work every 250 ms for 4.5 s: a wall-clock deadline of idleMs would have killed it.
    const exit = await watchRun(
      node(
        'let n = 0; const t = setInterval(() => { const end = Date.now() + 60; while (Date.now() < end); ' +
          'if (++n === 18) { clearInterval(t); console.log("done"); } }, 250);',
      ),
      LIMITS,
      reports,
    );
    expect(exit.output).not.toContain('hung');
    expect(exit.code).toBe(0);
    expect(exit.output).toContain('done');
  });

  it('a run waiting on something that never comes is hung, and says where it waited', async () => {
    const exit = await watchRun(
      node(
        'function waitForever() { return new Promise(() => setInterval(() => undefined, 1e6)); } waitForever();',
      ),
      LIMITS,
      reports,
    );
    expect(exit.code).toBeNull();
    expect(exit.output).toMatch(/hung \(no CPU used and none waited for in \d+ ms\), killed/);
    expect(exit.output).toContain('active handles: ');
  });

  it('a run that spins is hung once it used more CPU than any run needs', async () => {
    const exit = await watchRun(node('function spin() { for (;;); } spin();'), LIMITS, reports);
    expect(exit.code).toBeNull();
    expect(exit.output).toMatch(/hung \(used \d+ ms of CPU\), killed/);
    // Its one runnable thread is named (a JS stack needs the loop to reach an interrupt check: best effort).
    expect(exit.output).toMatch(/threads: \d+ node R /);
  });
});
