// A hook whose changed-path list would push argv and environment past ARG_MAX still runs (adv28): real processes.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../lib/logger.js';
import { CHANGED_ENV, CHANGED_TRUNCATED_ENV, runHooks } from './hooks.js';

let dir: string | undefined;

afterEach(() => {
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  dir = undefined;
});

/** Linux's limit on argv and environment together: a quarter of the stack limit, at least 128 KiB, at most 6 MiB. */
function argMax(): number {
  const line = readFileSync('/proc/self/limits', 'utf8')
    .split('\n')
    .find((row) => row.startsWith('Max stack size'));
  const soft = line?.split(/\s{2,}/)[1];
  const stack = soft === undefined || soft === 'unlimited' ? Number.POSITIVE_INFINITY : Number(soft);
  return Math.max(128 * 1024, Math.min(stack / 4, 6 * 1024 * 1024));
}

describe('a changed-path list that passes ARG_MAX with the rest of the environment (adv28)', () => {
  // The list is cut to one environment string (128 KiB), but exec counts argv and every string together: under a
  // small stack limit (a LimitSTACK= drop-in, ulimit -s) or beside a large environment, the spawn failed E2BIG,
  // the hook never ran for that change (a first sync of thousands of files) and its paths were settled.
  it('runs the hook without the list, told it is cut short', async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'config-agent-e2big-'));
    const out = path.join(dir, 'env.json');
    // The agent's own environment leaves less room than the list takes: variables of 100 KB each (one string may
    // be at most 128 KiB) up to 64 KiB short of the limit.
    const env: NodeJS.ProcessEnv = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
    const chunk = 100_000;
    for (let k = 0; (k + 1) * (chunk + 16) < argMax() - 64 * 1024; k += 1)
      env[`FILLER_${k}`] = 'x'.repeat(chunk);
    const changed = Array.from({ length: 5_000 }, (_, k) => `dir/file-number-${k}.json`);
    const script = `require('node:fs').writeFileSync(process.argv[1], JSON.stringify({ list: process.env.${CHANGED_ENV}, cut: process.env.${CHANGED_TRUNCATED_ENV} }))`;
    const [result] = await runHooks(
      [{ match: '**', run: [process.execPath, '-e', script, out], timeoutSeconds: 10 }],
      changed,
      { cwd: dir, env, logger: silentLogger() },
    );
    expect(result?.error).toBeUndefined();
    expect(result?.exitCode).toBe(0);
    expect(JSON.parse(readFileSync(out, 'utf8'))).toEqual({ list: '', cut: '1' });
  });
});
