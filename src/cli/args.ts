// argv → the command to run, as a discriminated union; every misuse is a UsageError (exit code 2).
import { createRequire } from 'node:module';
import { errnoCode, errorMessage, UsageError } from '../lib/errors.js';
import { EXIT_CODE_MEANINGS, ExitCode } from './exit-codes.js';

// Through require: on Node 24 an ESM import of node:util reads every export, and its lazy getters load ~19 more
// modules for every command (docs/performance-history.md "Memory, fourth round").
const { parseArgs } = createRequire(import.meta.url)('node:util') as typeof import('node:util');

export type CliCommand =
  | { kind: 'help' }
  | { kind: 'version' }
  | { kind: 'once'; configPath?: string; dryRun: boolean; json: boolean }
  /** No --once: the daemon. */
  | { kind: 'run'; configPath?: string }
  /** `config-agent status [--json]`: asks the running agent over its local socket. */
  | { kind: 'status'; configPath?: string; json: boolean }
  /** `config-agent sync`: asks the running agent to reconcile now. */
  | { kind: 'sync'; configPath?: string }
  /** `config-agent init`: writes config.json and the key, checks them (src/cli/init.ts). */
  | {
      kind: 'init';
      configPath?: string;
      deviceId?: string;
      baseUrl?: string;
      rootDir?: string;
      apiKeyFile?: string;
    }
  /** `config-agent doctor`: checks the installation, one line per check (src/cli/doctor.ts). */
  | { kind: 'doctor'; configPath?: string };

const OPTIONS = {
  config: { type: 'string', short: 'c' },
  once: { type: 'boolean' },
  'dry-run': { type: 'boolean' },
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
  version: { type: 'boolean' },
  'device-id': { type: 'string' },
  'base-url': { type: 'string' },
  'root-dir': { type: 'string' },
  'api-key-file': { type: 'string' },
} as const;

const COMMANDS = ['status', 'sync', 'help', 'init', 'doctor'] as const;
const INIT_FLAGS = ['device-id', 'base-url', 'root-dir', 'api-key-file'] as const;

const exitCodeLines = Object.values(ExitCode)
  .map((code) => `  ${String(code).padEnd(4)}${EXIT_CODE_MEANINGS[code]}`)
  .join('\n');

export const HELP_TEXT = `config-agent: keeps this device's config files in sync with the Device Configuration Delivery Service.

Usage:
  config-agent [--config <file>]                        run as a daemon: poll, apply, repair drift
  config-agent --once [--dry-run] [--json] [--config <file>]
                                                        run one reconcile pass and exit (codes below)
  config-agent status [--json] [--config <file>]        print the running agent's status
  config-agent sync [--config <file>]                   ask the running agent to reconcile now
  config-agent init [--device-id <id>] [--base-url <url>] [--root-dir <dir>] [--api-key-file <file|->]
                    [--config <file>]                   write config.json (0640 root:config-agent; at --config
                                                        if given) and the key beside it (0600 root:root),
                                                        check them against the service; asks for what is
                                                        missing on a terminal
  config-agent doctor [--config <file>]                 check config, key, directories, unit, service, clock
  config-agent --help | --version

Options:
  -c, --config <file>  the config file (default: $CONFIG_AGENT_CONFIG, else /etc/config-agent/config.json);
                       --config=<file> works too
      --once           run one reconcile pass, then exit
      --dry-run        with --once: print the plan (files to write, remove, archive, statuses to report,
                       with a content diff summary) and change nothing, neither on disk nor on the server
      --json           with --once or status: print one JSON object instead of the human summary
  -h, --help           print this help and exit
      --version        print the version and exit

Exit codes of --once (every command exits 2 on a usage error and 78 on an invalid configuration):
${exitCodeLines}
status and sync exit 3 when no agent answers on the socket; sync exits with its pass's code, as --once;
status exits 0 when nothing is in error and no report is pending, else 1.

Environment:
  CONFIG_AGENT_CONFIG           the config file, when --config is not given
  CONFIG_AGENT_API_KEY          the API key; wins over the files below
  CREDENTIALS_DIRECTORY         set by systemd for LoadCredential=api-key:<file>; the key is read from
                                $CREDENTIALS_DIRECTORY/api-key, else from the config's server.apiKeyFile
  NODE_TLS_REJECT_UNAUTHORIZED  the value 0 is refused (exit 78): certificates are always verified

Logs go to stderr as JSON lines; stdout carries only the command's output, so it can be piped.
Every configuration key is described in docs/configuration.md.
`;

