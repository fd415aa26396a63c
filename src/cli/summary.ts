// What a pass did, said two ways: a short human summary for a terminal and one JSON object for scripts.
import type { InstanceAction, InstanceOutcome, PassResult } from '../reconcile/pass-runner.js';
import type { PlannedChange } from './plan-report.js';

const ACTION_ORDER: readonly InstanceAction[] = [
  'written',
  'removed',
  'archived',
  'replaced',
  'reported',
  'unchanged',
  'waiting',
  'refused',
  'retrying',
  'failed',
  'untouched',
];

export interface JsonSummary {
  converged: boolean;
  reachable: boolean;
  dryRun: boolean;
  mode: string;
  startedAt: string;
  durationMs: number;
  error?: { code: string; message: string };
  counts: Record<InstanceAction, number>;
  instances: InstanceOutcome[];
  plan?: PlannedChange[];
  reports: PassResult['reports'];
  sweptTempFiles: string[];
}

export function toJsonSummary(result: PassResult, plan?: readonly PlannedChange[]): JsonSummary {
  const counts = Object.fromEntries(ACTION_ORDER.map((action) => [action, 0])) as Record<
    InstanceAction,
    number
  >;
  for (const outcome of result.outcomes) counts[outcome.action] += 1;
  return {
    converged: result.converged,
    reachable: result.reachable,
    dryRun: result.dryRun,
    mode: result.mode,
    startedAt: result.startedAt,
    durationMs: result.durationMs,
    ...(result.error === undefined
      ? {}
      : { error: { code: result.error.code, message: result.error.message } }),
    counts,
    instances: result.outcomes,
    ...(plan === undefined ? {} : { plan: [...plan] }),
    reports: result.reports,
    sweptTempFiles: result.sweptTempFiles,
  };
}

// Paths, ids and messages come from the service and go to a terminal: a control character (C0, C1), a bidi
// override or a lone surrogate could forge a summary line or drive the terminal. Such text is shown quoted,
// with those characters escaped.
const UNSAFE_FOR_TERMINAL = /[\p{Cc}\p{Cf}\p{Cs}\u2028\u2029]/u;

/**
 * Longer text from the service is named by its length: a path is at most 4,095 bytes and a message names at most
 * two, so only a hostile service sends more, and a path of a megabyte made `--once` and `status` print a
 * megabyte. Left out whole, never cut (no part of an echoed key escapes the scrub of whole keys).
 */
const SHOWN_TERMINAL_CHARS = 10_000;

export function terminalSafe(text: string): string {
  if (text.length > SHOWN_TERMINAL_CHARS) return `<${text.length} characters, not shown>`;
  if (!UNSAFE_FOR_TERMINAL.test(text)) return text;
  let escaped = '';
  for (const char of text) {
    if (char === '"' || char === '\\') escaped += `\\${char}`;
    else if (char === '\n') escaped += '\\n';
    else if (UNSAFE_FOR_TERMINAL.test(char)) escaped += unicodeEscape(char.codePointAt(0)!);
    else escaped += char;
  }
  return `"${escaped}"`;
}

function unicodeEscape(codePoint: number): string {
  const hex = codePoint.toString(16);
  return codePoint > 0xffff ? `\\u{${hex}}` : `\\u${hex.padStart(4, '0')}`;
}

/** The way out of the service's refusals an operator can fix on the device (`--once`, `sync`): the key. */
const FIX_FOR_STATUS: Readonly<Record<number, string>> = {
  401: 'The service rejected the API key (wrong, revoked, or for another workspace): sudo config-agent init --api-key-file <file> replaces it (then, for the service, sudo systemctl restart config-agent).',
  403: "The API key may not read this device's instances: check the key's workspace and the deviceId in the configuration (sudo config-agent doctor).",
};

export function renderHumanSummary(result: PassResult): string {
  const lines: string[] = [];
  if (!result.reachable) {
    lines.push(`The service could not be used: ${terminalSafe(result.error?.message ?? 'unknown error')}`);
    const fix = result.error?.status === undefined ? undefined : FIX_FOR_STATUS[result.error.status];
    if (fix !== undefined) lines.push(fix);
    lines.push('No file was changed.');
    if (result.reports.pending > 0) lines.push(`${result.reports.pending} status report(s) kept for later.`);
    return `${lines.join('\n')}\n`;
  }
  const byAction = new Map<InstanceAction, InstanceOutcome[]>();
  for (const outcome of result.outcomes) {
    const group = byAction.get(outcome.action) ?? [];
    group.push(outcome);
    byAction.set(outcome.action, group);
  }
  const counts = ACTION_ORDER.filter((action) => byAction.has(action)).map(
    (action) => `${byAction.get(action)!.length} ${action}`,
  );
  lines.push(`${result.converged ? 'Converged' : 'Not converged'}: ${counts.join(', ') || 'nothing to do'}.`);
  for (const action of ACTION_ORDER) {
    for (const outcome of byAction.get(action) ?? []) {
      // An unchanged file is listed only with a note: one kept as someone else changed it (`drift: report`).
      if (action === 'unchanged' && outcome.message === undefined) continue;
      const detail = outcome.message === undefined ? '' : ` — ${terminalSafe(outcome.message)}`;
      lines.push(
        `  ${action.padEnd(9)} ${terminalSafe(outcome.path)} (${terminalSafe(outcome.instanceId)})${detail}`,
      );
    }
  }
  const { delivered, pending, rejected, deliveryError } = result.reports;
  if (delivered + pending + rejected > 0) {
    let reportLine = `Status reports: ${delivered} delivered`;
    if (pending > 0)
      reportLine += `, ${pending} pending${deliveryError ? ` (${terminalSafe(deliveryError.message)})` : ''}`;
    if (rejected > 0) reportLine += `, ${rejected} rejected by the service`;
    lines.push(`${reportLine}.`);
  }
  if (result.sweptTempFiles.length > 0) {
    lines.push(`Removed ${result.sweptTempFiles.length} temp file(s) left by an interrupted write.`);
  }
  return `${lines.join('\n')}\n`;
}

export function renderPlan(result: PassResult, plan: readonly PlannedChange[]): string {
  if (!result.reachable) return renderHumanSummary(result);
  const lines = [
    `Dry run: ${plan.length === 0 ? 'nothing would change' : `${plan.length} change(s) planned`}.`,
  ];
  for (const change of plan) {
    const detail = change.detail === undefined ? '' : ` — ${terminalSafe(change.detail)}`;
    const report = change.report === undefined ? '' : ` [report ${change.report}]`;
    const subject = `${terminalSafe(change.path)} (${terminalSafe(change.instanceId)})`;
    lines.push(`  ${change.action.padEnd(9)} ${subject}${detail}${report}`);
  }
  lines.push('Nothing was changed on disk or on the service.');
  return `${lines.join('\n')}\n`;
}
