// recordStep and recordInvalid on their own: the state, cooldowns, hook paths and queued reports each kind of
// applied step leaves behind.

import { createFsFromVolume, Volume } from 'memfs';
import { beforeEach, describe, expect, it } from 'vitest';
import { instanceFactory } from '../../test/helpers/instances.js';
import { STATUS_MESSAGE_MAX } from '../api/schemas.js';
import type { Clock } from '../lib/clock.js';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { PathRejectedError } from '../store/errors.js';
import { StatusOutbox } from '../store/outbox.js';
import { emptyState } from '../store/state.js';
import type { AppliedStep, EffectResult } from './apply.js';
import type { RemoveStep, Step, WriteStep } from './plan.js';
import {
  dropElapsedCooldowns,
  forgetUnseen,
  type RecordContext,
  recordInvalid,
  recordStep,
} from './record.js';

const SHA = 'a'.repeat(64);
const makeInstance = instanceFactory({ relative_filepath: 'app.json' });

let ctx: RecordContext;
let mono: number;

beforeEach(() => {
  mono = 10_000;
  const clock: Clock = {
    now: () => Date.parse('2026-03-01T12:00:00.000Z') + mono,
    monotonic: () => mono,
    sleep: async () => undefined,
  };
  const fs = createFsFromVolume(new Volume()).promises as unknown as FsPort;
  ctx = {
    state: emptyState('dvc_1', '/srv'),
    outbox: StatusOutbox.ephemeral(fs, '/state', silentLogger()),
    clock,
    random: () => 0.5,
    logger: silentLogger(),
    fileMode: 0o640,
    retry: { maxAttempts: 3, baseDelaySeconds: 10, maxDelaySeconds: 60 },
    trackHookPaths: false,
  };
});

function writeStep(id: string, path: string): WriteStep {
  return {
    kind: 'write',
    instance: makeInstance({ id, relative_filepath: path }),
    path,
    data: Buffer.from('x'),
    sha256: SHA,
    reason: 'new',
    displaces: [],
    supersedes: [],
    report: { activity_status: 'deployed', error_status: 'none' },
  };
}

function removeStep(id: string, path: string): RemoveStep {
  return {
    kind: 'remove',
    instance: makeInstance({
      id,
      relative_filepath: path,
      target_status: 'removed',
      activity_status: 'deployed',
    }),
    path,
    report: { activity_status: 'removed', error_status: 'none' },
  };
}

function applied(step: Step, result: EffectResult): AppliedStep {
  return { step, result, displaced: [] };
}

const written: EffectResult = { kind: 'written', sha256: SHA, createdDirs: [] };

function queued(): string[] {
  return ctx.outbox
    .pending()
    .map(
      (entry) =>
        `${entry.instanceId} ${entry.report.activity_status}/${entry.report.error_status}${entry.report.message === undefined ? '' : ` ${entry.report.message}`}`,
    );
}

describe('recordStep: hook paths', () => {
  it('with hooks, written and removed paths are remembered for them; unchanged and failed ones are not', () => {
    ctx.trackHookPaths = true;
    ctx.state.files.set('old.json', {
      instanceId: 'cfg_old',
      sha256: SHA,
      mode: 0o640,
      createdDirs: [],
      writtenAt: 'x',
    });

    recordStep(applied(writeStep('cfg_a', 'a.json'), written), ctx);
    recordStep(applied(removeStep('cfg_old', 'old.json'), { kind: 'removed' }), ctx);
    recordStep(
      applied(writeStep('cfg_b', 'b.json'), { kind: 'unchanged', sha256: SHA, createdDirs: [] }),
      ctx,
    );
    recordStep(
      applied(writeStep('cfg_c', 'c.json'), { kind: 'failed', error: new Error('EIO'), operation: 'write' }),
      ctx,
    );

    expect([...ctx.state.pendingHookPaths].sort()).toEqual(['a.json', 'old.json']);
  });

  it('without hooks, nothing is remembered for them', () => {
    recordStep(applied(writeStep('cfg_a', 'a.json'), written), ctx);
    expect(ctx.state.pendingHookPaths.size).toBe(0);
  });
});

