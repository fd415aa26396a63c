// Table tests of the pure planner: one row per row of the per-instance state machine and per branch of planSteps.
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { instanceFactory } from '../../test/helpers/instances.js';
import { LosslessNumber } from '../api/json.js';
import { type ConfigInstance, STATUS_MESSAGE_MAX } from '../api/schemas.js';
import { TEMP_PREFIX } from '../store/path-guard.js';
import type { ManagedFile } from '../store/state.js';
import {
  type DiskObservation,
  errorReport,
  type PlanInput,
  type PlanInstance,
  planSteps,
  type Step,
  type WriteStep,
  withFile,
} from './plan.js';

const FILE_MODE = 0o640;
const NOW = 50_000;
const PATH = 'app/config.json';
const CONTENT = { port: 8080, tls: { enabled: true }, peers: ['a', 'b'] };

/** A ConfigInstance valid under the wire schema, at PATH with CONTENT unless told otherwise. */
const makeInstance = instanceFactory({ relative_filepath: PATH, content: CONTENT });

/** The bytes the agent must write for JSON content: 2-space indent and a final newline. */
function jsonBytes(content: unknown): Buffer {
  return Buffer.from(`${JSON.stringify(content, null, 2)}\n`, 'utf8');
}

function sha256(data: Uint8Array | string): string {
  return createHash('sha256').update(data).digest('hex');
}

const CONTENT_SHA = sha256(jsonBytes(CONTENT));
const OTHER_SHA = sha256('someone else wrote this\n');

function managed(instanceId: string, sha = CONTENT_SHA): ManagedFile {
  return {
    instanceId,
    sha256: sha,
    mode: FILE_MODE,
    createdDirs: ['app'],
    writtenAt: '2026-01-01T00:00:00.000Z',
  };
}

interface Setup {
  files?: Record<string, ManagedFile>;
  cooldowns?: Record<string, number>;
  disk?: Record<string, DiskObservation>;
  restoreDrift?: boolean;
  complete?: boolean;
  fileMeta?: PlanInput['fileMeta'];
}

function plan(instances: PlanInstance[], setup: Setup = {}): Step[] {
  const input: PlanInput = {
    instances,
    local: {
      files: new Map(Object.entries(setup.files ?? {})),
      cooldowns: new Map(Object.entries(setup.cooldowns ?? {})),
    },
    disk: new Map(Object.entries(setup.disk ?? {})),
    now: NOW,
    fileMode: FILE_MODE,
    complete: setup.complete ?? true,
    ...(setup.restoreDrift === undefined ? {} : { restoreDrift: setup.restoreDrift }),
    ...(setup.fileMeta === undefined ? {} : { fileMeta: setup.fileMeta }),
  };
  return planSteps(input);
}

/** `removed` is due unless the service already holds it. */
function dueRemoved(instance: ConfigInstance) {
  return instance.activity_status === 'removed' && instance.error_status === 'none'
    ? undefined
    : { activity_status: 'removed' as const, error_status: 'none' as const };
}

function stepsFor(steps: Step[], id: string): Step[] {
  return steps.filter((step) => step.instance.id === id);
}

function onlyStepFor(steps: Step[], id: string): Step {
  const mine = stepsFor(steps, id);
  expect(mine).toHaveLength(1);
  return mine[0]!;
}

function asWrite(step: Step): WriteStep {
  if (step.kind !== 'write') throw new Error(`expected a write step, got ${step.kind}`);
  return step;
}

type Disk = 'absent' | 'identical' | 'different' | 'wrong_mode' | 'rejected' | 'unreadable';
type Owner = 'this' | 'other' | 'none';

const observations: Record<Disk, DiskObservation | undefined> = {
  absent: undefined,
  identical: { kind: 'file', sha256: CONTENT_SHA, mode: FILE_MODE },
  different: { kind: 'file', sha256: OTHER_SHA, mode: FILE_MODE },
  wrong_mode: { kind: 'file', sha256: CONTENT_SHA, mode: 0o644 },
  rejected: { kind: 'rejected', reason: 'path rejected: "app/config.json" crosses a symlink (app)' },
  unreadable: { kind: 'unreadable', reason: 'disk error: open for reading failed: EACCES' },
};

function ownerFiles(owner: Owner, path = PATH): Record<string, ManagedFile> {
  if (owner === 'this') return { [path]: managed('cfg_me') };
  if (owner === 'other') return { [path]: managed('cfg_previous') };
  return {};
}

function diskAt(disk: Disk, path = PATH): Record<string, DiskObservation> {
  const observation = observations[disk];
  return observation === undefined ? {} : { [path]: observation };
}

/** `write:<reason>`, `report`, `confirm` or `fail`. */
type Expected = `write:${WriteStep['reason']}` | 'report' | 'confirm' | 'fail';

