// `config-agent status` and `config-agent sync`: ask the running agent over its unix socket.
import * as nodeFs from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { ConfigError } from '../config/errors.js';
import { loadConfigFile, readConfigText, resolveConfigPath } from '../config/load.js';
import { CONFIG_DEFAULTS } from '../config/schema.js';
import { type Clock, systemClock } from '../lib/clock.js';
import { AgentError, errnoCode, errorMessage } from '../lib/errors.js';
import { ExitCode } from './exit-codes.js';
import type { CommandIo } from './io.js';
import { AnswerWeigher } from './local-answer-weight.js';
import { terminalSafe } from './summary.js';

// Through require, as in daemon/local-api.ts: on Node 24 an ESM import of node:http reads every export, whose lazy
// WebSocket getter loads Node's own undici (+12 MiB RSS, ~60 modules) for a command that sends one request.
const { request } = createRequire(import.meta.url)('node:http') as typeof import('node:http');

export interface LocalResponse {
  status: number;
  body: unknown;
}

/** How long `sync` waits for the pass it asked for; a pass is bounded by request timeouts well below this. */
const SYNC_TIMEOUT_MS = 15 * 60 * 1000;
const STATUS_TIMEOUT_MS = 10_000;
/**
 * How long `sync` waits for the agent to take its request: an agent answers `102 Processing` as it takes it (the
 * pass's answer follows when the pass ends), so one that is stopped (SIGSTOP) or wedged is told in the 10 s that
 * bound `status`, not after SYNC_TIMEOUT_MS.
 */
const SYNC_HEARD_WITHIN_MS = STATUS_TIMEOUT_MS;
/**
 * Without a 102 by then, `/v1/health` is asked beside the sync: an agent older than the 102 answers a sync only when
 * its pass ends, and its health answer (within SYNC_HEARD_WITHIN_MS of the sync) tells it is there.
 */
const SYNC_PROBE_AFTER_MS = 1_000;
/**
 * The largest answer read from the socket: about 18 times the status at 10,000 managed files (1.8 MB), so a status
 * at the agent's listing limit (100,000 instances, ITERATOR_MAX_ITEMS in src/api/client.ts; ~18 MB) is read with
 * room for long paths. mem35 had lowered it to 16 MiB, under that limit's status (~90,000 files: `status` exited 3 on
 * a device the agent serves; review35). What parsing it builds is bounded by AnswerWeigher, not by this: whatever
 * sits at socketPath (a broken daemon, another user's socket) cannot make the CLI allocate without bound.
 */
export const MAX_LOCAL_ANSWER_BYTES = 32 * 1024 * 1024;

/**
 * An answer from the socket that is not read: over the size cap, more than any status to parse, or not complete by
 * the deadline. Exit 3.
 */
export class LocalAnswerError extends AgentError {
  constructor(code: 'response_too_large' | 'timeout', message: string) {
    super(code, message, { retryable: code === 'timeout' });
  }
}

function tooLarge(maxBytes: number): LocalAnswerError {
  return new LocalAnswerError('response_too_large', `its answer is larger than ${maxBytes} bytes: not read`);
}

/**
 * One request to the agent's local API over its unix socket; the body is parsed JSON. `timeoutMs` bounds the
 * whole exchange (a trickling answer too), `maxBytes` the answer's body.
 */
