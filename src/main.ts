#!/usr/bin/env node
// The process entry: argv, environment, stdio and signals in, an exit code out; each command's modules load on demand.
import type { EventEmitter } from 'node:events';
import { readFileSync, realpathSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { HELP_TEXT, parseCliArgs } from './cli/args.js';
import { ExitCode, exitCodeForStartupError } from './cli/exit-codes.js';
import { type CommandIo, checkedOutput, finishOutput, wholeLinesOutput } from './cli/io.js';
import { holdOnceSignals } from './cli/once-early-signals.js';
import { endProcess, LOOKUP_DRAIN_MS, nodeProcessEnd } from './cli/process-exit.js';
import { STRAY_SIGNALS } from './cli/stray-signals.js';
import { errorMessage, UsageError } from './lib/errors.js';
import { createSecretRegistry } from './lib/secrets.js';

function packageVersion(): string {
  const text = readFileSync(new URL('../package.json', import.meta.url), 'utf8');
  return (JSON.parse(text) as { version: string }).version;
}

/**
 * The version in the package.json one directory above the running entry (`dist/../package.json`: the repository's,
 * or the one packaging/bundle.mjs installs beside the bundle's dist/), for the daemon's 'agent started' line;
 * undefined when there is none to read.
 */
function runningVersion(): string | undefined {
  const entry = process.argv[1];
  if (entry === undefined) return undefined;
  try {
    const text = readFileSync(new URL('../package.json', pathToFileURL(realpathSync(entry))), 'utf8');
    const { version } = JSON.parse(text) as { version?: unknown };
    return typeof version === 'string' ? version : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Runs one command line. `events` is where signals and uncaught errors arrive (the process; an emitter in
 * tests). A configuration, key or usage problem — thrown by whichever command met it — is printed here, once,
 * and becomes its exit code (78 or 2); the API key is scrubbed from what is printed.
 */
export async function main(argv: readonly string[], io: CommandIo, events: EventEmitter): Promise<number> {
  const secrets = createSecretRegistry();
  try {
    const command = parseCliArgs(argv);
    switch (command.kind) {
      case 'help':
        io.stdout.write(HELP_TEXT.endsWith('\n') ? HELP_TEXT : `${HELP_TEXT}\n`);
        return ExitCode.Converged;
      case 'version':
        io.stdout.write(`config-agent ${packageVersion()}\n`);
        return ExitCode.Converged;
      case 'status': {
        const { runStatus } = await import('./cli/local-client.js');
        return await runStatus(command, io);
      }
      case 'sync': {
        const { runSync } = await import('./cli/local-client.js');
        return await runSync(command, io);
      }
      case 'once': {
        const { runOnce } = await import('./cli/compose.js');
        return await runOnce(command, io, secrets, events);
      }
      case 'run': {
        const { runAgent } = await import('./cli/compose.js');
        const version = runningVersion();
        return await runAgent(version === undefined ? command : { ...command, version }, io, secrets, events);
      }
      case 'init': {
        const { runInit, SYSTEM_INIT_ENVIRONMENT } = await import('./cli/init.js');
        const { kind: _, ...flags } = command;
        return await runInit(flags, io, {
          ...SYSTEM_INIT_ENVIRONMENT,
          stdin: process.stdin,
          stdinIsTty: process.stdin.isTTY === true,
          uid: process.getuid?.(),
        });
      }
      case 'doctor': {
        const { runDoctor, runSystemctl } = await import('./cli/doctor.js');
        const { SYSTEM_INIT_ENVIRONMENT } = await import('./cli/init.js');
        return await runDoctor(command, io, {
          ...SYSTEM_INIT_ENVIRONMENT,
          systemctl: runSystemctl,
          now: Date.now,
          unit: 'config-agent.service',
        });
      }
    }
  } catch (error) {
    if (error instanceof UsageError) {
      io.stderr.write(`config-agent: ${error.message}\nRun 'config-agent --help' for usage.\n`);
      return ExitCode.Usage;
    }
    const code = exitCodeForStartupError(error);
    if (code === undefined) throw error;
    io.stderr.write(`config-agent: ${secrets.scrub(errorMessage(error))}\n`);
    return code;
  }
}

function isEntryPoint(): boolean {
  const script = process.argv[1];
  if (script === undefined) return false;
  try {
    return realpathSync(script) === fileURLToPath(import.meta.url);
  } catch {
    return false;
  }
}

/**
 * Sets `syncV8Flags` for the commands that sync (`--once`, `run`); the others are over before any tier-up, and
 * loading node:v8 (~2 ms) would only slow them.
 */
async function raiseTierUpBudget(argv: readonly string[]): Promise<void> {
  try {
    const { kind } = parseCliArgs(argv);
    if (kind !== 'once' && kind !== 'run') return;
  } catch {
    return; // main() reports the usage error.
  }
  const { syncV8Flags } = await import('./cli/v8-flags.js');
  const flags = syncV8Flags(Number.parseInt(process.versions.v8, 10), process.execArgv);
  if (flags.length === 0) return;
  try {
    // require, not import(): the CommonJS agent bundle runs in a vm.Script, which has no import() (packaging/bundle.mjs).
    const { setFlagsFromString } = createRequire(import.meta.url)('node:v8') as typeof import('node:v8');
    for (const flag of flags) setFlagsFromString(flag);
  } catch {
    // Only a cost: the command runs the same at V8's defaults.
  }
}

/**
 * Whether `argv` runs a pass that keeps its state (`--once` without `--dry-run`): the agent loader writes its code
 * cache only after such a run, so that `--once --help` does not leave a cache of the argument parser alone.
 */
export function runsAPass(argv: readonly string[]): boolean {
  try {
    const command = parseCliArgs(argv);
    return command.kind === 'once' && !command.dryRun;
  } catch {
    return false;
  }
}

/**
 * Runs this process's command line and exits with its code. The packages' entry is main.cjs (packaging/bundle.mjs),
 * which answers --help and --version itself and calls this for every other command line.
 */
export function runProcess(): void {
  // stdout and stderr may go away under a running agent (journald stopped, the terminal closed, a pipe's reader
  // gone): a write then fails with EPIPE or EIO, emitted as an 'error' that nothing handled. The fatal handler
  // logged it to the same stream, which failed again: a nextTick loop at 100 % CPU that starved every timer,
  // the socket and SIGTERM. Output is best effort; the configs are the job, so the agent goes on without it.
  for (const stream of [process.stdout, process.stderr]) stream.on('error', () => undefined);
  // Node's own answer to SIGUSR1 is to open its inspector on 127.0.0.1:9229, with no authentication: every local
  // user could then connect and run code as the agent (read the API key, write anywhere it may; root, in many
  // installs). Anyone allowed to signal the agent (root, its own user: a hook) could open it. A listener of our
  // own keeps Node's from acting (Node 20 and 24).
  process.on('SIGUSR1', () => undefined);
  const argv = process.argv.slice(2);
  // The daemon reloads on SIGHUP; until runAgent's listener is in (after its modules load), Node's default answer
  // would end it, which systemd counts as a clean exit it does not restart (a reload right after a start). Such
  // an early SIGHUP comes before the configuration is read, so there is nothing to reload yet.
  // The same holds for the signals it ignores (stray-signals.ts).
  if (runsTheDaemon(argv))
    for (const signal of ['SIGHUP', ...STRAY_SIGNALS]) process.on(signal, () => undefined);
  // The daemon's stdout carries nothing (its logs go to stderr): only the other commands' output is checked.
  const stdout = runsTheDaemon(argv) ? undefined : checkedOutput(process.stdout, { fd: 1 });
  const io: CommandIo = {
    stdout: stdout?.stream ?? process.stdout,
    stderr: wholeLinesOutput(process.stderr, 2),
    env: process.env,
    isTty: process.stdout.isTTY === true,
  };
  // Exits once stdout has drained, so piped output is never cut short, and not with 0 when it was not written.
  // A command's exit code waits out a name lookup still in flight (a DNS that never answered); the daemon's stop,
  // which systemd gives 15 s and takes SIGTERM's end as clean, does not (adv25).
  const drain = runsTheDaemon(argv) ? {} : { lookupDrainMs: LOOKUP_DRAIN_MS };
  const exit = (code: number): void => void endProcess(code, nodeProcessEnd, drain);
  // --once's stop and stray signals outside its pass (its modules loading, its output flushed): an exit code (adv33).
  if (runsOnce(argv)) holdOnceSignals(process, exit);
  const exitAfterFlush = (code: number): void => {
    if (stdout === undefined) {
      process.stdout.write('', () => exit(code));
      return;
    }
    finishOutput(code, stdout, io.stderr).then(exit, () => exit(code));
  };
  raiseTierUpBudget(argv)
    .then(() => main(argv, io, process))
    .then(exitAfterFlush, (error: unknown) => {
      process.stderr.write(
        `config-agent: unexpected error: ${error instanceof Error ? error.stack : String(error)}\n`,
      );
      exitAfterFlush(ExitCode.NotConverged);
    });
}

function runsOnce(argv: readonly string[]): boolean {
  try {
    return parseCliArgs(argv).kind === 'once';
  } catch {
    return false;
  }
}

function runsTheDaemon(argv: readonly string[]): boolean {
  try {
    return parseCliArgs(argv).kind === 'run';
  } catch {
    return false;
  }
}

if (isEntryPoint()) runProcess();
