// The human summary of a pass: which instances get a line of their own.
import { describe, expect, it } from 'vitest';
import type { InstanceOutcome, PassResult } from '../reconcile/pass-runner.js';
import { renderHumanSummary } from './summary.js';

function result(outcomes: InstanceOutcome[]): PassResult {
  return {
    mode: 'full',
    dryRun: false,
    startedAt: '2026-11-24T06:00:00.000Z',
    durationMs: 12,
    reachable: true,
    steps: [],
    outcomes,
    reports: { delivered: 0, rejected: 0, pending: 0 },
    sweptTempFiles: [],
    converged: true,
  };
}

describe('renderHumanSummary', () => {
  it('lists a file kept as someone else changed it (drift: report), not the files merely in place', () => {
    const text = renderHumanSummary(
      result([
        { instanceId: 'cfg_a', path: 'a.json', action: 'unchanged', converged: true },
        {
          instanceId: 'cfg_b',
          path: 'etc/b.json',
          action: 'unchanged',
          converged: true,
          message: 'changed on disk by someone else: kept (drift policy is not "restore")',
        },
      ]),
    );
    expect(text).toBe(
      'Converged: 2 unchanged.\n' +
        '  unchanged etc/b.json (cfg_b) — changed on disk by someone else: kept (drift policy is not "restore")\n',
    );
  });

  it('names the way out of a rejected key (ux23: sync said only "HTTP 401 (unauthorized)")', () => {
    const text = renderHumanSummary({
      ...result([]),
      reachable: false,
      converged: false,
      error: {
        code: 'http_status',
        message: 'GET /v1/config_instances failed with HTTP 401 (unauthorized)',
        retryable: false,
        status: 401,
      },
    });
    expect(text).toBe(
      'The service could not be used: GET /v1/config_instances failed with HTTP 401 (unauthorized)\n' +
        'The service rejected the API key (wrong, revoked, or for another workspace): sudo config-agent init --api-key-file <file> replaces it (then, for the service, sudo systemctl restart config-agent).\n' +
        'No file was changed.\n',
    );
  });
});