describe('planSteps: target deployed', () => {
  // activity × disk × who the local state says wrote the path → the step, and whether a `deployed` report is due.
  const rows: Array<
    [activity: 'queued' | 'removed' | 'deployed', Disk, Owner, Expected, reportDue: boolean]
  > = [
    ['queued', 'absent', 'none', 'write:new', true],
    ['queued', 'absent', 'this', 'write:drift', true],
    ['queued', 'absent', 'other', 'write:changed', true],
    ['queued', 'identical', 'none', 'write:adopt', true],
    ['queued', 'identical', 'this', 'report', true],
    ['queued', 'identical', 'other', 'write:adopt', true],
    ['queued', 'different', 'none', 'write:changed', true],
    ['queued', 'different', 'this', 'write:drift', true],
    ['queued', 'different', 'other', 'write:changed', true],
    ['queued', 'wrong_mode', 'none', 'write:changed', true],
    ['queued', 'wrong_mode', 'this', 'write:drift', true],
    ['queued', 'wrong_mode', 'other', 'write:changed', true],
    ['queued', 'rejected', 'none', 'write:changed', true],
    ['queued', 'rejected', 'this', 'write:drift', true],
    ['queued', 'rejected', 'other', 'write:changed', true],
    ['queued', 'unreadable', 'none', 'write:changed', true],
    ['removed', 'absent', 'none', 'write:new', true],
    ['removed', 'absent', 'this', 'write:drift', true],
    ['removed', 'absent', 'other', 'write:changed', true],
    ['removed', 'identical', 'none', 'write:adopt', true],
    ['removed', 'identical', 'this', 'report', true],
    ['removed', 'identical', 'other', 'write:adopt', true],
    ['removed', 'different', 'none', 'write:changed', true],
    ['removed', 'different', 'this', 'write:drift', true],
    ['removed', 'different', 'other', 'write:changed', true],
    ['removed', 'wrong_mode', 'none', 'write:changed', true],
    ['removed', 'wrong_mode', 'this', 'write:drift', true],
    ['removed', 'wrong_mode', 'other', 'write:changed', true],
    ['removed', 'rejected', 'none', 'write:changed', true],
    ['removed', 'rejected', 'this', 'write:drift', true],
    ['removed', 'rejected', 'other', 'write:changed', true],
    ['deployed', 'absent', 'none', 'write:new', false],
    ['deployed', 'absent', 'this', 'write:drift', false],
    ['deployed', 'absent', 'other', 'write:changed', false],
    ['deployed', 'identical', 'none', 'write:adopt', false],
    ['deployed', 'identical', 'this', 'confirm', false],
    ['deployed', 'identical', 'other', 'write:adopt', false],
    ['deployed', 'different', 'none', 'write:changed', false],
    ['deployed', 'different', 'this', 'write:drift', false],
    ['deployed', 'different', 'other', 'write:changed', false],
    ['deployed', 'wrong_mode', 'none', 'write:changed', false],
    ['deployed', 'wrong_mode', 'this', 'write:drift', false],
    ['deployed', 'wrong_mode', 'other', 'write:changed', false],
    ['deployed', 'rejected', 'none', 'write:changed', false],
    ['deployed', 'rejected', 'this', 'write:drift', false],
    ['deployed', 'rejected', 'other', 'write:changed', false],
    ['deployed', 'unreadable', 'this', 'write:drift', false],
  ];

  it.each(rows)(
    'activity %s, disk %s, owner %s → %s (report due: %s)',
    (activity, disk, owner, expected, due) => {
      const instance = makeInstance({ id: 'cfg_me', activity_status: activity });
      const steps = plan([instance], { files: ownerFiles(owner), disk: diskAt(disk) });
      const step = onlyStepFor(steps, 'cfg_me');
      if (expected.startsWith('write:')) {
        const write = asWrite(step);
        expect(write.reason).toBe(expected.slice('write:'.length));
        expect(write.path).toBe(PATH);
        expect(write.data?.equals(jsonBytes(CONTENT))).toBe(true);
        expect(write.sha256).toBe(CONTENT_SHA);
        expect(write.displaces).toEqual([]);
        expect(write.report).toEqual(due ? { activity_status: 'deployed', error_status: 'none' } : undefined);
      } else if (expected === 'report') {
        expect(step).toMatchObject({
          kind: 'report',
          reason: 'already_in_place',
          report: { activity_status: 'deployed', error_status: 'none' },
        });
      } else if (expected === 'confirm') {
        // managed() records no length (a record from before lengths were kept): the confirm hands it over.
        expect(step).toEqual({
          kind: 'confirm',
          instance,
          report: undefined,
          recordSize: jsonBytes(CONTENT).length,
        });
      } else {
        expect(step).toMatchObject({
          kind: 'fail',
          message: 'path rejected: "app/config.json" crosses a symlink (app)',
        });
      }
    },
  );

  it('a confirm hands over no length when the record already has one', () => {
    const instance = makeInstance({ id: 'cfg_me', activity_status: 'deployed' });
    const record = { ...managed('cfg_me'), size: jsonBytes(CONTENT).length };
    const steps = plan([instance], { files: { [PATH]: record }, disk: diskAt('identical') });
    expect(onlyStepFor(steps, 'cfg_me')).toEqual({ kind: 'confirm', instance, report: undefined });
  });

  it.each([
    [undefined, 'write'],
    [true, 'write'],
    [false, 'keep'],
  ] as const)('a managed file edited locally with restoreDrift %s → %s', (restoreDrift, kind) => {
    const instance = makeInstance({ id: 'cfg_me', activity_status: 'deployed' });
    const steps = plan([instance], {
      files: ownerFiles('this'),
      disk: { [PATH]: { kind: 'file', sha256: OTHER_SHA, mode: FILE_MODE } },
      ...(restoreDrift === undefined ? {} : { restoreDrift }),
    });
    const step = onlyStepFor(steps, 'cfg_me');
    expect(step.kind).toBe(kind);
    if (step.kind === 'write') expect(step.reason).toBe('drift');
    if (step.kind === 'keep') expect(step.reason).toBe('drift_kept');
  });

  it('restoreDrift false still writes when the service changed the content', () => {
    const instance = makeInstance({ id: 'cfg_me', activity_status: 'queued' });
    const oldSha = sha256(jsonBytes({ port: 80 }));
    const steps = plan([instance], {
      files: { [PATH]: managed('cfg_me', oldSha) },
      disk: { [PATH]: { kind: 'file', sha256: OTHER_SHA, mode: FILE_MODE } },
      restoreDrift: false,
    });
    expect(asWrite(onlyStepFor(steps, 'cfg_me')).reason).toBe('changed');
  });

  it('rewrites a file this agent wrote when the server changed the content (recorded sha is stale)', () => {
    const instance = makeInstance({ id: 'cfg_me', activity_status: 'queued' });
    const oldSha = sha256(jsonBytes({ port: 80 }));
    const steps = plan([instance], {
      files: { [PATH]: managed('cfg_me', oldSha) },
      disk: { [PATH]: { kind: 'file', sha256: oldSha, mode: FILE_MODE } },
    });
    expect(asWrite(onlyStepFor(steps, 'cfg_me')).reason).toBe('changed');
  });

  it.each([
    ['retrying', 'identical', 'report'],
    ['retrying', 'absent', 'write'],
  ] as const)(
    'a deployed instance with error %s and disk %s is re-reported deployed/none (%s)',
    (error, disk, kind) => {
      const instance = makeInstance({ id: 'cfg_me', activity_status: 'deployed', error_status: error });
      const step = onlyStepFor(plan([instance], { files: ownerFiles('this'), disk: diskAt(disk) }), 'cfg_me');
      expect(step.kind).toBe(kind);
      if (step.kind === 'write')
        expect(step.report).toEqual({ activity_status: 'deployed', error_status: 'none' });
      if (step.kind === 'report')
        expect(step.report).toEqual({ activity_status: 'deployed', error_status: 'none' });
    },
  );

  it('a write reports nothing only when the server already holds deployed/none', () => {
    const cases = [
      makeInstance({
        id: 'cfg_a',
        relative_filepath: 'a.json',
        activity_status: 'deployed',
        error_status: 'none',
      }),
      makeInstance({
        id: 'cfg_b',
        relative_filepath: 'b.json',
        activity_status: 'deployed',
        error_status: 'retrying',
      }),
      makeInstance({
        id: 'cfg_c',
        relative_filepath: 'c.json',
        activity_status: 'queued',
        error_status: 'none',
      }),
      makeInstance({
        id: 'cfg_d',
        relative_filepath: 'd.json',
        activity_status: 'queued',
        error_status: 'retrying',
      }),
    ];
    const steps = plan(cases);
    expect(
      Object.fromEntries(
        cases.map((instance) => [instance.id, asWrite(onlyStepFor(steps, instance.id)).report !== undefined]),
      ),
    ).toEqual({ cfg_a: false, cfg_b: true, cfg_c: true, cfg_d: true });
  });
});

