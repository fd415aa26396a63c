// The composition root of the commands that reconcile (`--once`, the daemon): configuration, Deps, client, runner, signals.
import type { EventEmitter } from 'node:events';
import * as nodeFs from 'node:fs/promises';
import { type ClientOptions, createClient, type ServiceClient } from '../api/client.js';
import { proxyCredentialSecrets } from '../api/proxy.js';
import { hookProgramProblem } from '../config/hook-programs.js';
import { type ConfigFs, ensureDirectories, type LoadedConfig, loadAgentConfig } from '../config/load.js';
import type { AgentConfig } from '../config/schema.js';
import type { AgentComponents } from '../daemon/agent.js';
import { systemClock } from '../lib/clock.js';
import type { Deps } from '../lib/deps.js';
import { errorMessage } from '../lib/errors.js';
import type { FsPort } from '../lib/fs-port.js';
import { createLogger } from '../lib/logger.js';
import { heapCheckpoint, heapReleaser } from '../lib/release-memory.js';
import { createSecretRegistry, type SecretRegistry } from '../lib/secrets.js';
import type { PassResult, ReconcilerSettings } from '../reconcile/pass-runner.js';
import { Reconciler } from '../reconcile/reconcile.js';
import { renewalFailureLog } from '../store/directory-syncs.js';
import { readRegularFileUpTo } from '../store/durable-writer.js';
import { StateLockedError } from '../store/lock.js';
import type { RunningAgent } from './daemon.js';
import { ExitCode, exitCodeForPass, exitCodeForStartupError, waitsOutAtStart } from './exit-codes.js';
import { hangSafeConfigCalls, hangSafeFs } from './hang-safe-fs.js';
import type { CommandIo } from './io.js';
import { MOUNT_ANSWER_MS, MountLanes, mountDidNotAnswer } from './mount-gate.js';
import { type OnceCommand, printPassResult } from './once.js';
import { STRAY_SIGNALS, strayCounter } from './stray-signals.js';

/** Retries of one request within a `--once` pass: there is no outer loop to try again later. */
const ONCE_REQUEST_RETRIES = 2;
/** The daemon's poll loop is its retry layer for requests: no retries inside a pass. */
const DAEMON_REQUEST_RETRIES = 0;
/** Must exit within this after SIGTERM; systemd's TimeoutStopSec is longer. */
const STOP_DEADLINE_MS = 10_000;

/**
 * How the daemon waits out a start-up failure that may pass by itself (`waitsOutAtStart`: a full or failing
 * disk under stateDir or rootDir; or stateDir locked by another live agent, such as an operator's long
 * `config-agent --once` at boot): 5 s, doubling up to 5 min, in-process: exiting instead would have systemd restart
 * the whole agent every 30 s (systemd/config-agent.service).
 */
export interface StartRetry {
  firstDelayMs: number;
  maxDelayMs: number;
  /** How long a stop may take from its signal, start-up included (STOP_DEADLINE_MS; shorter in tests). */
  stopDeadlineMs?: number;
  /** The bound of a call into a mount that may hang (MOUNT_ANSWER_MS; shorter in tests). */
  mountAnswerMs?: number;
}
const START_RETRY: StartRetry = { firstDelayMs: 5_000, maxDelayMs: 300_000 };

/**
 * The line said when mounts a start waited for answer again: only those of `waited` not in `stillLate` (another
 * mount late instead is said by the next refusal); none answering, nothing (it named the waited ones until fix30).
 */
export function answersAgainLine(
  waited: readonly string[],
  stillLate: readonly string[],
): string | undefined {
  const answering = waited.filter((mount) => !stillLate.includes(mount));
  if (answering.length === 0) return undefined;
  return `config-agent: the mount at ${answering.join(', ')} answers again: trying to start now\n`;
}

/** Loaded only by the daemon: `--once` never pays for the drift watcher, prom-client, the socket server or hooks. */
type DaemonModule = typeof import('./daemon.js');

/**
 * Reads the config file, the environment and the API key, and registers the key and the proxy variables'
 * credentials with `secrets`. Throws
 * ConfigError or ApiKeyError (exit 78): the caller prints the problem.
 */
async function loadConfiguration(
  configPath: string | undefined,
  env: NodeJS.ProcessEnv,
  secrets: SecretRegistry,
  lanes: MountLanes,
  servesSocket = false,
): Promise<LoadedConfig> {
  // Its checks of rootDir and stateDir on a hung NFS or FUSE mount fail after the bound (cli/mount-gate.ts).
  const calls = await hangSafeConfigCalls(lanes, nodeFs as unknown as FsPort);
  const loaded = await loadAgentConfig(calls.fs as ConfigFs, {
    ...(configPath === undefined ? {} : { configFlag: configPath }),
    env,
    servesSocket,
    ownPathsPort: calls.ownPathsPort,
  });
  secrets.add(loaded.apiKey);
  // The proxy variables' credentials too: a hook given them (hooks[].proxyCredentials) may print them.
  for (const secret of proxyCredentialSecrets(env)) secrets.add(secret);
  return loaded;
}

