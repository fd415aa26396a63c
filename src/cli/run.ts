// `config-agent` without --once: builds the daemon and its local API; main.ts wires the signals to it.
import { Writable } from 'node:stream';
import { ensureDirectories, type LoadedConfig } from '../config/load.js';
import { type AgentComponents, AgentDaemon } from '../daemon/agent.js';
import { LocalApiServer } from '../daemon/local-api.js';
import { AgentMetrics } from '../daemon/metrics.js';
import { errorMessage } from '../lib/errors.js';
import { createSecretRegistry, type Logger, type SecretRegistry } from '../lib/logger.js';
import { Reconciler } from '../reconcile/reconcile.js';
import { createDeps, createServiceClient, reconcilerSettings } from './agent-context.js';
import { ExitCode, exitCodeForPass, exitCodeForStartupError } from './exit-codes.js';
import type { CommandIo } from './io.js';
import { loadConfigOrExit } from './once.js';
import { renderHumanSummary } from './summary.js';

/** The daemon's poll loop is its retry layer for requests: no retries inside a pass. */
const DAEMON_REQUEST_RETRIES = 0;

export interface RunningAgent {
  /** SIGTERM/SIGINT: stop polling, abandon the current file atomically, flush state and the outbox. */
  stop(): Promise<void>;
  /** SIGHUP: reload the configuration file; an invalid one is logged and the old one kept. */
  reload(): Promise<void>;
  logger: Logger;
}

async function buildComponents(
  loaded: LoadedConfig,
  io: CommandIo,
  secrets: SecretRegistry,
  current?: AgentComponents,
): Promise<AgentComponents> {
  const { config, apiKey } = loaded;
  const deps = createDeps({ config, secrets, stderr: io.stderr });
  await ensureDirectories(deps.fs, config);
  const metrics =
    current !== undefined && current.config.deviceId === config.deviceId
      ? current.metrics
      : new AgentMetrics({ deviceId: config.deviceId });
  const client = createServiceClient(config, apiKey, deps, (event) => metrics.recordRequest(event));
  const settings = reconcilerSettings(config, DAEMON_REQUEST_RETRIES, true);
  let reconciler: Reconciler;
  if (current?.reconciler.reconfigure(deps, settings, client)) {
    reconciler = current.reconciler;
  } else {
    // Another device, root or state dir: the old state is flushed where it belongs, the new one opened.
    reconciler = await Reconciler.open(deps, settings, client);
    await current?.reconciler.flushState();
    await current?.reconciler.close();
  }
  return { deps, config, client, reconciler, metrics, settings, hookEnv: io.env };
}

class ReloadRejected extends Error {}

export async function startAgent(
  configPath: string | undefined,
  io: CommandIo,
): Promise<RunningAgent | number> {
  const secrets = createSecretRegistry();
  const loaded = await loadConfigOrExit(configPath, io, secrets);
  if (typeof loaded === 'number') return loaded;
  let components: AgentComponents;
  try {
    components = await buildComponents(loaded, io, secrets);
  } catch (error) {
    io.stderr.write(`config-agent: cannot start: ${secrets.scrub(errorMessage(error))}\n`);
    return exitCodeForStartupError(error) ?? ExitCode.NotConverged;
  }
  const logger = components.deps.logger.child({ component: 'main' });
  const daemon = new AgentDaemon(components);
  let api = await startLocalApi(daemon, components, logger);
  await daemon.start();
  logger.info(
    {
      deviceId: loaded.config.deviceId,
      rootDir: loaded.config.rootDir,
      socketPath: loaded.config.socketPath,
    },
    'agent started',
  );

  return {
    logger,
    async stop() {
      logger.info('stopping');
      await api?.close();
      await daemon.stop();
      logger.info('stopped');
    },
    async reload() {
      const before = daemon.components;
      try {
        await daemon.reload(async (current) => {
          const problems = new CollectingWritable();
          const next = await loadConfigOrExit(configPath, { ...io, stderr: problems }, secrets);
          if (typeof next === 'number') throw new ReloadRejected(problems.text.trim());
          return buildComponents(next, io, secrets, current);
        });
      } catch (error) {
        const reason = error instanceof ReloadRejected ? error.message : errorMessage(error);
        logger.error({ reason }, 'configuration reload failed: keeping the running configuration');
        return;
      }
      const after = daemon.components;
      if (after.config.socketPath !== before.config.socketPath) {
        await api?.close();
        api = await startLocalApi(daemon, after, logger);
      }
      logger.info('configuration reloaded');
    },
  };
}

async function startLocalApi(
  daemon: AgentDaemon,
  components: AgentComponents,
  logger: Logger,
): Promise<LocalApiServer | undefined> {
  const server = new LocalApiServer(
    components.config.socketPath,
    {
      health: () => daemon.health(),
      status: () => daemon.status(),
      sync: async () => {
        const result = await daemon.syncNow('full');
        return {
          converged: result.converged,
          exitCode: exitCodeForPass(result),
          result: {
            reachable: result.reachable,
            mode: result.mode,
            durationMs: result.durationMs,
            outcomes: result.outcomes,
            reports: result.reports,
            ...(result.error === undefined ? {} : { error: result.error }),
            summary: renderHumanSummary(result),
          },
        };
      },
    },
    components.deps.logger.child({ component: 'local-api' }),
  );
  try {
    await server.start();
    return server;
  } catch (error) {
    // Apps lose the socket, but the device keeps converging: the agent's main job does not depend on it.
    logger.error({ err: error, socketPath: components.config.socketPath }, 'local API unavailable');
    return undefined;
  }
}

class CollectingWritable extends Writable {
  text = '';
  override _write(chunk: Buffer | string, _encoding: BufferEncoding, callback: () => void): void {
    this.text += chunk.toString();
    callback();
  }
}
