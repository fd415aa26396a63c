// --once's signals outside its pass (its modules loading, its output being flushed): an exit code or nothing, never Node's death by the signal (adv33).
import { EventEmitter } from 'node:events';
import { readdir } from 'node:fs/promises';
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { AgentHarness } from '../../test/helpers/harness.js';
import { LIST_PATH } from '../../test/helpers/outage.js';
import { PATIENCE_MS, waitFor } from '../../test/helpers/wait-for.js';
import { main } from '../main.js';
import type { CommandIo } from './io.js';
import { holdOnceSignals } from './once-early-signals.js';
import { STRAY_SIGNALS } from './stray-signals.js';

let harness: AgentHarness | undefined;

afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

/** A process's events as runProcess holds them for --once; `exits` are the codes it asked to exit with. */
function heldEvents(): { events: EventEmitter; exits: number[] } {
  const events = new EventEmitter();
  const exits: number[] = [];
  holdOnceSignals(events, (code) => exits.push(code));
  return { events, exits };
}

function quietIo(): CommandIo {
  return { stdout: new PassThrough(), stderr: new PassThrough(), env: {}, isTty: false };
}

describe('--once, signals before and after its pass (adv33)', () => {
  // Node ends a process by a signal nothing listens to: a `kill -TERM` while --once loaded its modules (a second
  // and more on a busy device) or flushed its summary gave no exit code (a caller saw no 143), and a stray
  // `kill -USR2` there killed a run that had converged.
  it.each([
    ['SIGTERM', 143],
    ['SIGINT', 130],
    ['SIGHUP', 129],
  ] as const)('%s before the pass begins exits %i', (signal, code) => {
    const { events, exits } = heldEvents();
    events.emit(signal);
    events.emit(signal);
    expect(exits).toEqual([code]);
  });

  it('every stray signal is listened to (so Node does not end the run) and ends nothing', () => {
    const { events, exits } = heldEvents();
    for (const signal of STRAY_SIGNALS) {
      expect(events.listenerCount(signal)).toBeGreaterThan(0);
      events.emit(signal);
    }
    expect(exits).toEqual([]);
  });

  it('during the pass the pass stops itself (exit 143 from it), and after it a SIGTERM exits 143', async () => {
    const h = await AgentHarness.create({ registerDevice: true });
    harness = h;
    await h.createAndDeploy({ relative_filepath: 'a.json', content: { a: 1 } });
    await h.fault({ match: LIST_PATH, count: 1, mode: 'hang' });
    const { events, exits } = heldEvents();
    const code = main(['--once', '--config', h.configPath], quietIo(), events);
    await waitFor(
      () => h.server.state.faults.length === 0 || h.server.state.faults[0]?.remaining === 0,
      PATIENCE_MS,
      {
        what: 'the listing hanging in the fault',
        intervalMs: 2,
      },
    );
    events.emit('SIGTERM');
    expect(await code).toBe(143);
    // The pass's listener took it: nothing asked the process to exit beside it.
    expect(exits).toEqual([]);
    events.emit('SIGUSR2');
    expect(exits).toEqual([]);
    events.emit('SIGTERM');
    expect(exits).toEqual([143]);
  });

  it('a run that converged is not ended by a stray signal while its output is flushed', async () => {
    const h = await AgentHarness.create({ registerDevice: true });
    harness = h;
    await h.createAndDeploy({ relative_filepath: 'a.json', content: { a: 1 } });
    const { events, exits } = heldEvents();
    expect(await main(['--once', '--config', h.configPath], quietIo(), events)).toBe(0);
    expect(await readdir(h.rootDir)).toEqual(['a.json']);
    for (const signal of STRAY_SIGNALS) {
      expect(events.listenerCount(signal)).toBeGreaterThan(0);
      events.emit(signal);
    }
    expect(exits).toEqual([]);
  });
});