/**
 * `lanes`: the process's lanes into mounts that may hang (cli/mount-gate.ts), shared with start-up's checks.
 * `running`: the deps a reload replaces. Their directory fsync ledger is kept (store/directory-syncs.ts: one per
 * process): a fresh one would forget the entries a failed fsync dropped, and a file left in place by it would
 * then be confirmed `deployed` on the strength of a later fsync alone.
 */
export async function createDeps(
  config: AgentConfig,
  secrets: SecretRegistry,
  stderr: NodeJS.WritableStream,
  running?: Pick<Deps, 'fs'>,
  lanes?: MountLanes,
): Promise<Deps> {
  const fs = await hangSafeFs(config.rootDir, systemClock, undefined, running?.fs.directorySyncs, {
    stateDir: config.stateDir,
    ...(lanes === undefined ? {} : { lanes }),
  });
  const logger = createLogger({ level: config.log.level, secrets, destination: stderr });
  const ledger = fs.directorySyncs;
  if (ledger !== undefined)
    ledger.onRenewalFailure = renewalFailureLog(logger.child({ component: 'writer' }));
  return { fs, clock: systemClock, random: Math.random, logger, heapCheckpoint: heapCheckpoint() };
}

function createServiceClient(
  loaded: LoadedConfig,
  deps: Deps,
  env: NodeJS.ProcessEnv,
  onRequest?: ClientOptions['onRequest'],
): ServiceClient {
  const { server } = loaded.config;
  return createClient({
    baseUrl: server.baseUrl,
    apiVersion: server.apiVersion,
    apiKey: loaded.apiKey,
    timeoutMs: server.timeoutSeconds * 1000,
    maxResponseBytes: server.maxResponseBytes,
    clock: deps.clock,
    ...(deps.transport === undefined ? {} : { transport: deps.transport }),
    ...(onRequest === undefined ? {} : { onRequest }),
    proxy: { ...(server.proxy === undefined ? {} : { url: server.proxy }), env },
  });
}

/**
 * files.rules as a resolver, checked against the groups this process holds (a ConfigError, exit 78 or a
 * refused reload, names a group the agent cannot use). /etc/group is read only when a rule names a group.
 */
async function fileMetaFor(config: AgentConfig): Promise<ReconcilerSettings['fileMeta']> {
  if (config.files.rules.length === 0) return undefined;
  // Loaded only with rules: /etc/group parsing and the glob matcher are otherwise a daemon-only (hooks) need.
  const { compileFileRules, parseGroupFile } = await import('../config/file-rules.js');
  const named = config.files.rules.some((rule) => rule.group !== undefined && !/^\d+$/.test(rule.group));
  const groups = named ? await nodeFs.readFile('/etc/group', 'utf8') : '';
  return compileFileRules(config.files, {
    gidByName: parseGroupFile(groups),
    memberGids: process.getgroups?.() ?? [],
    primaryGid: process.getgid?.() ?? 0,
    privileged: process.getuid?.() === 0,
  });
}

/**
 * Below this length the API key is not looked for in listed paths nor in the values of hooks' variables: a short key
 * (the configuration takes 4 characters) would match ordinary text, refusing `production/...` for a key `prod` or
 * dropping a hook's PATH; the log's scrub still takes it whole.
 */
export const KEY_MATCH_MIN_LENGTH = 12;

/**
 * Whether a text holds the API key (any of `apiKeys`) as written, escaped or percent-encoded (the log scrub's
 * spellings); undefined without a key of KEY_MATCH_MIN_LENGTH or more.
 */
export function apiKeyMatcher(
  apiKeys: string | readonly string[] | undefined,
): ((text: string) => boolean) | undefined {
  const long = (typeof apiKeys === 'string' ? [apiKeys] : (apiKeys ?? [])).filter(
    (apiKey) => apiKey.length >= KEY_MATCH_MIN_LENGTH,
  );
  if (long.length === 0) return undefined;
  const key = createSecretRegistry();
  for (const apiKey of long) key.add(apiKey);
  return (text) => key.scrub(text) !== text;
}

/** The API keys a daemon keeps looking for: the one it holds and those it held before reloads (fix36). */
export const HELD_API_KEYS = 4;

