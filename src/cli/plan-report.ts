// Describes planned steps for `--dry-run`: what would be written, removed, archived and reported, with a diff summary.
import type { StatusReport } from '../api/schemas.js';
import { removedReport, type Step } from '../reconcile/plan.js';

export interface PlannedChange {
  action: 'write' | 'remove' | 'archive' | 'report' | 'fail' | 'refuse' | 'wait';
  instanceId: string;
  path: string;
  detail?: string;
  /** The status that would be reported, as `activity/error`. */
  report?: string;
}

/**
 * The file under the root now: its size, and its bytes when it holds at most `maxBytes`; undefined when there is
 * none to compare with.
 */
export type ReadCurrent = (
  relativePath: string,
  maxBytes: number,
) => Promise<{ size: number; data?: Buffer } | undefined>;

/**
 * A file on disk larger than this is not read for its diff: a dry run must not hold a file a local user planted
 * at a managed path (gigabytes, sparse) in memory. Files the service sends are bounded by the response cap.
 */
export const DIFF_MAX_BYTES = 4 * 1024 * 1024;

export async function describePlan(
  steps: readonly Step[],
  readCurrent: ReadCurrent,
): Promise<PlannedChange[]> {
  const changes: PlannedChange[] = [];
  for (const step of steps) {
    const base = { instanceId: step.instance.id, path: step.instance.relative_filepath };
    switch (step.kind) {
      case 'write': {
        for (const displaced of step.displaces) {
          changes.push({
            action: 'remove',
            instanceId: displaced.instance.id,
            path: displaced.path,
            detail: `replaced by ${step.instance.id} (same config schema)`,
            ...reported(displaced.report),
          });
        }
        for (const superseded of step.supersedes) {
          changes.push({
            action: 'report',
            instanceId: superseded.instance.id,
            path: superseded.instance.relative_filepath,
            detail: `its file is taken over by ${step.instance.id}`,
            ...reported(superseded.report),
          });
        }
        const current = await readCurrent(step.path, DIFF_MAX_BYTES).catch(() => undefined);
        changes.push({
          ...base,
          action: 'write',
          // A dry run holds every file's bytes (nothing is set aside in the state directory: pass.ts).
          detail: `${step.reason}: ${step.data === undefined ? `${step.sha256} (bytes set aside)` : summary(current, step.data)}`,
          ...reported(step.report),
        });
        break;
      }
      case 'remove':
        changes.push({ ...base, action: 'remove', ...reported(step.report) });
        break;
      case 'report':
        changes.push({
          ...base,
          action: step.reason === 'archive' ? 'archive' : 'report',
          detail: (step.report ?? removedReport(step.reason)).message ?? step.reason.replaceAll('_', ' '),
          ...reported(step.report),
        });
        break;
      case 'fail':
        changes.push({
          ...base,
          action: 'fail',
          detail: step.message,
          report: `${step.instance.activity_status}/failed`,
        });
        break;
      case 'refuse':
        changes.push({
          ...base,
          action: 'refuse',
          detail: step.message,
          report: `${step.instance.activity_status}/retrying`,
        });
        break;
      case 'wait':
        changes.push({ ...base, action: 'wait', detail: 'per-instance retry cooldown not yet elapsed' });
        break;
      case 'confirm':
      case 'keep':
      case 'skip':
        break;
    }
  }
  return changes;
}

/** The status a step would report, as `activity/error`; nothing when the service already holds it. */
function reported(report: StatusReport | undefined): { report?: string } {
  return report === undefined ? {} : { report: `${report.activity_status}/${report.error_status}` };
}

/** The diff summary of the file on disk, or only its size when it was too large to read. */
function summary(current: { size: number; data?: Buffer } | undefined, next: Buffer): string {
  if (current !== undefined && current.data === undefined) {
    return `differs (${current.size} bytes on disk, too large to show) → ${next.length} bytes`;
  }
  return diffSummary(current?.data, next);
}

/** A short, human diff summary: sizes and how many lines would be added and removed. */
export function diffSummary(current: Buffer | undefined, next: Buffer): string {
  if (current === undefined) return `new file, ${next.length} bytes`;
  if (current.equals(next)) return `same bytes (mode or ownership changes), ${next.length} bytes`;
  const oldLines = countLines(current.toString('utf8'));
  const newLines = countLines(next.toString('utf8'));
  let added = 0;
  let removed = 0;
  for (const [line, count] of newLines) added += Math.max(0, count - (oldLines.get(line) ?? 0));
  for (const [line, count] of oldLines) removed += Math.max(0, count - (newLines.get(line) ?? 0));
  return `+${added} -${removed} lines, ${current.length} → ${next.length} bytes`;
}

function countLines(text: string): Map<string, number> {
  const counts = new Map<string, number>();
  for (const line of text.split('\n')) counts.set(line, (counts.get(line) ?? 0) + 1);
  return counts;
}