describe('planSteps: serialisation by extension', () => {
  const content = { name: 'edge', limits: { cpu: 2 }, tags: ['x', 'y'] };
  it.each([
    ['settings.json', jsonBytes(content).toString('utf8')],
    ['settings.JSON', jsonBytes(content).toString('utf8')],
    ['settings.conf', jsonBytes(content).toString('utf8')],
    ['no-extension', jsonBytes(content).toString('utf8')],
    // "y" is a boolean to YAML 1.1 readers (go-yaml v2): quoted.
    ['settings.yaml', 'name: edge\nlimits:\n  cpu: 2\ntags:\n  - x\n  - "y"\n'],
    ['nested/settings.yml', 'name: edge\nlimits:\n  cpu: 2\ntags:\n  - x\n  - "y"\n'],
  ])('%s is written as %j', (path, text) => {
    const instance = makeInstance({ id: 'cfg_me', relative_filepath: path, content });
    const write = asWrite(onlyStepFor(plan([instance]), 'cfg_me'));
    expect(write.data?.toString('utf8')).toBe(text);
    expect(write.sha256).toBe(sha256(text));
  });
});

describe('withFile: an instance held as the bytes of its file', () => {
  const content = {
    name: 'edge',
    big: new LosslessNumber('12345678901234567891'),
    ratio: new LosslessNumber('1.0'),
    tags: ['x', 'y'],
  };
  it.each([
    [
      'settings.json',
      '{\n  "name": "edge",\n  "big": 12345678901234567891,\n  "ratio": 1.0,\n  "tags": [\n    "x",\n    "y"\n  ]\n}\n',
    ],
    ['settings.yaml', 'name: edge\nbig: 12345678901234567891\nratio: 1.0\ntags:\n  - x\n  - "y"\n'],
  ])('%s: the bytes the content is written as, the content itself dropped', (path, text) => {
    const instance = makeInstance({ id: 'cfg_me', relative_filepath: path, content });

    const held = withFile(instance);

    expect('content' in held).toBe(false);
    const { content: _content, ...head } = instance;
    expect(held).toMatchObject(head);
    if (!('file' in held)) throw new Error('expected the bytes of the file');
    expect(held.file.data.toString('utf8')).toBe(text);
    expect(held.file.sha256).toBe(sha256(text));
  });

  it.each([
    ['new file', {}, {}],
    [
      'in place and ours',
      { [PATH]: managed('cfg_me') },
      { [PATH]: { kind: 'file', sha256: CONTENT_SHA, mode: FILE_MODE } },
    ],
    [
      'drifted',
      { [PATH]: managed('cfg_me') },
      { [PATH]: { kind: 'file', sha256: OTHER_SHA, mode: FILE_MODE } },
    ],
  ] as const)('%s: planned exactly as the instance with its content', (_name, files, disk) => {
    const instance = makeInstance({ id: 'cfg_me', activity_status: 'deployed' });
    const setup: Setup = { files: { ...files }, disk: { ...disk } };

    const fromBytes = plan([withFile(instance)], setup);
    const fromContent = plan([instance], setup);

    expect(fromBytes.map((step) => step.kind)).toEqual(fromContent.map((step) => step.kind));
    const strip = (steps: Step[]) => steps.map(({ instance: { id }, ...rest }) => ({ id, ...rest }));
    expect(strip(fromBytes)).toEqual(strip(fromContent));
  });
});