/**
 * `held` with `apiKey` last (once), the oldest dropped past HELD_API_KEYS: a key rotated away is still a secret
 * until the service revokes it, so a service echoing it is refused as for the key held now (fix36).
 */
export function heldApiKeys(held: readonly string[], apiKey: string): string[] {
  return [...held.filter((key) => key !== apiKey), apiKey].slice(-HELD_API_KEYS);
}

/**
 * `forDaemon`: the daemon runs hooks, so changed paths are kept for them until they ran. `requestRetryBaseMs`:
 * the in-pass request retry's first wait, a test seam (CommandIo.requestRetryBaseMs); unset, the pass's 500 ms.
 */
export function reconcilerSettings(
  config: AgentConfig,
  requestRetries: number,
  forDaemon: boolean,
  fileMeta: ReconcilerSettings['fileMeta'],
  apiKey?: string | readonly string[],
  requestRetryBaseMs?: number,
): ReconcilerSettings {
  const holdsApiKey = apiKeyMatcher(apiKey);
  return {
    ...(requestRetryBaseMs === undefined ? {} : { requestRetryBaseMs }),
    ...(fileMeta === undefined ? {} : { fileMeta }),
    ...(holdsApiKey === undefined ? {} : { holdsApiKey }),
    deviceId: config.deviceId,
    rootDir: config.rootDir,
    stateDir: config.stateDir,
    fileMode: config.files.mode,
    dirMode: config.files.dirMode,
    retry: forDaemon ? { ...config.retry, pollIntervalSeconds: config.poll.intervalSeconds } : config.retry,
    requestRetries,
    maxResponseBytes: config.server.maxResponseBytes,
    restoreDrift: config.drift === 'restore',
    trackHookPaths: forDaemon && config.hooks.length > 0,
    // Only the daemon's drift watcher reads the copies; writing them cost `--once` ~19 % of its first sync's CPU.
    cacheWrittenFiles: forDaemon,
  };
}

/**
 * `config-agent --once`: one pass, what it did on stdout, and the exit code that tells it. SIGTERM, SIGINT or SIGHUP
 * stops the pass as the daemon's stop does (the file in progress abandoned whole, what landed recorded, reports
 * kept queued for the next run): exit 143, 130 or 129. A second signal, or the stop deadline, exits at once, leaving what a
 * kill -9 leaves (whole files and temp files the next run sweeps).
 */
export async function runOnce(
  command: OnceCommand,
  io: CommandIo,
  secrets: SecretRegistry,
  events?: EventEmitter,
  stopDeadlineMs = STOP_DEADLINE_MS,
): Promise<number> {
  keepOwnerBits();
  const interruption = onceInterruption(io, events, stopDeadlineMs);
  try {
    return await Promise.race([
      runOncePass(command, io, secrets, interruption.stop, stopDeadlineMs),
      interruption.forced,
    ]);
  } finally {
    interruption.dispose();
  }
}

/**
 * Clears the owner's bits from the inherited umask, keeping the group's and others'. Modes are set with chmod,
 * but a directory is chmod'ed through a descriptor opened on it, and a umask taking the owner's read bit (an
 * `UMask=0777` drop-in, `umask 0477` in a shell) made every new directory one the agent (not root) could not
 * open: each write failed with EACCES, an attempt, until every instance was `failed` for good; `agent.lock`
 * made unreadable was taken for gone at every pass (adv18).
 */
function keepOwnerBits(): void {
  const inherited = process.umask(0o077);
  process.umask(inherited & 0o077);
}

/** The exit code of a `--once` stopped by `signal`. */
function interruptedExitCode(signal: NodeJS.Signals): ExitCode {
  if (signal === 'SIGHUP') return ExitCode.HungUp;
  return signal === 'SIGINT' ? ExitCode.Interrupted : ExitCode.Terminated;
}

interface OnceInterruption {
  /** Aborted, with the signal as its reason, by the first SIGTERM, SIGINT or SIGHUP. */
  stop: AbortSignal;
  /** Settles with the exit code when a second signal or the deadline gives up on a graceful stop. */
  forced: Promise<number>;
  dispose(): void;
}

