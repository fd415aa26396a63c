// UnrecordedReports' warning: said only of reports it holds back (review30), once per instance left unrecorded (fix30).
import * as nodeFs from 'node:fs/promises';
import { Writable } from 'node:stream';
import { expect, it } from 'vitest';
import type { StatusReport } from '../api/schemas.js';
import { createLogger, silentLogger } from '../lib/logger.js';
import { createSecretRegistry } from '../lib/secrets.js';
import { StatusOutbox } from '../store/outbox.js';
import { UnrecordedReports } from './report.js';

const deployed: StatusReport = { activity_status: 'deployed', error_status: 'none' };

/** An UnrecordedReports with a debug logger whose lines the test reads, an outbox in memory and a fixed backoff. */
function world() {
  const lines: Array<{ level: string; msg: string; reports?: number; instanceId?: string }> = [];
  const destination = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(line));
      done();
    },
  });
  const logger = createLogger({ level: 'debug', secrets: createSecretRegistry(), destination });
  const outbox = StatusOutbox.ephemeral(nodeFs, '/nonexistent-state-dir', silentLogger());
  const backoff = { delayMs: () => 30_000, now: () => 1_000 };
  return { lines, logger, outbox, backoff, unrecorded: new UnrecordedReports() };
}

// A report awaiting its echo is kept in state.json, UnrecordedReports only in memory: after a restart the first
// listing found the instance unrecorded, nothing was held back (the report went out at once), and the agent still
// warned that each was kept for a backoff, starting the episode, so the warning of the one it then held went to
// debug.
it('warns of the reports it holds back, not of those it never sent', () => {
  const { lines, logger, outbox, backoff, unrecorded } = world();
  // Before a restart: sent, not remembered now.
  unrecorded.judge({ recorded: [], unrecorded: ['cfg_before'] }, outbox, backoff as never, logger);
  unrecorded.sent('cfg_a', deployed);
  unrecorded.judge({ recorded: [], unrecorded: ['cfg_a'] }, outbox, backoff as never, logger);
  const told = lines.filter((line) => line.msg.includes('recorded none of them'));
  expect(told.map((line) => ({ level: line.level, reports: line.reports }))).toEqual([
    { level: 'warn', reports: 1 },
  ]);
});

// Any echoed answer ended the episode: a service that records cfg_ok's reports and never cfg_bad's warned on
// every poll (4 warnings in 4 polls), the held-back report's warning never going to debug.
it('warns once per instance the service leaves unrecorded, over polls where others are recorded', () => {
  const { lines, logger, outbox, backoff, unrecorded } = world();
  const poll = (unrecordedIds: string[]) => {
    for (const id of ['cfg_ok', ...unrecordedIds]) unrecorded.sent(id, deployed);
    // cfg_ok's answer showed it recorded; the next listing finds the others unrecorded.
    unrecorded.recorded('cfg_ok');
    unrecorded.judge({ recorded: ['cfg_ok'], unrecorded: unrecordedIds }, outbox, backoff as never, logger);
  };
  const warned = () =>
    lines
      .filter((line) => line.msg.includes('recorded none of them') && line.level === 'warn')
      .map((line) => line.instanceId);
  for (let i = 0; i < 4; i += 1) poll(['cfg_bad']);
  expect(warned()).toEqual(['cfg_bad']);
  expect(lines.filter((line) => line.msg.includes('recorded none of them')).length).toBe(4);
  // Another instance left unrecorded is another cause: one warning more, then none.
  for (let i = 0; i < 3; i += 1) poll(['cfg_bad', 'cfg_bad2']);
  expect(warned()).toEqual(['cfg_bad', 'cfg_bad']);
  // Once cfg_bad is recorded its episode ends: left unrecorded again later, it is warned of again.
  unrecorded.recorded('cfg_bad');
  unrecorded.recorded('cfg_bad2');
  poll(['cfg_bad']);
  expect(warned()).toEqual(['cfg_bad', 'cfg_bad', 'cfg_bad']);
});
