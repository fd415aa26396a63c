// `config-agent doctor`'s lines on the running agent: its local API (the unix socket) and the mounts it keeps as gone.
import type { Stats } from 'node:fs';
import type { ConfigFs } from '../config/load.js';
import type { OwnPathsPort } from '../config/own-paths.js';
import type { AgentConfig } from '../config/schema.js';
import { errnoCode, errorMessage } from '../lib/errors.js';
import type { FsPort } from '../lib/fs-port.js';
import { ROOT_MOUNT_FILE, RootMountWatch } from '../store/root-mount.js';
import { notAnswered } from './doctor-bounds.js';
import { mountPointsBelow, mountsThatMayHangBelow } from './hang-safe-fs.js';
import { callAgent, LocalAnswerError } from './local-client.js';
import { terminalSafe } from './summary.js';

/** One line of doctor's output. */
export interface Check {
  name: string;
  ok: boolean;
  detail: string;
  /** Worth an operator's look but no failure: printed `warn`, not counted. */
  warn?: true;
}

/** How long doctor waits for the agent's answer to `GET /v1/health`: as a watchdog's `curl --max-time 5`. */
export const LOCAL_API_ANSWER_MS = 5_000;
/** A health answer is a few hundred bytes (a degraded list of hook processes and mounts: a few KiB). */
const HEALTH_ANSWER_BYTES = 256 * 1024;

/** What systemd says of the unit, as far as the local API's line needs it. */
export type UnitRunning = 'running' | 'stopped' | 'unknown';

/** What is at a path that is not a socket, for the line that names it. */
function kindOf(stats: Stats): string {
  if (stats.isFile()) return 'a regular file';
  if (stats.isDirectory()) return 'a directory';
  if (stats.isSymbolicLink()) return 'a symlink';
  if (stats.isFIFO()) return 'a FIFO';
  return 'a device file';
}

/**
 * The `localApi` line: whether the agent answers `GET /v1/health` on `socketPath`, and if not, what is there and
 * what to do. The path is looked at first through doctor's bounded port (`fs`): a socket on a mount that does not
 * answer is never connected to (the connect's lookup runs on the event loop's thread, where nothing bounds it). Read
 * only: nothing at the path is removed or changed, and the answer is weighed and time-bound (`timeoutMs`).
 */