function onceInterruption(
  io: CommandIo,
  events: EventEmitter | undefined,
  stopDeadlineMs: number,
): OnceInterruption {
  const controller = new AbortController();
  let force: (code: number) => void = () => undefined;
  const forced = new Promise<number>((resolve) => {
    force = resolve;
  });
  let deadline: NodeJS.Timeout | undefined;
  const onSignal = (signal: NodeJS.Signals) => {
    const first = controller.signal.reason as NodeJS.Signals | undefined;
    if (first !== undefined) {
      io.stderr.write(`config-agent: ${signal} again: exiting now; the next run finishes the job\n`);
      force(interruptedExitCode(first));
      return;
    }
    io.stderr.write(
      `config-agent: ${signal}: stopping after the file in progress; what landed is recorded and ` +
        `its reports stay queued for the next run (${signal} again to exit now)\n`,
    );
    controller.abort(signal);
    deadline = setTimeout(() => {
      io.stderr.write(
        `config-agent: ${signal}: the pass did not stop within ${stopDeadlineMs / 1000} s ` +
          '(a hung file system or service?): exiting now; the next run finishes the job\n',
      );
      force(interruptedExitCode(signal));
    }, stopDeadlineMs);
    deadline.unref();
  };
  // SIGHUP too: an operator's `sudo config-agent --once` whose terminal or ssh session closes mid-pass. Node's
  // default ended it there (temp files left, what landed unrecorded, a signal death instead of an exit code).
  const listeners: Array<readonly [NodeJS.Signals, () => void]> = (
    ['SIGTERM', 'SIGINT', 'SIGHUP'] as const
  ).map((signal) => {
    const listener = () => onSignal(signal);
    events?.on(signal, listener);
    return [signal, listener] as const;
  });
  // The daemon's stray signals (a `kill -USR2` meant for another program, SIGPWR, a timer's SIGALRM): their default
  // ended the pass midway as SIGHUP's did; ignored, named on stderr at the 1st, 10th, 100th ... of a kind.
  const strayCount = strayCounter();
  for (const signal of STRAY_SIGNALS) {
    const listener = () => {
      if (strayCount(signal) !== undefined) {
        io.stderr.write(`config-agent: ${signal} ignored (only SIGTERM, SIGINT or SIGHUP stops --once)\n`);
      }
    };
    events?.on(signal, listener);
    listeners.push([signal, listener]);
  }
  return {
    stop: controller.signal,
    forced,
    dispose() {
      clearTimeout(deadline);
      for (const [signal, listener] of listeners) events?.off(signal, listener);
    },
  };
}

async function runOncePass(
  command: OnceCommand,
  io: CommandIo,
  secrets: SecretRegistry,
  stop: AbortSignal,
  stopDeadlineMs: number,
): Promise<number> {
  // One lane per mount that may hang for the whole run: start-up's checks and the pass share them. A stop gives up
  // on a call waiting on a hung mount at once: the pass ends now, not after the mount's 15 s bound; the stop's own
  // flush is bounded by what is left of its deadline.
  const lanes = new MountLanes(systemClock, MOUNT_ANSWER_MS, stop, stopDeadlineMs);
  const loaded = await loadConfiguration(command.configPath, io.env, secrets, lanes);
  const { config } = loaded;
  const deps = await createDeps(config, secrets, io.stderr, undefined, lanes);
  const stoppedBy = () => stop.reason as NodeJS.Signals;
  try {
    if (!command.dryRun) await ensureDirectories(deps.fs, config);
    const settings = reconcilerSettings(
      config,
      ONCE_REQUEST_RETRIES,
      false,
      await fileMetaFor(config),
      loaded.apiKey,
      io.requestRetryBaseMs,
    );
    const runner = await Reconciler.open(deps, settings, createServiceClient(loaded, deps, io.env), {
      readOnly: command.dryRun,
    });
    let result: PassResult | undefined;
    try {
      if (stop.aborted) return interruptedExitCode(stoppedBy());
      result = await runner.runPass({ mode: 'full', dryRun: command.dryRun, signal: stop });
    } catch (error) {
      if (!stop.aborted) throw error;
      // What landed before the stop is recorded in memory only: made durable, as the daemon's stop does.
      await runner.flushState().catch((flushError: unknown) => {
        deps.logger.child({ component: 'once' }).error({ err: flushError }, 'could not flush state');
      });
      deps.logger.child({ component: 'once' }).warn({ signal: stoppedBy() }, 'pass stopped by a signal');
      return interruptedExitCode(stoppedBy());
    } finally {
      // A pass that planned no write nor removal and converged made no temp file in rootDir: the next start may
      // skip its sweep (store/clean-exit.ts).
      const clean =
        result?.converged === true &&
        result.error === undefined &&
        !stop.aborted &&
        result.steps.every((step) => step.kind !== 'write' && step.kind !== 'remove');
      await runner.close({ clean });
    }
    // Ids, paths and messages come from the service, which may echo the key back: scrubbed like the logs.
    const scrubbed = { write: (text: string) => io.stdout.write(secrets.scrub(text)) };
    await printPassResult(result, command, { stdout: scrubbed }, (path, maxBytes) =>
      readRegularFileUpTo(deps.fs, config.rootDir, path, maxBytes),
    );
    return exitCodeForPass(result);
  } catch (error) {
    // Another agent (the daemon) holds stateDir: nothing was done, and that is no crash to log with its stack.
    if (error instanceof StateLockedError) {
      io.stderr.write(`config-agent: ${secrets.scrub(error.refusal)}\n`);
      return ExitCode.NotConverged;
    }
    // A root or state directory that cannot be created is a configuration problem: the caller prints it.
    if (exitCodeForStartupError(error) !== undefined) throw error;
    if (stop.aborted) return interruptedExitCode(stoppedBy());
    io.stderr.write(`config-agent: ${secrets.scrub(errorMessage(error))}\n`);
    deps.logger.child({ component: 'once' }).error({ err: error }, 'reconcile pass failed');
    return ExitCode.NotConverged;
  }
}

