// systemd's watchdog (WatchdogSec=): `WATCHDOG=1` written on the notify socket the unit's wrapper left open, while the event loop turns.

import { writeSync } from 'node:fs';
import type { Clock } from '../lib/clock.js';
import { errorMessage } from '../lib/errors.js';
import type { Logger } from '../lib/logger.js';

/** The variable systemd/config-agent-notify sets: the descriptor of a datagram socket connected to NOTIFY_SOCKET. */
export const NOTIFY_FD_VARIABLE = 'CONFIG_AGENT_NOTIFY_FD';

export interface WatchdogOptions {
  /** The process's environment: WATCHDOG_USEC and WATCHDOG_PID from systemd, the descriptor from the wrapper. */
  env: Readonly<Record<string, string | undefined>>;
  pid: number;
  clock: Clock;
  logger: Logger;
  /** Ends the pings (the agent stops). */
  signal: AbortSignal;
  /** Sends one datagram on `fd` (a connected socket: a write is a send); fs.writeSync by default. */
  write?: (fd: number, text: string) => void;
}

/**
 * Pings systemd's watchdog every quarter of `WatchdogSec=` from the event loop, so an agent whose loop is stuck
 * (an endless loop) or stopped (SIGSTOP) misses its pings and is killed and restarted by systemd. Node cannot
 * open a Unix datagram socket, so the unit's `ExecStart=` runs the agent through `config-agent-notify`, which
 * connects one to `$NOTIFY_SOCKET` and leaves it open across exec; a write on it is a datagram sent by the
 * agent's own pid, so the unit needs no `NotifyAccess=all` (docs/operations.md). Returns whether it pings:
 * not without WatchdogSec=, without the descriptor, or when systemd watches another pid.
 */
export function startWatchdog(options: WatchdogOptions): boolean {
  const { env, clock, logger, signal } = options;
  const fd = Number(env[NOTIFY_FD_VARIABLE]);
  const usec = Number(env.WATCHDOG_USEC);
  if (!Number.isFinite(usec) || usec <= 0) return false;
  if (env.WATCHDOG_PID !== undefined && Number(env.WATCHDOG_PID) !== options.pid) return false;
  if (!Number.isInteger(fd) || fd < 3) {
    // No socket: systemd kills the agent each time WatchdogSec= passes. One line saying which start it is and the
    // fixes; the wrapper (when it ran) already said why it could not connect.
    const wrapperFailed = env[NOTIFY_FD_VARIABLE] !== undefined;
    logger.error(
      { watchdogSeconds: usec / 1_000_000, wrapperRan: wrapperFailed },
      `WatchdogSec= is set but the agent has no socket to ping it on: systemd will kill and restart it every ${usec / 1_000_000} s. ` +
        (wrapperFailed
          ? 'config-agent-notify could not connect to $NOTIFY_SOCKET (its line above says why). '
          : 'ExecStart= runs it without /usr/lib/config-agent/config-agent-notify (a drop-in naming node): ') +
        'put /usr/lib/config-agent/config-agent-notify first in ExecStart= (or run /usr/bin/config-agent, which ' +
        'does), or set WatchdogSec=0 in the drop-in (docs/operations.md, "The watchdog")',
    );
    return false;
  }
  const write = options.write ?? ((to: number, text: string) => void writeSync(to, text));
  const everyMs = Math.max(100, usec / 1000 / 4);
  void (async () => {
    while (!signal.aborted) {
      try {
        write(fd, 'WATCHDOG=1');
      } catch (error) {
        // Not a socket systemd reads (closed, another file): systemd restarts the agent when WatchdogSec= passes.
        logger.error(
          { err: error, fd, reason: errorMessage(error) },
          'cannot ping the systemd watchdog: systemd will restart the agent',
        );
        return;
      }
      await clock.sleep(everyMs, signal).catch(() => undefined);
    }
  })();
  logger.debug({ everyMs }, 'pinging the systemd watchdog');
  return true;
}