export async function localApiCheck(
  fs: ConfigFs,
  config: AgentConfig,
  unit: { name: string; running: UnitRunning },
  timeoutMs: number = LOCAL_API_ANSWER_MS,
): Promise<Check> {
  const name = 'localApi';
  const socketPath = config.socketPath;
  const shown = terminalSafe(socketPath);
  const retry =
    `the agent tries again every poll interval (${config.poll.intervalSeconds} s), ` +
    'sudo systemctl reload config-agent at once';
  const fail = (detail: string): Check => ({ name, ok: false, detail });
  let stats: Stats | undefined;
  try {
    stats = await fs.lstat(socketPath);
  } catch (error) {
    if (notAnswered(error)) return fail(`${shown} not judged: ${errorMessage(error)}`);
    if (errnoCode(error) === 'EACCES')
      return fail(`${shown} not judged: permission denied: run doctor as root`);
    if (errnoCode(error) !== 'ENOENT' && errnoCode(error) !== 'ENOTDIR')
      return fail(`${shown}: cannot lstat: ${errorMessage(error)}`);
  }
  if (stats !== undefined && !stats.isSocket()) {
    return fail(
      `${shown} is ${kindOf(stats)}, not the agent's socket: the agent cannot listen there and runs without its ` +
        `local API (status, sync and /v1/health cannot reach it; config_agent_local_api_up 0). Move it away, or ` +
        `choose another socketPath; ${retry}`,
    );
  }
  if (unit.running === 'stopped')
    return { name, ok: true, warn: true, detail: `${shown} not asked: ${unit.name} is not running` };
  const journal = `journalctl -u ${unit.name} -g 'local API' says why`;
  if (stats === undefined) {
    return fail(
      `no socket at ${shown}: ` +
        (unit.running === 'running'
          ? `${unit.name} runs without its local API, which could not start`
          : 'no agent runs, or it runs without its local API, which could not start') +
        ` (status, sync and /v1/health cannot reach it; config_agent_local_api_up 0): ${journal}; ${retry}`,
    );
  }
  let answer: { status: number; body: unknown };
  try {
    answer = await callAgent(socketPath, 'GET', '/v1/health', timeoutMs, HEALTH_ANSWER_BYTES);
  } catch (error) {
    const code = errnoCode(error);
    if (code === 'ECONNREFUSED') {
      return fail(
        `${shown} is a socket nobody listens on (left by an agent that ended, or taken by another program)` +
          (unit.running === 'running' ? `: ${unit.name} runs without its local API, ${journal}` : '') +
          `; if no process holds it (ss -xlp | grep ${shown}), remove it; ${retry}`,
      );
    }
    if (code === 'EACCES') return fail(`${shown} not asked: permission denied: run doctor as root`);
    if (error instanceof LocalAnswerError && error.code === 'timeout') {
      return fail(
        `${shown} took the connection but gave no whole answer within ${timeoutMs / 1000} s: the agent is ` +
          'stopped (SIGSTOP) or its loop is ' +
          `stuck; systemd's watchdog restarts it (WatchdogSec=), or sudo systemctl restart config-agent`,
      );
    }
    return fail(`${shown}: no answer from the agent: ${terminalSafe(errorMessage(error))}`);
  }
  const body = (typeof answer.body === 'object' && answer.body !== null ? answer.body : {}) as {
    healthy?: unknown;
    reason?: unknown;
    degraded?: unknown;
  };
  const reason = typeof body.reason === 'string' ? terminalSafe(body.reason) : undefined;
  if (answer.status === 503 && body.healthy === false) {
    return fail(
      `${shown} answers: not healthy (${reason ?? 'no reason given'}): systemd's watchdog restarts it ` +
        `(WatchdogSec=); journalctl -u ${unit.name} -o cat -n 50 shows what it was doing`,
    );
  }
  if (answer.status !== 200 || body.healthy !== true)
    return fail(
      `${shown} answers HTTP ${answer.status}, not as the agent's local API does: is it the agent's?`,
    );
  const degraded = Array.isArray(body.degraded) ? body.degraded.length : 0;
  return {
    name,
    ok: true,
    detail:
      `${shown} answers: healthy${reason === 'starting' ? ' (starting)' : ''}` +
      (degraded === 0 ? '' : `, degraded (${degraded}: config-agent status names each)`),
  };
}

/** Where the record of rootDir's mounts is, and what to write in the remedies. */
function recordPath(config: AgentConfig): string {
  return `${config.stateDir}/${ROOT_MOUNT_FILE}`;
}

/**
 * The `mounts` lines: rootDir's own mount and each mount point below it the agent recorded (`root-mount.json`), as
 * the agent judges them (its RootMountWatch, read only: the record is never written), through doctor's bounded port.
 * One `FAIL` per mount kept as gone, saying what waits and what to do; one `ok` when every recorded one is mounted;
 * none when nothing is recorded (no mount at or below rootDir ever seen). Judged in doctor's mount namespace, the
 * host's: the unit's own binds (`ReadWritePaths=`) are not there, mounts made on the host are seen by both.
 */