describe('recordStep: a bug met while recording one step', () => {
  it('costs that instance one write attempt: retrying, with a cooldown and the report', () => {
    const broken = { kind: 'written', sha256: SHA } as unknown as EffectResult;

    const outcomes = recordStep(applied(writeStep('cfg_a', 'a.json'), broken), ctx);

    expect(outcomes).toHaveLength(1);
    expect(outcomes[0]).toMatchObject({ instanceId: 'cfg_a', action: 'retrying', converged: false });
    expect(outcomes[0]?.message).toMatch(/^write failed: /);
    expect(ctx.state.instances.get('cfg_a')).toMatchObject({ error: 'retrying', attempts: 1 });
    expect(ctx.state.cooldowns.has('cfg_a')).toBe(true);
    expect(queued()).toEqual([`cfg_a queued/retrying ${outcomes[0]?.message}`]);
  });

  it('for a removal, the attempt is a remove attempt', () => {
    ctx.state.files.set('old.json', {
      instanceId: 'cfg_old',
      sha256: SHA,
      mode: 0o640,
      createdDirs: 5 as unknown as string[],
      writtenAt: 'x',
    });

    const outcomes = recordStep(applied(removeStep('cfg_old', 'old.json'), { kind: 'removed' }), ctx);

    expect(outcomes[0]).toMatchObject({ instanceId: 'cfg_old', action: 'retrying' });
    expect(outcomes[0]?.message).toMatch(/^remove failed: /);
  });
});

describe('recordStep: keep', () => {
  it('a file changed by someone else and kept: converged, said so, nothing queued', () => {
    const outcomes = recordStep(
      applied(
        { kind: 'keep', instance: makeInstance({ id: 'cfg_a' }), reason: 'drift_kept' },
        { kind: 'none' },
      ),
      ctx,
    );

    expect(outcomes).toEqual([
      {
        instanceId: 'cfg_a',
        path: 'app.json',
        action: 'unchanged',
        converged: true,
        message: 'changed on disk by someone else: kept (drift policy is not "restore")',
      },
    ]);
    expect(queued()).toEqual([]);
  });

  it('a file kept for its replacement: waiting for it', () => {
    const outcomes = recordStep(
      applied(
        { kind: 'keep', instance: makeInstance({ id: 'cfg_a' }), reason: 'awaiting_owner' },
        { kind: 'none' },
      ),
      ctx,
    );

    expect(outcomes).toEqual([
      {
        instanceId: 'cfg_a',
        path: 'app.json',
        action: 'waiting',
        converged: false,
        message: 'kept until its replacement is written in its place',
      },
    ]);
  });
});

