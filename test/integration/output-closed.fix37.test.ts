// What --help says of exit 74 holds for the built agent: /dev/full is 74; stdout closed at start and a reader gone are 0.
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { EXIT_CODE_MEANINGS, ExitCode } from '../../src/cli/exit-codes.js';
import { AGENT_BIN, collect, type RunResult } from '../helpers/harness.js';

/** `--help` through bash, its stdout as `redirect` makes it; the agent's own exit code (PIPESTATUS for a pipe). */
function help(redirect: string): Promise<RunResult> {
  const child = spawn(
    'bash',
    ['-c', `"$0" "$1" --help ${redirect}; exit \${PIPESTATUS[0]}`, process.execPath, AGENT_BIN],
    { env: { PATH: process.env.PATH }, stdio: ['ignore', 'ignore', 'pipe'] },
  );
  return collect(child, 60_000);
}

describe('--help on stdouts that fail or are gone (fix37)', () => {
  // Before, --help said "stdout closed" exits 74; with >&- Node opens /dev/null on fd 1 first: the run exits 0.
  it('says what each case does, and each does it', async () => {
    const meaning = EXIT_CODE_MEANINGS[ExitCode.OutputFailed];
    expect(meaning).toContain('a reader gone (EPIPE) or >&- keeps the code');
    const [closed, full, gone] = await Promise.all([help('>&-'), help('>/dev/full'), help('| true')]);
    expect(closed).toMatchObject({ code: 0, stderr: '' });
    expect(full.code).toBe(ExitCode.OutputFailed);
    expect(full.stderr).toContain('could not write the output to standard output: ENOSPC');
    // `true` ends before or after the help is written: EPIPE or not, the code is the one help has.
    expect(gone).toMatchObject({ code: 0, stderr: '' });
  });
});