export async function mountChecks(
  fs: ConfigFs,
  ownPaths: OwnPathsPort,
  config: AgentConfig,
): Promise<Check[]> {
  const name = 'mounts';
  const file = recordPath(config);
  const shownFile = terminalSafe(file);
  try {
    await fs.lstat(file);
  } catch (error) {
    const code = errnoCode(error);
    if (code === 'ENOENT' || code === 'ENOTDIR') return [];
    if (notAnswered(error))
      return [{ name, ok: false, detail: `${shownFile} not judged: ${errorMessage(error)}` }];
    if (code === 'EACCES')
      return [{ name, ok: false, detail: `${shownFile} not read: permission denied: run doctor as root` }];
    return [{ name, ok: false, detail: `${shownFile}: cannot lstat: ${errorMessage(error)}` }];
  }
  // The table doctor's bounds were judged by (/proc/self/mountinfo, read once).
  const mountinfo = (await ownPaths.mountinfo().catch(() => undefined)) ?? '';
  const realRoot = await ownPaths.realpath(config.rootDir).catch(() => config.rootDir);
  const below = mountPointsBelow(mountinfo, realRoot);
  const mayHang = mountsThatMayHangBelow(mountinfo, realRoot);
  const root = config.rootDir.replace(/\/+$/, '');
  // The agent's watch over doctor's port, the mount table doctor read standing for the process's own.
  const port = Object.assign(Object.create(fs) as FsPort, {
    readFile: ((target: string, options?: unknown) =>
      target === '/proc/self/mountinfo'
        ? Promise.resolve(mountinfo)
        : fs.readFile(target, options as 'utf8')) as FsPort['readFile'],
    mountsBelow: (dir: string) => (dir === config.rootDir ? below : new Set<string>()),
    mayHangAt: (at: string) => {
      if (!at.startsWith(`${root}/`)) return false;
      const relative = at.slice(root.length + 1);
      return [...mayHang].some((mount) => relative === mount || relative.startsWith(`${mount}/`));
    },
  });
  const watch = new RootMountWatch(port, config.rootDir, { stateDir: config.stateDir, readOnly: true });
  let rootGone: Awaited<ReturnType<RootMountWatch['check']>>;
  try {
    rootGone = await watch.check();
  } catch (error) {
    if (notAnswered(error))
      return [{ name, ok: false, detail: `${shownFile} not judged: ${errorMessage(error)}` }];
    return [{ name, ok: false, detail: `not judged: ${errorMessage(error)}` }];
  }
  const restart = 'sudo systemctl restart config-agent';
  if (rootGone?.mountGone !== undefined) {
    return [
      {
        name,
        ok: false,
        detail:
          `${terminalSafe(rootGone.mountGone)}. Every file under rootDir waits (retrying) meanwhile; after ` +
          `removing ${shownFile}: ${restart}`,
      },
    ];
  }
  const conditions = watch.belowConditions();
  const checks: Check[] = [];
  for (const { mountPoint, gone, absent } of conditions) {
    if (gone === undefined) continue;
    const at = terminalSafe(`${root}/${mountPoint}`);
    const entry = terminalSafe(JSON.stringify(mountPoint));
    const giveUp = `give it up: delete ${entry} from "below" in ${shownFile}, then ${restart}`;
    checks.push({
      name,
      ok: false,
      detail: absent
        ? `${at} was a mount point below rootDir and is not there at all now: files the agent manages under it ` +
          'wait (retrying); if it holds none, the agent forgets it at its next full pass. Mount it again, or ' +
          giveUp
        : `${at} is no mount point any more (it was one: ${shownFile}) and its bare directory is left: the agent ` +
          'keeps it as gone, so every file under it waits (retrying), a new instance placed there too, until it is ' +
          `mounted again. Mount it again (mount ${at}), or, to keep those files on rootDir's own filesystem, ${giveUp}`,
    });
  }
  if (checks.length > 0 || conditions.length === 0) return checks;
  const names = conditions.map((each) => terminalSafe(each.mountPoint));
  const listed = names.length <= 8 ? names.join(', ') : `${names.slice(0, 8).join(', ')}, ...`;
  return [
    {
      name,
      ok: true,
      detail: `the ${names.length} mount point(s) below rootDir the agent watches are mounted (${listed})`,
    },
  ];
}
