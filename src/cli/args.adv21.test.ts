// adv21: command lines an operator's slip makes: each a usage error (exit 2) naming it, or read as getopt reads it.
import { describe, expect, it } from 'vitest';
import { UsageError } from '../lib/errors.js';
import { parseCliArgs } from './args.js';

function refusal(argv: string[]): string {
  try {
    parseCliArgs(argv);
  } catch (error) {
    expect(error).toBeInstanceOf(UsageError);
    return (error as Error).message;
  }
  throw new Error(`accepted: ${argv.join(' ')}`);
}

describe('edge command lines (adv21)', () => {
  it('are refused with their reason', () => {
    expect(refusal(['--config='])).toBe('--config needs a file path');
    expect(refusal(['--', '--once'])).toContain("unknown command '--once'");
    expect(refusal(['--once', '-'])).toContain("unknown command '-'");
    expect(refusal(['--once=1'])).toBe("option '--once' does not take a value");
    expect(refusal(['--dry-run'])).toBe('--dry-run requires --once');
    expect(refusal(['--json'])).toContain('--json requires --once');
    expect(refusal(['--once', '--config', 'a', '--config=b'])).toBe('--config given more than once');
    expect(refusal(['init', '--api-key-file'])).toBe('--api-key-file needs a value');
  });

  it('read a short option glued to its value as getopt does (-c=x is the file "=x"), and --help first', () => {
    expect(parseCliArgs(['-c=x'])).toEqual({ kind: 'run', configPath: '=x' });
    expect(parseCliArgs(['--help', '--once'])).toEqual({ kind: 'help' });
  });
});
