// UnrecordedReports forgets an instance's report once a listing or an answer shows it recorded (review29).
import * as nodeFs from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import type { StatusReport } from '../api/schemas.js';
import { silentLogger } from '../lib/logger.js';
import { StatusOutbox } from '../store/outbox.js';
import { UnrecordedReports } from './report.js';

const deployed: StatusReport = { activity_status: 'deployed', error_status: 'none' };

describe('UnrecordedReports', () => {
  it('remembers a report answered without an echo only until it is shown recorded', () => {
    // Before: every instance's last such report stayed until 100,000 others were sent (a service answering every
    // report with an empty body: one StatusReport, message up to 4 KiB, per instance ever reported).
    const unrecorded = new UnrecordedReports();
    for (const id of ['cfg_a', 'cfg_b', 'cfg_c']) unrecorded.sent(id, deployed);
    expect(unrecorded.remembered).toBe(3);
    // A listing showing two recorded; an answer showing the third.
    const unused = undefined as never;
    unrecorded.judge({ recorded: ['cfg_a', 'cfg_b'], unrecorded: [] }, unused, unused, silentLogger());
    expect(unrecorded.remembered).toBe(1);
    unrecorded.recorded('cfg_c');
    expect(unrecorded.remembered).toBe(0);
  });

  it('keeps the one shown unrecorded while others are recorded', () => {
    const unrecorded = new UnrecordedReports();
    unrecorded.sent('cfg_a', deployed);
    unrecorded.sent('cfg_b', deployed);
    const outbox = StatusOutbox.ephemeral(nodeFs, '/nonexistent-state-dir', silentLogger());
    const backoff = { delayMs: () => 30_000, now: () => 1_000 };
    unrecorded.judge(
      { recorded: ['cfg_a'], unrecorded: ['cfg_b'] },
      outbox,
      backoff as never,
      silentLogger(),
    );
    // cfg_b's report kept (its backoff grows while the service keeps answering without recording it).
    expect(unrecorded.remembered).toBe(1);
  });
});
