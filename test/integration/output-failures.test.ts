// The built agent's stdout failing (/dev/full, a file over RLIMIT_FSIZE): exit 74, never 0 for output not written.
import { spawn } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, statSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { AGENT_BIN, AgentHarness, collect, type RunResult } from '../helpers/harness.js';

let harness: AgentHarness | undefined;
const dirs: string[] = [];

afterEach(async () => {
  await harness?.close();
  harness = undefined;
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** Runs `argv` (through `prefix`, e.g. prlimit) with stdout on the file `stdoutPath` opened for writing. */
async function runTo(
  stdoutPath: string,
  argv: readonly string[],
  prefix: readonly string[] = [],
): Promise<RunResult> {
  const fd = openSync(stdoutPath, 'w');
  try {
    const [command, ...args] = [...prefix, process.execPath, AGENT_BIN, ...argv];
    const child = spawn(command!, args, {
      env: { PATH: process.env.PATH, HOME: process.env.HOME },
      stdio: ['ignore', fd, 'pipe'],
    });
    return await collect(child, 120_000);
  } finally {
    closeSync(fd);
  }
}

describe('stdout that fails with another error than EPIPE', () => {
  it('--once --json to /dev/full (ENOSPC) syncs, then exits 74 and says why, without a stack trace', async () => {
    const h = await AgentHarness.create({ registerDevice: true });
    harness = h;
    await h.createAndDeploy({ relative_filepath: 'app/a.json', content: { a: 1 } });
    const result = await runTo('/dev/full', ['--config', h.configPath, '--once', '--json']);
    expect(result).toMatchObject({ code: 74, signal: null });
    expect(result.stderr).toContain(
      'config-agent: could not write the output to standard output: ENOSPC (no space left on device)',
    );
    expect(result.stderr).not.toMatch(/^\s+at /m);
    expect(await readdir(h.rootPath('app'))).toEqual(['a.json']);
  });

  it('--help to a file that can take only part of it (RLIMIT_FSIZE: a short write, then EFBIG) exits 74', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'config-agent-output-'));
    dirs.push(dir);
    const out = path.join(dir, 'help.txt');
    const whole = await runTo(out, ['--help']);
    expect(whole.code).toBe(0);
    const size = statSync(out).size;
    expect(size).toBeGreaterThan(1000);

    // Node's own stream wrote the first 1,000 bytes, dropped the rest of the chunk and exited 0.
    const cut = await runTo(out, ['--help'], ['prlimit', '--fsize=1000']);
    expect(cut).toMatchObject({ code: 74, signal: null });
    expect(cut.stderr).toContain('EFBIG (file too large)');
    expect(readFileSync(out, 'utf8')).toHaveLength(1000);
  });

  it('--version to /dev/null, and to a file, exits 0', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'config-agent-output-'));
    dirs.push(dir);
    expect((await runTo('/dev/null', ['--version'])).code).toBe(0);
    const out = path.join(dir, 'version.txt');
    expect(await runTo(out, ['--version'])).toMatchObject({ code: 0, stderr: '' });
    expect(readFileSync(out, 'utf8')).toMatch(/^config-agent \d+\.\d+\.\d+/);
  });
});