export function callAgent(
  socketPath: string,
  method: string,
  route: string,
  timeoutMs: number,
  maxBytes: number = MAX_LOCAL_ANSWER_BYTES,
  options: ExchangeOptions = {},
): Promise<LocalResponse> {
  return new Promise((resolve, reject) => {
    let chunks: Buffer[] = [];
    // The agent says its answer's length: read into one buffer of it, not into chunks and then a copy of them all.
    let whole: Buffer | undefined;
    let received = 0;
    const weigher = new AnswerWeigher();
    const req = request({ socketPath, method, path: route, timeout: timeoutMs }, (res) => {
      options.onHeard?.();
      const declared = Number(res.headers['content-length']);
      if (declared > maxBytes) {
        fail(tooLarge(maxBytes));
        return;
      }
      if (Number.isSafeInteger(declared) && declared > 0) whole = Buffer.allocUnsafe(declared);
      res.on('data', (chunk: Buffer) => {
        received += chunk.length;
        if (received > maxBytes) {
          fail(tooLarge(maxBytes));
          return;
        }
        // Counted as it comes: an answer that would build a tree no status builds stops the read here.
        const why = weigher.add(chunk);
        if (why !== undefined) {
          fail(new LocalAnswerError('response_too_large', why));
          return;
        }
        // Node's parser ends the body at its content-length: received never passes whole's length.
        if (whole !== undefined) chunk.copy(whole, received - chunk.length);
        else chunks.push(chunk);
      });
      res.on('end', () => {
        clearTimeout(deadline);
        try {
          // Each copy let go of once the next is made: the bytes and the text are not both beside the tree.
          const text = answerText();
          resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) });
        } catch (error) {
          reject(error);
        }
      });
      res.on('error', fail);
    });
    const answerText = (): string => {
      const bytes = whole !== undefined ? whole.subarray(0, received) : Buffer.concat(chunks, received);
      whole = undefined;
      chunks = [];
      return bytes.toString('utf8');
    };
    // Rejected with the cause first: destroying the request makes the response fail with a plain "aborted" too.
    // Destroyed without it: an answer already whole has let go of its socket's error listener, so the cause
    // passed on would be thrown as uncaught.
    const fail = (error: Error) => {
      clearTimeout(deadline);
      reject(error);
      req.destroy();
    };
    const noAnswer = () =>
      fail(new LocalAnswerError('timeout', `no whole answer within ${Math.round(timeoutMs / 1000)}s`));
    // The socket's own timeout fires only when it goes idle; the deadline also ends an answer that trickles.
    const deadline = setTimeout(noAnswer, timeoutMs);
    req.on('timeout', noAnswer);
    req.on('error', fail);
    // An interim answer (102 Processing: the agent took the request and runs its pass) before the final one.
    req.on('information', () => options.onHeard?.());
    const signal = options.signal;
    if (signal !== undefined) {
      if (signal.aborted) fail(abortReason(signal));
      else signal.addEventListener('abort', () => fail(abortReason(signal)), { once: true });
    }
    req.on('close', () => clearTimeout(deadline));
    req.end();
  });
}

/** What else one exchange with the agent is told. */
export interface ExchangeOptions {
  /** Called when the agent's first answer to the request arrives: an interim one (102) or the final head. */
  onHeard?: () => void;
  /** Ends the exchange, rejected with the signal's reason. */
  signal?: AbortSignal;
}

function abortReason(signal: AbortSignal): Error {
  return signal.reason instanceof Error
    ? signal.reason
    : new LocalAnswerError('timeout', String(signal.reason));
}

/** The socket of the agent this config file describes; throws ConfigError (exit 78) when there is none to ask. */
async function socketPathFor(configPath: string | undefined, io: CommandIo): Promise<string> {
  const file = resolveConfigPath(configPath, io.env);
  try {
    // Only the socket path is needed: no API key, so any member of the agent's group can ask.
    const config = await loadConfigFile(nodeFs, file);
    return config.socketPath;
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    // An edited, not yet valid file must not hide the agent that still runs on the previous one.
    const fallback = await socketPathFromInvalidFile(file);
    if (fallback === undefined) throw error;
    io.stderr.write(`config-agent: warning: ${error.message}; asking the agent at ${fallback} anyway\n`);
    return fallback;
  }
}

/**
 * The socket path of a config file that fails validation: its own `socketPath`, or the default. Undefined
 * (exit 78) when the file itself cannot be read, or is not a regular file: nothing to fall back on.
 */
