// The steps apply.ts judges from what is on disk (judgedOnDisk, mount27's fix) under a gone mount, step by step (mut27).
import path from 'node:path';
import { Volume } from 'memfs';
import { beforeEach, describe, expect, it } from 'vitest';
import { instanceFactory } from '../../test/helpers/instances.js';
import { memfsPort } from '../../test/helpers/memfs.js';
import { sha256Hex } from '../lib/hash.js';
import { silentLogger } from '../lib/logger.js';
import { ContentCache } from '../store/content-cache.js';
import type { RootMountWatch } from '../store/root-mount.js';
import type { ManagedFile } from '../store/state.js';
import { type ApplyContext, applySteps } from './apply.js';
import { deployedReport, type RemoveStep, type Step, type WriteStep } from './plan.js';

const ROOT = '/srv/config';
const STATE_DIR = '/var/lib/config-agent';
const BYTES = '{"a":1}\n';
const makeInstance = instanceFactory({ activity_status: 'deployed' });
/** What the watch answers for a gone mount (apply hands it on as the step's error, as it is). */
const BELOW_GONE = new Error('/srv/config/data is no mount point any more');
const ROOT_GONE = new Error('/srv/config is no mount point any more');
const FILES = ['data/a.json', 'data/b.json', 'data/c.json', 'data/e.json', 'data/r.json', 'other/d.json'];

let vol: InstanceType<typeof Volume>;

beforeEach(() => {
  vol = new Volume();
  vol.mkdirSync(STATE_DIR, { recursive: true });
  for (const file of FILES) {
    vol.mkdirSync(path.dirname(path.join(ROOT, file)), { recursive: true });
    vol.writeFileSync(path.join(ROOT, file), BYTES, { mode: 0o644 });
  }
  vol.writeFileSync(path.join(ROOT, 'data/k.json'), '{"a":2}\n', { mode: 0o644 });
});

const record = (instanceId: string): ManagedFile => ({
  instanceId,
  sha256: sha256Hex(Buffer.from(BYTES)),
  mode: 0o644,
  createdDirs: [],
  writtenAt: '2026-01-01T00:00:00.000Z',
});

/**
 * A watch whose `check` (rootDir's own mount) answers `checks` in turn, and `data/` below it gone once `check` was
 * asked `belowAfter` times (0: from the start; Infinity: never).
 */
function watch(checks: (Error | undefined)[], belowAfter: number): RootMountWatch {
  let asked = 0;
  return {
    check: async () => checks[Math.min(asked++, checks.length - 1)],
    goneAt: (relative: string) =>
      asked >= belowAfter && relative.startsWith('data/') ? BELOW_GONE : undefined,
  } as unknown as RootMountWatch;
}

/** Each step's result as `kind` or `failed/<operation>`, and the errors of the failed ones. */
async function apply(steps: Step[], rootMount: RootMountWatch) {
  const fs = memfsPort(vol);
  const ctx: ApplyContext = {
    fs,
    logger: silentLogger(),
    rootDir: ROOT,
    fileMode: 0o644,
    dirMode: 0o755,
    files: new Map(steps.map((step) => [step.instance.relative_filepath, record(step.instance.id)])),
    cache: new ContentCache(fs, STATE_DIR),
    rootMount,
  };
  const outcome = await applySteps(steps, ctx, () => undefined);
  const results: Record<string, string> = {};
  const errors = new Set<unknown>();
  for (const { step, result } of outcome.applied) {
    results[step.instance.relative_filepath] =
      result.kind === 'failed' ? `failed/${result.operation}` : result.kind;
    if (result.kind === 'failed') errors.add(result.error);
  }
  return { results, errors: [...errors] };
}

const instance = (relative_filepath: string) =>
  makeInstance({ id: `cfg_${relative_filepath}`, relative_filepath });
const report = (
  relative_filepath: string,
  reason: 'already_in_place' | 'gone_from_former_root' | 'archive',
) => ({ kind: 'report', instance: instance(relative_filepath), report: deployedReport(), reason }) as Step;
const write = (relative_filepath: string): Step => ({
  kind: 'write',
  instance: instance(relative_filepath),
  path: relative_filepath,
  data: Buffer.from(BYTES),
  sha256: sha256Hex(Buffer.from(BYTES)),
  size: BYTES.length,
  reason: 'new',
  displaces: [],
  supersedes: [],
  report: deployedReport(),
});
const remove = (relative_filepath: string): Step => ({
  kind: 'remove',
  instance: instance(relative_filepath),
  path: relative_filepath,
  report: undefined,
});