describe('recordInvalid', () => {
  it('an item without an id: counted as failed, nothing queued or recorded', () => {
    expect(recordInvalid([{ problem: 'no id' }], ctx)).toEqual([
      {
        instanceId: '',
        path: '',
        action: 'failed',
        converged: false,
        message: 'invalid instance from the service: no id',
      },
    ]);
    expect(queued()).toEqual([]);
    expect(ctx.state.instances.size).toBe(0);
  });

  it('an item with an id: reported failed once with the activity the service gave, its record marked failed', () => {
    ctx.state.instances.set('cfg_a', {
      relativePath: 'a.json',
      activity: 'deployed',
      error: 'none',
      attempts: 0,
    });

    const outcomes = recordInvalid([{ id: 'cfg_a', activityStatus: 'queued', problem: 'bad content' }], ctx);

    const message = 'invalid instance from the service: bad content';
    expect(outcomes).toEqual([
      { instanceId: 'cfg_a', path: 'a.json', action: 'failed', converged: false, message },
    ]);
    expect(queued()).toEqual([`cfg_a queued/failed ${message}`]);
    expect(ctx.state.instances.get('cfg_a')).toEqual({
      relativePath: 'a.json',
      activity: 'deployed',
      error: 'failed',
      message,
      attempts: 0,
    });
  });

  it('the activity falls back to the record, then to queued', () => {
    ctx.state.instances.set('cfg_a', {
      relativePath: 'a.json',
      activity: 'deployed',
      error: 'none',
      attempts: 0,
    });

    recordInvalid(
      [
        { id: 'cfg_a', problem: 'p' },
        { id: 'cfg_b', problem: 'p' },
      ],
      ctx,
    );

    expect(queued().sort()).toEqual([
      'cfg_a deployed/failed invalid instance from the service: p',
      'cfg_b queued/failed invalid instance from the service: p',
    ]);
    // Recorded though never known before: the next listing may not tell its statuses (too large by itself).
    expect(ctx.state.instances.get('cfg_b')).toEqual({
      relativePath: '',
      activity: 'queued',
      error: 'failed',
      message: 'invalid instance from the service: p',
      attempts: 0,
    });
  });

  it('not reported again: when the service shows it failed, when recorded failed with this message, when queued', () => {
    const message = 'invalid instance from the service: p';
    ctx.state.instances.set('cfg_rec', {
      relativePath: 'r.json',
      activity: 'deployed',
      error: 'failed',
      message,
      attempts: 0,
    });
    ctx.outbox.enqueue('cfg_q', { activity_status: 'queued', error_status: 'failed', message }, new Date(0));
    const before = ctx.outbox.pending()[0]?.seq;

    const outcomes = recordInvalid(
      [
        { id: 'cfg_svc', errorStatus: 'failed', problem: 'p' },
        { id: 'cfg_rec', problem: 'p' },
        { id: 'cfg_q', problem: 'p' },
      ],
      ctx,
    );

    expect(outcomes.map((outcome) => outcome.converged)).toEqual([true, false, false]);
    expect(ctx.outbox.pending().map((entry) => [entry.instanceId, entry.seq])).toEqual([['cfg_q', before]]);
  });

  it('reported again when the recorded or queued failure says something else', () => {
    const old = 'invalid instance from the service: old';
    ctx.state.instances.set('cfg_rec', {
      relativePath: 'r.json',
      activity: 'deployed',
      error: 'failed',
      message: old,
      attempts: 0,
    });
    ctx.state.instances.set('cfg_none', {
      relativePath: 'n.json',
      activity: 'deployed',
      error: 'none',
      message: 'invalid instance from the service: p',
      attempts: 0,
    });
    ctx.outbox.enqueue(
      'cfg_q',
      { activity_status: 'queued', error_status: 'failed', message: old },
      new Date(0),
    );
    ctx.outbox.enqueue(
      'cfg_r',
      {
        activity_status: 'queued',
        error_status: 'retrying',
        message: 'invalid instance from the service: p',
      },
      new Date(0),
    );

    recordInvalid(
      [
        { id: 'cfg_rec', problem: 'p' },
        { id: 'cfg_none', problem: 'p' },
        { id: 'cfg_q', problem: 'p' },
        { id: 'cfg_r', problem: 'p' },
      ],
      ctx,
    );

    expect(queued().sort()).toEqual([
      'cfg_none deployed/failed invalid instance from the service: p',
      'cfg_q queued/failed invalid instance from the service: p',
      'cfg_r queued/failed invalid instance from the service: p',
      'cfg_rec deployed/failed invalid instance from the service: p',
    ]);
  });
});

