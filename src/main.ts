#!/usr/bin/env node
// The composition root: the only place that reads argv and the environment, handles signals and exits.
import { readFileSync } from 'node:fs';
import { HELP_TEXT, parseCliArgs, UsageError } from './cli/args.js';
import { ExitCode } from './cli/exit-codes.js';
import type { CommandIo } from './cli/io.js';
import { runStatus, runSync } from './cli/local-client.js';
import { runOnce } from './cli/once.js';
import { startAgent } from './cli/run.js';

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
    case 'status':
      return runStatus({ json: command.json, ...configFlag(command.configPath) }, io);
    case 'sync':
      return runSync(configFlag(command.configPath), io);
    case 'run':
      return runDaemon(command.configPath, io);
  }
}

function configFlag(configPath: string | undefined): { configPath?: string } {
  return configPath === undefined ? {} : { configPath };
}

/** Must exit within this after SIGTERM; systemd's TimeoutStopSec is longer. */
const STOP_DEADLINE_MS = 10_000;

async function runDaemon(configPath: string | undefined, io: CommandIo): Promise<number> {
  const agent = await startAgent(configPath, io);
  if (typeof agent === 'number') return agent;
  return new Promise<number>((resolve) => {
    let stopping = false;
    const stop = (signal: NodeJS.Signals) => {
      if (stopping) return;
      stopping = true;
      agent.logger.info({ signal }, 'shutdown requested');
      const deadline = setTimeout(() => {
        agent.logger.error('shutdown took too long: exiting with state as last flushed');
        resolve(ExitCode.NotConverged);
      }, STOP_DEADLINE_MS);
      deadline.unref();
      agent.stop().then(
        () => resolve(ExitCode.Converged),
        (error: unknown) => {
          agent.logger.error({ err: error }, 'shutdown failed');
          resolve(ExitCode.NotConverged);
        },
      );
    };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
    process.on('SIGHUP', () => {
      agent.logger.info('SIGHUP: reloading the configuration');
      void agent.reload();
    });
    process.on('uncaughtException', (error) => {
      agent.logger.fatal({ err: error }, 'uncaught exception: exiting so systemd restarts the agent');
      resolve(ExitCode.NotConverged);
    });
    process.on('unhandledRejection', (error) => {
      agent.logger.fatal({ err: error }, 'unhandled rejection: exiting so systemd restarts the agent');
      resolve(ExitCode.NotConverged);
    });
  });
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