/**
 * The environment hooks inherit, without every variable whose value holds the API key: the hook runner drops
 * variables by name (`API_KEY`, `CREDENTIALS_DIRECTORY`), not the key set under another (an `EnvironmentFile=`'s
 * `DCDS_TOKEN`, a wrapper's `--key=...`), which reached every hook (adv28). In any spelling the log scrub knows
 * (escaped, percent-encoded: a URL's `?key=`, a JSON text), not only as written (fix32). A reload passes the
 * environment the hooks had, so a key held before (a rotated one, maybe still valid) stays out too.
 */
export function withoutKeyValues(env: NodeJS.ProcessEnv, apiKey: string): NodeJS.ProcessEnv {
  const holdsKey = apiKeyMatcher(apiKey);
  if (holdsKey === undefined) return env;
  return Object.fromEntries(
    Object.entries(env).filter(([, value]) => value === undefined || !holdsKey(value)),
  );
}

/**
 * The components of the daemon for the configuration on disk now. `current` (a reload) keeps what the new
 * configuration does not change: the runner with its cooldowns and outbox (unless the device, root or state
 * directory moved), and the metrics (unless the device did). `held`: the API keys this process has held, the loaded
 * one added (heldApiKeys).
 */
async function buildAgentComponents(
  loaded: LoadedConfig,
  io: CommandIo,
  secrets: SecretRegistry,
  daemon: DaemonModule,
  lanes: MountLanes,
  held: { apiKeys: string[] },
  current?: AgentComponents<Reconciler>,
): Promise<AgentComponents<Reconciler>> {
  const { config } = loaded;
  held.apiKeys = heldApiKeys(held.apiKeys, loaded.apiKey);
  const deps = await createDeps(config, secrets, io.stderr, current?.deps, lanes);
  for (const { hook, program, why } of loaded.hookChecksUnanswered ?? []) {
    deps.logger
      .child({ component: 'hooks' })
      .warn(
        { hook, program, why },
        `${hook} (${program}) not judged: its check did not answer (a hung mount?); each run is checked first and refused while the check does not answer`,
      );
  }
  // Between polls the daemon gives back what its pass grew; `--once` exits instead.
  const releaseMemory = heapReleaser();
  if (releaseMemory !== undefined) deps.releaseMemory = releaseMemory;
  await ensureDirectories(deps.fs, config);
  const metrics = daemon.metricsFor(config, current);
  const client = createServiceClient(loaded, deps, io.env, (event) => metrics.recordRequest(event));
  const settings = reconcilerSettings(
    config,
    DAEMON_REQUEST_RETRIES,
    true,
    await fileMetaFor(config),
    held.apiKeys,
  );
  let runner: Reconciler;
  if (current?.runner.reconfigure(deps, settings, client)) {
    runner = current.runner;
  } else {
    // Another device, root or state dir: the old state is flushed where it belongs, then the new one opened. In that
    // order: a flush that fails fails the reload with nothing of the new one held (its lock, and the record of
    // renewal asides it hands the process's fsync ledger), and the running reconciler goes on as it was.
    await current?.runner.flushState();
    runner = await Reconciler.open(deps, settings, client, { legacyLockHelper: true });
    await current?.runner.close();
  }
  return {
    deps,
    config,
    runner,
    metrics,
    hookEnv: withoutKeyValues(current?.hookEnv ?? io.env, loaded.apiKey),
    scrub: (text) => secrets.scrub(text),
    vetHookProgram: (program) => hookProgramProblem(nodeFs, program, io.env),
  };
}

/**
 * Whether the daemon waits out a start-up failure (tries again in-process) rather than exit: waitsOutAtStart's
 * errors, and a mount that did not answer, whichever step of the start reached it and however it was wrapped (or
 * not). Before, a step that let the lane's error through bare ended the daemon with 1 (with 1 at a stop, too: the
 * CI rehearsal at fad40d3). Here, not in exit-codes.ts: --help and --version load that one, and not the lanes.
 */
