// `config-agent --once` retiring instances: removal of files it wrote, files it cannot prove it wrote, archives.
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
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

const statuses = async (h: AgentHarness, id: string) => {
  const instance = await h.instance(id);
  return [instance.target_status, instance.activity_status, instance.error_status];
};

describe('config-agent --once: removal', () => {
  it('deletes the file it wrote, prunes the directories it created, reports removed, exits 0', async () => {
    const h = await harness();
    const gone = (await h.createAndDeploy({ relative_filepath: 'svc/deep/er/gone.json', content: { x: 1 } }))
      .deploy;
    const stays = (await h.createAndDeploy({ relative_filepath: 'stays.yaml', content: { y: 2 } })).deploy;
    expect((await h.runOnce()).code).toBe(0);
    // A directory the agent did not create is never pruned, even when it ends up empty.
    await mkdir(h.rootPath('svc/operator-dir'));
    const staysBefore = (await snapshotTree(h.rootDir, { identity: true }))['stays.yaml'];

    await h.removeInstance(gone.id);
    const result = await h.runOnce(['--json']);

    expect(result.code).toBe(0);
    expect(await snapshotTree(h.rootDir)).toEqual({
      svc: 'dir 755',
      'svc/operator-dir': 'dir 755',
      'stays.yaml': `file 644 ${Buffer.from('"y": 2\n').toString('base64')}`, // "y" is a boolean to YAML 1.1 readers
    });
    expect((await snapshotTree(h.rootDir, { identity: true }))['stays.yaml']).toBe(staysBefore);
    expect(await statuses(h, gone.id)).toEqual(['removed', 'removed', 'none']);
    expect(await statuses(h, stays.id)).toEqual(['deployed', 'deployed', 'none']);
    expect((await h.reportsFor(gone.id)).map((r) => [r.activity_status, r.error_status, r.message])).toEqual([
      ['deployed', 'none', undefined],
      ['removed', 'none', undefined],
    ]);
    const summary = JSON.parse(result.stdout) as { converged: boolean; counts: Record<string, number> };
    expect(summary).toMatchObject({ converged: true, counts: { removed: 1, unchanged: 1 } });
    expect(leaksApiKey(result)).toBe(false);
  });

  it('prunes every directory it created once the last file in them is gone', async () => {
    const h = await harness();
    const only = (await h.createAndDeploy({ relative_filepath: 'a/b/c/only.json', content: { z: 0 } }))
      .deploy;
    expect((await h.runOnce()).code).toBe(0);

    await h.removeInstance(only.id);
    const result = await h.runOnce();

    expect(result.code).toBe(0);
    expect(await snapshotTree(h.rootDir)).toEqual({});
    expect(result.stdout).toMatch(/removed\s+a\/b\/c\/only\.json/);
  });

  it('never deletes a file it cannot prove it wrote (local state lost): reports removed, file kept', async () => {
    const h = await harness();
    const instance = (await h.createAndDeploy({ relative_filepath: 'etc/app.json', content: { v: 1 } }))
      .deploy;
    expect((await h.runOnce()).code).toBe(0);
    // Someone else now owns the bytes at that path, and the agent's memory of writing it is gone.
    await writeFile(h.rootPath('etc/app.json'), 'operator-managed\n');
    await h.forgetState();
    await h.removeInstance(instance.id);
    const before = await snapshotTree(h.rootDir, { identity: true });

    const result = await h.runOnce();

    expect(result.code).toBe(0);
    expect(await snapshotTree(h.rootDir, { identity: true })).toEqual(before);
    expect(await readFile(h.rootPath('etc/app.json'), 'utf8')).toBe('operator-managed\n');
    expect(await statuses(h, instance.id)).toEqual(['removed', 'removed', 'none']);
    const last = (await h.reportsFor(instance.id)).at(-1);
    expect(last).toMatchObject({ activity_status: 'removed', error_status: 'none' });
    expect(last?.message).toMatch(/not recorded as written by this agent/);
  });

  it('with local state lost, the agent does not delete even its own unmodified bytes', async () => {
    const h = await harness();
    const instance = (await h.createAndDeploy({ relative_filepath: 'own.json', content: { v: 1 } })).deploy;
    expect((await h.runOnce()).code).toBe(0);
    await h.forgetState();
    await h.removeInstance(instance.id);
    const before = await snapshotTree(h.rootDir, { identity: true });

    const result = await h.runOnce();

    expect(result.code).toBe(0);
    expect(await snapshotTree(h.rootDir, { identity: true })).toEqual(before);
    expect(await statuses(h, instance.id)).toEqual(['removed', 'removed', 'none']);
  });

  it('a corrupt local state never leads to a deletion: the file stays, the instance is reported removed', async () => {
    const h = await harness();
    const instance = (await h.createAndDeploy({ relative_filepath: 'kept.json', content: { v: 1 } })).deploy;
    expect((await h.runOnce()).code).toBe(0);
    await writeFile(
      path.join(h.stateDir, 'state.json'),
      '{"version": 1, "deviceId": "dvc_it_01", "files": [tru',
    );
    await h.removeInstance(instance.id);
    const before = await snapshotTree(h.rootDir, { identity: true });

    const result = await h.runOnce();

    expect(result.code).toBe(0);
    expect(await snapshotTree(h.rootDir, { identity: true })).toEqual(before);
    expect(await statuses(h, instance.id)).toEqual(['removed', 'removed', 'none']);
    expect(result.stderr).toMatch(/local state is corrupt/);
  });
});

