// `config-agent --once` against hostile server paths and symlinks planted in the root: nothing escapes the root.
import { access, mkdir, readFile, readlink, rm, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AgentHarness, leaksApiKey, snapshotTree } from '../helpers/harness.js';

let h: AgentHarness;
let sentinel: string;

/** A directory BESIDE the root, holding files a path escape would overwrite or delete. */
async function plantSentinel(dir: string): Promise<void> {
  await mkdir(path.join(dir, 'sub'), { recursive: true });
  await writeFile(path.join(dir, 'escape.json'), 'sentinel: escape\n', { mode: 0o600 });
  await writeFile(path.join(dir, 'b.json'), 'sentinel: b\n', { mode: 0o640 });
  await writeFile(path.join(dir, 'x.json'), 'sentinel: x\n');
  await writeFile(path.join(dir, 'file.json'), 'sentinel: file\n');
  await writeFile(path.join(dir, 'sub', 'deep.json'), 'sentinel: deep\n', { mode: 0o444 });
}

beforeEach(async () => {
  h = await AgentHarness.create({ registerDevice: true });
  sentinel = path.join(h.dir, 'sentinel');
  await plantSentinel(sentinel);
  await mkdir(h.rootDir, { recursive: true });
});

afterEach(async () => {
  await h.close();
});

const exists = (file: string) =>
  access(file).then(
    () => true,
    () => false,
  );

const statuses = async (id: string) => {
  const instance = await h.instance(id);
  return [instance.target_status, instance.activity_status, instance.error_status];
};