export function startWaitsOut(error: unknown): boolean {
  return waitsOutAtStart(error) || mountDidNotAnswer(error);
}

/**
 * `config-agent` without --once: starts the daemon and serves until SIGTERM/SIGINT (exit 0 once state is
 * flushed, 1 past the deadline); SIGHUP reloads the configuration. Handlers go in before start-up: a SIGHUP's
 * default action would end the process, and systemd counts that as a clean exit it does not restart. Signals
 * that arrive while starting are acted on once started; the stop deadline runs from the signal, so a start-up
 * that hangs (rootDir on a dead mount) returns 1 when it runs out (the process then ends by SIGTERM: endProcess).
 */
export async function runAgent(
  command: { configPath?: string; version?: string },
  io: CommandIo,
  secrets: SecretRegistry,
  events: EventEmitter,
  startRetry: StartRetry = START_RETRY,
): Promise<number> {
  keepOwnerBits();
  const stopDeadlineMs = startRetry.stopDeadlineMs ?? STOP_DEADLINE_MS;
  let agent: RunningAgent<Reconciler> | undefined;
  let stopSignal: NodeJS.Signals | undefined;
  let reloadPending = false;
  let finish: (code: number) => void = () => undefined;
  const exit = new Promise<number>((resolve) => {
    finish = resolve;
  });

  const beginStop = (running: RunningAgent<Reconciler>, signal: NodeJS.Signals) => {
    running.logger.info({ signal }, 'shutdown requested');
    running.stop().then(
      () => finish(ExitCode.Converged),
      (error: unknown) => {
        running.logger.error({ err: error }, 'shutdown failed');
        finish(ExitCode.NotConverged);
      },
    );
  };
  /** Ends a wait between start attempts early: a stop, or a SIGHUP (the operator fixed something: try now). */
  let wakeStartWait: () => void = () => undefined;
  /** Set when the stop deadline ran out before start-up finished: whatever start-up still opens is closed. */
  let abandoned = false;
  /** Fired by the stop: the mount lanes give up on the calls waiting on a hung mount. */
  const stopping = new AbortController();
  const onStop = (signal: NodeJS.Signals) => {
    if (stopSignal !== undefined) return;
    stopSignal = signal;
    wakeStartWait();
    // The deadline runs from the signal, start-up included: a start-up that never ends (rootDir on a hung NFS
    // or FUSE mount: its realpath or mkdir waits in the kernel for good) must not keep a stopped agent
    // running until systemd's SIGKILL. Killing a start-up part-way is what a kill -9 does (test/reliability).
    const deadline = setTimeout(() => {
      if (agent !== undefined) {
        agent.logger.error('shutdown took too long: exiting with state as last flushed');
      } else {
        abandoned = true;
        io.stderr.write(
          `config-agent: ${signal}: start-up has not finished after ${stopDeadlineMs / 1000} s ` +
            '(a hung file system under rootDir or stateDir?): exiting without it\n',
        );
      }
      finish(ExitCode.NotConverged);
    }, stopDeadlineMs);
    deadline.unref();
    if (agent !== undefined) beginStop(agent, signal);
    // After the pass's abort: a call of it (or of start-up) waiting on a hung mount fails now, and the pass ends.
    stopping.abort(signal);
  };
  /** Waits `ms` unless a stop or a SIGHUP comes first; true when a stop did. */
  const stopOrDelay = (ms: number) =>
    new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(stopSignal !== undefined), ms);
      wakeStartWait = () => {
        clearTimeout(timer);
        resolve(stopSignal !== undefined);
      };
    }).finally(() => {
      wakeStartWait = () => undefined;
    });
  let fatalSeen = false;
  const fatal = (what: string) => (error: unknown) => {
    // Once: an error raised by the logging of the first (a log destination that fails) must not loop on itself.
    if (fatalSeen) return;
    fatalSeen = true;
    if (agent !== undefined)
      agent.logger.fatal({ err: error }, `${what}: exiting so systemd restarts the agent`);
    else io.stderr.write(`config-agent: ${what}: ${secrets.scrub(errorMessage(error))}\n`);
    finish(ExitCode.NotConverged);
  };
  for (const signal of ['SIGTERM', 'SIGINT'] as const) events.on(signal, () => onStop(signal));
  events.on('SIGHUP', () => {
    if (agent === undefined) {
      reloadPending = true;
      wakeStartWait();
      return;
    }
    requestReload(agent);
  });
  // main.ts keeps Node's inspector from opening on SIGUSR1; this only says so.
  events.on('SIGUSR1', () =>
    agent?.logger.warn(
      'SIGUSR1 ignored: the Node inspector stays off (it would let any local user run code as the agent)',
    ),
  );
  // Their default action ended the daemon (systemd restarted it 30 s later); ignored, sparingly logged.
  const strayCount = strayCounter();
  for (const signal of STRAY_SIGNALS) {
    events.on(signal, () => {
      const count = strayCount(signal);
      if (count === undefined) return;
      agent?.logger.warn(
        { signal, count },
        `${signal} ignored: the agent has no use for it (only SIGTERM or SIGINT stops it, SIGHUP reloads)`,
      );
    });
  }
  events.on('uncaughtException', fatal('uncaught exception'));
  events.on('unhandledRejection', fatal('unhandled rejection'));

  const daemon = await import('./daemon.js');
  // One lane per mount that may hang for the life of the process: start attempts, the port and every reload's
  // share them, so a dead NFS server holds one thread of libuv's pool however often the agent asks. A stop gives up
  // on the calls waiting on such a mount at once (the pass ends, the stop flushes and exits), not after the bound,
  // and bounds the flush's own calls by what is left of the stop deadline.
  const clock = systemClock;
  // systemd's watchdog, from the first moment: a start-up that waits on a mount still turns the event loop.
  const watchdogStop = new AbortController();
  void exit.then(() => watchdogStop.abort());
  stopping.signal.addEventListener('abort', () => watchdogStop.abort(), { once: true });
  daemon.startWatchdog({
    env: io.env,
    pid: process.pid,
    clock,
    logger: createLogger({ level: 'info', secrets, destination: io.stderr }).child({ component: 'main' }),
    signal: watchdogStop.signal,
  });
  const lanes = new MountLanes(
    clock,
    startRetry.mountAnswerMs ?? MOUNT_ANSWER_MS,
    stopping.signal,
    stopDeadlineMs,
  );
  // Now, not at the first reload with files.rules: the shipped bundle splits into hashed chunks, and after an
  // upgrade replaced them a later import() would not find this version's (packaging/bundle.mjs). The daemon
  // loads the glob matcher for its hooks anyway.
  await import('../config/file-rules.js');
  // The keys held so far: a reload's new one does not end the search for the one it replaced (fix36).
  const held = { apiKeys: [] as string[] };
  const reload = (running: RunningAgent<Reconciler>) =>
    running.reload(async (current) =>
      buildAgentComponents(
        await loadConfiguration(command.configPath, io.env, secrets, lanes, true),
        io,
        secrets,
        daemon,
        lanes,
        held,
        current,
      ),
    );
  /** The reload running, if any, and whether a SIGHUP came while it ran. */
  let reloading = false;
  let reloadAgain = false;
  /**
   * One reload at a time, and a burst of SIGHUPs (a script or a logrotate loop sending them) makes one more
   * after it, not one each: that one reads the configuration as it is after the burst. Each reload rebuilds the
   * components, restarts the drift watcher's walk of rootDir and runs a full pass; 3,000 signals made about
   * 1,300 of them, one after another for minutes (adv18).
   */
  const requestReload = (running: RunningAgent<Reconciler>) => {
    if (reloading) {
      reloadAgain = true;
      return;
    }
    reloading = true;
    void (async () => {
      do {
        reloadAgain = false;
        running.logger.info('SIGHUP: reloading the configuration');
        await reload(running);
      } while (reloadAgain && stopSignal === undefined);
    })().finally(() => {
      reloading = false;
    });
  };
  // Start-up races the stop deadline: `exit` settles when the deadline runs out, however start-up hangs.
  return Promise.race([exit, startAndServe()]);

  async function startAndServe(): Promise<number> {
    // An invalid configuration throws to the caller (exit 78); a failure to start on a valid one is told here.
    /** The mounts not answering that the last start attempt was told to wait for (said once per episode). */
    let waitingFor: string | undefined;
    let waitingMounts: string[] = [];
    /** The local API while waiting on them: health 503 saying why (closed before the start opens its own). */
    let waitingApi: { close(): Promise<void> } | undefined;
    const closeWaitingApi = async () => {
      await waitingApi?.close().catch(() => undefined);
      waitingApi = undefined;
    };
    let started: AgentComponents<Reconciler> | number;
    try {
      started = await attempts();
    } finally {
      await closeWaitingApi();
    }
    return typeof started === 'number' ? started : serve(started);

    /**
     * Says once that the mounts waited for answer again. Before each attempt, and after one that got past them: an
     * attempt begun while they hung (a SIGHUP's) may find them answering midway, and its outcome (started, or
     * another reason not to) must not come without the line that the wait is over.
     */
    async function tellAnswered(): Promise<void> {
      const stillLate = lanes.lateMounts();
      if (waitingFor !== undefined && stillLate.join(', ') !== waitingFor) {
        const line = answersAgainLine(waitingMounts, stillLate);
        if (line !== undefined) io.stderr.write(line);
        waitingFor = undefined;
        await closeWaitingApi();
      }
    }

    async function attempts(): Promise<AgentComponents<Reconciler> | number> {
      for (let attempt = 0; ; attempt += 1) {
        await tellAnswered();
        // Each attempt reads the configuration afresh: a SIGHUP meanwhile asks for nothing more.
        reloadPending = false;
        const loaded = await loadConfiguration(command.configPath, io.env, secrets, lanes, true);
        // The deadline ran out while the configuration was read (its realpaths hung): create nothing now.
        if (abandoned) return ExitCode.NotConverged;
        try {
          const components = await buildAgentComponents(loaded, io, secrets, daemon, lanes, held);
          await tellAnswered();
          return components;
        } catch (error) {
          const message = secrets.scrub(errorMessage(error));
          if (!startWaitsOut(error) && !(error instanceof StateLockedError)) {
            await tellAnswered();
            io.stderr.write(`config-agent: cannot start: ${message}\n`);
            return exitCodeForStartupError(error) ?? ExitCode.NotConverged;
          }
          // A stop asked for while this attempt ran: nothing was opened, so there is nothing to flush.
          if (stopSignal !== undefined) return ExitCode.Converged;
          const delayMs = Math.min(startRetry.firstDelayMs * 2 ** attempt, startRetry.maxDelayMs);
          const lateMounts = lanes.lateMounts();
          const late = lateMounts.join(', ');
          if (late === '') {
            waitingFor = undefined;
            io.stderr.write(
              `config-agent: cannot start yet: ${message}; trying again in ${delayMs / 1000} s\n`,
            );
            if (await stopOrDelay(delayMs)) return ExitCode.Converged;
            continue;
          }
          // A mount that does not answer (stateDir's: its lock, state and outbox out of reach, so nothing is polled
          // or reported): said once, and tried again the moment it answers (or, with nothing sent into it, on the
          // back-off: each such attempt is refused at once).
          if (waitingFor !== late) {
            io.stderr.write(
              `config-agent: cannot start yet: ${message}; nothing is polled or reported until the mount at ${late} ` +
                'answers: starting as soon as it does\n',
            );
            waitingFor = late;
            waitingMounts = lateMounts;
          }
          // Its socket on the mount itself would hold the event loop (a unix socket's bind runs on its thread).
          const socketPath = loaded.config.socketPath;
          const onLate = lanes.lateMounts().some((mount) => socketPath.startsWith(`${mount}/`));
          if (waitingApi === undefined && !onLate) {
            const logger = createLogger({ level: loaded.config.log.level, secrets, destination: io.stderr });
            const mounts = late;
            waitingApi = await daemon.startWaitingApi(
              socketPath,
              () =>
                `not started: the mount at ${mounts} does not answer (ETIMEDOUT): nothing is polled or reported until it answers`,
              logger.child({ component: 'local-api' }),
              (text) => secrets.scrub(text),
              clock,
            );
          }
          const answered = new AbortController();
          void lanes.nextAnswer(answered.signal).then(() => {
            if (!answered.signal.aborted) wakeStartWait();
          });
          const stopped = await stopOrDelay(delayMs);
          answered.abort();
          if (stopped) return ExitCode.Converged;
        }
      }
    }
  }

  async function serve(components: AgentComponents<Reconciler>): Promise<number> {
    if (abandoned) {
      // The process is exiting already (the deadline ran out): the lock is given back, nothing is started.
      await components.runner.close().catch(() => undefined);
      return ExitCode.NotConverged;
    }
    try {
      agent = await daemon.startAgent(components, command.version);
    } catch (error) {
      // A stop asked for while the start waited on a mount that does not answer: the stop is what happens (0), as
      // when it comes during an attempt (attempts()). Before, the call given up at the stop ended the daemon with 1.
      if (stopSignal !== undefined && startWaitsOut(error)) {
        await components.runner.close().catch(() => undefined);
        return ExitCode.Converged;
      }
      io.stderr.write(`config-agent: cannot start: ${secrets.scrub(errorMessage(error))}\n`);
      await components.runner.close().catch(() => undefined);
      return exitCodeForStartupError(error) ?? ExitCode.NotConverged;
    }
    if (stopSignal !== undefined) beginStop(agent, stopSignal);
    else if (reloadPending) requestReload(agent);
    return exit;
  }
}