describe('config-agent --once: archive of a never-deployed instance', () => {
  it('reports removed and leaves the disk untouched, even a file at its path', async () => {
    const h = await harness();
    const keeper = (await h.createAndDeploy({ relative_filepath: 'keeper.json', content: { k: 1 } })).deploy;
    expect((await h.runOnce()).code).toBe(0);
    // A file at the archived instance's path that the agent never wrote.
    await mkdir(h.rootPath('never'), { recursive: true });
    await writeFile(h.rootPath('never/deployed.json'), "not the agent's\n");
    const created = await h.createInstance({ relative_filepath: 'never/deployed.json', content: { n: 1 } });
    await h.deploy(created.id);
    await h.removeInstance(created.id);
    expect(await statuses(h, created.id)).toEqual(['removed', 'queued', 'none']);
    const rootBefore = await snapshotTree(h.rootDir, { identity: true });

    const result = await h.runOnce(['--json']);

    expect(result.code).toBe(0);
    expect(await snapshotTree(h.rootDir, { identity: true })).toEqual(rootBefore);
    expect(await statuses(h, created.id)).toEqual(['removed', 'removed', 'none']);
    expect((await h.reportsFor(created.id)).map((r) => [r.activity_status, r.error_status])).toEqual([
      ['removed', 'none'],
    ]);
    expect(await statuses(h, keeper.id)).toEqual(['deployed', 'deployed', 'none']);
    const summary = JSON.parse(result.stdout) as { instances: { instanceId: string; action: string }[] };
    expect(summary.instances.find((i) => i.instanceId === created.id)?.action).toBe('archived');
  });

  it('archives an instance removed before it was ever deployed (activity still created); leaves drafts alone', async () => {
    const h = await harness();
    const removedDraft = await h.createInstance({ relative_filepath: 'draft.json', content: { n: 1 } });
    await h.removeInstance(removedDraft.id);
    const draft = await h.createInstance({ relative_filepath: 'other.json', content: { n: 2 } });
    expect(await statuses(h, removedDraft.id)).toEqual(['removed', 'created', 'none']);

    const result = await h.runOnce();

    expect(result.code).toBe(0);
    expect(await snapshotTree(h.rootDir)).toEqual({});
    expect(await statuses(h, removedDraft.id)).toEqual(['removed', 'removed', 'none']);
    expect(await statuses(h, draft.id)).toEqual(['created', 'created', 'none']);
    expect(await h.reportsFor(draft.id)).toEqual([]);
  });

  it('archives on a device the agent never synced before: the root stays empty', async () => {
    const h = await harness();
    const created = await h.createInstance({ relative_filepath: 'x.json', content: { n: 1 } });
    await h.deploy(created.id);
    await h.removeInstance(created.id);

    const result = await h.runOnce();

    expect(result.code).toBe(0);
    expect(await snapshotTree(h.rootDir)).toEqual({});
    expect(await statuses(h, created.id)).toEqual(['removed', 'removed', 'none']);
    expect(result.stdout).toMatch(/archived\s+x\.json/);
  });
});
