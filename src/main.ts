#!/usr/bin/env node
// The composition root: the only place that reads argv and the environment, handles signals and exits.
import { readFileSync } from 'node:fs';
import { HELP_TEXT, parseCliArgs } from './cli/args.js';
import { ExitCode } from './cli/exit-codes.js';
import type { CommandIo } from './cli/io.js';
import { runStatus, runSync } from './cli/local-client.js';
import { runOnce } from './cli/once.js';
import { type RunningAgent, startAgent } from './cli/run.js';
import { UsageError } from './lib/errors.js';

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
  // Handlers go in before start-up: a SIGHUP's default action would end the process, and systemd counts
  // that as a clean exit it does not restart. Signals that arrive while starting are acted on once started.
  let agent: RunningAgent | undefined;
  let stopSignal: NodeJS.Signals | undefined;
  let reloadPending = false;
  let finish: (code: number) => void = () => undefined;
  const exit = new Promise<number>((resolve) => {
    finish = resolve;
  });

  const beginStop = (running: RunningAgent, signal: NodeJS.Signals) => {
    running.logger.info({ signal }, 'shutdown requested');
    const deadline = setTimeout(() => {
      running.logger.error('shutdown took too long: exiting with state as last flushed');
      finish(ExitCode.NotConverged);
    }, STOP_DEADLINE_MS);
    deadline.unref();
    running.stop().then(
      () => finish(ExitCode.Converged),
      (error: unknown) => {
        running.logger.error({ err: error }, 'shutdown failed');
        finish(ExitCode.NotConverged);
      },
    );
  };
  const onStop = (signal: NodeJS.Signals) => {
    if (stopSignal !== undefined) return;
    stopSignal = signal;
    if (agent !== undefined) beginStop(agent, signal);
  };
  const fatal = (what: string) => (error: unknown) => {
    if (agent !== undefined)
      agent.logger.fatal({ err: error }, `${what}: exiting so systemd restarts the agent`);
    else
      io.stderr.write(`config-agent: ${what}: ${error instanceof Error ? error.message : String(error)}\n`);
    finish(ExitCode.NotConverged);
  };
  process.on('SIGTERM', onStop);
  process.on('SIGINT', onStop);
  process.on('SIGHUP', () => {
    if (agent === undefined) {
      reloadPending = true;
      return;
    }
    agent.logger.info('SIGHUP: reloading the configuration');
    void agent.reload();
  });
  process.on('uncaughtException', fatal('uncaught exception'));
  process.on('unhandledRejection', fatal('unhandled rejection'));

  const started = await startAgent(configPath, io);
  if (typeof started === 'number') return started;
  agent = started;
  if (stopSignal !== undefined) beginStop(agent, stopSignal);
  else if (reloadPending) void agent.reload();
  return exit;
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
