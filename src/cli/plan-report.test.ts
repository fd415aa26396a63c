// What `--dry-run` prints: the diff summary of a write, and one planned change per step kind.
import * as nodeFs from 'node:fs/promises';
import { mkdtemp, rm, truncate, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type InstanceFields, instanceFactory } from '../../test/helpers/instances.js';
import type { ConfigInstance } from '../api/schemas.js';
import type { FsPort } from '../lib/fs-port.js';
import { deployedReport, errorReport, removedReport, type Step, type WriteStep } from '../reconcile/plan.js';
import { readRegularFileUpTo } from '../store/durable-writer.js';
import { DIFF_MAX_BYTES, describePlan, diffSummary, type ReadCurrent } from './plan-report.js';

const makeInstance = instanceFactory();

function writeStep(instance: ConfigInstance, data: string, extra: Partial<WriteStep> = {}): WriteStep {
  return {
    kind: 'write',
    instance,
    path: instance.relative_filepath,
    data: Buffer.from(data),
    sha256: 'unused',
    reason: 'changed',
    displaces: [],
    supersedes: [],
    report: deployedReport(),
    ...extra,
  };
}

/** Reads from an in-memory root; a path not in `files` has no current bytes. */
function readFrom(files: Record<string, string>): { read: ReadCurrent; asked: string[] } {
  const asked: string[] = [];
  return {
    asked,
    read: async (relativePath) => {
      asked.push(relativePath);
      const text = files[relativePath];
      return text === undefined ? undefined : { size: text.length, data: Buffer.from(text) };
    },
  };
}

describe('diffSummary', () => {
  it('a new file: only its size', () => {
    expect(diffSummary(undefined, Buffer.from('{\n  "a": 1\n}\n'))).toBe('new file, 13 bytes');
    expect(diffSummary(undefined, Buffer.alloc(0))).toBe('new file, 0 bytes');
  });

  it('identical bytes: a rewrite for the mode alone', () => {
    expect(diffSummary(Buffer.from('same\n'), Buffer.from('same\n'))).toBe(
      'same bytes (mode or ownership changes), 5 bytes',
    );
  });

  it('counts added and removed lines, and old → new sizes', () => {
    // b → B and a new d: two lines added, one removed.
    expect(diffSummary(Buffer.from('a\nb\nc\n'), Buffer.from('a\nB\nc\nd\n'))).toBe(
      '+2 -1 lines, 6 → 8 bytes',
    );
    expect(diffSummary(Buffer.from('a\nb\nc\n'), Buffer.from('a\n'))).toBe('+0 -2 lines, 6 → 2 bytes');
    expect(diffSummary(Buffer.from('a\n'), Buffer.from('a\nb\nc\n'))).toBe('+2 -0 lines, 2 → 6 bytes');
  });

  it('counts repeated lines by multiplicity, and a moved line as neither added nor removed', () => {
    expect(diffSummary(Buffer.from('x\nx\nx\n'), Buffer.from('x\n'))).toBe('+0 -2 lines, 6 → 2 bytes');
    expect(diffSummary(Buffer.from('x\n'), Buffer.from('x\nx\nx\n'))).toBe('+2 -0 lines, 2 → 6 bytes');
    expect(diffSummary(Buffer.from('a\nb\n'), Buffer.from('b\na\n'))).toBe('+0 -0 lines, 4 → 4 bytes');
  });

  it('an empty existing file is a change, not a new file; sizes are bytes, not characters', () => {
    expect(diffSummary(Buffer.alloc(0), Buffer.from('a\n'))).toBe('+1 -0 lines, 0 → 2 bytes');
    expect(diffSummary(Buffer.from('name: e\n'), Buffer.from('name: é\n'))).toBe('+1 -1 lines, 8 → 9 bytes');
  });
});

