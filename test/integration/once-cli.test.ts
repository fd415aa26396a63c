// `config-agent --once` as a command: every exit code, `--dry-run` changing nothing, and the key never printed.
import { chmod, readFile, rm, writeFile } from 'node:fs/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { AgentHarness, leaksApiKey, type RunResult, snapshotTree } from '../helpers/harness.js';

const harnesses: AgentHarness[] = [];
async function harness(): Promise<AgentHarness> {
  const created = await AgentHarness.create({ registerDevice: true });
  harnesses.push(created);
  return created;
}

afterEach(async () => {
  await Promise.all(harnesses.splice(0).map((h) => h.close()));
});

/** Root and state, with inodes and mtimes: equal means not one byte (nor one rewrite) changed. */
async function world(h: AgentHarness) {
  return {
    root: await snapshotTree(h.rootDir, { identity: true }),
    state: await snapshotTree(h.stateDir, { identity: true }),
  };
}

function expectCleanOutput(result: RunResult): void {
  expect(leaksApiKey(result)).toBe(false);
  // Logs are JSON lines on stderr; nothing on stdout looks like a log line.
  expect(result.stdout).not.toMatch(/"level":/);
}

describe('config-agent --once: exit codes', () => {
  it('0 when converged', async () => {
    const h = await harness();
    await h.createAndDeploy({ relative_filepath: 'a.json', content: { a: 1 } });
    const result = await h.runOnce();
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(/^Converged: 1 written\./);
    expectCleanOutput(result);
  });

  it('0 for an empty device (nothing to do)', async () => {
    const h = await harness();
    const result = await h.runOnce();
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(/^Converged: nothing to do\./);
    expect(await snapshotTree(h.rootDir)).toEqual({});
  });

  it('1 when the server was reached but an instance did not converge', async () => {
    const h = await harness();
    await h.createAndDeploy({ relative_filepath: 'ok.json', content: { ok: 1 } });
    await h.createAndDeploy({ relative_filepath: '/etc/passwd', content: { evil: 1 } });
    const result = await h.runOnce();
    expect(result.code).toBe(1);
    expect(result.stdout).toMatch(/^Not converged: 1 written, 1 failed\./);
    expect(await readFile(h.rootPath('ok.json'), 'utf8')).toBe('{\n  "ok": 1\n}\n');
    expectCleanOutput(result);
  });

  it.each([
    [['--once', '--bogus'], /--bogus/],
    [['--dry-run'], /--dry-run requires --once/],
    [['--once', 'extra', 'args'], /unexpected argument|unknown command/],
    [['sync', '--once'], /--once cannot be used with sync/],
  ])('2 on a usage error: %j', async (args, message) => {
    const h = await harness();
    await h.createAndDeploy({ relative_filepath: 'a.json', content: { a: 1 } });
    const statsBefore = await h.stats();
    const result = await h.run(args);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(message);
    expect(result.stderr).toContain("Run 'config-agent --help' for usage.");
    expect(result.stdout).toBe('');
    expect(await snapshotTree(h.dir)).not.toHaveProperty('root');
    // Not one request reached the service (the operator's deploy above is all it counted).
    expect(await h.stats()).toEqual(statsBefore);
  });

  it('3 when the server is down: nothing written, the reason printed', async () => {
    const h = await harness();
    await h.createAndDeploy({ relative_filepath: 'a.json', content: { a: 1 } });
    await h.stopServer();
    const result = await h.runOnce();
    expect(result.code).toBe(3);
    expect(await snapshotTree(h.rootDir)).toEqual({});
    expect(result.stdout).toMatch(/^The service could not be used: /);
    expectCleanOutput(result);
  });

  it('3 when the key is rejected (401), and neither key is ever printed', async () => {
    const h = await harness();
    await h.createAndDeploy({ relative_filepath: 'a.json', content: { a: 1 } });
    const wrongKey = 'sk_wrong_key_that_must_stay_secret_42';
    await writeFile(h.keyPath, `${wrongKey}\n`, { mode: 0o600 });

    for (const args of [[], ['--json']]) {
      const result = await h.runOnce(args);
      expect(result.code).toBe(3);
      expect(`${result.stdout}${result.stderr}`).not.toContain(wrongKey);
      expectCleanOutput(result);
      if (args.length === 0) expect(result.stdout).toMatch(/^The service could not be used: .*HTTP 401/);
      else expect(JSON.parse(result.stdout)).toMatchObject({ reachable: false, converged: false });
    }
    // The wrong key from the environment is scrubbed too.
    const fromEnv = await h.runOnce([], { CONFIG_AGENT_API_KEY: wrongKey });
    expect(fromEnv.code).toBe(3);
    expect(`${fromEnv.stdout}${fromEnv.stderr}`).not.toContain(wrongKey);
    expect(await snapshotTree(h.rootDir)).toEqual({});
    expect(await h.reports()).toEqual([]);
    // A rejected key is not retried: one list request per run.
    expect(await h.requestCount('GET /v1/config_instances')).toBe(3);
  });

  const invalidConfigs: [string, (h: AgentHarness) => Promise<NodeJS.ProcessEnv | undefined>, RegExp][] = [
    [
      'an unknown key',
      async (h) => {
        await writeFile(h.configPath, JSON.stringify({ ...h.configObject(), pollIntervall: 5 }));
        return undefined;
      },
      /pollIntervall: unknown key/,
    ],
    [
      'an unknown nested key',
      async (h) => {
        const config = h.configObject();
        await writeFile(h.configPath, JSON.stringify({ ...config, retry: { maxAttempts: 3, baseDelay: 1 } }));
        return undefined;
      },
      /retry.*baseDelay|baseDelay/,
    ],
    [
      'a missing deviceId',
      async (h) => {
        const { deviceId: _omitted, ...rest } = h.configObject();
        await writeFile(h.configPath, JSON.stringify(rest));
        return undefined;
      },
      /deviceId/,
    ],
    [
      'a wrong type',
      async (h) => {
        await writeFile(h.configPath, JSON.stringify({ ...h.configObject(), rootDir: 42 }));
        return undefined;
      },
      /rootDir/,
    ],
    [
      'a key file readable by group and others (0644)',
      async (h) => {
        await chmod(h.keyPath, 0o644);
        return undefined;
      },
      /accessible by group or others \(mode 0644\)/,
    ],
    [
      'NODE_TLS_REJECT_UNAUTHORIZED=0',
      async () => ({ NODE_TLS_REJECT_UNAUTHORIZED: '0' }),
      /NODE_TLS_REJECT_UNAUTHORIZED/,
    ],
    [
      'a files.rules glob the bounded matcher does not take (an extglob)',
      async (h) => {
        const files = { rules: [{ match: '**/+(a|b).json', mode: '0640' }] };
        await writeFile(h.configPath, JSON.stringify({ ...h.configObject(), files }));
        return undefined;
      },
      /files\.rules\[0\]\.match: unsupported glob: "\(" is not supported/,
    ],
    [
      'a config file that does not exist',
      async (h) => {
        await rm(h.configPath);
        return undefined;
      },
      /cannot read the file/,
    ],
    [
      'a config file that is not JSON',
      async (h) => {
        await writeFile(h.configPath, '{ "deviceId": "dvc_it_01", }');
        return undefined;
      },
      /JSON|position|line/i,
    ],
  ];

  it.each(invalidConfigs)('78 on invalid configuration: %s', async (_name, breakIt, message) => {
    const h = await harness();
    await h.createAndDeploy({ relative_filepath: 'a.json', content: { a: 1 } });
    const env = await breakIt(h);
    const statsBefore = await h.stats();

    const result = await h.runOnce([], env);

    expect(result.code).toBe(78);
    expect(result.stderr).toMatch(message);
    expect(result.stdout).toBe('');
    // Refused before doing anything: no directory created, no request sent.
    expect(Object.keys(await snapshotTree(h.dir))).not.toContain('root');
    expect(Object.keys(await snapshotTree(h.dir))).not.toContain('state');
    expect(await h.stats()).toEqual(statsBefore);
    expect(leaksApiKey(result)).toBe(false);
  });

  it('--help and --version exit 0 and print to stdout', async () => {
    const h = await harness();
    const help = await h.run(['--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/--once/);
    expect(help.stdout).toMatch(/--dry-run/);
    const version = await h.run(['--version']);
    expect(version.code).toBe(0);
    expect(version.stdout).toMatch(/^config-agent \d+\.\d+\.\d+\n$/);
  });
});

describe('config-agent --once --dry-run', () => {
  /** A synced device with one change of every kind pending: new, changed, removed, archived, hostile. */
  async function pendingChanges(h: AgentHarness) {
    const keep = (await h.createAndDeploy({ relative_filepath: 'keep.json', content: { k: 1 } })).deploy;
    const old = (await h.createAndDeploy({ relative_filepath: 'app/config.json', content: { v: 1 } })).deploy;
    const gone = (await h.createAndDeploy({ relative_filepath: 'gone/file.yaml', content: { g: 1 } })).deploy;
    expect((await h.runOnce()).code).toBe(0);
    const fresh = (await h.createAndDeploy({ relative_filepath: 'new/fresh.yaml', content: { f: [1, 2] } }))
      .deploy;
    const replacement = await h.createInstance({
      relative_filepath: 'app/config.json',
      content: { v: 2, added: 'line' },
    });
    await h.deploy(replacement.id);
    await h.removeInstance(gone.id);
    const archived = await h.createInstance({ relative_filepath: 'never.json', content: { n: 1 } });
    await h.deploy(archived.id);
    await h.removeInstance(archived.id);
    const hostile = (await h.createAndDeploy({ relative_filepath: '../escape.json', content: { e: 1 } }))
      .deploy;
    return { keep, old, gone, fresh, replacement, archived, hostile };
  }

  it('changes nothing on disk or on the service, and lists what it would do', async () => {
    const h = await harness();
    const ids = await pendingChanges(h);
    const before = await world(h);
    const reportsBefore = await h.reports();
    const patchesBefore = (await h.stats()).requests['PATCH /v1/config_instances/:id'];

    const result = await h.runOnce(['--dry-run']);

    expect(result.code).toBe(0);
    expect(await world(h)).toEqual(before);
    expect(await h.reports()).toEqual(reportsBefore);
    expect((await h.stats()).requests['PATCH /v1/config_instances/:id']).toBe(patchesBefore);
    expect((await h.instance(ids.fresh.id)).activity_status).toBe('queued');

    expect(result.stdout).toMatch(/^Dry run: \d+ change\(s\) planned\./);
    expect(result.stdout).toMatch(
      new RegExp(`write\\s+new/fresh\\.yaml \\(${ids.fresh.id}\\) — new: new file, \\d+ bytes`),
    );
    expect(result.stdout).toMatch(
      new RegExp(
        `write\\s+app/config\\.json \\(${ids.replacement.id}\\) — changed: \\+\\d+ -\\d+ lines, \\d+ → \\d+ bytes.*\\[report deployed/none\\]`,
      ),
    );
    // {"v": 1} → {"v": 2, "added": "line"}: two lines in, one out, 13 → 32 bytes; the YAML is 15 bytes.
    expect(result.stdout).toContain('changed: +2 -1 lines, 13 → 32 bytes');
    expect(result.stdout).toContain('new: new file, 15 bytes');
    expect(result.stdout).toMatch(
      new RegExp(`remove\\s+gone/file\\.yaml \\(${ids.gone.id}\\).*\\[report removed/none\\]`),
    );
    expect(result.stdout).toMatch(new RegExp(`archive\\s+never\\.json \\(${ids.archived.id}\\)`));
    expect(result.stdout).toMatch(
      new RegExp(`fail\\s+\\.\\./escape\\.json \\(${ids.hostile.id}\\) — path rejected`),
    );
    expect(result.stdout).not.toContain('keep.json');
    expect(result.stdout).toContain('Nothing was changed on disk or on the service.');
    expectCleanOutput(result);

    // The plan was honest: the real pass does what the dry run said.
    const real = await h.runOnce();
    expect(real.code).toBe(1);
    expect(await readFile(h.rootPath('new/fresh.yaml'), 'utf8')).toBe('f:\n  - 1\n  - 2\n');
    expect(await readFile(h.rootPath('app/config.json'), 'utf8')).toBe(
      '{\n  "v": 2,\n  "added": "line"\n}\n',
    );
    expect(Object.keys(await snapshotTree(h.rootDir))).not.toContain('gone');
  });

  it('--dry-run --json prints one parseable object with the plan', async () => {
    const h = await harness();
    const ids = await pendingChanges(h);
    const before = await world(h);

    const result = await h.runOnce(['--dry-run', '--json']);

    expect(result.code).toBe(0);
    expect(await world(h)).toEqual(before);
    const summary = JSON.parse(result.stdout) as {
      dryRun: boolean;
      converged: boolean;
      reachable: boolean;
      plan: { action: string; instanceId: string; path: string; detail?: string; report?: string }[];
    };
    expect(summary).toMatchObject({ dryRun: true, reachable: true, converged: false });
    const byInstance = new Map(summary.plan.map((change) => [change.instanceId, change]));
    expect(byInstance.get(ids.fresh.id)).toMatchObject({ action: 'write', path: 'new/fresh.yaml' });
    expect(byInstance.get(ids.replacement.id)).toMatchObject({
      action: 'write',
      path: 'app/config.json',
      report: 'deployed/none',
    });
    expect(byInstance.get(ids.gone.id)).toMatchObject({ action: 'remove', report: 'removed/none' });
    expect(byInstance.get(ids.archived.id)).toMatchObject({ action: 'archive', report: 'removed/none' });
    expect(byInstance.get(ids.hostile.id)).toMatchObject({ action: 'fail', report: 'queued/failed' });
    expect(byInstance.has(ids.keep.id)).toBe(false);
    expectCleanOutput(result);
  });

  it('on a device never synced: creates neither rootDir nor stateDir', async () => {
    const h = await harness();
    const fresh = (await h.createAndDeploy({ relative_filepath: 'x/y.json', content: { y: 1 } })).deploy;

    const result = await h.runOnce(['--dry-run']);

    expect(result.code).toBe(0);
    const top = Object.keys(await snapshotTree(h.dir));
    expect(top).not.toContain('root');
    expect(top).not.toContain('state');
    expect(result.stdout).toMatch(
      new RegExp(`write\\s+x/y\\.json \\(${fresh.id}\\) — new: new file, \\d+ bytes`),
    );
    expect(await h.reports()).toEqual([]);
  });

  it('does not deliver reports left in the outbox by an earlier pass', async () => {
    const h = await harness();
    await h.createAndDeploy({ relative_filepath: 'a.json', content: { a: 1 } });
    await h.fault({ match: '^/v1/config_instances/[^/]+$', mode: 'reset', count: 1000 });
    expect((await h.runOnce()).code).toBe(1);
    await h.clearFaults();
    const pending = await h.outbox();
    expect(pending).toHaveLength(1);
    const before = await world(h);
    const patches = await h.requestCount('PATCH /v1/config_instances/:id');

    const result = await h.runOnce(['--dry-run']);

    expect(result.code).toBe(0);
    expect(await world(h)).toEqual(before);
    expect(await h.outbox()).toEqual(pending);
    expect(await h.requestCount('PATCH /v1/config_instances/:id')).toBe(patches);
    expect(await h.reports()).toEqual([]);
  });

  it('exits 3 when the service is down, still changing nothing', async () => {
    const h = await harness();
    await h.createAndDeploy({ relative_filepath: 'a.json', content: { a: 1 } });
    expect((await h.runOnce()).code).toBe(0);
    const before = await world(h);
    await h.stopServer();

    const result = await h.runOnce(['--dry-run']);

    expect(result.code).toBe(3);
    expect(await world(h)).toEqual(before);
  });
});
