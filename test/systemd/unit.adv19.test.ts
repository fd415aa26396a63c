// adv19: exits a restart cannot fix (a usage error of a drop-in's ExecStart, an invalid configuration) never loop.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseCliArgs } from '../../src/cli/args.js';
import { ExitCode, exitCodeForStartupError } from '../../src/cli/exit-codes.js';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const unitText = readFileSync(path.join(REPO, 'systemd/config-agent.service'), 'utf8');

/** Every value of `Key=` in the unit, space-separated lists split (systemd reads repeated keys as one list). */
function values(key: string): string[] {
  return unitText
    .split('\n')
    .filter((line) => line.startsWith(`${key}=`))
    .flatMap((line) =>
      line
        .slice(key.length + 1)
        .trim()
        .split(/\s+/),
    );
}

describe('exit codes a restart cannot fix', () => {
  it('the daemon exits 2 for a command line it does not know (an ExecStart= drop-in with a typo)', () => {
    // The daemon's own command line with a misspelt flag: refused before anything else runs.
    let caught: unknown;
    try {
      parseCliArgs(['--confg', '/etc/x.json']);
    } catch (error) {
      caught = error;
    }
    expect(String(caught)).toContain("unknown option '--confg'");
    expect(exitCodeForStartupError(caught)).toBe(ExitCode.Usage);
  });

  it('are in RestartPreventExitStatus: a usage error (2) restarted every 30 s for good, an invalid config (78) not', () => {
    // Before: RestartPreventExitStatus=78 alone, so a drop-in's bad flag restarted the unit every 30 s for ever,
    // two lines in the journal each time, and the device unmanaged all along.
    const prevented = values('RestartPreventExitStatus');
    expect(prevented).toContain(String(ExitCode.Usage));
    expect(prevented).toContain(String(ExitCode.Config));
    expect(values('Restart')).toEqual(['on-failure']);
  });
});