describe('config-agent --once: hostile paths', () => {
  it('fails every hostile instance with a reason, writes the good ones, touches nothing outside the root', async () => {
    const etcProbe = '/etc/x.json';
    const etcExisted = await exists(etcProbe);
    const hostile: Record<string, RegExp> = {
      '../escape.json': /"\.\." segment/,
      '../sentinel/escape.json': /"\.\." segment/,
      [path.join(sentinel, 'abs.json')]: /absolute/,
      [etcProbe]: /absolute/,
      'a/../../b.json': /"\.\." segment/,
      'a/../../sentinel/b.json': /"\.\." segment/,
      'a\\b.json': /backslash/,
      '..\\sentinel\\x.json': /backslash/,
      'nul\u0000.json': /NUL or control character/,
      'line\nbreak.json': /NUL or control character/,
      '.config-agent.tmp-x': /reserved temp-file prefix/,
      'sub/.config-agent.tmp-y.json': /reserved temp-file prefix/,
      [`${'s'.repeat(300)}.json`]: /longer than 255 bytes/,
      './dot.json': /"\." or "\.\." segment/,
      'a//b.json': /empty segment/,
      'trailing/': /empty segment/,
      '': /is empty/,
      'cafe\u0301.json': /NFC/,
    };
    const ids = new Map<string, string>();
    let n = 0;
    for (const relativePath of Object.keys(hostile)) {
      n += 1;
      // Explicit schemas: the mock's default schema id is derived from the path and would make these collide.
      const deployed = await h.createAndDeploy({
        relative_filepath: relativePath,
        content: { hostile: n },
        config_schema_id: `cfs_hostile_${n}`,
      });
      ids.set(relativePath, deployed.deploy.id);
    }
    const good = (await h.createAndDeploy({ relative_filepath: 'good/ok.json', content: { ok: true } }))
      .deploy;
    const good2 = (await h.createAndDeploy({ relative_filepath: 'b.json', content: { ok: 2 } })).deploy;
    const sentinelBefore = await snapshotTree(sentinel, { identity: true });

    const result = await h.runOnce(['--json']);

    expect(result.code).toBe(1);
    expect(await snapshotTree(sentinel, { identity: true })).toEqual(sentinelBefore);
    // Beside the root only what the harness put there: nothing landed in the parent directory.
    expect(
      Object.keys(await snapshotTree(h.dir))
        .filter((name) => !name.includes('/'))
        .sort(),
    ).toEqual(['api-key', 'config.json', 'root', 'sentinel', 'state']);
    expect(await exists(etcProbe)).toBe(etcExisted);
    expect(await snapshotTree(h.rootDir)).toEqual({
      'b.json': `file 644 ${Buffer.from('{\n  "ok": 2\n}\n').toString('base64')}`,
      good: 'dir 755',
      'good/ok.json': `file 644 ${Buffer.from('{\n  "ok": true\n}\n').toString('base64')}`,
    });

    for (const [relativePath, reason] of Object.entries(hostile)) {
      const id = ids.get(relativePath)!;
      const reports = await h.reportsFor(id);
      expect(
        reports.map((r) => r.error_status),
        JSON.stringify(relativePath),
      ).toEqual(['failed']);
      expect(reports[0]?.message, JSON.stringify(relativePath)).toMatch(/^path rejected: /);
      expect(reports[0]?.message, JSON.stringify(relativePath)).toMatch(reason);
      expect(await statuses(id)).toEqual(['deployed', 'queued', 'failed']);
    }
    expect(await statuses(good.id)).toEqual(['deployed', 'deployed', 'none']);
    expect(await statuses(good2.id)).toEqual(['deployed', 'deployed', 'none']);

    const summary = JSON.parse(result.stdout) as {
      converged: boolean;
      counts: Record<string, number>;
      instances: { instanceId: string; action: string; message?: string }[];
    };
    expect(summary.converged).toBe(false);
    expect(summary.counts).toMatchObject({ written: 2, failed: Object.keys(hostile).length });
    // A hostile path is quoted in messages: a control character cannot forge a log line or a summary line.
    expect(result.stdout.trim().split('\n')).toHaveLength(1);
    for (const line of result.stderr.trim().split('\n')) expect(() => JSON.parse(line)).not.toThrow();
    expect(leaksApiKey(result)).toBe(false);

    // A failed instance is never touched again: the next pass leaves everything as it is.
    const rootBefore = await snapshotTree(h.rootDir, { identity: true });
    const reportsBefore = (await h.reports()).length;
    const again = await h.runOnce();
    expect(again.code).toBe(1);
    expect(await snapshotTree(h.rootDir, { identity: true })).toEqual(rootBefore);
    expect(await snapshotTree(sentinel, { identity: true })).toEqual(sentinelBefore);
    expect(await h.reports()).toHaveLength(reportsBefore);
    expect(again.stdout).toMatch(/untouched/);
  });

  it('the human summary names each failed instance and why', async () => {
    const bad = (await h.createAndDeploy({ relative_filepath: '../escape.json', content: { x: 1 } })).deploy;

    const result = await h.runOnce();

    expect(result.code).toBe(1);
    expect(result.stdout).toMatch(/^Not converged: 1 failed\./);
    expect(result.stdout).toContain(`failed    ../escape.json (${bad.id}) — path rejected:`);
    expect(await snapshotTree(h.rootDir)).toEqual({});
  });

  it('control characters in server paths and ids cannot forge summary lines or drive the terminal', async () => {
    const forged = 'x\nConverged: 0 failed.json';
    const terminalEscape = 'evil\u001b[2J\u009b31m\u202e.json';
    await h.createAndDeploy({ relative_filepath: forged, content: { a: 1 }, config_schema_id: 'cfs_forged' });
    await h.createAndDeploy({
      relative_filepath: terminalEscape,
      content: { a: 2 },
      config_schema_id: 'cfs_escape',
    });
    await h.createAndDeploy({
      id: 'cfg_evil\u001b]0;pwned\u0007',
      relative_filepath: 'fine.json',
      content: { a: 3 },
    });

    const plan = await h.runOnce(['--dry-run']);
    const result = await h.runOnce();

    expect(result.code).toBe(1);
    for (const output of [plan.stdout, result.stdout]) {
      // No C0/C1 control character other than the line breaks the summary itself puts between lines.
      expect(output.replaceAll('\n', '')).not.toMatch(/[\p{Cc}\u202e]/u);
      expect(output.split('\n').filter((line) => line.startsWith('Converged'))).toEqual([]);
    }
    expect(result.stdout).toMatch(/^Not converged: 1 written, 2 failed\./);
    expect(result.stdout).toContain('"x\\nConverged: 0 failed.json"');
    expect(result.stdout).toContain('"evil\\u001b[2J\\u009b31m\\u202e.json"');
    expect(result.stdout).toContain('"cfg_evil\\u001b]0;pwned\\u0007"');
    expect(await readFile(h.rootPath('fine.json'), 'utf8')).toBe('{\n  "a": 3\n}\n');
  });
});

