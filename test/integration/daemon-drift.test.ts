// Drift repair of the daemon on a real disk: `restore` rewrites a managed file someone changed; `report` and `off` leave it.
import { chmod, mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { DaemonProcess, killAllDaemons, type LogLine } from '../helpers/daemon.js';
import { AgentHarness } from '../helpers/harness.js';
import { PATIENCE_MS, waitFor } from '../helpers/wait-for.js';

const MANAGED = 'nginx/site.json';
const CONTENT = { server_name: 'robot.local', port: 443 };
const BYTES = `${JSON.stringify(CONTENT, null, 2)}\n`;
const TAMPERED = '{"server_name": "edited by hand"}\n';

let harness: AgentHarness | undefined;

afterEach(async () => {
  await killAllDaemons();
  await harness?.close();
  harness = undefined;
});

/** A converged daemon managing MANAGED, with an unmanaged file next to it. */
async function startConverged(drift: 'restore' | 'report' | 'off', fullResyncSeconds: number) {
  const h = await AgentHarness.create({ registerDevice: true });
  await mkdir(path.join(h.dir, 'metrics'));
  await h.writeConfig({
    drift,
    poll: { intervalSeconds: 1, jitterRatio: 0.1, fullResyncSeconds },
    metrics: { textfile: path.join(h.dir, 'metrics', 'agent.prom') },
  });
  harness = h;
  await h.createAndDeploy({ relative_filepath: MANAGED, content: CONTENT });
  const daemon = DaemonProcess.start(h);
  await daemon.waitForPasses(1, PATIENCE_MS, {
    predicate: (p) => p.converged && (p.counts.written ?? 0) === 1,
  });
  expect(await readFile(h.rootPath(MANAGED), 'utf8')).toBe(BYTES);
  await writeFile(h.rootPath('nginx/local-notes.txt'), 'mine, not the agent’s\n');
  return { h, daemon };
}

/** The value of one unlabelled counter in the agent's metrics textfile. */
async function counter(h: AgentHarness, name: string): Promise<number> {
  const text = await readFile(path.join(h.dir, 'metrics', 'agent.prom'), 'utf8');
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `));
  return Number(line?.split(' ').at(-1) ?? Number.NaN);
}

function driftWarnings(daemon: DaemonProcess): LogLine[] {
  return daemon.logs.filter((line) => line.component === 'drift' && /changed by someone else/.test(line.msg));
}

describe('drift policy restore', () => {
  it('rewrites a managed file changed, re-moded or deleted by someone else, and nothing else', async () => {
    const { h, daemon } = await startConverged('restore', 600);
    const target = h.rootPath(MANAGED);
    // The agent's own writes (the first deploy) are never drift.
    expect(driftWarnings(daemon)).toEqual([]);

    await writeFile(target, TAMPERED);
    await waitFor(async () => (await readFile(target, 'utf8')) === BYTES, PATIENCE_MS, {
      what: 'content restored',
    });
    const warning = await waitFor(() => driftWarnings(daemon)[0], PATIENCE_MS, { what: 'a drift warning' });
    expect(warning).toMatchObject({ path: MANAGED, policy: 'restore', level: 'warn' });

    await chmod(target, 0o600);
    await waitFor(async () => ((await stat(target)).mode & 0o777) === 0o644, PATIENCE_MS, {
      what: 'mode restored',
    });

    await rm(target);
    await waitFor(async () => (await readFile(target, 'utf8')) === BYTES, PATIENCE_MS, {
      what: 'deleted file restored',
    });

    expect(await readFile(h.rootPath('nginx/local-notes.txt'), 'utf8')).toBe('mine, not the agent’s\n');
    // One repair per tampering: the repair's own write does not set off another round.
    const passesAfterRepairs = daemon.passes().length;
    await daemon.waitForPasses(2, PATIENCE_MS, { after: passesAfterRepairs });
    expect(driftWarnings(daemon).map((line) => line.path)).toEqual([MANAGED, MANAGED, MANAGED]);
    // The repairs came from the content cache, not from passes: only the first deploy was a pass that wrote.
    expect(daemon.passes().filter((p) => (p.counts.written ?? 0) > 0)).toHaveLength(1);
    // Counted: three repairs of three noticed changes.
    await waitFor(async () => (await counter(h, 'config_agent_drift_repairs_total')) === 3, PATIENCE_MS, {
      what: 'drift repairs counted in the metrics',
    });
    expect(await counter(h, 'config_agent_drift_detected_total')).toBeGreaterThanOrEqual(3);
    // Nothing reported as an error to the service: a repaired file is still deployed.
    expect((await h.reports()).map((r) => [r.activity_status, r.error_status])).toEqual([
      ['deployed', 'none'],
    ]);
  });
});

describe.each(['report', 'off'] as const)('drift policy %s', (policy) => {
  it('leaves a modified managed file modified, across a full resync', async () => {
    const { h, daemon } = await startConverged(policy, 2);
    const target = h.rootPath(MANAGED);
    await writeFile(target, TAMPERED);

    if (policy === 'report') {
      const warning = await waitFor(() => driftWarnings(daemon)[0], PATIENCE_MS, { what: 'a drift warning' });
      expect(warning).toMatchObject({ path: MANAGED, policy: 'report' });
    }
    const passesAtTamper = daemon.passes().length;
    // Two full passes after the change: the periodic resync reads the bytes on disk and must still keep out.
    await daemon.waitForPasses(2, PATIENCE_MS, {
      after: passesAtTamper,
      predicate: (p) => p.mode === 'full',
    });
    expect(
      await readFile(target, 'utf8'),
      `drift "${policy}": a full pass must not restore a managed file someone else changed`,
    ).toBe(TAMPERED);
    if (policy === 'off') expect(driftWarnings(daemon)).toEqual([]);
    // `report` counts what it saw; neither policy repairs.
    expect(await counter(h, 'config_agent_drift_detected_total')).toBe(policy === 'report' ? 1 : 0);
    expect(await counter(h, 'config_agent_drift_repairs_total')).toBe(0);
    expect(daemon.alive).toBe(true);
  });
});
