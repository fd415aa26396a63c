// `config-agent --once` against the real mock: a first sync, and a second pass that writes nothing at all.
import { chmod, mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { CLEAN_EXIT_FILE } from '../../src/store/clean-exit.js';
import { FINGERPRINTS_FILE } from '../../src/store/fingerprints.js';
import { TEMP_PREFIX } from '../../src/store/path-guard.js';
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

const APP = { log_level: 'debug', workers: 4, features: { beta: true }, tags: ['a', 'b'] };
const MQTT = { broker: { host: 'mqtt.local', port: 8883 }, topics: ['telemetry', 'alerts'] };
const LIMITS = { max_speed: 1.5, zones: [{ id: 1, enabled: true }] };

/** Three instances of different formats and depths, deployed the way an operator would. */
async function deployFleet(h: AgentHarness) {
  const app = await h.createAndDeploy({ relative_filepath: 'app/settings.json', content: APP });
  const mqtt = await h.createAndDeploy({ relative_filepath: 'bridge/mqtt.yaml', content: MQTT });
  const limits = await h.createAndDeploy({ relative_filepath: 'motion/deep/limits.yml', content: LIMITS });
  return { app: app.deploy.id, mqtt: mqtt.deploy.id, limits: limits.deploy.id };
}

describe('config-agent --once: first sync', () => {
  it('writes every deployed instance with the exact bytes and mode, reports deployed, exits 0', async () => {
    const h = await harness();
    const ids = await deployFleet(h);

    const result = await h.runOnce();

    expect(result.stderr).not.toMatch(/"level":"(error|fatal)"/);
    expect(result.code).toBe(0);
    expect(await readFile(h.rootPath('app/settings.json'), 'utf8')).toBe(`${JSON.stringify(APP, null, 2)}\n`);
    expect(await readFile(h.rootPath('bridge/mqtt.yaml'), 'utf8')).toBe(
      ['broker:', '  host: mqtt.local', '  port: 8883', 'topics:', '  - telemetry', '  - alerts', ''].join(
        '\n',
      ),
    );
    expect(await readFile(h.rootPath('motion/deep/limits.yml'), 'utf8')).toBe(
      ['max_speed: 1.5', 'zones:', '  - id: 1', '    enabled: true', ''].join('\n'),
    );
    for (const file of ['app/settings.json', 'bridge/mqtt.yaml', 'motion/deep/limits.yml']) {
      expect(((await stat(h.rootPath(file))).mode & 0o7777).toString(8), file).toBe('644');
    }
    expect(((await stat(h.rootPath('motion/deep'))).mode & 0o7777).toString(8)).toBe('755');
    // The root holds the three files and their directories, nothing else (no temp files left behind).
    expect(Object.keys(await snapshotTree(h.rootDir)).sort()).toEqual([
      'app',
      'app/settings.json',
      'bridge',
      'bridge/mqtt.yaml',
      'motion',
      'motion/deep',
      'motion/deep/limits.yml',
    ]);

    for (const id of Object.values(ids)) {
      const instance = await h.instance(id);
      expect([instance.activity_status, instance.error_status], id).toEqual(['deployed', 'none']);
      expect((await h.reportsFor(id)).map((r) => [r.activity_status, r.error_status])).toEqual([
        ['deployed', 'none'],
      ]);
    }
    expect(await h.requestCount('PATCH /v1/config_instances/:id')).toBe(3);
    expect(await h.outbox()).toEqual([]);

    expect(result.stdout).toMatch(/^Converged: 3 written\./);
    for (const file of ['app/settings.json', 'bridge/mqtt.yaml', 'motion/deep/limits.yml']) {
      expect(result.stdout).toContain(file);
    }
    expect(result.stdout).toContain('Status reports: 3 delivered.');
    // stdout is only the summary: logs are JSON lines on stderr.
    expect(result.stdout).not.toMatch(/"level":/);
    expect(leaksApiKey(result)).toBe(false);
  });

  it('creates rootDir and a 0700 stateDir when they are missing', async () => {
    const h = await harness();
    await h.createAndDeploy({ relative_filepath: 'a.json', content: { a: 1 } });

    const result = await h.runOnce();

    expect(result.code).toBe(0);
    expect((await stat(h.stateDir)).mode & 0o777).toBe(0o700);
    expect(await readFile(h.rootPath('a.json'), 'utf8')).toBe('{\n  "a": 1\n}\n');
  });

  it('--json prints one object with the same facts', async () => {
    const h = await harness();
    const ids = await deployFleet(h);

    const result = await h.runOnce(['--json']);

    expect(result.code).toBe(0);
    expect(result.stdout.trim().split('\n')).toHaveLength(1);
    const summary = JSON.parse(result.stdout) as {
      converged: boolean;
      reachable: boolean;
      dryRun: boolean;
      counts: Record<string, number>;
      instances: { instanceId: string; path: string; action: string }[];
      reports: { delivered: number; pending: number; rejected: number };
    };
    expect(summary).toMatchObject({ converged: true, reachable: true, dryRun: false });
    expect(summary.counts).toMatchObject({ written: 3, failed: 0, retrying: 0, removed: 0 });
    expect(summary.reports).toMatchObject({ delivered: 3, pending: 0, rejected: 0 });
    expect(
      summary.instances
        .map((i) => [i.instanceId, i.path, i.action])
        .sort(([a], [b]) => String(a).localeCompare(String(b))),
    ).toEqual(
      [
        [ids.app, 'app/settings.json', 'written'],
        [ids.mqtt, 'bridge/mqtt.yaml', 'written'],
        [ids.limits, 'motion/deep/limits.yml', 'written'],
      ].sort(([a], [b]) => String(a).localeCompare(String(b))),
    );
    expect(leaksApiKey(result)).toBe(false);
  });
});

describe('config-agent --once: formats and paging', () => {
  it('unknown extensions are JSON, .YAML/.yml in any case are YAML', async () => {
    const h = await harness();
    await h.createAndDeploy({ relative_filepath: 'nginx/site.conf', content: { listen: 80 } });
    await h.createAndDeploy({ relative_filepath: 'noext', content: { n: null } });
    await h.createAndDeploy({
      relative_filepath: 'UPPER.YAML',
      content: { list: ['a'], nested: { k: 'v' } },
    });

    expect((await h.runOnce()).code).toBe(0);

    expect(await readFile(h.rootPath('nginx/site.conf'), 'utf8')).toBe('{\n  "listen": 80\n}\n');
    expect(await readFile(h.rootPath('noext'), 'utf8')).toBe('{\n  "n": null\n}\n');
    expect(await readFile(h.rootPath('UPPER.YAML'), 'utf8')).toBe('list:\n  - a\nnested:\n  k: v\n');
  });

  it('pulls every page: 230 deployed instances are all written and reported', async () => {
    const h = await harness();
    const count = 230;
    for (let i = 0; i < count; i += 1) {
      await h.createAndDeploy({
        relative_filepath: `many/f${String(i).padStart(3, '0')}.json`,
        content: { i },
      });
    }

    const result = await h.runOnce(['--json']);

    expect(result.code).toBe(0);
    const files = Object.keys(await snapshotTree(h.rootPath('many')));
    expect(files).toHaveLength(count);
    expect(await readFile(h.rootPath('many/f229.json'), 'utf8')).toBe('{\n  "i": 229\n}\n');
    expect(await h.requestCount('PATCH /v1/config_instances/:id')).toBe(count);
    // A full pass lists the device once (api/pager.ts `wide`), in pages of 100 that overlap by one item:
    // 0–99, 99–198, 198–229. The seven queries it stands for would take 11 (each instance listed twice).
    expect(await h.requestCount('GET /v1/config_instances')).toBe(3);
    const summary = JSON.parse(result.stdout) as { counts: Record<string, number> };
    expect(summary.counts.written).toBe(count);

    // The second pass sees them all in place: nothing written, nothing reported.
    const again = await h.runOnce(['--json']);
    expect(again.code).toBe(0);
    expect((JSON.parse(again.stdout) as { counts: Record<string, number> }).counts.unchanged).toBe(count);
    expect(await h.requestCount('PATCH /v1/config_instances/:id')).toBe(count);
  });
});

describe('config-agent --once: idempotence', () => {
  it('a second pass writes nothing: same inodes, mtimes, bytes; no report sent; exit 0', async () => {
    const h = await harness();
    const ids = await deployFleet(h);
    expect((await h.runOnce()).code).toBe(0);
    const rootBefore = await snapshotTree(h.rootDir, { identity: true });
    const stateBefore = await snapshotTree(h.stateDir, { identity: true });
    const patchesBefore = await h.requestCount('PATCH /v1/config_instances/:id');

    const second = await h.runOnce(['--json']);

    expect(second.code).toBe(0);
    expect(await snapshotTree(h.rootDir, { identity: true })).toEqual(rootBefore);
    // Local state is rewritten only when it changed: an idempotent pass leaves it alone too.
    expect(withoutFingerprints(await snapshotTree(h.stateDir, { identity: true }))).toEqual(
      withoutFingerprints(stateBefore),
    );
    expect(await h.requestCount('PATCH /v1/config_instances/:id')).toBe(patchesBefore);
    const summary = JSON.parse(second.stdout) as { converged: boolean; counts: Record<string, number> };
    expect(summary.converged).toBe(true);
    expect(summary.counts).toMatchObject({ unchanged: 3, written: 0 });
    for (const id of Object.values(ids)) expect(await h.reportsFor(id)).toHaveLength(1);

    const human = await h.runOnce();
    expect(human.code).toBe(0);
    expect(human.stdout).toMatch(/^Converged: 3 unchanged\./);
    expect(await snapshotTree(h.rootDir, { identity: true })).toEqual(rootBefore);
  });

  it('restores a managed file changed behind its back, and only that file', async () => {
    const h = await harness();
    await deployFleet(h);
    expect((await h.runOnce()).code).toBe(0);
    const before = await snapshotTree(h.rootDir, { identity: true });
    await writeFile(h.rootPath('app/settings.json'), '{"tampered": true}\n');

    const result = await h.runOnce(['--json']);

    expect(result.code).toBe(0);
    expect(await readFile(h.rootPath('app/settings.json'), 'utf8')).toBe(`${JSON.stringify(APP, null, 2)}\n`);
    const after = await snapshotTree(h.rootDir, { identity: true });
    for (const file of ['bridge/mqtt.yaml', 'motion/deep/limits.yml']) expect(after[file]).toBe(before[file]);
    const summary = JSON.parse(result.stdout) as { counts: Record<string, number> };
    expect(summary.counts).toMatchObject({ written: 1, unchanged: 2 });
  });

  it('puts back the configured mode of a managed file chmod-ed behind its back', async () => {
    const h = await harness();
    await deployFleet(h);
    expect((await h.runOnce()).code).toBe(0);
    await chmod(h.rootPath('bridge/mqtt.yaml'), 0o600);

    const result = await h.runOnce();

    expect(result.code).toBe(0);
    expect((await stat(h.rootPath('bridge/mqtt.yaml'))).mode & 0o7777).toBe(0o644);
    expect(await readFile(h.rootPath('bridge/mqtt.yaml'), 'utf8')).toContain('host: mqtt.local');
  });
});

/**
 * A state-directory snapshot without fingerprints.json: a cache, which a run writes when it comes more than
 * RACY_MARGIN_MS (3 s) after the files were last written (src/store/fingerprints.ts) — a matter of the machine's
 * load, not of what these tests check.
 */
/** Without the caches: the fingerprints, and the marker an idle run leaves for the next (store/clean-exit.ts). */
function withoutFingerprints(snapshot: Record<string, string>): Record<string, string> {
  const { [FINGERPRINTS_FILE]: _cache, [CLEAN_EXIT_FILE]: _marker, ...rest } = snapshot;
  return rest;
}

/**
 * Every entry under `dir` with bytes, mode, inode and mtime, except a directory's mtime: planting and then
 * sweeping a temp file moves it, and that is all it may move.
 */
async function entriesBesideTemps(dir: string): Promise<Record<string, string>> {
  const tree = await snapshotTree(dir, { identity: true });
  return Object.fromEntries(
    Object.entries(tree).map(([key, value]) => [
      key,
      value.startsWith('dir ') ? value.replace(/ mtime=\d+$/, '') : value,
    ]),
  );
}

describe('config-agent --once: temp files left by a crash', () => {
  it('sweeps them from rootDir and stateDir at start, touches nothing else, and says which', async () => {
    const h = await harness();
    await h.createAndDeploy({ relative_filepath: 'a/app.json', content: { a: 1 } });
    expect((await h.runOnce()).code).toBe(0);
    const rootTemp = `a/${TEMP_PREFIX}dead1`;
    const stateTemp = `${TEMP_PREFIX}dead2`;
    // Beside them: an operator's files, including names that only look like ours.
    await mkdir(h.rootPath('b'), { recursive: true });
    await writeFile(h.rootPath('a/notes.txt'), 'operator notes\n');
    await writeFile(h.rootPath('b/x.config-agent.tmp-zzz'), 'prefix not at the start\n');
    await writeFile(h.rootPath('b/.config-agent.tmp'), 'prefix without its dash\n');
    await writeFile(path.join(h.stateDir, 'operator-backup.json'), '{"keep": true}\n', { mode: 0o600 });
    const rootBefore = await entriesBesideTemps(h.rootDir);
    const stateBefore = await entriesBesideTemps(h.stateDir);
    await writeFile(h.rootPath(rootTemp), '{"a": tor');
    await writeFile(path.join(h.stateDir, stateTemp), '{"version": 1, "fil');

    const result = await h.runOnce(['--json']);

    expect(result.code).toBe(0);
    // Both temp files gone; every other entry byte-identical, same inode and mtime.
    expect(await entriesBesideTemps(h.rootDir)).toEqual(rootBefore);
    expect(withoutFingerprints(await entriesBesideTemps(h.stateDir))).toEqual(
      withoutFingerprints(stateBefore),
    );
    const summary = JSON.parse(result.stdout) as { sweptTempFiles: string[]; converged: boolean };
    expect(summary.sweptTempFiles).toEqual([rootTemp]);
    expect(summary.converged).toBe(true);
    const warnings = result.stderr
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line) as { level: string; msg: string; files?: string[] })
      .filter((line) => line.level === 'warn' && line.files !== undefined);
    expect(warnings).toMatchObject([{ msg: expect.stringMatching(/temp files/), files: [rootTemp] }]);
    expect(leaksApiKey(result)).toBe(false);

    // Nothing left to sweep: the next pass reports none.
    const again = await h.runOnce(['--json']);
    expect((JSON.parse(again.stdout) as { sweptTempFiles: string[] }).sweptTempFiles).toEqual([]);
    expect(again.stderr).not.toContain(TEMP_PREFIX);
  });
});
