// `config-agent --once` when the service fails: reports kept in the durable outbox, files left alone, exit codes.
import { readFile } from 'node:fs/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { AgentHarness, leaksApiKey, snapshotTree } from '../helpers/harness.js';

const harnesses: AgentHarness[] = [];
async function harness(): Promise<AgentHarness> {
  const created = await AgentHarness.create({ registerDevice: true });
  harnesses.push(created);
  return created;
}

afterEach(async () => {
  await Promise.all(harnesses.splice(0).map((h) => h.close()));
});

const PATCH = 'PATCH /v1/config_instances/:id';
const LIST = 'GET /v1/config_instances';

describe('config-agent --once: reports cannot be delivered mid-pass', () => {
  it('writes the files, keeps the reports in the outbox (exit 1), delivers them on the next pass (exit 0)', async () => {
    const h = await harness();
    const a = (await h.createAndDeploy({ relative_filepath: 'a.json', content: { a: 1 } })).deploy;
    const b = (await h.createAndDeploy({ relative_filepath: 'dir/b.yaml', content: { b: 2 } })).deploy;
    await h.fault({ match: '^/v1/config_instances/[^/]+$', mode: 'reset', count: 1000 });

    const first = await h.runOnce();

    expect(first.code).toBe(1);
    expect(await readFile(h.rootPath('a.json'), 'utf8')).toBe('{\n  "a": 1\n}\n');
    expect(await readFile(h.rootPath('dir/b.yaml'), 'utf8')).toBe('b: 2\n');
    expect(await h.reports()).toEqual([]);
    expect(await h.requestCount(PATCH)).toBeGreaterThan(0);
    expect(
      (await h.outbox()).map((e) => [e.instanceId, e.report.activity_status, e.report.error_status]).sort(),
    ).toEqual(
      [
        [a.id, 'deployed', 'none'],
        [b.id, 'deployed', 'none'],
      ].sort(),
    );
    expect((await h.instance(a.id)).activity_status).toBe('queued');
    expect(first.stdout).toMatch(/^Not converged: 2 written\./);
    expect(first.stdout).toMatch(/Status reports: 0 delivered, 2 pending/);
    expect(leaksApiKey(first)).toBe(false);

    await h.clearFaults();
    const rootBefore = await snapshotTree(h.rootDir, { identity: true });

    const second = await h.runOnce(['--json']);

    expect(second.code).toBe(0);
    expect(await snapshotTree(h.rootDir, { identity: true })).toEqual(rootBefore);
    expect(
      (await h.reports()).map((r) => [r.config_instance_id, r.activity_status, r.error_status]).sort(),
    ).toEqual(
      [
        [a.id, 'deployed', 'none'],
        [b.id, 'deployed', 'none'],
      ].sort(),
    );
    expect(await h.outbox()).toEqual([]);
    for (const id of [a.id, b.id]) expect((await h.instance(id)).activity_status).toBe('deployed');
    const summary = JSON.parse(second.stdout) as {
      converged: boolean;
      counts: Record<string, number>;
      reports: { delivered: number; pending: number };
    };
    expect(summary).toMatchObject({ converged: true, reports: { delivered: 2, pending: 0 } });
    // Each deployed report waits for the pull (docs/architecture.md, step 1): the files in place, their reports sent.
    expect(summary.counts).toMatchObject({ reported: 2, written: 0 });

    // Delivered means gone from the outbox: a third pass sends nothing.
    const patches = await h.requestCount(PATCH);
    expect((await h.runOnce()).code).toBe(0);
    expect(await h.requestCount(PATCH)).toBe(patches);
  });

  it('a 503 on reports with Retry-After: the outbox survives it too, and a removal report is kept as well', async () => {
    const h = await harness();
    const gone = (await h.createAndDeploy({ relative_filepath: 'gone.json', content: { g: 1 } })).deploy;
    expect((await h.runOnce()).code).toBe(0);
    await h.removeInstance(gone.id);
    await h.fault({ match: '^/v1/config_instances/[^/]+$', status: 503, retry_after: 0, count: 1000 });

    const first = await h.runOnce();

    expect(first.code).toBe(1);
    expect(await snapshotTree(h.rootDir)).toEqual({});
    expect(await h.outbox()).toMatchObject([{ instanceId: gone.id, report: { activity_status: 'removed' } }]);

    await h.clearFaults();
    const second = await h.runOnce();

    expect(second.code).toBe(0);
    expect((await h.reportsFor(gone.id)).map((r) => r.activity_status)).toEqual(['deployed', 'removed']);
    expect((await h.instance(gone.id)).activity_status).toBe('removed');
    expect(await h.outbox()).toEqual([]);
  });
});

