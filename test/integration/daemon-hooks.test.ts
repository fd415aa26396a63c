// Post-pass hooks of the daemon: run once per pass that changed matching files, with the changed paths, never the key.
import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DaemonProcess, killAllDaemons } from '../helpers/daemon.js';
import { AgentHarness, TEST_API_KEY } from '../helpers/harness.js';
import { PATIENCE_MS, waitFor } from '../helpers/wait-for.js';

/** Appends one JSON line per run: what the hook saw. Runs under `node -e`, so argv[1] is the output file. */
const RECORD_RUN = `
const fs = require('node:fs');
const keyVisible = Object.values(process.env).some((v) => v && v.includes(${JSON.stringify(TEST_API_KEY)}));
fs.appendFileSync(process.argv[1], JSON.stringify({
  changed: process.env.CONFIG_AGENT_CHANGED,
  cwd: process.cwd(),
  keyVisible,
  apiKeyVar: process.env.CONFIG_AGENT_API_KEY ?? null,
}) + '\\n');
`;
const FAIL_RUN = `process.stderr.write('reload failed: bad directive at line 3\\n'); process.exit(7);`;

interface HookRun {
  changed: string;
  cwd: string;
  keyVisible: boolean;
  apiKeyVar: string | null;
}

let harness: AgentHarness;
let runsFile: string;
let metricsFile: string;

async function hookRuns(): Promise<HookRun[]> {
  const text = await readFile(runsFile, 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as HookRun);
}

async function exists(file: string): Promise<boolean> {
  return stat(file).then(
    () => true,
    () => false,
  );
}

beforeEach(async () => {
  harness = await AgentHarness.create({ registerDevice: true });
  runsFile = path.join(harness.dir, 'hook-runs.jsonl');
  metricsFile = path.join(harness.dir, 'metrics', 'agent.prom');
  await mkdir(path.dirname(metricsFile));
  await harness.writeConfig({
    poll: { intervalSeconds: 1, jitterRatio: 0.1, fullResyncSeconds: 600 },
    hooks: [
      { match: 'nginx/**', run: [process.execPath, '-e', RECORD_RUN, runsFile], timeoutSeconds: 60 },
      { match: 'broken/*.json', run: [process.execPath, '-e', FAIL_RUN], timeoutSeconds: 60 },
    ],
    metrics: { textfile: metricsFile },
  });
});

afterEach(async () => {
  await killAllDaemons();
  await harness.close();
});

