// Every command-line form the agent accepts, and every misuse it rejects as a usage error.
import { describe, expect, it } from 'vitest';
import { AgentError, UsageError } from '../lib/errors.js';
import { type CliCommand, HELP_TEXT, parseCliArgs } from './args.js';

function usageError(argv: string[]): UsageError {
  try {
    parseCliArgs(argv);
  } catch (error) {
    if (error instanceof UsageError) return error;
    throw error;
  }
  throw new Error(`expected a UsageError for ${JSON.stringify(argv)}`);
}

describe('parseCliArgs', () => {
  it.each<[string[], CliCommand]>([
    [[], { kind: 'run' }],
    [['--config', '/etc/a.json'], { kind: 'run', configPath: '/etc/a.json' }],
    [['--config=/etc/a.json'], { kind: 'run', configPath: '/etc/a.json' }],
    [['-c', 'a.json'], { kind: 'run', configPath: 'a.json' }],
    [['--once'], { kind: 'once', dryRun: false, json: false }],
    [['--config', '/c.json', '--once'], { kind: 'once', configPath: '/c.json', dryRun: false, json: false }],
    [['--once', '--dry-run'], { kind: 'once', dryRun: true, json: false }],
    [['--once', '--json'], { kind: 'once', dryRun: false, json: true }],
    [
      ['--json', '--dry-run', '--once', '--config=/c.json'],
      { kind: 'once', configPath: '/c.json', dryRun: true, json: true },
    ],
    [['status'], { kind: 'status', json: false }],
    [['status', '--json'], { kind: 'status', json: true }],
    [['--config', '/c.json', 'status', '--json'], { kind: 'status', configPath: '/c.json', json: true }],
    [['sync'], { kind: 'sync' }],
    [['sync', '--config=/c.json'], { kind: 'sync', configPath: '/c.json' }],
    [['--help'], { kind: 'help' }],
    [['-h'], { kind: 'help' }],
    [['help'], { kind: 'help' }],
    [['--once', '--dry-run', '--help'], { kind: 'help' }],
    [['--version'], { kind: 'version' }],
    [['status', '--version'], { kind: 'version' }],
  ])('%j → %j', (argv, expected) => {
    expect(parseCliArgs(argv)).toEqual(expected);
  });

  it('omits configPath entirely when --config is absent', () => {
    expect(Object.keys(parseCliArgs(['--once']))).not.toContain('configPath');
  });

  it.each([
    [['--dry-run'], '--dry-run requires --once'],
    [['--json'], '--json requires --once (or the status command)'],
    [['--dry-run', '--json'], '--dry-run requires --once'],
    [['--foo'], "unknown option '--foo'"],
    [['--once', '--dryrun'], "unknown option '--dryrun'"],
    [['-x'], "unknown option '-x'"],
    [['--no-once'], "unknown option '--no-once'"],
    [['--config'], '--config needs a file path (--config <file> or --config=<file>)'],
    [['--config', '--once'], '--config needs a file path (--config <file> or --config=<file>)'],
    [['--config='], '--config needs a file path'],
    [['--config', 'a', '--config', 'b'], '--config given more than once'],
    [['--once=yes'], "option '--once' does not take a value"],
    [['status', '--once'], '--once cannot be used with status'],
    [['status', '--dry-run'], '--dry-run cannot be used with status'],
    [['sync', '--once'], '--once cannot be used with sync'],
    [['sync', '--json'], '--json cannot be used with sync'],
    [['sync', '--dry-run'], '--dry-run cannot be used with sync'],
    [['run'], "unknown command 'run' (commands: status, sync, init, doctor; or none to run the agent)"],
    [['once'], "unknown command 'once' (commands: status, sync, init, doctor; or none to run the agent)"],
    [['status', 'now'], "unexpected argument 'now'"],
    [['help', '--once'], 'help takes no options'],
  ])('%j is a usage error: %s', (argv, message) => {
    const error = usageError(argv);
    expect(error.message).toBe(message);
    expect(error).toBeInstanceOf(AgentError);
    expect(error.code).toBe('usage');
    expect(error.retryable).toBe(false);
  });
});

describe('HELP_TEXT', () => {
  it.each([
    '--config <file>',
    '--config=<file>',
    '--once',
    '--dry-run',
    '--json',
    '--help',
    '--version',
    'status',
    'sync',
    'CONFIG_AGENT_CONFIG',
    'CONFIG_AGENT_API_KEY',
    'CREDENTIALS_DIRECTORY',
    'NODE_TLS_REJECT_UNAUTHORIZED',
    '/etc/config-agent/config.json',
    'stderr',
  ])('mentions %s', (text) => {
    expect(HELP_TEXT).toContain(text);
  });

  it.each([0, 1, 2, 3, 74, 78])('explains exit code %i', (code) => {
    expect(HELP_TEXT).toMatch(new RegExp(`^  ${code} +\\S`, 'm'));
  });

  it('fits an 110-column terminal', () => {
    for (const line of HELP_TEXT.split('\n')) expect(line.length).toBeLessThanOrEqual(110);
  });
});