describe('planSteps: target removed or created', () => {
  type Expectation =
    | { kind: 'remove' }
    | { kind: 'report'; reason: 'archive' | 'replaced_by_owner' | 'not_ours'; message: boolean }
    /** No step of its own: the write of the instance taking its path over reports it removed on success. */
    | { kind: 'superseded' }
    | { kind: 'none' };
  const superseded: Expectation = { kind: 'superseded' };
  const remove: Expectation = { kind: 'remove' };
  const archive: Expectation = { kind: 'report', reason: 'archive', message: false };
  const replacedNoted: Expectation = { kind: 'report', reason: 'replaced_by_owner', message: true };
  const notOurs: Expectation = { kind: 'report', reason: 'not_ours', message: true };

  // activity × who the local state says wrote the path × whether another instance targets deployed there.
  const byActivity: Array<['deployed' | 'queued' | 'created' | 'removed', Owner, boolean, Expectation]> = [
    ['deployed', 'this', false, remove],
    ['deployed', 'this', true, superseded],
    // Written by us for an earlier owner that is gone, and nobody targets the path: our file, unwanted.
    ['deployed', 'other', false, remove],
    ['deployed', 'other', true, superseded],
    ['deployed', 'none', false, notOurs],
    ['deployed', 'none', true, replacedNoted],
    ['queued', 'this', false, remove],
    ['queued', 'this', true, superseded],
    ['queued', 'other', false, archive],
    ['queued', 'other', true, archive],
    ['queued', 'none', false, archive],
    ['queued', 'none', true, archive],
    ['created', 'this', false, remove],
    ['created', 'this', true, superseded],
    ['created', 'other', false, archive],
    ['created', 'other', true, archive],
    ['created', 'none', false, archive],
    ['created', 'none', true, archive],
    // Already removed on the service (not pulled in practice): nothing to say unless the file is still ours.
    ['removed', 'this', false, remove],
    ['removed', 'none', false, { kind: 'none' }],
    ['removed', 'other', false, { kind: 'none' }],
  ];
  const rows = (['removed', 'created'] as const).flatMap((target) =>
    byActivity.map(
      ([activity, owner, other, expected]) => [target, activity, owner, other, expected] as const,
    ),
  );

  it.each(rows)(
    'target %s, activity %s, owner %s, another deployed at the path: %s → %o',
    (target, activity, owner, other, expected) => {
      const instance = makeInstance({ id: 'cfg_me', target_status: target, activity_status: activity });
      const instances = [instance];
      if (other) {
        instances.push(
          makeInstance({
            id: 'cfg_new',
            target_status: 'deployed',
            activity_status: 'queued',
            content: { port: 9 },
          }),
        );
      }
      const steps = plan(instances, { files: ownerFiles(owner), disk: diskAt('identical') });
      const mine = stepsFor(steps, 'cfg_me');
      if (expected.kind === 'superseded') {
        expect(mine).toEqual([]);
        expect(asWrite(onlyStepFor(steps, 'cfg_new')).supersedes).toEqual([
          { instance, report: { activity_status: 'removed', error_status: 'none' } },
        ]);
        return;
      }
      if (expected.kind === 'none') {
        expect(mine).toEqual([]);
        return;
      }
      expect(mine).toHaveLength(1);
      const step = mine[0]!;
      if (expected.kind === 'remove') {
        expect(step).toEqual({ kind: 'remove', instance, path: PATH, report: dueRemoved(instance) });
        return;
      }
      expect(step).toMatchObject({ kind: 'report', reason: expected.reason });
      if (step.kind !== 'report') return;
      expect(step.report?.activity_status).toBe('removed');
      expect(step.report?.error_status).toBe('none');
      if (expected.message) expect(step.report?.message).toMatch(/file (left in place|kept)/);
      else expect(step.report?.message).toBeUndefined();
      // No removal of the path is planned for anyone: the file stays for its owner (or its unknown writer).
      expect(steps.some((s) => s.kind === 'remove' || (s.kind === 'write' && s.displaces.length > 0))).toBe(
        false,
      );
    },
  );

  it.each([
    ['absent', undefined],
    ['unreadable', observations.unreadable],
    ['rejected', observations.rejected],
  ] as const)(
    'a recorded file observed %s is still handed to the remover (it prunes dirs and forgets the record)',
    (_disk, observation) => {
      const instance = makeInstance({ id: 'cfg_me', target_status: 'removed', activity_status: 'deployed' });
      const disk = observation === undefined ? {} : { [PATH]: observation };
      expect(plan([instance], { files: ownerFiles('this'), disk })).toEqual([
        { kind: 'remove', instance, path: PATH, report: dueRemoved(instance) },
      ]);
    },
  );

  it('never removes a file at a path a failed instance still targets deployed', () => {
    const removed = makeInstance({ id: 'cfg_me', target_status: 'removed', activity_status: 'deployed' });
    const failed = makeInstance({
      id: 'cfg_failed',
      target_status: 'deployed',
      activity_status: 'deployed',
      error_status: 'failed',
    });
    const steps = plan([removed, failed], { files: ownerFiles('other'), disk: diskAt('identical') });
    expect(stepsFor(steps, 'cfg_me').map((step) => step.kind)).toEqual(['report']);
  });

  it('the deployed instance at the same path takes the file over (adopt); the old owner is reported with it', () => {
    const old = makeInstance({ id: 'cfg_me', target_status: 'removed', activity_status: 'deployed' });
    const successor = makeInstance({ id: 'cfg_new', activity_status: 'queued' });
    const steps = plan([old, successor], { files: ownerFiles('this'), disk: diskAt('identical') });
    expect(steps.map((step) => [step.instance.id, step.kind])).toEqual([['cfg_new', 'write']]);
    expect(asWrite(steps[0]!).reason).toBe('adopt');
    expect(asWrite(steps[0]!).supersedes).toEqual([{ instance: old, report: dueRemoved(old) }]);
  });

  it('while the new owner of the path waits for a retry, the old owner is kept, not reported', () => {
    const old = makeInstance({ id: 'cfg_me', target_status: 'removed', activity_status: 'deployed' });
    const successor = makeInstance({ id: 'cfg_new', activity_status: 'queued', content: { port: 9 } });
    const steps = plan([old, successor], {
      files: ownerFiles('this'),
      disk: diskAt('identical'),
      cooldowns: { cfg_new: NOW + 1000 },
    });
    expect(steps.map((step) => [step.instance.id, step.kind])).toEqual([
      ['cfg_new', 'wait'],
      ['cfg_me', 'keep'],
    ]);
  });

  it('once the new owner holds the path, the old owner is simply reported removed', () => {
    const old = makeInstance({ id: 'cfg_me', target_status: 'removed', activity_status: 'deployed' });
    const successor = makeInstance({ id: 'cfg_new', activity_status: 'deployed' });
    const steps = plan([old, successor], {
      files: { [PATH]: managed('cfg_new') },
      disk: diskAt('identical'),
    });
    expect(stepsFor(steps, 'cfg_me')).toMatchObject([{ kind: 'report', reason: 'replaced_by_owner' }]);
  });

  it('when the new owner of the path failed for good, the old owner keeps its file', () => {
    const old = makeInstance({ id: 'cfg_me', target_status: 'removed', activity_status: 'deployed' });
    const failed = makeInstance({ id: 'cfg_new', activity_status: 'queued', error_status: 'failed' });
    const steps = plan([old, failed], { files: ownerFiles('this'), disk: diskAt('identical') });
    expect(stepsFor(steps, 'cfg_me')).toMatchObject([{ kind: 'keep', reason: 'awaiting_owner' }]);
  });

  it('a same-schema successor that is not in place yet keeps the old file; once in place, the old one goes', () => {
    const old = makeInstance({
      id: 'cfg_me',
      target_status: 'removed',
      activity_status: 'deployed',
      config_schema_id: 'sch',
    });
    const successor = makeInstance({
      id: 'cfg_next',
      relative_filepath: 'app/next.json',
      activity_status: 'queued',
      config_schema_id: 'sch',
    });
    const waiting = plan([old, successor], {
      files: ownerFiles('this'),
      disk: diskAt('identical'),
      cooldowns: { cfg_next: NOW + 1000 },
    });
    expect(stepsFor(waiting, 'cfg_me')).toMatchObject([{ kind: 'keep', reason: 'awaiting_owner' }]);

    const failed = plan([old, { ...successor, error_status: 'failed' as const }], {
      files: ownerFiles('this'),
      disk: diskAt('identical'),
    });
    expect(stepsFor(failed, 'cfg_me')).toMatchObject([{ kind: 'keep', reason: 'awaiting_owner' }]);

    const inPlace = plan([old, { ...successor, activity_status: 'deployed' as const }], {
      files: { ...ownerFiles('this'), 'app/next.json': managed('cfg_next') },
      disk: { ...diskAt('identical'), 'app/next.json': observations.identical! },
    });
    expect(stepsFor(inPlace, 'cfg_me')).toEqual([
      { kind: 'remove', instance: old, path: PATH, report: dueRemoved(old) },
    ]);
  });

  it("a changed configured mode is the agent's own metadata change (no rewrite), not drift, whatever the drift policy", () => {
    const instance = makeInstance({ id: 'cfg_me', activity_status: 'deployed' });
    const steps = plan([instance], {
      files: { [PATH]: { ...managed('cfg_me'), mode: 0o644 } },
      disk: { [PATH]: { kind: 'file', sha256: CONTENT_SHA, mode: 0o644 } },
      restoreDrift: false,
    });
    expect(asWrite(onlyStepFor(steps, 'cfg_me')).reason).toBe('metadata');
  });

  it('files.rules: a path whose rule wants another mode or group gets a metadata step carrying them', () => {
    const instance = makeInstance({ id: 'cfg_me', activity_status: 'deployed' });
    const fileMeta = () => ({ mode: 0o640, gid: 1001 });
    const groupOnly = plan([instance], {
      files: { [PATH]: { ...managed('cfg_me'), mode: 0o640 } },
      disk: { [PATH]: { kind: 'file', sha256: CONTENT_SHA, mode: 0o640, gid: 997 } },
      fileMeta,
    });
    expect(asWrite(onlyStepFor(groupOnly, 'cfg_me'))).toMatchObject({
      reason: 'metadata',
      mode: 0o640,
      gid: 1001,
    });
    const settled = plan([instance], {
      files: { [PATH]: { ...managed('cfg_me'), mode: 0o640 } },
      disk: { [PATH]: { kind: 'file', sha256: CONTENT_SHA, mode: 0o640, gid: 1001 } },
      fileMeta,
    });
    expect(onlyStepFor(settled, 'cfg_me').kind).not.toBe('write');
  });

  it('an incremental (incomplete) pull never removes a file recorded for an instance it did not fetch', () => {
    const instance = makeInstance({ id: 'cfg_me', target_status: 'removed', activity_status: 'deployed' });
    const steps = plan([instance], {
      files: ownerFiles('other'),
      disk: diskAt('identical'),
      complete: false,
    });
    expect(stepsFor(steps, 'cfg_me').map((step) => step.kind)).toEqual(['report']);
  });
});