describe('config-agent --once: symlinks planted in the root', () => {
  it('a symlinked directory in the root: the instance retries (an obstacle on disk), nothing is written through it', async () => {
    await symlink('../sentinel', h.rootPath('link'));
    const through = (await h.createAndDeploy({ relative_filepath: 'link/x.json', content: { evil: 1 } }))
      .deploy;
    const overwrite = (
      await h.createAndDeploy({ relative_filepath: 'link/escape.json', content: { evil: 2 } })
    ).deploy;
    const deeper = (await h.createAndDeploy({ relative_filepath: 'link/sub/new.json', content: { evil: 3 } }))
      .deploy;
    const good = (await h.createAndDeploy({ relative_filepath: 'ok.json', content: { ok: 1 } })).deploy;
    const sentinelBefore = await snapshotTree(sentinel, { identity: true });

    const result = await h.runOnce();

    expect(result.code).toBe(1);
    expect(await snapshotTree(sentinel, { identity: true })).toEqual(sentinelBefore);
    expect(await readlink(h.rootPath('link'))).toBe('../sentinel');
    for (const id of [through.id, overwrite.id, deeper.id]) {
      expect(await statuses(id)).toEqual(['deployed', 'queued', 'retrying']);
      expect((await h.reportsFor(id))[0]?.message).toMatch(/crosses a symlink/);
    }
    expect(await readFile(h.rootPath('ok.json'), 'utf8')).toBe('{\n  "ok": 1\n}\n');
    expect(await statuses(good.id)).toEqual(['deployed', 'deployed', 'none']);
  });

  it('a symlink at the target file: the instance retries and the symlink and its target are untouched', async () => {
    await symlink('../sentinel/file.json', h.rootPath('target.json'));
    await symlink(path.join(sentinel, 'x.json'), h.rootPath('absolute-target.json'));
    const relative = (await h.createAndDeploy({ relative_filepath: 'target.json', content: { evil: 1 } }))
      .deploy;
    const absolute = (
      await h.createAndDeploy({ relative_filepath: 'absolute-target.json', content: { evil: 2 } })
    ).deploy;
    const sentinelBefore = await snapshotTree(sentinel, { identity: true });
    const rootBefore = await snapshotTree(h.rootDir, { identity: true });

    const result = await h.runOnce();

    expect(result.code).toBe(1);
    expect(await snapshotTree(sentinel, { identity: true })).toEqual(sentinelBefore);
    expect(await snapshotTree(h.rootDir, { identity: true })).toEqual(rootBefore);
    for (const id of [relative.id, absolute.id]) {
      expect(await statuses(id)).toEqual(['deployed', 'queued', 'retrying']);
      expect((await h.reportsFor(id))[0]?.message).toMatch(
        /^write failed: path rejected: .* crosses a symlink \(the target itself\); something on the device is in the way of the path/,
      );
    }
  });

  it('a directory swapped for a symlink after a sync: removal deletes nothing through it', async () => {
    const instance = (await h.createAndDeploy({ relative_filepath: 'd/file.json', content: { v: 1 } }))
      .deploy;
    expect((await h.runOnce()).code).toBe(0);
    // The managed directory is replaced by a symlink to a directory holding a file of the same name.
    await rm(h.rootPath('d'), { recursive: true });
    await symlink('../sentinel', h.rootPath('d'));
    await h.removeInstance(instance.id);
    const sentinelBefore = await snapshotTree(sentinel, { identity: true });

    const result = await h.runOnce();

    expect(await snapshotTree(sentinel, { identity: true })).toEqual(sentinelBefore);
    expect(await readlink(h.rootPath('d'))).toBe('../sentinel');
    expect(await readFile(path.join(sentinel, 'file.json'), 'utf8')).toBe('sentinel: file\n');
    // The file the agent wrote is no longer reachable without crossing the symlink: retried (never an attempt)
    // until the way is cleared.
    expect(result.code).toBe(1);
    expect(await statuses(instance.id)).toEqual(['removed', 'deployed', 'retrying']);
    expect((await h.reportsFor(instance.id)).at(-1)?.message).toMatch(
      /^remove failed: path rejected: "d\/file.json" crosses a symlink \(d\); something on the device is in the way of the path/,
    );
  });
});
