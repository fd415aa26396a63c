// `config-agent --once`: one reconcile pass, a summary on stdout, and an exit code that tells what happened.
import * as nodeFs from 'node:fs/promises';
import { ensureDirectories, type LoadedConfig, loadAgentConfig } from '../config/load.js';
import type { Deps } from '../lib/deps.js';
import { errorMessage } from '../lib/errors.js';
import { createSecretRegistry, type SecretRegistry } from '../lib/logger.js';
import type { PassResult } from '../reconcile/pass-runner.js';
import { Reconciler } from '../reconcile/reconcile.js';
import { readRegularFile } from '../store/durable-writer.js';
import { createDeps, createServiceClient, reconcilerSettings } from './agent-context.js';
import { ExitCode, exitCodeForPass, exitCodeForStartupError } from './exit-codes.js';
import type { CommandIo } from './io.js';
import { describePlan } from './plan-report.js';
import { renderHumanSummary, renderPlan, toJsonSummary } from './summary.js';

/** Retries of one request within a `--once` pass: there is no outer loop to try again later. */
const ONCE_REQUEST_RETRIES = 2;

export interface OnceCommand {
  configPath?: string;
  dryRun: boolean;
  json: boolean;
}

/** Loads config and key; prints the problem and returns the exit code instead when they are unusable. */
export async function loadConfigOrExit(
  configPath: string | undefined,
  io: CommandIo,
  secrets: SecretRegistry,
): Promise<LoadedConfig | number> {
  try {
    const loaded = await loadAgentConfig(nodeFs, {
      ...(configPath === undefined ? {} : { configFlag: configPath }),
      env: io.env,
    });
    secrets.add(loaded.apiKey);
    return loaded;
  } catch (error) {
    const code = exitCodeForStartupError(error);
    if (code === undefined) throw error;
    io.stderr.write(`config-agent: ${secrets.scrub(errorMessage(error))}\n`);
    return code;
  }
}

export async function runOnce(
  command: OnceCommand,
  io: CommandIo,
  overrides: Partial<Deps> = {},
): Promise<number> {
  const secrets = createSecretRegistry();
  const loaded = await loadConfigOrExit(command.configPath, io, secrets);
  if (typeof loaded === 'number') return loaded;
  const { config, apiKey } = loaded;
  const deps: Deps = { ...createDeps({ config, secrets, stderr: io.stderr }), ...overrides };
  const logger = deps.logger.child({ component: 'once' });

  try {
    if (!command.dryRun) await ensureDirectories(deps.fs, config);
    const client = createServiceClient(config, apiKey, deps);
    const reconciler = await Reconciler.open(deps, reconcilerSettings(config, ONCE_REQUEST_RETRIES), client, {
      readOnly: command.dryRun,
    });
    const result = await reconciler
      .runPass({ mode: 'full', dryRun: command.dryRun })
      .finally(() => reconciler.close());
    await printResult(result, command, io, (path) =>
      readRegularFile(deps.fs, config.rootDir, path).then((file) => file?.data),
    );
    return exitCodeForPass(result);
  } catch (error) {
    io.stderr.write(`config-agent: ${secrets.scrub(errorMessage(error))}\n`);
    // A root or state directory that cannot be created is a configuration problem, not a failed pass.
    const startupCode = exitCodeForStartupError(error);
    if (startupCode !== undefined) return startupCode;
    logger.error({ err: error }, 'reconcile pass failed');
    return ExitCode.NotConverged;
  }
}

async function printResult(
  result: PassResult,
  command: OnceCommand,
  io: CommandIo,
  readCurrent: (path: string) => Promise<Buffer | undefined>,
): Promise<void> {
  const plan = command.dryRun ? await describePlan(result.steps, readCurrent) : undefined;
  if (command.json) {
    io.stdout.write(`${JSON.stringify(toJsonSummary(result, plan))}\n`);
  } else if (plan !== undefined) {
    io.stdout.write(renderPlan(result, plan));
  } else {
    io.stdout.write(renderHumanSummary(result));
  }
}