describe('planSteps: two instances targeting deployed at one path', () => {
  const older = makeInstance({ id: 'cfg_old', updated_at: '2026-01-01T10:00:00Z', content: { v: 1 } });
  const newer = makeInstance({ id: 'cfg_new', updated_at: '2026-01-01T11:00:00Z', content: { v: 2 } });

  it.each([
    ['older first', [older, newer]],
    ['newer first', [newer, older]],
  ])('the one updated last wins whatever the input order (%s)', (_order, instances) => {
    const steps = plan(instances);
    const winner = asWrite(onlyStepFor(steps, 'cfg_new'));
    expect(winner.data?.equals(jsonBytes({ v: 2 }))).toBe(true);
    const loser = onlyStepFor(steps, 'cfg_old');
    expect(loser.kind).toBe('refuse');
    if (loser.kind !== 'refuse') return;
    expect(loser.message).toContain('cfg_old');
    expect(loser.message).toContain('cfg_new');
    expect(loser.message).toContain(JSON.stringify(PATH));
    expect(steps.filter((step) => step.kind === 'write')).toHaveLength(1);
  });

  it.each(['x', 'xx'])(
    'a refusal naming ids longer than a report holds is cut on a character, never inside a surrogate pair (prefix %s)',
    (prefix) => {
      // Ids come from the service (up to 512 characters); with a long path in front of them, one of the two
      // prefixes puts the cut of the message inside a pair.
      const id = (tag: string) => `${prefix}_${tag}_${'\u{1F600}'.repeat(250)}`;
      const relative_filepath = Array.from({ length: 15 }, () => 'p'.repeat(250)).join('/');
      const loser = makeInstance({ id: id('old'), relative_filepath, updated_at: '2026-01-01T10:00:00Z' });
      const winner = makeInstance({ id: id('new'), relative_filepath, updated_at: '2026-01-01T11:00:00Z' });
      const step = onlyStepFor(plan([loser, winner]), loser.id);
      if (step.kind !== 'refuse') throw new Error(`expected a refusal, got ${step.kind}`);
      const { message } = errorReport('queued', 'retrying', step.message);
      expect(message?.length).toBeGreaterThanOrEqual(STATUS_MESSAGE_MAX - 1);
      expect(message?.length).toBeLessThanOrEqual(STATUS_MESSAGE_MAX);
      expect(message).not.toMatch(/[\uD800-\uDFFF]/u);
      expect(step.message.startsWith(message ?? '')).toBe(true);
    },
  );

  it.each([
    [
      'same updated_at: the later created_at wins',
      { id: 'cfg_b', created_at: '2026-01-01T00:00:00Z' },
      { id: 'cfg_a', created_at: '2026-01-01T00:00:01Z' },
      'cfg_a',
    ],
    ['same timestamps: the greater id wins', { id: 'cfg_a' }, { id: 'cfg_b' }, 'cfg_b'],
    [
      'equal instants written differently compare as equal',
      { id: 'cfg_b', updated_at: '2026-01-01T01:00:00+01:00' },
      { id: 'cfg_c', updated_at: '2026-01-01T00:00:00Z' },
      'cfg_c',
    ],
    [
      // Date.parse drops what is past the millisecond: these tied, and the greater id (cfg_b) took the path.
      'updated a microsecond apart: the later one wins',
      { id: 'cfg_b', updated_at: '2026-01-01T00:00:00.000001Z' },
      { id: 'cfg_a', updated_at: '2026-01-01T00:00:00.000002Z' },
      'cfg_a',
    ],
    [
      'created a microsecond apart, same updated_at: the later created_at wins',
      { id: 'cfg_b', created_at: '2025-12-31T23:59:59.9999990Z' },
      { id: 'cfg_a', created_at: '2025-12-31T23:59:59.999999500+00:00' },
      'cfg_a',
    ],
  ])('ties are broken deterministically — %s', (_name, first, second, winnerId) => {
    const a = makeInstance(first);
    const b = makeInstance(second);
    for (const order of [
      [a, b],
      [b, a],
    ]) {
      const steps = plan(order);
      const loserId = winnerId === a.id ? b.id : a.id;
      expect(onlyStepFor(steps, winnerId).kind).toBe('write');
      expect(onlyStepFor(steps, loserId)).toMatchObject({
        kind: 'refuse',
        message: expect.stringContaining(winnerId),
      });
    }
  });

  it('three contenders: both losers are refused and name the winner', () => {
    const middle = makeInstance({ id: 'cfg_mid', updated_at: '2026-01-01T10:30:00Z' });
    const steps = plan([newer, older, middle]);
    expect(steps.map((step) => [step.instance.id, step.kind])).toEqual([
      ['cfg_new', 'write'],
      ['cfg_old', 'refuse'],
      ['cfg_mid', 'refuse'],
    ]);
    for (const step of steps.filter((s) => s.kind === 'refuse')) {
      if (step.kind === 'refuse') expect(step.message).toContain('cfg_new');
    }
  });

  it('a failed instance does not compete for the path', () => {
    const failedNewer = makeInstance({ ...newer, error_status: 'failed' });
    const steps = plan([older, failedNewer]);
    expect(onlyStepFor(steps, 'cfg_old').kind).toBe('write');
    expect(onlyStepFor(steps, 'cfg_new')).toMatchObject({ kind: 'skip' });
  });

  it('a losing instance that is cooling down waits (the cooldown is checked first)', () => {
    const steps = plan([older, newer], { cooldowns: { cfg_old: NOW + 1 } });
    expect(onlyStepFor(steps, 'cfg_old')).toEqual({ kind: 'wait', instance: older, until: NOW + 1 });
  });
});

