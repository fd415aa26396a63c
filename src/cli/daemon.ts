// The running agent (daemon and local API) started, reloaded, stopped: the one CLI module that imports daemon/*.
import type { AgentConfig } from '../config/schema.js';
import { type AgentComponents, AgentDaemon } from '../daemon/agent.js';
import { LocalApiServer } from '../daemon/local-api.js';
import { AgentMetrics } from '../daemon/metrics.js';

import type { Clock } from '../lib/clock.js';
import { errnoCode, errorMessage } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';
import type { PassRunner } from '../reconcile/pass-runner.js';
import { ExitCode, exitCodeForPass } from './exit-codes.js';
import { renderHumanSummary } from './summary.js';

/** systemd's watchdog: started by compose.ts before start-up, which may wait on a mount (daemon/watchdog.ts). */
export { startWatchdog } from '../daemon/watchdog.js';

export interface RunningAgent<R extends PassRunner> {
  readonly logger: Logger;
  /** SIGTERM/SIGINT: stop polling, abandon the current file atomically, flush state and the outbox. */
  stop(): Promise<void>;
  /**
   * SIGHUP: `build` loads the configuration again and returns the next components (see AgentDaemon.reload).
   * When it throws, the reason is logged and the running configuration stays; this never rejects.
   */
  reload(build: (current: AgentComponents<R>) => Promise<AgentComponents<R>>): Promise<void>;
}

/** Metrics live as long as the device id: a reload to another device starts them afresh. */
export function metricsFor(config: AgentConfig, current?: AgentComponents<PassRunner>): AgentMetrics {
  return current !== undefined && current.config.deviceId === config.deviceId
    ? current.metrics
    : new AgentMetrics({ deviceId: config.deviceId });
}

export async function startAgent<R extends PassRunner>(
  components: AgentComponents<R>,
  /** The running program's version, for the journal's 'agent started' line (after an upgrade: which one runs). */
  version?: string,
): Promise<RunningAgent<R>> {
  const logger = components.deps.logger.child({ component: 'main' });
  const daemon = new AgentDaemon(components);
  /** The last reason the local API could not start, told once (errno or message), for the retries. */
  let apiCause: string | undefined;
  const listen = async (current: AgentComponents<R>) => {
    const started = await startLocalApi(daemon, current, logger, apiCause);
    apiCause = started.cause;
    // config_agent_local_api_up: nothing else shows a local API that could not start (its /v1/health is down too).
    current.metrics.setLocalApiUp(started.server !== undefined);
    return started.server;
  };
  let api = await listen(components);
  /** Set by stop(): a SIGHUP during or after it must not listen again. */
  let stopping = false;
  const stopRetries = new AbortController();
  /** Set while a start of the local API (a retry's or a reload's) is under way: never two at once. */
  let starting: Promise<unknown> | undefined;
  // A local API that could not start (/run full, the socket's directory missing, a squatter that later leaves) is
  // tried again every poll interval, until it listens or the agent stops; before, it stayed closed until a SIGHUP.
  const retryApi = async () => {
    const clock = components.deps.clock;
    while (!stopping) {
      try {
        await clock.sleep(daemon.components.config.poll.intervalSeconds * 1000, stopRetries.signal);
      } catch {
        return;
      }
      if (stopping || api !== undefined || starting !== undefined) continue;
      const attempt = listen(daemon.components);
      starting = attempt;
      const server = await attempt.finally(() => {
        starting = undefined;
      });
      if (stopping) await server?.close();
      else if (server !== undefined) {
        api = server;
        logger.info({ socketPath: daemon.components.config.socketPath }, 'local API listening');
      }
    }
  };
  void retryApi();
  await daemon.start();
  logger.info(
    {
      ...(version === undefined ? {} : { version }),
      deviceId: components.config.deviceId,
      rootDir: components.config.rootDir,
      socketPath: components.config.socketPath,
    },
    'agent started',
  );

  return {
    logger,
    async stop() {
      logger.info('stopping');
      stopping = true;
      stopRetries.abort();
      await starting;
      await api?.close();
      await daemon.stop();
      logger.info('stopped');
    },
    async reload(build) {
      const before = daemon.components;
      try {
        await daemon.reload(build);
      } catch (error) {
        logger.error(
          { reason: errorMessage(error) },
          'configuration reload failed: keeping the running configuration',
        );
        return;
      }
      const after = daemon.components;
      // Also when its socket file was removed or replaced under the running agent (or never came up): apps could
      // not reach it again until a restart.
      if (stopping) return logger.info('SIGHUP while stopping: the local API stays closed');
      if (after.config.socketPath !== before.config.socketPath || !(await api?.reachable())) {
        await starting;
        await api?.close();
        api = undefined;
        const attempt = listen(after);
        starting = attempt;
        const next = await attempt.finally(() => {
          starting = undefined;
        });
        if (stopping) {
          await next?.close();
          return logger.info('SIGHUP while stopping: the local API stays closed');
        }
        api = next;
      }
      // Metrics of another device start afresh (metricsFor): they learn the local API's state here.
      after.metrics.setLocalApiUp(api !== undefined);
      logger.info('configuration reloaded');
    },
  };
}

async function startLocalApi<R extends PassRunner>(
  daemon: AgentDaemon<R>,
  components: AgentComponents<R>,
  logger: Logger,
  /** Why the last start failed: the same cause again is logged at debug (the retries of every poll). */
  lastCause?: string,
): Promise<{ server?: LocalApiServer; cause?: string }> {
  const server = new LocalApiServer(
    components.config.socketPath,
    {
      health: () => daemon.health(),
      status: () => daemon.status(),
      scrub: components.scrub,
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
    {},
    components.deps.clock,
  );
  try {
    await server.start();
    return { server };
  } catch (error) {
    // Apps lose the socket, but the device keeps converging: the agent's main job does not depend on it. Tried
    // again every poll interval; told at error once per cause, at debug while the same cause holds.
    const cause = `${components.config.socketPath} ${errnoCode(error) ?? errorMessage(error)}`;
    const level = cause === lastCause ? 'debug' : 'error';
    logger[level](
      { err: error, socketPath: components.config.socketPath },
      'local API unavailable: tried again every poll interval',
    );
    return { cause };
  }
}

/**
 * The local API of a daemon that cannot start yet (stateDir's mount not answering): `/v1/health` answers 503 with
 * `why()`, `status` says it has not started, and a sync runs nothing. Closed before the start opens its own; undefined
 * when the socket could not be served (logged), which costs only the answer.
 */
export async function startWaitingApi(
  socketPath: string,
  why: () => string,
  logger: Logger,
  scrub: (text: string) => string,
  clock: Pick<Clock, 'monotonic' | 'sleep'>,
): Promise<{ close(): Promise<void> } | undefined> {
  const server = new LocalApiServer(
    socketPath,
    {
      health: () => ({ healthy: false, reason: why(), lastLoopAt: null }),
      status: () => ({ started: false, reason: why() }),
      sync: async () => ({
        converged: false,
        exitCode: ExitCode.NotConverged,
        result: { started: false, reason: why() },
      }),
      scrub,
    },
    logger,
    {},
    clock,
  );
  try {
    await server.start();
    return server;
  } catch (error) {
    logger.error({ err: error, socketPath }, 'local API unavailable while waiting to start');
    return undefined;
  }
}