describe('config-agent --once: server unreachable', () => {
  it('server stopped before the run: exit 3, files untouched, the reason on stdout', async () => {
    const h = await harness();
    await h.createAndDeploy({ relative_filepath: 'app/a.json', content: { a: 1 } });
    expect((await h.runOnce()).code).toBe(0);
    const rootBefore = await snapshotTree(h.rootDir, { identity: true });
    const stateBefore = await snapshotTree(h.stateDir, { identity: true });
    await h.stopServer();

    const result = await h.runOnce();

    expect(result.code).toBe(3);
    expect(await snapshotTree(h.rootDir, { identity: true })).toEqual(rootBefore);
    expect(await snapshotTree(h.stateDir, { identity: true })).toEqual(stateBefore);
    expect(result.stdout).toMatch(/^The service could not be used: .+/);
    expect(result.stdout).toContain('No file was changed.');
    expect(result.stderr).toMatch(/could not pull config instances/);
    expect(leaksApiKey(result)).toBe(false);

    const json = await h.runOnce(['--json']);
    expect(json.code).toBe(3);
    const summary = JSON.parse(json.stdout) as {
      reachable: boolean;
      converged: boolean;
      error?: { code: string };
    };
    expect(summary).toMatchObject({ reachable: false, converged: false });
    expect(summary.error?.code).toMatch(/\w+/);

    await h.restartServer();
    expect((await h.runOnce()).code).toBe(0);
  });

  it('reports pending from an earlier pass survive a full outage and go out when the service is back', async () => {
    const h = await harness();
    const a = (await h.createAndDeploy({ relative_filepath: 'a.json', content: { a: 1 } })).deploy;
    await h.fault({ match: '^/v1/config_instances/[^/]+$', mode: 'reset', count: 1000 });
    expect((await h.runOnce()).code).toBe(1);
    expect(await h.outbox()).toHaveLength(1);
    await h.clearFaults();
    await h.stopServer();

    const during = await h.runOnce();

    expect(during.code).toBe(3);
    expect(await h.outbox()).toMatchObject([{ instanceId: a.id, report: { activity_status: 'deployed' } }]);
    expect(during.stdout).toContain('1 status report(s) kept for later.');

    await h.restartServer();
    const after = await h.runOnce();

    expect(after.code).toBe(0);
    expect((await h.reportsFor(a.id)).map((r) => r.activity_status)).toEqual(['deployed']);
    expect(await h.outbox()).toEqual([]);
  });

  it('the list request times out (hanging service): exit 3, nothing written', async () => {
    const h = await harness();
    await h.writeConfig({
      server: { baseUrl: h.server.url, apiKeyFile: h.keyPath, timeoutSeconds: 1 },
    });
    await h.createAndDeploy({ relative_filepath: 'a.json', content: { a: 1 } });
    await h.fault({ match: '^/v1/config_instances$', mode: 'hang', count: 1000 });

    const result = await h.runOnce();

    expect(result.code).toBe(3);
    expect(await snapshotTree(h.rootDir)).toEqual({});
    expect(await h.reports()).toEqual([]);
    // One request retry layer, bounded: the initial attempt and ONCE_REQUEST_RETRIES (2) more.
    expect(await h.requestCount(LIST)).toBe(3);
  });

  it('a list response cut mid-JSON (200, truncated): exit 3, nothing written', async () => {
    const h = await harness();
    await h.createAndDeploy({ relative_filepath: 'a.json', content: { a: 1 } });
    await h.fault({ match: '^/v1/config_instances$', mode: 'truncate', count: 1000 });

    const result = await h.runOnce();

    expect(result.code).toBe(3);
    expect(await snapshotTree(h.rootDir)).toEqual({});
    expect(await h.reports()).toEqual([]);
  });
});

