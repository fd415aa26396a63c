// Hung program checks of different programs no longer take every thread of libuv's pool: at most
// MAX_UNANSWERED_CHECKS hang at once, and the agent's own file writes go on meanwhile. Each check here holds a
// real pool thread (an open of a FIFO for reading, which waits for a writer as a stat on a dead mount waits).
import { spawnSync } from 'node:child_process';
import { closeSync, constants, openSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { capturedLogger, fakeSystem } from '../../test/helpers/hook-system.js';
import { type HookSpec, hookHangs, MAX_UNANSWERED_CHECKS, runHooks } from './hooks.js';

const POOL_SIZE = Number(process.env.UV_THREADPOOL_SIZE ?? 4);
let dir: string;
/** The checks begun, each with its FIFO: ended (a writer opened and closed) after each test. */
const begun: { fifo: string; answered: Promise<unknown>; done: boolean }[] = [];

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-check-pool-'));
  vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
});

afterEach(async () => {
  vi.useRealTimers();
  // A reader may not have reached its open yet on a busy machine: a writer opened before it finds none (ENXIO).
  for (const check of begun.splice(0)) {
    while (!check.done) {
      try {
        closeSync(openSync(check.fifo, constants.O_WRONLY | constants.O_NONBLOCK));
      } catch {
        // ENXIO: no reader yet.
      }
      await Promise.race([check.answered, new Promise((resolve) => setTimeout(resolve, 10))]);
    }
  }
  await rm(dir, { recursive: true, force: true });
});

describe('program checks of different programs that hang (hook26)', () => {
  it(`hold at most ${MAX_UNANSWERED_CHECKS} pool threads: the others are refused without a check, and the agent's writes go on`, async () => {
    const system = fakeSystem();
    const log = capturedLogger();
    // One hook a pool thread, each of its own program on a mount that does not answer.
    const hooks: HookSpec[] = Array.from({ length: POOL_SIZE }, (_, i) => ({
      match: '**',
      run: [`/mnt/dead/reload${i}`],
      timeoutSeconds: 1,
    }));
    const vetProgram = async (program: string): Promise<string | undefined> => {
      const fifo = path.join(dir, path.basename(program));
      spawnSync('mkfifo', [fifo]);
      const check = { fifo, answered: Promise.resolve() as Promise<unknown>, done: false };
      check.answered = readFile(fifo).finally(() => {
        check.done = true;
      });
      begun.push(check);
      await check.answered;
      return undefined;
    };
    const running = runHooks(hooks, ['app/a.conf'], {
      cwd: '/',
      env: {},
      logger: log.logger,
      clock: { monotonic: () => Date.now() },
      processes: system.processes,
      spawn: system.spawn,
      hangs: hookHangs(),
      programCheckMs: 500,
      vetProgram,
    });
    for (let i = 0; i < POOL_SIZE; i += 1) await vi.advanceTimersByTimeAsync(500);
    const runs = await running;
    // The agent's own writes and reads go through the same pool while the checks hang: they still get a thread
    // (with every thread held, this write waits until the test's timeout).
    const file = path.join(dir, 'state.json');
    await writeFile(file, '{"ok":true}');
    expect(await readFile(file, 'utf8')).toBe('{"ok":true}');

    expect(begun).toHaveLength(MAX_UNANSWERED_CHECKS);
    expect(runs.map((run) => run.error)).toEqual(
      hooks.map((_, i) =>
        i < MAX_UNANSWERED_CHECKS
          ? `not run: /mnt/dead/reload${i}: its check (a stat of the program and the directories on its way) did not answer within 500 ms (a hung mount?)`
          : `not run: /mnt/dead/reload${i}: not checked: the checks of /mnt/dead/reload0, /mnt/dead/reload1 have not answered yet (a hung mount?), and each holds one of the agent's four fs threads: no other check starts until one answers`,
      ),
    );
    expect(system.started).toEqual([]);
  });
});
