// A file found in place with the recorded bytes is made durable before its `deployed` report (power-cut model).
import path from 'node:path';
import { Volume } from 'memfs';
import { beforeEach, describe, expect, it } from 'vitest';
import { instanceFactory } from '../../test/helpers/instances.js';
import { memfsPort } from '../../test/helpers/memfs.js';
import { PowerCutFs } from '../../test/helpers/power-cut-fs.js';
import { sha256Hex } from '../lib/hash.js';
import { silentLogger } from '../lib/logger.js';
import { ContentCache } from '../store/content-cache.js';
import { StatusOutbox } from '../store/outbox.js';
import { emptyState, type ManagedFile } from '../store/state.js';
import { type AppliedStep, type ApplyContext, applySteps } from './apply.js';
import { deployedReport, type Step } from './plan.js';
import { pendingReports, recordStep } from './record.js';

const ROOT = '/srv/config';
const STATE_DIR = '/var/lib/config-agent';
const BYTES = '{"a":1}\n';
const makeInstance = instanceFactory({ activity_status: 'deployed' });

let vol: InstanceType<typeof Volume>;
let model: PowerCutFs;

beforeEach(async () => {
  vol = new Volume();
  vol.mkdirSync(path.join(ROOT, 'app'), { recursive: true });
  vol.mkdirSync(STATE_DIR, { recursive: true });
  model = await PowerCutFs.over(memfsPort(vol), ROOT);
  // Planted after the model took the tree as durable, and never fsynced: a local user's copy, a restore.
  vol.mkdirSync(path.join(ROOT, 'app/new'));
  vol.writeFileSync(path.join(ROOT, 'app/new/a.json'), BYTES, { mode: 0o644 });
});

const record = (instanceId: string): ManagedFile => ({
  instanceId,
  sha256: sha256Hex(Buffer.from(BYTES)),
  mode: 0o644,
  createdDirs: [],
  writtenAt: '2026-01-01T00:00:00.000Z',
});

/**
 * Applies and records `step` with the file recorded as the instance's: what a power cut leaves when it is handed
 * on, and the report it queued for the service.
 */
async function handOn(
  step: Step,
): Promise<{ result: AppliedStep['result']; left: Record<string, string>; queued: string | undefined }> {
  const ctx: ApplyContext = {
    fs: model.fs,
    logger: silentLogger(),
    rootDir: ROOT,
    fileMode: 0o644,
    dirMode: 0o755,
    files: new Map([['app/new/a.json', record(step.instance.id)]]),
    cache: new ContentCache(model.fs, STATE_DIR),
  };
  const outbox = StatusOutbox.ephemeral(model.fs, STATE_DIR, silentLogger());
  const recordCtx = {
    state: emptyState('dvc_1', ROOT),
    outbox,
    clock: { now: () => 0, monotonic: () => 0, sleep: async () => undefined },
    random: () => 0.5,
    logger: silentLogger(),
    fileMode: 0o644,
    retry: { maxAttempts: 1, baseDelaySeconds: 10, maxDelaySeconds: 60 },
    trackHookPaths: false,
  };
  let left: Record<string, string> = {};
  const outcome = await applySteps([step], ctx, (applied) => {
    left = model.afterPowerCut();
    recordStep(applied, recordCtx);
  });
  const applied = outcome.applied[0];
  if (applied === undefined) throw new Error('the step was not handed on');
  const report = pendingReports(outbox).get(step.instance.id);
  const queued = report === undefined ? undefined : `${report.activity_status}/${report.error_status}`;
  return { result: applied.result, left, queued };
}

describe('a file in place, reported deployed without a write', () => {
  const instance = makeInstance({ id: 'cfg_a', relative_filepath: 'app/new/a.json' });

  it('already_in_place: the planted bytes and their directories survive a cut at the report', async () => {
    const { result, left, queued } = await handOn({
      kind: 'report',
      instance: makeInstance({ id: 'cfg_a', relative_filepath: 'app/new/a.json', activity_status: 'queued' }),
      report: deployedReport(),
      reason: 'already_in_place',
    });
    expect(result.kind).toBe('none');
    expect(left['app/new/a.json']).toBe(`644 ${BYTES}`);
    expect(queued).toBe('deployed/none');
  });

  it('confirm with a report due: the same', async () => {
    const { result, left } = await handOn({ kind: 'confirm', instance, report: deployedReport() });
    expect(result.kind).toBe('none');
    expect(left['app/new/a.json']).toBe(`644 ${BYTES}`);
  });

  it('confirm with nothing to report: nothing fsynced (a steady pass costs what it did)', async () => {
    const { result, left } = await handOn({ kind: 'confirm', instance, report: undefined });
    expect(result.kind).toBe('none');
    expect(left['app/new']).toBeUndefined();
  });

  it('bytes changed since the pass read them: kept, no report queued, no attempt (nothing fsynced)', async () => {
    vol.writeFileSync(path.join(ROOT, 'app/new/a.json'), '{"a":2}\n');
    const { result, left, queued } = await handOn({ kind: 'confirm', instance, report: deployedReport() });
    expect(result.kind).toBe('kept');
    expect(left['app/new']).toBeUndefined();
    // maxAttempts 1: an attempt counted would have queued failed/failed.
    expect(queued).toBeUndefined();
  });
});
