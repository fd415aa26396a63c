// UnrecordedReports' warning (review30): said only of reports it holds back, not of ones it never sent.
import * as nodeFs from 'node:fs/promises';
import { Writable } from 'node:stream';
import { expect, it } from 'vitest';
import type { StatusReport } from '../api/schemas.js';
import { createLogger, silentLogger } from '../lib/logger.js';
import { createSecretRegistry } from '../lib/secrets.js';
import { StatusOutbox } from '../store/outbox.js';
import { UnrecordedReports } from './report.js';

const deployed: StatusReport = { activity_status: 'deployed', error_status: 'none' };

// A report awaiting its echo is kept in state.json, UnrecordedReports only in memory: after a restart the first
// listing found the instance unrecorded, nothing was held back (the report went out at once), and the agent still
// warned that each was kept for a backoff, starting the episode, so the warning of the one it then held went to
// debug.
it('warns of the reports it holds back, not of those it never sent', () => {
  const lines: Array<{ level: string; msg: string; reports?: number }> = [];
  const destination = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(line));
      done();
    },
  });
  const logger = createLogger({ level: 'debug', secrets: createSecretRegistry(), destination });
  const outbox = StatusOutbox.ephemeral(nodeFs, '/nonexistent-state-dir', silentLogger());
  const backoff = { delayMs: () => 30_000, now: () => 1_000 };
  const unrecorded = new UnrecordedReports();
  // Before a restart: sent, not remembered now.
  unrecorded.judge({ recorded: [], unrecorded: ['cfg_before'] }, outbox, backoff as never, logger);
  unrecorded.sent('cfg_a', deployed);
  unrecorded.judge({ recorded: [], unrecorded: ['cfg_a'] }, outbox, backoff as never, logger);
  const told = lines.filter((line) => line.msg.includes('recorded none of them'));
  expect(told.map((line) => ({ level: line.level, reports: line.reports }))).toEqual([
    { level: 'warn', reports: 1 },
  ]);
});