describe('planSteps: error_status failed and cooldowns', () => {
  it.each([
    ['deployed', 'queued'],
    ['deployed', 'deployed'],
    ['removed', 'deployed'],
    ['created', 'queued'],
  ] as const)('target %s, activity %s, error failed → skip, even with a file we own', (target, activity) => {
    const instance = makeInstance({
      id: 'cfg_me',
      target_status: target,
      activity_status: activity,
      error_status: 'failed',
    });
    const steps = plan([instance], { files: ownerFiles('this'), disk: diskAt('different') });
    expect(steps).toEqual([{ kind: 'skip', instance }]);
  });

  it.each([
    ['not elapsed', NOW + 1, 'wait'],
    ['due exactly now', NOW, 'write'],
    ['elapsed', NOW - 1, 'write'],
  ] as const)('a write whose cooldown is %s → %s', (_name, until, kind) => {
    const instance = makeInstance({ id: 'cfg_me' });
    const step = onlyStepFor(plan([instance], { cooldowns: { cfg_me: until } }), 'cfg_me');
    expect(step.kind).toBe(kind);
    if (step.kind === 'wait') expect(step.until).toBe(until);
  });

  it.each([
    ['not elapsed', NOW + 5_000, 'wait'],
    ['elapsed', NOW - 5_000, 'remove'],
  ] as const)('a removal whose cooldown is %s → %s', (_name, until, kind) => {
    const instance = makeInstance({ id: 'cfg_me', target_status: 'removed', activity_status: 'deployed' });
    const steps = plan([instance], {
      files: ownerFiles('this'),
      disk: diskAt('identical'),
      cooldowns: { cfg_me: until },
    });
    expect(onlyStepFor(steps, 'cfg_me').kind).toBe(kind);
  });

  it('a cooldown of one instance never delays another', () => {
    const waiting = makeInstance({ id: 'cfg_wait', relative_filepath: 'a.json' });
    const free = makeInstance({ id: 'cfg_free', relative_filepath: 'b.json' });
    const steps = plan([waiting, free], { cooldowns: { cfg_wait: NOW + 60_000 } });
    expect(onlyStepFor(steps, 'cfg_wait').kind).toBe('wait');
    expect(onlyStepFor(steps, 'cfg_free').kind).toBe('write');
  });
});