describe('describePlan', () => {
  it('a write that displaces and supersedes others: their removal and report first, then the write', async () => {
    const winner = makeInstance({ id: 'cfg_new', relative_filepath: 'app/config.json' });
    const displaced = makeInstance({
      id: 'cfg_same_schema',
      relative_filepath: 'old/place.json',
      activity_status: 'deployed',
    });
    const superseded = makeInstance({
      id: 'cfg_same_path',
      relative_filepath: 'app/config.json',
      activity_status: 'deployed',
    });
    const step = writeStep(winner, 'a\nB\nc\nd\n', {
      displaces: [{ kind: 'remove', instance: displaced, path: 'old/place.json', report: removedReport() }],
      supersedes: [{ instance: superseded, report: removedReport() }],
    });
    const { read, asked } = readFrom({ 'app/config.json': 'a\nb\nc\n' });

    expect(await describePlan([step], read)).toEqual([
      {
        action: 'remove',
        instanceId: 'cfg_same_schema',
        path: 'old/place.json',
        detail: 'replaced by cfg_new (same config schema)',
        report: 'removed/none',
      },
      {
        action: 'report',
        instanceId: 'cfg_same_path',
        path: 'app/config.json',
        detail: 'its file is taken over by cfg_new',
        report: 'removed/none',
      },
      {
        action: 'write',
        instanceId: 'cfg_new',
        path: 'app/config.json',
        detail: 'changed: +2 -1 lines, 6 → 8 bytes',
        report: 'deployed/none',
      },
    ]);
    expect(asked).toEqual(['app/config.json']);
  });

  it('a new file; no report when the service already shows it deployed; an unreadable file counts as new', async () => {
    const fresh = makeInstance({ id: 'cfg_fresh', relative_filepath: 'new/file.yaml' });
    const drifted = makeInstance({
      id: 'cfg_drift',
      relative_filepath: 'drift.json',
      activity_status: 'deployed',
    });
    const steps: Step[] = [
      writeStep(fresh, 'k: v\n', { reason: 'new' }),
      writeStep(drifted, 'xy\n', { reason: 'drift', report: undefined }),
    ];
    const read: ReadCurrent = async (relativePath) => {
      if (relativePath === 'drift.json') throw Object.assign(new Error('EACCES'), { code: 'EACCES' });
      return undefined;
    };

    expect(await describePlan(steps, read)).toEqual([
      {
        action: 'write',
        instanceId: 'cfg_fresh',
        path: 'new/file.yaml',
        detail: 'new: new file, 5 bytes',
        report: 'deployed/none',
      },
      { action: 'write', instanceId: 'cfg_drift', path: 'drift.json', detail: 'drift: new file, 3 bytes' },
    ]);
  });

  it('remove, archive, report, fail, refuse and wait each become one line; confirm, keep and skip none', async () => {
    const at = (id: string, relative_filepath: string, fields: Partial<InstanceFields> = {}) =>
      makeInstance({ id, relative_filepath, ...fields });
    const steps: Step[] = [
      {
        kind: 'remove',
        instance: at('cfg_rm', 'gone.json', { target_status: 'removed' }),
        path: 'gone.json',
        report: removedReport(),
      },
      {
        kind: 'report',
        instance: at('cfg_arch', 'never.json', { target_status: 'removed' }),
        report: removedReport(),
        reason: 'archive',
      },
      {
        kind: 'report',
        instance: at('cfg_inplace', 'in/place.json'),
        report: deployedReport(),
        reason: 'already_in_place',
      },
      {
        kind: 'report',
        instance: at('cfg_notours', 'theirs.json', { target_status: 'removed', activity_status: 'deployed' }),
        report: removedReport('not_ours'),
        reason: 'not_ours',
      },
      { kind: 'fail', instance: at('cfg_evil', '../escape.json'), message: 'path rejected: dot segment' },
      {
        kind: 'refuse',
        instance: at('cfg_loser', 'shared.json', { activity_status: 'deployed' }),
        message: 'cfg_winner owns shared.json',
      },
      { kind: 'wait', instance: at('cfg_cool', 'later.json'), until: 1000 },
      { kind: 'confirm', instance: at('cfg_same', 'same.json'), report: undefined },
      { kind: 'keep', instance: at('cfg_kept', 'kept.json'), reason: 'drift_kept' },
      { kind: 'skip', instance: at('cfg_failed', 'failed.json', { error_status: 'failed' }) },
    ];
    const { read, asked } = readFrom({});

    expect(await describePlan(steps, read)).toEqual([
      { action: 'remove', instanceId: 'cfg_rm', path: 'gone.json', report: 'removed/none' },
      {
        action: 'archive',
        instanceId: 'cfg_arch',
        path: 'never.json',
        detail: 'archive',
        report: 'removed/none',
      },
      {
        action: 'report',
        instanceId: 'cfg_inplace',
        path: 'in/place.json',
        detail: 'already in place',
        report: 'deployed/none',
      },
      {
        action: 'report',
        instanceId: 'cfg_notours',
        path: 'theirs.json',
        detail: 'file left in place: it is not recorded as written by this agent',
        report: 'removed/none',
      },
      {
        action: 'fail',
        instanceId: 'cfg_evil',
        path: '../escape.json',
        detail: 'path rejected: dot segment',
        report: 'queued/failed',
      },
      {
        action: 'refuse',
        instanceId: 'cfg_loser',
        path: 'shared.json',
        detail: 'cfg_winner owns shared.json',
        report: 'deployed/retrying',
      },
      {
        action: 'wait',
        instanceId: 'cfg_cool',
        path: 'later.json',
        detail: 'per-instance retry cooldown not yet elapsed',
      },
    ]);
    // Only writes compare with the disk.
    expect(asked).toEqual([]);
  });

  it('a report carrying an error message shows that message', async () => {
    const instance = makeInstance({
      id: 'cfg_err',
      relative_filepath: 'x.json',
      activity_status: 'deployed',
    });
    const steps: Step[] = [
      {
        kind: 'report',
        instance,
        report: errorReport('deployed', 'retrying', 'disk full'),
        reason: 'already_in_place',
      },
    ];
    expect(await describePlan(steps, readFrom({}).read)).toEqual([
      {
        action: 'report',
        instanceId: 'cfg_err',
        path: 'x.json',
        detail: 'disk full',
        report: 'deployed/retrying',
      },
    ]);
  });
});