describe('recordStep: status-only steps and takeovers', () => {
  const reportStep = (
    id: string,
    reason: 'archive' | 'already_in_place' | 'replaced_by_owner' | 'not_ours',
  ) =>
    applied(
      {
        kind: 'report',
        instance: makeInstance({ id }),
        report: {
          activity_status: reason === 'already_in_place' ? 'deployed' : 'removed',
          error_status: 'none',
        },
        reason,
      },
      { kind: 'none' },
    );

  it('already in place: recorded deployed, reported, converged, no note', () => {
    expect(recordStep(reportStep('cfg_a', 'already_in_place'), ctx)).toEqual([
      { instanceId: 'cfg_a', path: 'app.json', action: 'reported', converged: true },
    ]);
    expect(ctx.state.instances.get('cfg_a')).toEqual({
      relativePath: 'app.json',
      activity: 'deployed',
      error: 'none',
      attempts: 0,
    });
    expect(queued()).toEqual(['cfg_a deployed/none']);
  });

  it.each([
    ['archive', undefined],
    ['replaced_by_owner', 'file kept: another instance now owns this path'],
    ['not_ours', 'file left in place: it is not recorded as written by this agent'],
  ] as const)('%s: recorded removed, archived with the note of its reason', (reason, note) => {
    const outcomes = recordStep(reportStep('cfg_a', reason), ctx);

    expect(outcomes).toEqual([
      {
        instanceId: 'cfg_a',
        path: 'app.json',
        action: 'archived',
        converged: true,
        ...(note === undefined ? {} : { message: note }),
      },
    ]);
    expect(ctx.state.instances.get('cfg_a')?.activity).toBe('removed');
  });

  it('a write that takes over a path: the old owner is recorded removed and told who has the file now', () => {
    const step: WriteStep = {
      ...writeStep('cfg_new', 'a.json'),
      supersedes: [
        {
          instance: makeInstance({ id: 'cfg_old', relative_filepath: 'a.json' }),
          report: { activity_status: 'removed', error_status: 'none' },
        },
      ],
    };

    const outcomes = recordStep(applied(step, written), ctx);

    expect(outcomes).toEqual([
      {
        instanceId: 'cfg_old',
        path: 'a.json',
        action: 'replaced',
        converged: true,
        message: 'its file now belongs to cfg_new',
      },
      { instanceId: 'cfg_new', path: 'a.json', action: 'written', converged: true, reason: 'new' },
    ]);
    expect(ctx.state.instances.get('cfg_old')?.activity).toBe('removed');
    expect(queued().sort()).toEqual(['cfg_new deployed/none', 'cfg_old removed/none']);
  });
});

describe('recordStep: steps that leave the instance alone', () => {
  it('failed on the service: untouched, not converged, its cooldown dropped', () => {
    ctx.state.cooldowns.set('cfg_a', mono + 5_000);

    const outcomes = recordStep(
      applied({ kind: 'skip', instance: makeInstance({ id: 'cfg_a' }) }, { kind: 'none' }),
      ctx,
    );

    expect(outcomes).toEqual([
      {
        instanceId: 'cfg_a',
        path: 'app.json',
        action: 'untouched',
        converged: false,
        message: 'failed on the service: left alone',
      },
    ]);
    expect(ctx.state.cooldowns.has('cfg_a')).toBe(false);
    expect(queued()).toEqual([]);
  });

  it('cooling down: waiting, not converged, the whole seconds left rounded up', () => {
    const wait = (until: number) =>
      recordStep(
        applied({ kind: 'wait', instance: makeInstance({ id: 'cfg_a' }), until }, { kind: 'none' }),
        ctx,
      );

    expect(wait(mono + 1_500)).toEqual([
      {
        instanceId: 'cfg_a',
        path: 'app.json',
        action: 'waiting',
        converged: false,
        message: 'next attempt in 2s',
      },
    ]);
    expect(wait(mono + 1_000)[0]?.message).toBe('next attempt in 1s');
    expect(wait(mono - 3_000)[0]?.message).toBe('next attempt in 0s');
    expect(queued()).toEqual([]);
  });
});

describe('recordStep: removals', () => {
  it('a file left in place by a removal (changed by someone else): no longer ours, recorded removed, reported with why', () => {
    ctx.state.files.set('old.json', {
      instanceId: 'cfg_old',
      sha256: SHA,
      mode: 0o640,
      createdDirs: [],
      writtenAt: 'x',
    });

    const outcomes = recordStep(
      applied(removeStep('cfg_old', 'old.json'), { kind: 'kept', message: 'changed on disk: kept' }),
      ctx,
    );

    expect(outcomes).toEqual([
      {
        instanceId: 'cfg_old',
        path: 'old.json',
        action: 'archived',
        converged: true,
        message: 'changed on disk: kept',
      },
    ]);
    expect(ctx.state.files.has('old.json')).toBe(false);
    expect(ctx.state.instances.get('cfg_old')).toEqual({
      relativePath: 'old.json',
      activity: 'removed',
      error: 'none',
      attempts: 0,
    });
    expect(queued()).toEqual(['cfg_old removed/none changed on disk: kept']);
  });
});