describe('planSteps: hostile paths', () => {
  const hostile: Array<[string, RegExp]> = [
    ['../etc/passwd', /"\."|"\.\."/],
    ['/etc/passwd', /absolute/],
    ['a//b.json', /empty segment/],
    ['a\\b.json', /backslash/],
    ['a\0b.json', /control character/],
    ['', /empty/],
    [`${TEMP_PREFIX}x.json`, /reserved temp-file prefix/],
    [`dir/${'x'.repeat(256)}`, /longer than 255 bytes/],
  ];

  it.each(hostile)('target deployed at %j → fail at once with the reason', (path, why) => {
    const instance = makeInstance({ id: 'cfg_me', relative_filepath: path });
    const steps = plan([instance]);
    expect(steps).toHaveLength(1);
    const step = steps[0]!;
    expect(step.kind).toBe('fail');
    if (step.kind !== 'fail') return;
    expect(step.message).toMatch(/^path rejected: /);
    expect(step.message).toMatch(why);
  });

  it.each(hostile)(
    'target removed at %j, activity deployed → reported removed, the disk is never touched',
    (path) => {
      const instance = makeInstance({
        id: 'cfg_me',
        relative_filepath: path,
        target_status: 'removed',
        activity_status: 'deployed',
      });
      const steps = plan([instance], { files: { [path]: managed('cfg_me') } });
      expect(steps).toHaveLength(1);
      expect(steps[0]).toMatchObject({
        kind: 'report',
        report: { activity_status: 'removed', error_status: 'none' },
      });
    },
  );

  it('a hostile path does not take part in the conflict check of a valid one', () => {
    const hostileNewer = makeInstance({
      id: 'cfg_bad',
      relative_filepath: 'app//config.json',
      updated_at: '2026-02-01T00:00:00Z',
    });
    const good = makeInstance({ id: 'cfg_good' });
    const steps = plan([hostileNewer, good]);
    expect(onlyStepFor(steps, 'cfg_bad').kind).toBe('fail');
    expect(onlyStepFor(steps, 'cfg_good').kind).toBe('write');
  });
});