describe('steps judged from the disk under a gone mount (mut27)', () => {
  it('a mount below rootDir gone: writes and removals touch nothing, confirm and already_in_place fail as writes, gone_from_former_root as a removal; others and other places as they are', async () => {
    const { results, errors } = await apply(
      [
        { kind: 'confirm', instance: instance('data/a.json'), report: deployedReport() },
        report('data/b.json', 'already_in_place'),
        report('data/c.json', 'gone_from_former_root'),
        report('data/e.json', 'archive'),
        { kind: 'confirm', instance: instance('other/d.json'), report: deployedReport() },
        write('data/w.json'),
        remove('data/r.json'),
      ],
      watch([undefined], 0),
    );
    expect(results).toStrictEqual({
      'data/w.json': 'failed/write',
      'data/r.json': 'failed/remove',
      'data/a.json': 'failed/write',
      'data/b.json': 'failed/write',
      'data/c.json': 'failed/remove',
      'data/e.json': 'none',
      'other/d.json': 'none',
    });
    expect(errors).toStrictEqual([BELOW_GONE]);
    expect(vol.existsSync(path.join(ROOT, 'data/w.json'))).toBe(false);
    expect(vol.readFileSync(path.join(ROOT, 'data/r.json'), 'utf8')).toBe(BYTES);
  });

  it("rootDir's own mount gone once the batch confirmed in place: those with a report due fail with its error, as writes or removals", async () => {
    const { results, errors } = await apply(
      [
        { kind: 'confirm', instance: instance('data/a.json'), report: deployedReport() },
        report('data/b.json', 'already_in_place'),
        report('data/c.json', 'gone_from_former_root'),
        report('data/e.json', 'archive'),
        { kind: 'confirm', instance: instance('other/d.json'), report: undefined },
        { kind: 'confirm', instance: instance('data/k.json'), report: deployedReport() },
        write('data/w.json'),
      ],
      watch([undefined, ROOT_GONE], Number.POSITIVE_INFINITY),
    );
    expect(results).toStrictEqual({
      // Its bytes changed since the pass read them: kept (not judged again, the mount or not).
      'data/k.json': 'kept',
      // Written, maybe into the bare directory: not counted either (mount26).
      'data/w.json': 'failed/write',
      'data/a.json': 'failed/write',
      'data/b.json': 'failed/write',
      'data/c.json': 'failed/remove',
      'data/e.json': 'none',
      'other/d.json': 'none',
    });
    expect(errors).toStrictEqual([ROOT_GONE]);
  });

  it('a mount below rootDir gone once the batch confirmed in place: only the files under it fail', async () => {
    const { results, errors } = await apply(
      [
        { kind: 'confirm', instance: instance('data/a.json'), report: deployedReport() },
        { kind: 'confirm', instance: instance('other/d.json'), report: deployedReport() },
      ],
      watch([undefined], 2),
    );
    expect(results).toStrictEqual({ 'data/a.json': 'failed/write', 'other/d.json': 'none' });
    expect(errors).toStrictEqual([BELOW_GONE]);
  });

  it("rootDir's own mount gone once a removal or a change of mode landed: failed as a removal, as a write", async () => {
    const removed = await apply(
      [remove('data/r.json')],
      watch([undefined, ROOT_GONE], Number.POSITIVE_INFINITY),
    );
    expect(removed).toStrictEqual({ results: { 'data/r.json': 'failed/remove' }, errors: [ROOT_GONE] });
    const chmod = { ...(write('data/a.json') as WriteStep), reason: 'metadata', mode: 0o600 } as const;
    const changed = await apply([chmod], watch([undefined, ROOT_GONE], Number.POSITIVE_INFINITY));
    expect(changed).toStrictEqual({ results: { 'data/a.json': 'failed/write' }, errors: [ROOT_GONE] });
    // A swap (a write with the files it displaced) is left as it is (mount26).
    const swap = { ...(write('data/w.json') as WriteStep), displaces: [remove('data/e.json') as RemoveStep] };
    const swapped = await apply([swap], watch([undefined, ROOT_GONE], Number.POSITIVE_INFINITY));
    expect(swapped.results).toStrictEqual({ 'data/w.json': 'written' });
    expect(vol.existsSync(path.join(ROOT, 'data/e.json'))).toBe(false);
    // Without the mount going: a change of mode, as its handler has it.
    const other = { ...(write('data/b.json') as WriteStep), reason: 'metadata', mode: 0o600 } as const;
    const steady = await apply([other], watch([undefined], Number.POSITIVE_INFINITY));
    expect(steady.results).toStrictEqual({ 'data/b.json': 'metadata' });
  });

  it('nothing gone: each as its handler has it', async () => {
    const { results } = await apply(
      [
        { kind: 'confirm', instance: instance('data/a.json'), report: deployedReport() },
        report('data/b.json', 'already_in_place'),
        report('data/c.json', 'gone_from_former_root'),
      ],
      watch([undefined], Number.POSITIVE_INFINITY),
    );
    expect(results).toStrictEqual({ 'data/a.json': 'none', 'data/b.json': 'none', 'data/c.json': 'none' });
  });
});