describe('recordStep: directories the agent created, handed down on removal', () => {
  const file = (instanceId: string, createdDirs: string[]) => ({
    instanceId,
    sha256: SHA,
    mode: 0o640,
    createdDirs,
    writtenAt: 'x',
  });

  it('the first managed file still under each created directory inherits it, shallowest first', () => {
    ctx.state.files.set('z.json', file('cfg_z', []));
    ctx.state.files.set('d/e/f/a.json', file('cfg_a', ['d', 'd/e', 'd/e/f']));
    ctx.state.files.set('d/e/f/c.json', file('cfg_c', []));
    ctx.state.files.set('d/b.json', file('cfg_b', ['d']));

    const outcomes = recordStep(applied(removeStep('cfg_a', 'd/e/f/a.json'), { kind: 'removed' }), ctx);

    expect(outcomes.map((outcome) => outcome.action)).toEqual(['removed']);
    expect(ctx.state.files.has('d/e/f/a.json')).toBe(false);
    expect(ctx.state.files.get('d/e/f/c.json')?.createdDirs).toEqual(['d', 'd/e', 'd/e/f']);
    expect(ctx.state.files.get('d/b.json')?.createdDirs).toEqual(['d']);
    expect(ctx.state.files.get('z.json')?.createdDirs).toEqual([]);
  });

  it('a directory the inheriting file already holds is not added twice', () => {
    ctx.state.files.set('d/a.json', file('cfg_a', ['d']));
    ctx.state.files.set('d/b.json', file('cfg_b', ['d']));

    recordStep(applied(removeStep('cfg_a', 'd/a.json'), { kind: 'removed' }), ctx);

    expect(ctx.state.files.get('d/b.json')?.createdDirs).toEqual(['d']);
  });

  it('a removal of a path with no record is still a removal', () => {
    const outcomes = recordStep(applied(removeStep('cfg_a', 'gone.json'), { kind: 'removed' }), ctx);

    expect(outcomes).toEqual([
      { instanceId: 'cfg_a', path: 'gone.json', action: 'removed', converged: true },
    ]);
  });
});

describe('recordStep: a swap', () => {
  const swap = (displacedResult: EffectResult, result: EffectResult) => {
    const displaced = removeStep('cfg_old', 'old.json');
    ctx.state.files.set('old.json', {
      instanceId: 'cfg_old',
      sha256: SHA,
      mode: 0o640,
      createdDirs: [],
      writtenAt: 'x',
    });
    return recordStep(
      {
        step: { ...writeStep('cfg_new', 'new.json'), displaces: [displaced] },
        result,
        displaced: [{ step: displaced, result: displacedResult }],
      },
      ctx,
    );
  };

  it('the old file put back after the new one failed: kept, not converged, said why', () => {
    const outcomes = swap(
      { kind: 'restored' },
      { kind: 'failed', error: new Error('ENOSPC'), operation: 'write' },
    );

    expect(outcomes[0]).toEqual({
      instanceId: 'cfg_old',
      path: 'old.json',
      action: 'unchanged',
      converged: false,
      message: 'kept: its replacement could not be written',
    });
    expect(ctx.state.files.has('old.json')).toBe(true);
  });

  it('the old file gone and not restorable: removed, with the lost rollback named', () => {
    const outcomes = swap(
      { kind: 'removed', rollbackLost: true },
      { kind: 'failed', error: new Error('ENOSPC'), operation: 'write' },
    );

    expect(outcomes[0]).toMatchObject({
      instanceId: 'cfg_old',
      action: 'removed',
      message: 'removed; rollback impossible (no cached copy)',
    });
  });

  it('the old file removed and the new one written: removed with no note', () => {
    const outcomes = swap({ kind: 'removed' }, written);

    expect(outcomes[0]).toEqual({
      instanceId: 'cfg_old',
      path: 'old.json',
      action: 'removed',
      converged: true,
    });
  });
});

