// Shared steps of the daemon outage tests: a converged daemon, a watch on the mock's faults, request counts.
import { expect } from 'vitest';
import { ActiveFaultList } from '../../src/api/admin-schemas.js';
import { DaemonProcess } from './daemon.js';
import { type AgentHarness, snapshotTree } from './harness.js';
import { waitFor } from './wait-for.js';

export const LIST_ROUTE = 'GET /v1/config_instances';
/** The list endpoint only: deploys, removals and reports of the test go through other paths. */
export const LIST_PATH = '^/v1/config_instances$';

/** Starts a daemon on two deployed files and waits until it converged and reported both. */
export async function startConverged(harness: AgentHarness): Promise<DaemonProcess> {
  await harness.createAndDeploy({ relative_filepath: 'etc/app.json', content: { level: 1 } });
  await harness.createAndDeploy({ relative_filepath: 'etc/db.yaml', content: { pool: 4 } });
  const daemon = DaemonProcess.start(harness);
  await daemon.waitForPasses(1, 30_000, { predicate: (p) => p.converged });
  await waitFor(async () => (await harness.reports()).length === 2, 30_000, {
    what: 'both deploys reported',
  });
  return daemon;
}

/** The root's bytes, modes, inodes and mtimes: equal snapshots mean the agent did not touch a thing. */
export function rootSnapshot(harness: AgentHarness): Promise<Record<string, string>> {
  return snapshotTree(harness.rootDir, { identity: true });
}

/** How many uses the mock's active faults have left (0 once every fault is used up). */
export async function activeFaultUses(harness: AgentHarness): Promise<number> {
  const { data } = ActiveFaultList.parse(await harness.api('GET', '/_admin/faults'));
  return data.reduce((sum, fault) => sum + fault.remaining, 0);
}

/** After an outage: a deploy made meanwhile lands, is reported `deployed`, and no attempt was burnt on it. */
export async function expectConvergesAfterRecovery(
  harness: AgentHarness,
  daemon: DaemonProcess,
  instanceId: string,
  timeoutMs: number,
): Promise<void> {
  await waitFor(
    async () => (await harness.reportsFor(instanceId)).some((r) => r.activity_status === 'deployed'),
    timeoutMs,
    { what: `instance ${instanceId} deployed and reported after the outage` },
  );
  const reports = await harness.reportsFor(instanceId);
  expect(reports.map((r) => [r.activity_status, r.error_status])).toEqual([['deployed', 'none']]);
  await daemon.waitForPasses(1, timeoutMs, {
    after: daemon.passes().length - 1,
    predicate: (p) => p.converged,
  });
  expect(daemon.alive).toBe(true);
  expect(daemon.logsWith(/crashed|uncaught|unhandled/)).toEqual([]);
}
