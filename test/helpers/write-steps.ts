// WriteSteps for apply's unit tests: a new instance's bytes at a path, reported `deployed` once written.
import { sha256Hex } from '../../src/lib/hash.js';
import type { WriteStep } from '../../src/reconcile/plan.js';
import { instanceFactory } from './instances.js';

const makeInstance = instanceFactory({ relative_filepath: 'app.json' });

/** A write of `text` (by default the id and a newline) to `relative` for a new instance `id`. */
export function writeStep(
  id: string,
  relative: string,
  text = `${id}\n`,
  extra: Partial<WriteStep> = {},
): WriteStep {
  const data = Buffer.from(text);
  return {
    kind: 'write',
    instance: makeInstance({ id, relative_filepath: relative }),
    path: relative,
    data,
    sha256: sha256Hex(data),
    reason: 'new',
    displaces: [],
    supersedes: [],
    report: { activity_status: 'deployed', error_status: 'none' },
    ...extra,
  };
}