async function socketPathFromInvalidFile(file: string): Promise<string | undefined> {
  let text: string;
  try {
    // The same non-blocking, regular-files-only read: a FIFO as config must not hang `status` either.
    text = await readConfigText(nodeFs, file);
  } catch {
    return undefined;
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = {};
  }
  const value =
    typeof json === 'object' && json !== null ? (json as { socketPath?: unknown }).socketPath : undefined;
  if (value === undefined) return CONFIG_DEFAULTS.socketPath;
  return typeof value === 'string' && path.isAbsolute(value) ? value : undefined;
}

function explainUnreachable(socketPath: string, error: unknown, io: CommandIo): number {
  const code = errnoCode(error);
  const why =
    code === 'ENOENT' || code === 'ECONNREFUSED'
      ? 'no agent is running (is the service started? `systemctl status config-agent`)'
      : code === 'EACCES'
        ? "permission denied (add your user to the agent's group, or use sudo)"
        : errorMessage(error);
  io.stderr.write(`config-agent: cannot reach the agent at ${socketPath}: ${why}\n`);
  return ExitCode.Unreachable;
}

/** Bounds of one local request; tests shrink them. */
export interface LocalAnswerLimits {
  timeoutMs?: number;
  maxBytes?: number;
  /** What `sync` times its wait for the agent to take the request by (SYNC_HEARD_WITHIN_MS); tests move it. */
  clock?: Pick<Clock, 'sleep'>;
}

export async function runStatus(
  command: { configPath?: string; json: boolean },
  io: CommandIo,
  limits: LocalAnswerLimits = {},
): Promise<number> {
  const socketPath = await socketPathFor(command.configPath, io);
  let response: LocalResponse;
  try {
    response = await callAgent(
      socketPath,
      'GET',
      '/v1/status',
      limits.timeoutMs ?? STATUS_TIMEOUT_MS,
      limits.maxBytes,
    );
  } catch (error) {
    return explainUnreachable(socketPath, error, io);
  }
  if (command.json) io.stdout.write(`${JSON.stringify(response.body)}\n`);
  else io.stdout.write(renderStatus(response.body as StatusView));
  const errors = (response.body as StatusView).errors ?? [];
  return errors.length === 0 && (response.body as StatusView).pendingReports === 0
    ? ExitCode.Converged
    : ExitCode.NotConverged;
}

export async function runSync(
  command: { configPath?: string },
  io: CommandIo,
  limits: LocalAnswerLimits = {},
): Promise<number> {
  const socketPath = await socketPathFor(command.configPath, io);
  let response: LocalResponse;
  try {
    response = await syncExchange(socketPath, limits);
  } catch (error) {
    return explainUnreachable(socketPath, error, io);
  }
  const body = response.body as {
    converged?: boolean;
    exitCode?: number;
    result?: { reachable?: boolean; summary?: string };
  };
  if (response.status !== 200) {
    io.stderr.write(`config-agent: the agent answered ${response.status}: ${JSON.stringify(body)}\n`);
    return ExitCode.NotConverged;
  }
  io.stdout.write(body.result?.summary ?? `${JSON.stringify(body)}\n`);
  // The agent classifies the pass exactly as `--once` would.
  if (typeof body.exitCode === 'number') return body.exitCode;
  return body.converged === true ? ExitCode.Converged : ExitCode.NotConverged;
}

/**
 * The sync's answer, given up (LocalAnswerError 'timeout') when within SYNC_HEARD_WITHIN_MS the agent has answered
 * neither the sync (its 102, or the final answer) nor the `/v1/health` asked beside it after SYNC_PROBE_AFTER_MS:
 * the kernel accepts connections for an agent that is stopped (SIGSTOP) or wedged, which never answers, and the
 * sync waited the whole SYNC_TIMEOUT_MS for it (adv36). An agent that answers either has the pass's answer awaited
 * up to SYNC_TIMEOUT_MS, as before: one older than the 102 answers only when its pass ends.
 */
