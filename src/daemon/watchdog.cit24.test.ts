// systemd's watchdog pings: on the wrapper's descriptor every quarter of WatchdogSec=, only when asked, told when unusable.
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import type { Clock } from '../lib/clock.js';
import { createLogger } from '../lib/logger.js';
import { createSecretRegistry } from '../lib/secrets.js';
import { NOTIFY_FD_VARIABLE, startWatchdog } from './watchdog.js';

const PID = 4242;
const WATCHDOG_USEC = '120000000';

/** Sleeps recorded and ended by the test (an abort ends them too). */
class StepClock implements Clock {
  readonly sleeps: number[] = [];
  #wake: (() => void) | undefined;
  now = () => 0;
  monotonic = () => 0;
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    this.sleeps.push(ms);
    return new Promise((resolve, reject) => {
      this.#wake = resolve;
      signal?.addEventListener('abort', () => reject(signal.reason), { once: true });
    });
  }
  async step(): Promise<void> {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
    for (let turn = 0; turn < 5; turn += 1) await new Promise((resolve) => setImmediate(resolve));
  }
}

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function world() {
  let text = '';
  const destination = new Writable({
    write(chunk, _encoding, done) {
      text += String(chunk);
      done();
    },
  });
  const logger = createLogger({ level: 'debug', secrets: createSecretRegistry(), destination });
  const dir = mkdtempSync(path.join(os.tmpdir(), 'config-agent-watchdog-'));
  dirs.push(dir);
  // A file stands in for the socket: each write appends the datagram's text, as fs.writeSync sends one.
  const file = path.join(dir, 'notify');
  const fd = openSync(file, 'w');
  const clock = new StepClock();
  const stop = new AbortController();
  return {
    fd,
    clock,
    stop,
    logger,
    pings: () => readFileSync(file, 'utf8').split('WATCHDOG=1').length - 1,
    log: () => text,
    close: () => closeSync(fd),
  };
}

describe('startWatchdog (cit24)', () => {
  it('pings on the descriptor at once and every quarter of WatchdogSec=, until the agent stops', async () => {
    const w = world();
    const env = { WATCHDOG_USEC, WATCHDOG_PID: String(PID), [NOTIFY_FD_VARIABLE]: String(w.fd) };
    expect(startWatchdog({ env, pid: PID, clock: w.clock, logger: w.logger, signal: w.stop.signal })).toBe(
      true,
    );
    expect(w.pings()).toBe(1);
    await w.clock.step();
    await w.clock.step();
    expect(w.pings()).toBe(3);
    expect(w.clock.sleeps).toEqual([30_000, 30_000, 30_000]);
    w.stop.abort();
    await w.clock.step();
    expect(w.pings()).toBe(3);
    w.close();
  });

  it('never pings without WatchdogSec=, nor for a watchdog on another pid', () => {
    const w = world();
    const fdOnly = { [NOTIFY_FD_VARIABLE]: String(w.fd) };
    const other = { ...fdOnly, WATCHDOG_USEC, WATCHDOG_PID: String(PID + 1) };
    for (const env of [fdOnly, other]) {
      expect(startWatchdog({ env, pid: PID, clock: w.clock, logger: w.logger, signal: w.stop.signal })).toBe(
        false,
      );
    }
    expect(w.pings()).toBe(0);
    expect(w.log()).toBe('');
    w.close();
  });

  it('WatchdogSec= without the wrapper (an ExecStart= drop-in) is logged as an error saying what to fix', () => {
    const w = world();
    const env = { WATCHDOG_USEC, WATCHDOG_PID: String(PID) };
    expect(startWatchdog({ env, pid: PID, clock: w.clock, logger: w.logger, signal: w.stop.signal })).toBe(
      false,
    );
    expect(w.log()).toContain('"level":"error"');
    expect(w.log()).toContain('config-agent-notify');
    w.close();
  });

  it('names both fixes, the period, and whether the wrapper ran but could not connect (cit25)', () => {
    for (const [value, cause] of [
      [undefined, 'without /usr/lib/config-agent/config-agent-notify'],
      ['', 'config-agent-notify could not connect to $NOTIFY_SOCKET'],
    ] as const) {
      const w = world();
      const env = { WATCHDOG_USEC, WATCHDOG_PID: String(PID), [NOTIFY_FD_VARIABLE]: value };
      expect(startWatchdog({ env, pid: PID, clock: w.clock, logger: w.logger, signal: w.stop.signal })).toBe(
        false,
      );
      const lines = w.log().trim().split('\n');
      expect(lines).toHaveLength(1);
      const line = JSON.parse(lines[0] as string) as { msg: string; wrapperRan: boolean };
      expect(line.wrapperRan).toBe(value !== undefined);
      expect(line.msg).toContain('every 120 s');
      expect(line.msg).toContain(cause);
      expect(line.msg).toContain('WatchdogSec=0');
      expect(line.msg).toContain('/usr/bin/config-agent');
      expect(w.clock.sleeps).toEqual([]);
      w.close();
    }
  });

  it('a descriptor that is not writable is logged once and the pings end', async () => {
    const w = world();
    w.close();
    const env = { WATCHDOG_USEC, [NOTIFY_FD_VARIABLE]: String(w.fd) };
    expect(startWatchdog({ env, pid: PID, clock: w.clock, logger: w.logger, signal: w.stop.signal })).toBe(
      true,
    );
    await w.clock.step();
    expect(w.log().match(/cannot ping the systemd watchdog/g)).toHaveLength(1);
    expect(w.clock.sleeps).toEqual([]);
  });
});