describe('config-agent --once: the pull fails after its first page', () => {
  const COUNT = 230;
  const file = (i: number) => `many/f${String(i).padStart(3, '0')}.json`;
  const json = (content: unknown) => `${JSON.stringify(content, null, 2)}\n`;

  /** Runs `task` over 0..n-1, a few at a time: hundreds of admin calls one by one would crowd the timeout. */
  async function eachIndex(n: number, task: (i: number) => Promise<unknown>): Promise<void> {
    const width = 10;
    for (let start = 0; start < n; start += width) {
      await Promise.all(Array.from({ length: Math.min(width, n - start) }, (_, k) => task(start + k)));
    }
  }

  it('leaves every file untouched and reports nothing (exit 3); the next pass applies the whole change', async () => {
    const h = await harness();
    await eachIndex(COUNT, (i) => h.createAndDeploy({ relative_filepath: file(i), content: { i, v: 1 } }));
    expect((await h.runOnce()).code).toBe(0);
    // Every file changes on the service: a new instance with new content deployed at each path.
    const replacements: string[] = [];
    await eachIndex(COUNT, async (i) => {
      const { deploy } = await h.createAndDeploy({ relative_filepath: file(i), content: { i, v: 2 } });
      replacements[i] = deploy.id;
    });
    const rootBefore = await snapshotTree(h.rootDir, { identity: true });
    const stateBefore = await snapshotTree(h.stateDir, { identity: true });
    const patchesBefore = await h.requestCount(PATCH);
    const listsBefore = await h.requestCount(LIST);
    // Pages hold 100: page 1 of the deployed instances is served, page 2 (and every retry of it) is reset.
    await h.fault({ match: '^/v1/config_instances$', skip: 1, count: 50, mode: 'reset' });

    const failed = await h.runOnce();

    expect(failed.code).toBe(3);
    expect(await snapshotTree(h.rootDir, { identity: true })).toEqual(rootBefore);
    expect(await snapshotTree(h.stateDir, { identity: true })).toEqual(stateBefore);
    expect(await h.requestCount(PATCH)).toBe(patchesBefore);
    expect(failed.stdout).toMatch(/^The service could not be used: /);
    expect(failed.stdout).toContain('No file was changed.');
    // Page 1 was pulled and the fault met at least once: the failure really came after the first page.
    const lists = (await h.requestCount(LIST)) - listsBefore;
    const faults = (await h.api('GET', '/_admin/faults')) as { data: { remaining: number }[] };
    expect(lists).toBeGreaterThanOrEqual(2);
    expect(faults.data).toHaveLength(1);
    expect(faults.data[0]?.remaining).toBe(50 - (lists - 1));
    expect(leaksApiKey(failed)).toBe(false);

    await h.clearFaults();
    const recovered = await h.runOnce(['--json']);

    expect(recovered.code).toBe(0);
    for (let i = 0; i < COUNT; i += 1) {
      expect(await readFile(h.rootPath(file(i)), 'utf8'), file(i)).toBe(json({ i, v: 2 }));
    }
    const summary = JSON.parse(recovered.stdout) as { converged: boolean; counts: Record<string, number> };
    expect(summary.converged).toBe(true);
    expect(summary.counts.written).toBe(COUNT);
    for (const id of [replacements[0], replacements[COUNT - 1]]) {
      expect((await h.instance(id!)).activity_status).toBe('deployed');
    }
  }, 300_000);
});