describe('recordStep: failures', () => {
  const fail = (id: string, error: unknown) =>
    recordStep(applied(writeStep(id, `${id}.json`), { kind: 'failed', error, operation: 'write' }), ctx);

  it('a permanent error (a hostile path) fails at the first attempt: failed, no cooldown', () => {
    const outcomes = fail('cfg_a', new PathRejectedError('absolute', '/etc/passwd'));

    expect(outcomes[0]).toMatchObject({ action: 'failed', converged: false });
    expect(ctx.state.instances.get('cfg_a')).toMatchObject({ error: 'failed', attempts: 1 });
    expect(Object.keys(ctx.state.instances.get('cfg_a') ?? {})).not.toContain('nextAttemptAt');
    expect(ctx.state.cooldowns.has('cfg_a')).toBe(false);
    expect(queued()[0]).toMatch(/^cfg_a queued\/failed write failed: path rejected/);
  });

  it('a retryable error: retrying, with the wall-clock time of the next attempt beside the monotonic cooldown', () => {
    fail('cfg_a', new Error('EIO: i/o error'));

    const record = ctx.state.instances.get('cfg_a');
    const cooldown = ctx.state.cooldowns.get('cfg_a') ?? 0;
    expect(record).toMatchObject({ error: 'retrying', attempts: 1 });
    expect(cooldown).toBeGreaterThan(mono);
    expect(record?.nextAttemptAt).toBe(new Date(ctx.clock.now() + (cooldown - mono)).toISOString());
  });

  it("a device condition is not tried again before the daemon's next poll, however small baseDelaySeconds", () => {
    // A read-only root (EROFS), a full one (ENOSPC) and a FIFO a local user put at the path: each due retry makes
    // the daemon's next pass a full listing, and with baseDelaySeconds 0.001 that was one a second for as long
    // as the condition lasted (measured on the built daemon: 13 full listings in 15 s at a 30 s poll interval).
    const conditions = [
      Object.assign(new Error('EROFS: read-only file system'), { code: 'EROFS' }),
      Object.assign(new Error('ENOSPC: no space left on device'), { code: 'ENOSPC' }),
      new PathRejectedError('target_not_regular_file', 'cfg.json'),
    ];
    for (const [pollIntervalSeconds, expectedMs] of [
      [10, 10_000],
      [30, 30_000],
      // A poll an hour away: still looked at again within 30 s, not at the poll.
      [3600, 30_000],
    ] as const) {
      ctx.retry = { maxAttempts: 3, baseDelaySeconds: 0.001, maxDelaySeconds: 0.001, pollIntervalSeconds };
      conditions.forEach((error, n) => {
        const id = `cfg_${pollIntervalSeconds}_${n}`;
        for (let failure = 0; failure < 3; failure += 1) {
          expect(fail(id, error)[0]).toMatchObject({ action: 'retrying' });
          expect((ctx.state.cooldowns.get(id) ?? 0) - mono).toBe(expectedMs);
        }
        expect(ctx.state.instances.get(id)).toMatchObject({ error: 'retrying', attempts: 0 });
      });
    }
    // --once (no poll interval): the configured backoff as it is.
    ctx.retry = { maxAttempts: 3, baseDelaySeconds: 0.001, maxDelaySeconds: 0.001 };
    fail('cfg_once', conditions[0]);
    expect((ctx.state.cooldowns.get('cfg_once') ?? 0) - mono).toBeLessThan(1000);
  });

  it("the agent's own resource trouble: waiting, not converged, no attempt, no cooldown, nothing queued", () => {
    const outcomes = fail(
      'cfg_a',
      Object.assign(new Error('EMFILE: too many open files'), { code: 'EMFILE' }),
    );

    expect(outcomes).toEqual([
      {
        instanceId: 'cfg_a',
        path: 'cfg_a.json',
        action: 'waiting',
        converged: false,
        message:
          "write postponed: EMFILE: too many open files; the agent's own resource limit, retried next pass",
      },
    ]);
    expect(ctx.state.instances.has('cfg_a')).toBe(false);
    expect(ctx.state.cooldowns.size).toBe(0);
    expect(queued()).toEqual([]);
  });

  it('a write step whose handler returned no write result counts as a failed write', () => {
    const outcomes = recordStep(applied(writeStep('cfg_a', 'a.json'), { kind: 'none' }), ctx);

    expect(outcomes[0]).toMatchObject({ action: 'retrying', message: 'write failed: unexpected none' });
  });
});

