#!/usr/bin/env node
// The composition root: the only place that reads argv and the environment, handles signals and exits.
import { readFileSync } from 'node:fs';
import { HELP_TEXT, parseCliArgs, UsageError } from './cli/args.js';
import { ExitCode } from './cli/exit-codes.js';
import type { CommandIo } from './cli/io.js';
import { runOnce } from './cli/once.js';

function packageVersion(): string {
  const text = readFileSync(new URL('../package.json', import.meta.url), 'utf8');
  return (JSON.parse(text) as { version: string }).version;
}

export async function main(argv: readonly string[], io: CommandIo): Promise<number> {
  let command: ReturnType<typeof parseCliArgs>;
  try {
    command = parseCliArgs(argv);
  } catch (error) {
    if (error instanceof UsageError) {
      io.stderr.write(`config-agent: ${error.message}\nRun 'config-agent --help' for usage.\n`);
      return ExitCode.Usage;
    }
    throw error;
  }
  switch (command.kind) {
    case 'help':
      io.stdout.write(HELP_TEXT.endsWith('\n') ? HELP_TEXT : `${HELP_TEXT}\n`);
      return ExitCode.Converged;
    case 'version':
      io.stdout.write(`config-agent ${packageVersion()}\n`);
      return ExitCode.Converged;
    case 'once':
      return runOnce(
        {
          dryRun: command.dryRun,
          json: command.json,
          ...(command.configPath === undefined ? {} : { configPath: command.configPath }),
        },
        io,
      );
    default:
      io.stderr.write(`config-agent: '${command.kind}' is not available in this build\n`);
      return ExitCode.Usage;
  }
}

/** Exits once stdout has drained, so piped output is never cut short. */
function exitAfterFlush(code: number): void {
  process.stdout.write('', () => process.exit(code));
}

const io: CommandIo = {
  stdout: process.stdout,
  stderr: process.stderr,
  env: process.env,
  isTty: process.stdout.isTTY === true,
};

main(process.argv.slice(2), io).then(exitAfterFlush, (error: unknown) => {
  process.stderr.write(
    `config-agent: unexpected error: ${error instanceof Error ? error.stack : String(error)}\n`,
  );
  exitAfterFlush(ExitCode.NotConverged);
});
