// Daemon polling over real HTTP: deploys and removals land within one poll (counted in passes, not seconds);
// steady state is cheap and writes nothing.
import { mkdir, readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DaemonProcess, killAllDaemons, type PassLog } from '../helpers/daemon.js';
import { AgentHarness, snapshotTree } from '../helpers/harness.js';
import { PATIENCE_MS, waitFor } from '../helpers/wait-for.js';

const INTERVAL_S = 1;
const JITTER = 0.1;

function fileBytes(content: unknown): string {
  return `${JSON.stringify(content, null, 2)}\n`;
}

async function exists(file: string): Promise<boolean> {
  return stat(file).then(
    () => true,
    () => false,
  );
}

let harness: AgentHarness;

beforeEach(async () => {
  harness = await AgentHarness.create({
    registerDevice: true,
    config: { poll: { intervalSeconds: INTERVAL_S, jitterRatio: JITTER, fullResyncSeconds: 600 } },
  });
});

afterEach(async () => {
  await killAllDaemons();
  await harness.close();
});

describe('daemon polling', () => {
  it('writes a deployed instance within one poll and deletes it within one poll of its removal', async () => {
    const daemon = DaemonProcess.start(harness);
    await daemon.waitForPasses(1, PATIENCE_MS);
    /** The passes started after `at` passes were logged: the one in flight, if any, then the next poll. */
    const passesToEffect = (at: number, effect: (pass: PassLog) => boolean) =>
      daemon.passes().slice(at).findIndex(effect) + 1;

    const content = { listen: 8080, upstreams: ['a', 'b'] };
    let at = daemon.passes().length;
    const deployed = await harness.createAndDeploy({ relative_filepath: 'app/service.json', content });
    const target = harness.rootPath('app/service.json');
    await waitFor(
      async () => (await harness.instance(deployed.deploy.id)).activity_status === 'deployed',
      PATIENCE_MS,
      { what: 'the deployed status reported' },
    );
    // Published by rename: whenever the file exists, it holds the whole content.
    expect(await readFile(target, 'utf8')).toBe(fileBytes(content));
    await daemon.waitForPasses(1, PATIENCE_MS, { after: at, predicate: (p) => p.counts.written === 1 });
    // Within one poll: the pass that was running when the deploy happened may miss it, the next one may not.
    expect(passesToEffect(at, (p) => p.counts.written === 1)).toBeLessThanOrEqual(2);

    at = daemon.passes().length;
    await harness.removeInstance(deployed.deploy.id);
    await waitFor(
      async () => (await harness.instance(deployed.deploy.id)).activity_status === 'removed',
      PATIENCE_MS,
      { what: 'the removal reported' },
    );
    expect(await exists(target)).toBe(false);
    await daemon.waitForPasses(1, PATIENCE_MS, { after: at, predicate: (p) => p.counts.removed === 1 });
    expect(passesToEffect(at, (p) => p.counts.removed === 1)).toBeLessThanOrEqual(2);
    const reports = await harness.reports();
    expect(reports.map((r) => [r.config_instance_id, r.activity_status, r.error_status])).toEqual([
      [deployed.deploy.id, 'deployed', 'none'],
      [deployed.deploy.id, 'removed', 'none'],
    ]);
    expect(daemon.alive).toBe(true);
  });

  it('in steady state asks at most 2 requests per poll and rewrites nothing', async () => {
    // Over one page of 100, so a full pass would need several list requests while a poll still needs 2.
    const count = 120;
    const ids: string[] = [];
    for (let start = 0; start < count; start += 20) {
      const batch = await Promise.all(
        Array.from({ length: Math.min(20, count - start) }, (_, k) =>
          harness.createAndDeploy({
            relative_filepath: `fleet/${String(start + k).padStart(3, '0')}.json`,
            content: { n: start + k },
          }),
        ),
      );
      ids.push(...batch.map((d) => d.deploy.id));
    }
    const daemon = DaemonProcess.start(harness);
    const [first] = await daemon.waitForPasses(1, PATIENCE_MS, { predicate: (p) => p.converged });
    expect(first?.mode).toBe('full');
    await waitFor(
      async () => (await harness.reports()).filter((r) => r.activity_status === 'deployed').length === count,
      PATIENCE_MS,
      { what: 'every deploy reported' },
    );
    const before = await snapshotTree(harness.rootDir, { identity: true });
    // "Writes nothing" covers the agent's own state too: rewriting it every poll would wear flash just the same.
    const stateBefore = await snapshotTree(harness.stateDir, { identity: true });
    expect(Object.keys(before).filter((key) => key.endsWith('.json'))).toHaveLength(count);

    // Measure from the end of a pass, so the window counts whole polls only.
    const passesAtStart = daemon.passes().length + 1;
    await daemon.waitForPasses(1, PATIENCE_MS, { after: passesAtStart - 1 });
    const statsBefore = await harness.stats();
    const polls = await daemon.waitForPasses(5, PATIENCE_MS, { after: passesAtStart });
    const statsAfter = await harness.stats();
    const requests = statsAfter.total - statsBefore.total;

    expect(polls.every((p) => p.mode === 'incremental' && p.converged)).toBe(true);
    // Each read of the stats may meet a poll already under way: one poll of slack at either end.
    expect(requests).toBeLessThanOrEqual(2 * (polls.length + 1));
    expect(requests).toBeGreaterThanOrEqual(2 * (polls.length - 1));
    const patches =
      (statsAfter.requests['PATCH /v1/config_instances/:id'] ?? 0) -
      (statsBefore.requests['PATCH /v1/config_instances/:id'] ?? 0);
    expect(patches).toBe(0);

    const after = await snapshotTree(harness.rootDir, { identity: true });
    expect(after).toEqual(before);
    expect(await snapshotTree(harness.stateDir, { identity: true })).toEqual(stateBefore);
    expect(daemon.logsWith(/could not|failed/)).toEqual([]);
  });

  it('a periodic full resync checks bytes on disk without rewriting identical files', async () => {
    await harness.writeConfig({
      poll: { intervalSeconds: INTERVAL_S, jitterRatio: JITTER, fullResyncSeconds: 2 },
    });
    for (let k = 0; k < 5; k += 1) {
      await harness.createAndDeploy({ relative_filepath: `etc/f${k}.json`, content: { k } });
    }
    const daemon = DaemonProcess.start(harness);
    await daemon.waitForPasses(1, PATIENCE_MS, { predicate: (p) => p.converged });
    const before = await snapshotTree(harness.rootDir, { identity: true });
    const passesSoFar = daemon.passes().length;

    const full = await daemon.waitForPasses(2, PATIENCE_MS, {
      after: passesSoFar,
      predicate: (p) => p.mode === 'full',
    });
    expect(full.every((p) => p.converged && (p.counts.written ?? 0) === 0)).toBe(true);
    expect(await snapshotTree(harness.rootDir, { identity: true })).toEqual(before);
  });

  it('writes a Prometheus textfile after every pass', async () => {
    const metricsFile = path.join(harness.dir, 'metrics', 'config-agent.prom');
    await mkdir(path.dirname(metricsFile));
    await harness.writeConfig({
      poll: { intervalSeconds: INTERVAL_S, jitterRatio: JITTER, fullResyncSeconds: 600 },
      metrics: { textfile: metricsFile },
    });
    await harness.createAndDeploy({ relative_filepath: 'a.json', content: { a: 1 } });
    await harness.createAndDeploy({ relative_filepath: 'b.json', content: { b: 2 } });
    const daemon = DaemonProcess.start(harness);
    await daemon.waitForPasses(2, PATIENCE_MS);

    const text = await waitFor(
      async () => {
        const body = await readFile(metricsFile, 'utf8');
        return /config_agent_passes_total\{[^}]*result="converged"[^}]*\} [2-9]/.test(body)
          ? body
          : undefined;
      },
      PATIENCE_MS,
      { what: 'a textfile counting two converged passes' },
    );
    expect(text).toMatch(/^config_agent_managed_files\{device_id="dvc_it_01"\} 2$/m);
    expect(text).toMatch(/^config_agent_instances\{[^}]*status="deployed"[^}]*\} 2$/m);
    expect(text).toMatch(/^config_agent_last_success_timestamp_seconds\{[^}]*\} (\d+)$/m);
    const lastSuccess = Number(
      /^config_agent_last_success_timestamp_seconds\{[^}]*\} (\d+)$/m.exec(text)?.[1],
    );
    expect(Math.abs(lastSuccess - Date.now() / 1000)).toBeLessThan(60);
    expect(text).toMatch(/^config_agent_requests_total\{[^}]*outcome="[^"]+"[^}]*\} \d+$/m);
    expect(text).toMatch(/^config_agent_pass_duration_seconds_count\{[^}]*\} [2-9]/m);
    expect(text).toMatch(/^config_agent_drift_repairs_total\{[^}]*\} 0$/m);
    expect(text).toMatch(/^config_agent_hook_failures_total\{[^}]*\} 0$/m);
    const mode = (await stat(metricsFile)).mode & 0o777;
    expect(mode).toBe(0o644);
  });
});