describe('recordStep: a failed takeover', () => {
  it('the instance whose path it was to take over waits for the newcomer, named', () => {
    const step: WriteStep = {
      ...writeStep('cfg_new', 'a.json'),
      supersedes: [
        { instance: makeInstance({ id: 'cfg_old', relative_filepath: 'a.json' }), report: undefined },
      ],
    };

    const outcomes = recordStep(
      applied(step, { kind: 'failed', error: new Error('EIO'), operation: 'write' }),
      ctx,
    );

    expect(outcomes[0]).toEqual({
      instanceId: 'cfg_old',
      path: 'a.json',
      action: 'waiting',
      converged: false,
      message: 'kept until cfg_new is written in its place',
    });
    expect(outcomes[1]).toMatchObject({ instanceId: 'cfg_new', action: 'retrying' });
  });
});

describe('recordStep and recordInvalid: what a record keeps', () => {
  it("a new record keeps the echo of the agent's own last report", () => {
    const echo = { updatedAt: '2026-02-02T00:00:00.000Z', operatorUpdatedAt: '2026-02-01T00:00:00.000Z' };
    ctx.state.instances.set('cfg_a', {
      relativePath: 'a.json',
      activity: 'queued',
      error: 'none',
      attempts: 0,
      reportEcho: echo,
    });
    ctx.state.instances.set('cfg_b', {
      relativePath: 'b.json',
      activity: 'queued',
      error: 'none',
      attempts: 0,
      reportEcho: echo,
    });

    recordStep(applied(writeStep('cfg_a', 'a.json'), written), ctx);
    recordStep(
      applied(writeStep('cfg_b', 'b.json'), { kind: 'failed', error: new Error('EIO'), operation: 'write' }),
      ctx,
    );

    expect(ctx.state.instances.get('cfg_a')?.reportEcho).toEqual(echo);
    expect(ctx.state.instances.get('cfg_b')?.reportEcho).toEqual(echo);
  });

  it('the message of an invalid item is cut to what a status report may carry', () => {
    recordInvalid([{ id: 'cfg_a', problem: 'x'.repeat(STATUS_MESSAGE_MAX * 2) }], ctx);

    const message = ctx.outbox.pending()[0]?.report.message ?? '';
    expect(message).toHaveLength(STATUS_MESSAGE_MAX);
    expect(message.startsWith('invalid instance from the service: xxx')).toBe(true);
  });
});

describe('dropElapsedCooldowns', () => {
  it('drops the cooldowns of planned instances whose time has come, and only those', () => {
    ctx.state.cooldowns.set('cfg_due', 100);
    ctx.state.cooldowns.set('cfg_later', 101);
    ctx.state.cooldowns.set('cfg_unplanned', 50);

    dropElapsedCooldowns(
      ctx.state,
      ['cfg_due', 'cfg_later', 'cfg_none'].map((id) => makeInstance({ id })),
      100,
    );

    expect([...ctx.state.cooldowns.keys()].sort()).toEqual(['cfg_later', 'cfg_unplanned']);
  });
});

describe('forgetUnseen', () => {
  it('after a full pass: unseen instances lose their cooldowns, and their records unless they own a file', () => {
    const record = {
      relativePath: 'x.json',
      activity: 'deployed' as const,
      error: 'none' as const,
      attempts: 0,
    };
    for (const id of ['cfg_seen', 'cfg_listed_unusable', 'cfg_owner', 'cfg_gone']) {
      ctx.state.instances.set(id, record);
      ctx.state.cooldowns.set(id, 1);
    }
    ctx.state.files.set('owned.json', {
      instanceId: 'cfg_owner',
      sha256: SHA,
      mode: 0o640,
      createdDirs: [],
      writtenAt: 'x',
    });

    forgetUnseen(ctx.state, [makeInstance({ id: 'cfg_seen' })], ['cfg_listed_unusable']);

    expect([...ctx.state.instances.keys()].sort()).toEqual(['cfg_listed_unusable', 'cfg_owner', 'cfg_seen']);
    expect([...ctx.state.cooldowns.keys()].sort()).toEqual(['cfg_listed_unusable', 'cfg_seen']);
  });

  it('an invalid item the agent has no record of is counted at no path', () => {
    expect(recordInvalid([{ id: 'cfg_new', problem: 'p' }], ctx)[0]?.path).toBe('');
  });
});