describe('daemon hooks', () => {
  it('runs a hook once per change with CONFIG_AGENT_CHANGED, in rootDir, without the API key', async () => {
    // The key comes from the environment here, the way a careless unit file would pass it.
    const daemon = DaemonProcess.start(harness, { CONFIG_AGENT_API_KEY: TEST_API_KEY });
    await daemon.waitForPasses(1, PATIENCE_MS, { predicate: (p) => p.converged });

    const site = await harness.createAndDeploy({ relative_filepath: 'nginx/site.json', content: { a: 1 } });
    const [first] = await waitFor(
      async () => ((await hookRuns()).length > 0 ? hookRuns() : undefined),
      PATIENCE_MS,
      {
        what: 'the first hook run',
      },
    );
    expect(first).toEqual({
      changed: 'nginx/site.json',
      cwd: harness.rootDir,
      keyVisible: false,
      apiKeyVar: null,
    });

    // Polls that change nothing, and a change the glob does not match, run no hook.
    await harness.createAndDeploy({ relative_filepath: 'other/app.json', content: { b: 2 } });
    await waitFor(() => exists(harness.rootPath('other/app.json')), PATIENCE_MS, {
      what: 'the unmatched file',
    });
    await daemon.waitForPasses(3, PATIENCE_MS, { after: daemon.passes().length });
    expect(await hookRuns()).toHaveLength(1);

    // Two matching changes: each path is announced exactly once, whether one pass or two wrote them.
    const [a, b] = await Promise.all([
      harness.createInstance({ relative_filepath: 'nginx/a.json', content: { a: true } }),
      harness.createInstance({ relative_filepath: 'nginx/conf.d/b.json', content: { b: true } }),
    ]);
    await Promise.all([harness.deploy(a?.id ?? ''), harness.deploy(b?.id ?? '')]);
    await waitFor(
      async () => (await hookRuns()).flatMap((run) => run.changed.split('\n')).length >= 3,
      PATIENCE_MS,
      {
        what: 'hook runs announcing both new files',
      },
    );
    await daemon.waitForPasses(2, PATIENCE_MS, { after: daemon.passes().length });
    const runs = await hookRuns();
    expect(runs.length).toBeLessThanOrEqual(3);
    expect(runs.flatMap((run) => run.changed.split('\n')).sort()).toEqual([
      'nginx/a.json',
      'nginx/conf.d/b.json',
      'nginx/site.json',
    ]);

    // A removal is a change too.
    await harness.removeInstance(site.deploy.id);
    await waitFor(async () => (await hookRuns()).at(-1)?.changed === 'nginx/site.json', PATIENCE_MS, {
      what: 'a hook run for the removal',
    });
    expect(await exists(harness.rootPath('nginx/site.json'))).toBe(false);
    expect((await hookRuns()).every((run) => !run.keyVisible)).toBe(true);
  });

  it('logs and counts a failing hook, and still writes every file', async () => {
    const daemon = DaemonProcess.start(harness);
    await daemon.waitForPasses(1, PATIENCE_MS, { predicate: (p) => p.converged });
    const [broken, nginx] = await Promise.all([
      harness.createInstance({ relative_filepath: 'broken/x.json', content: { x: 1 } }),
      harness.createInstance({ relative_filepath: 'nginx/y.json', content: { y: 1 } }),
    ]);
    await Promise.all([harness.deploy(broken?.id ?? ''), harness.deploy(nginx?.id ?? '')]);

    const failure = await daemon.waitForLog(
      (line) => line.msg === 'hook failed',
      PATIENCE_MS,
      'the hook failure log',
    );
    expect(failure).toMatchObject({ level: 'warn', hook: 'broken/*.json', exitCode: 7, timedOut: false });
    expect(String(failure.stderrTail)).toContain('bad directive at line 3');
    expect(await exists(harness.rootPath('broken/x.json'))).toBe(true);
    await waitFor(async () => (await hookRuns()).some((run) => run.changed === 'nginx/y.json'), PATIENCE_MS, {
      what: 'the other hook still ran',
    });
    const text = await waitFor(
      async () => {
        const body = await readFile(metricsFile, 'utf8');
        return /^config_agent_hook_failures_total\{[^}]*\} 1$/m.test(body) ? body : undefined;
      },
      PATIENCE_MS,
      { what: 'the hook failure counted in the metrics textfile' },
    );
    expect(text).toMatch(/^config_agent_hook_runs_total\{[^}]*\} [2-9]$/m);
    // A failing hook does not make the deploy fail: the service hears "deployed".
    await waitFor(
      async () => (await harness.reportsFor(broken?.id ?? '')).some((r) => r.activity_status === 'deployed'),
      PATIENCE_MS,
      { what: 'the deploy reported' },
    );
    // One failure, one log line: an operator grepping for failed hooks must not count double.
    expect(daemon.logsWith(/^hook (failed|killed)/)).toHaveLength(1);
    expect(daemon.alive).toBe(true);
  });
});

describe('daemon hooks across a restart', () => {
  it('a hook run cut short by SIGTERM runs after the next start, for the same changed paths', async () => {
    // The hook records its run only once the test releases it: the first run is still waiting when SIGTERM lands.
    const release = `${runsFile}.release`;
    const slowRecord = `const wait = () => require('node:fs').existsSync(${JSON.stringify(release)}) ? (() => { ${RECORD_RUN} })() : setTimeout(wait, 20); wait();`;
    await harness.writeConfig({
      poll: { intervalSeconds: 1, jitterRatio: 0.1, fullResyncSeconds: 600 },
      hooks: [{ match: 'nginx/**', run: [process.execPath, '-e', slowRecord, runsFile], timeoutSeconds: 20 }],
    });
    const first = DaemonProcess.start(harness);
    await first.waitForPasses(1, PATIENCE_MS, { predicate: (p) => p.converged });
    await harness.createAndDeploy({ relative_filepath: 'nginx/late.json', content: { late: true } });
    await waitFor(() => exists(harness.rootPath('nginx/late.json')), PATIENCE_MS, { what: 'the file' });

    // The hook is still sleeping when the agent is stopped: it is killed and never records its run.
    expect((await first.stop()).code).toBe(0);
    expect(await hookRuns()).toEqual([]);
    await writeFile(release, '');

    const second = DaemonProcess.start(harness);
    const [run] = await waitFor(
      async () => ((await hookRuns()).length > 0 ? hookRuns() : undefined),
      PATIENCE_MS,
      {
        what: 'the replayed hook run',
      },
    );
    expect(run?.changed).toBe('nginx/late.json');
    // Once it ran, it is not replayed again by later passes.
    await second.waitForPasses(2, PATIENCE_MS, { after: second.passes().length });
    expect(await hookRuns()).toHaveLength(1);
  });
});