describe('planSteps: swaps and ordering', () => {
  const leaving = makeInstance({
    id: 'cfg_a',
    relative_filepath: 'a.json',
    target_status: 'removed',
    activity_status: 'deployed',
    config_schema_id: 'sch_s',
  });
  const arriving = makeInstance({ id: 'cfg_b', relative_filepath: 'b.json', config_schema_id: 'sch_s' });
  const owned = { files: { 'a.json': managed('cfg_a') }, disk: { 'a.json': observations.identical! } };

  it('a removal paired with a write of the same config_schema_id is displaced by that write (one swap)', () => {
    const steps = plan([arriving, leaving], owned);
    expect(steps).toHaveLength(1);
    const write = asWrite(steps[0]!);
    expect(write.instance.id).toBe('cfg_b');
    expect(write.displaces).toEqual([
      { kind: 'remove', instance: leaving, path: 'a.json', report: dueRemoved(leaving) },
    ]);
  });

  it('a removal of another config schema stays a standalone step, ordered before the writes', () => {
    const other = makeInstance({ ...arriving, config_schema_id: 'sch_t' });
    const steps = plan([other, leaving], owned);
    expect(steps.map((step) => [step.instance.id, step.kind])).toEqual([
      ['cfg_a', 'remove'],
      ['cfg_b', 'write'],
    ]);
    expect(asWrite(steps[1]!).displaces).toEqual([]);
  });

  it('orders skipped (failed) first, then removals, then writes, then everything else', () => {
    const instances = [
      makeInstance({
        id: 'cfg_archive',
        relative_filepath: 'z.json',
        target_status: 'removed',
        activity_status: 'queued',
      }),
      makeInstance({ id: 'cfg_write', relative_filepath: 'w.json', config_schema_id: 'sch_w' }),
      makeInstance({ id: 'cfg_wait', relative_filepath: 'v.json' }),
      makeInstance({
        id: 'cfg_remove',
        relative_filepath: 'r.json',
        target_status: 'removed',
        activity_status: 'deployed',
        config_schema_id: 'sch_r',
      }),
      makeInstance({ id: 'cfg_failed', relative_filepath: 'f.json', error_status: 'failed' }),
    ];
    const steps = plan(instances, {
      files: { 'r.json': managed('cfg_remove') },
      disk: { 'r.json': observations.identical! },
      cooldowns: { cfg_wait: NOW + 1 },
    });
    expect(steps.map((step) => [step.instance.id, step.kind])).toEqual([
      ['cfg_failed', 'skip'],
      ['cfg_remove', 'remove'],
      ['cfg_write', 'write'],
      ['cfg_wait', 'wait'],
      ['cfg_archive', 'report'],
    ]);
  });

  it('is pure: the same input gives the same steps and the input is not changed', () => {
    const instances = [arriving, leaving];
    const files = new Map(Object.entries(owned.files));
    const before = JSON.stringify([instances, [...files]]);
    const input: PlanInput = {
      instances,
      local: { files, cooldowns: new Map() },
      disk: new Map(Object.entries(owned.disk)),
      now: NOW,
      complete: true,
      fileMode: FILE_MODE,
    };
    expect(planSteps(input)).toEqual(planSteps(input));
    expect(JSON.stringify([instances, [...files]])).toBe(before);
  });
});

describe('planSteps: paths that nest across instances', () => {
  const at = (id: string, path: string, day: number) =>
    makeInstance({ id, relative_filepath: path, updated_at: `2026-01-0${day}T00:00:00.000Z` });

  it('the one updated last wins along a chain; siblings under a winner stay; a loser is never written', () => {
    const steps = plan([
      at('cfg_a', 'a', 1),
      at('cfg_ab', 'a/b', 3),
      at('cfg_abc', 'a/b/c', 2),
      at('cfg_ax', 'a/x', 1),
      at('cfg_other', 'other/a', 1),
    ]);
    const kinds = Object.fromEntries(
      ['cfg_a', 'cfg_ab', 'cfg_abc', 'cfg_ax', 'cfg_other'].map((id) => [id, onlyStepFor(steps, id).kind]),
    );
    // cfg_ab (newest) needs `a` as a directory and `a/b` as its file: cfg_a and cfg_abc lose; cfg_ax, under
    // `a` beside it, does not nest with it, and cfg_a is out, so it stays.
    expect(kinds).toEqual({
      cfg_a: 'refuse',
      cfg_ab: 'write',
      cfg_abc: 'refuse',
      cfg_ax: 'write',
      cfg_other: 'write',
    });
    expect(onlyStepFor(steps, 'cfg_abc')).toMatchObject({
      message: expect.stringContaining('"a/b/c" and "a/b" of cfg_ab, the instance updated last'),
    });
  });

  it("a loser's own file is removed by the winner's write, without a report; only when the winner is written", () => {
    const file = at('cfg_file', 'a.json', 1);
    const dir = at('cfg_dir', 'a.json/b.json', 2);
    const files = { 'a.json': managed('cfg_file') };
    const disk = { 'a.json': observations.identical! };
    const steps = plan([file, dir], { files, disk });
    expect(steps.map((step) => `${step.kind} ${step.instance.id}`)).toEqual([
      'write cfg_dir',
      'refuse cfg_file',
    ]);
    // Displaced by the winner's write: put back if that write fails, never neither file.
    expect(steps[0]).toMatchObject({
      displaces: [{ path: 'a.json', report: undefined, leftPath: true }],
    });

    const waiting = plan([file, dir], { files, disk, cooldowns: { cfg_dir: NOW + 1 } });
    expect(waiting.map((step) => `${step.kind} ${step.instance.id}`).sort()).toEqual([
      'refuse cfg_file',
      'wait cfg_dir',
    ]);
  });
});