async function syncExchange(socketPath: string, limits: LocalAnswerLimits): Promise<LocalResponse> {
  const clock = limits.clock ?? systemClock;
  const done = new AbortController();
  const abandon = new AbortController();
  let heard!: () => void;
  const heardOf = new Promise<void>((resolve) => {
    heard = resolve;
  });
  const answer = callAgent(
    socketPath,
    'POST',
    '/v1/sync',
    limits.timeoutMs ?? SYNC_TIMEOUT_MS,
    limits.maxBytes,
    {
      onHeard: () => heard(),
      signal: abandon.signal,
    },
  );
  // Settled either way (a refused connection ends the wait at once); its outcome is awaited below.
  const ended = answer.then(
    () => undefined,
    () => undefined,
  );
  const probe = clock.sleep(SYNC_PROBE_AFTER_MS, done.signal).then(() =>
    callAgent(socketPath, 'GET', '/v1/health', SYNC_HEARD_WITHIN_MS - SYNC_PROBE_AFTER_MS, 64 * 1024, {
      signal: done.signal,
    }),
  );
  const probeAnswered = new Promise<void>((resolve) => {
    // A health answer of any status (a 503 is an agent there too); a failed probe tells nothing.
    probe.then(
      () => resolve(),
      () => undefined,
    );
  });
  const gaveUp = clock.sleep(SYNC_HEARD_WITHIN_MS, done.signal).then(
    () => true,
    () => false,
  );
  const silent = await Promise.race([
    heardOf.then(() => false),
    probeAnswered.then(() => false),
    ended.then(() => false),
    gaveUp,
  ]);
  done.abort();
  if (silent) {
    abandon.abort(
      new LocalAnswerError(
        'timeout',
        `no answer within ${Math.round(SYNC_HEARD_WITHIN_MS / 1000)}s: the agent takes connections but answers ` +
          'nothing (stopped with SIGSTOP, or wedged? `systemctl status config-agent`)',
      ),
    );
  }
  return answer;
}

interface StatusView {
  deviceId?: string;
  lastSuccessfulSyncAt?: string | null;
  lastAttemptAt?: string | null;
  nextPollAt?: string | null;
  consecutiveFailures?: number;
  pendingReports?: number;
  managedFiles?: { path: string; instanceId: string; status: string }[];
  errors?: { instanceId: string; path: string; status: string; message?: string }[];
  degraded?: string[];
}

function renderStatus(status: StatusView): string {
  const lines = [
    `Device:             ${status.deviceId ?? '?'}`,
    `Last successful sync: ${status.lastSuccessfulSyncAt ?? 'never'}`,
    `Last attempt:       ${status.lastAttemptAt ?? 'never'}`,
    `Next poll:          ${status.nextPollAt ?? 'now'}`,
    `Consecutive failures: ${status.consecutiveFailures ?? 0}`,
    `Pending reports:    ${status.pendingReports ?? 0}`,
    `Managed files (${status.managedFiles?.length ?? 0}):`,
  ];
  // A hook process left behind (SIGKILL could not end it): said first, it holds that hook's runs back.
  if ((status.degraded?.length ?? 0) > 0)
    lines.unshift(...(status.degraded ?? []).map((why) => `Degraded:           ${terminalSafe(why)}`));
  // Paths, ids and messages came from the service: shown the way --once shows them (cli/summary.ts).
  for (const file of status.managedFiles ?? [])
    lines.push(
      `  ${terminalSafe(file.status).padEnd(9)} ${terminalSafe(file.path)} (${terminalSafe(file.instanceId)})`,
    );
  if ((status.errors?.length ?? 0) > 0) {
    lines.push('Errors:');
    for (const error of status.errors ?? []) {
      lines.push(
        `  ${terminalSafe(error.status).padEnd(9)} ${terminalSafe(error.path)} (${terminalSafe(error.instanceId)})${error.message ? ` — ${terminalSafe(error.message)}` : ''}`,
      );
    }
  }
  return `${lines.join('\n')}\n`;
}