describe('describePlan over a real root: a file a local user planted', () => {
  let root: string;
  beforeEach(async () => {
    root = await mkdtemp(path.join(os.tmpdir(), 'config-agent-plan-'));
  });
  afterEach(async () => {
    await rm(root, { recursive: true, force: true });
  });

  /** The root's files read as `--once` reads them, counting the bytes read. */
  function meteredRoot(): { read: ReadCurrent; bytesRead: () => number } {
    let total = 0;
    const fs: FsPort = {
      ...nodeFs,
      open: (async (...args: Parameters<typeof nodeFs.open>) => {
        const handle = await nodeFs.open(...args);
        const read = handle.read.bind(handle);
        return Object.assign(handle, {
          read: async (...rest: unknown[]) => {
            const result = await (read as (...a: unknown[]) => Promise<{ bytesRead: number }>)(...rest);
            total += result.bytesRead;
            return result;
          },
          readFile: () => Promise.reject(new Error('read whole')),
        });
      }) as typeof nodeFs.open,
    };
    return {
      read: (relativePath, maxBytes) => readRegularFileUpTo(fs, root, relativePath, maxBytes),
      bytesRead: () => total,
    };
  }

  it('a huge file is not read for its diff: only its size is shown; a small one is diffed', async () => {
    // Sparse: gigabytes would cost no more to make. Read whole, the dry run held all of it in memory.
    await writeFile(path.join(root, 'big.json'), '');
    await truncate(path.join(root, 'big.json'), DIFF_MAX_BYTES + 1);
    await writeFile(path.join(root, 'small.json'), 'a\nb\n');
    const big = makeInstance({ id: 'cfg_big', relative_filepath: 'big.json' });
    const small = makeInstance({ id: 'cfg_small', relative_filepath: 'small.json' });
    const { read, bytesRead } = meteredRoot();

    const plan = await describePlan([writeStep(big, 'x\n'), writeStep(small, 'a\nc\n')], read);

    expect(plan.map((change) => change.detail)).toEqual([
      `changed: differs (${DIFF_MAX_BYTES + 1} bytes on disk, too large to show) → 2 bytes`,
      'changed: +1 -1 lines, 4 → 4 bytes',
    ]);
    expect(bytesRead()).toBe(4);
  });

  it('a file of exactly the cap is diffed', async () => {
    await writeFile(path.join(root, 'edge.json'), Buffer.alloc(DIFF_MAX_BYTES, 0x61));
    const edge = makeInstance({ id: 'cfg_edge', relative_filepath: 'edge.json' });
    const plan = await describePlan([writeStep(edge, 'a\n')], meteredRoot().read);
    expect(plan[0]?.detail).toBe(`changed: +2 -1 lines, ${DIFF_MAX_BYTES} → 2 bytes`);
  });
});
