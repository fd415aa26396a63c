// argv of init and doctor: their flags, and those flags refused elsewhere.
import { describe, expect, it } from 'vitest';
import { UsageError } from '../lib/errors.js';
import { HELP_TEXT, parseCliArgs } from './args.js';

describe('init and doctor arguments', () => {
  it('parses every init flag, the key from stdin included', () => {
    expect(
      parseCliArgs([
        'init',
        '--device-id',
        'dvc_1',
        '--base-url=https://configs.example.com',
        '--root-dir',
        '/data/configs',
        '--api-key-file',
        '-',
        '--config',
        '/tmp/c.json',
      ]),
    ).toEqual({
      kind: 'init',
      configPath: '/tmp/c.json',
      deviceId: 'dvc_1',
      baseUrl: 'https://configs.example.com',
      rootDir: '/data/configs',
      apiKeyFile: '-',
    });
    expect(parseCliArgs(['init'])).toEqual({ kind: 'init' });
    expect(parseCliArgs(['doctor', '-c', '/x.json'])).toEqual({ kind: 'doctor', configPath: '/x.json' });
  });

  it.each([
    [['status', '--device-id', 'x'], '--device-id can only be used with init'],
    [['doctor', '--api-key-file', 'k'], '--api-key-file can only be used with init'],
    [['init', '--once'], 'init takes no --once, --dry-run or --json'],
    [['doctor', '--json'], 'doctor takes no --once, --dry-run or --json'],
    [['init', '--device-id='], '--device-id needs a value'],
    [['init', '--base-url'], '--base-url needs a value'],
  ])('%j → %s', (argv, message) => {
    expect(() => parseCliArgs(argv)).toThrow(new UsageError(message));
  });

  it('is in --help', () => {
    expect(HELP_TEXT).toContain('config-agent init [--device-id <id>]');
    expect(HELP_TEXT).toContain('config-agent doctor [--config <file>]');
    // init takes --config too (where to write): the usage line says so, as parseCliArgs accepts it.
    expect(parseCliArgs(['init', '--config', '/x/c.json'])).toMatchObject({ configPath: '/x/c.json' });
    expect(HELP_TEXT).toMatch(/config-agent init \[--device-id <id>\][^\n]*\n +\[--config <file>\]/);
  });

  it("says how status and sync exit, which --once's table does not cover", () => {
    expect(HELP_TEXT).toContain('status and sync exit 3 when no agent answers on the socket');
    expect(HELP_TEXT).toContain('status exits 0 when nothing is in error and no report is pending, else 1');
  });
});