/** Parses argv WITHOUT node and the script path. Throws UsageError. */
export function parseCliArgs(argv: readonly string[]): CliCommand {
  let parsed: ReturnType<typeof parseWithNode>;
  try {
    parsed = parseWithNode(argv);
  } catch (error) {
    throw new UsageError(describeParseError(error));
  }
  const { values, positionals, tokens } = parsed;

  const configCount = tokens.filter((token) => token.kind === 'option' && token.name === 'config').length;
  if (configCount > 1) throw new UsageError('--config given more than once');
  if (values.config === '') throw new UsageError('--config needs a file path');

  if (values.help === true) return { kind: 'help' };
  if (values.version === true) return { kind: 'version' };

  if (positionals.length > 1) throw new UsageError(`unexpected argument '${positionals[1]}'`);
  const command = positionals[0];
  if (command !== undefined && !(COMMANDS as readonly string[]).includes(command)) {
    throw new UsageError(
      `unknown command '${command}' (commands: status, sync, init, doctor; or none to run the agent)`,
    );
  }
  const initFlags = INIT_FLAGS.filter((flag) => values[flag] !== undefined);
  if (command !== 'init' && initFlags.length > 0) {
    throw new UsageError(`--${initFlags[0]} can only be used with init`);
  }
  const once = values.once === true;
  const dryRun = values['dry-run'] === true;
  const json = values.json === true;
  const withConfig = values.config === undefined ? {} : { configPath: values.config };

  switch (command) {
    case 'help':
      if (once || dryRun || json || values.config !== undefined)
        throw new UsageError('help takes no options');
      return { kind: 'help' };
    case 'status':
      if (once) throw new UsageError('--once cannot be used with status');
      if (dryRun) throw new UsageError('--dry-run cannot be used with status');
      return { kind: 'status', ...withConfig, json };
    case 'sync':
      if (once) throw new UsageError('--once cannot be used with sync');
      if (dryRun) throw new UsageError('--dry-run cannot be used with sync');
      if (json) throw new UsageError('--json cannot be used with sync');
      return { kind: 'sync', ...withConfig };
    case 'init':
    case 'doctor':
      if (once || dryRun || json) throw new UsageError(`${command} takes no --once, --dry-run or --json`);
      if (command === 'doctor') return { kind: 'doctor', ...withConfig };
      for (const flag of initFlags) if (values[flag] === '') throw new UsageError(`--${flag} needs a value`);
      return {
        kind: 'init',
        ...withConfig,
        ...(values['device-id'] === undefined ? {} : { deviceId: values['device-id'] }),
        ...(values['base-url'] === undefined ? {} : { baseUrl: values['base-url'] }),
        ...(values['root-dir'] === undefined ? {} : { rootDir: values['root-dir'] }),
        ...(values['api-key-file'] === undefined ? {} : { apiKeyFile: values['api-key-file'] }),
      };
    default:
      if (once) return { kind: 'once', ...withConfig, dryRun, json };
      if (dryRun) throw new UsageError('--dry-run requires --once');
      if (json) throw new UsageError('--json requires --once (or the status command)');
      return { kind: 'run', ...withConfig };
  }
}

function parseWithNode(argv: readonly string[]) {
  return parseArgs({ args: [...argv], options: OPTIONS, strict: true, allowPositionals: true, tokens: true });
}

/** node's parseArgs messages are long and mention only its own syntax; keep the part a user needs. */
function describeParseError(error: unknown): string {
  const message = errorMessage(error);
  const option = /'([^']+)'/.exec(message)?.[1];
  switch (errnoCode(error)) {
    case 'ERR_PARSE_ARGS_UNKNOWN_OPTION':
      return `unknown option '${option ?? message}'`;
    case 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE':
      if (/does not take an argument/.test(message)) return `option '${option}' does not take a value`;
      // Both "argument missing" and "argument is ambiguous" (`--config --once`) mean the value is missing.
      if (option !== undefined && !option.includes('config')) return `${option.split(' ')[0]} needs a value`;
      return '--config needs a file path (--config <file> or --config=<file>)';
    default:
      return message.split('\n')[0] ?? message;
  }
}
