// `config-agent --once` when a deploy replaces an instance: same path, same config schema, and a double claim.
import { access, readFile } from 'node:fs/promises';
import { afterEach, describe, expect, it } from 'vitest';
import type { Fixtures } from '../../src/api/admin-schemas.js';
import { AgentHarness, leaksApiKey, snapshotTree } from '../helpers/harness.js';

const harnesses: AgentHarness[] = [];
async function harness(fixtures?: Fixtures): Promise<AgentHarness> {
  const created = await AgentHarness.create({
    registerDevice: true,
    ...(fixtures === undefined ? {} : { fixtures }),
  });
  harnesses.push(created);
  return created;
}

afterEach(async () => {
  await Promise.all(harnesses.splice(0).map((h) => h.close()));
});

const json = (content: unknown) => `${JSON.stringify(content, null, 2)}\n`;
const statuses = async (h: AgentHarness, id: string) => {
  const instance = await h.instance(id);
  return [instance.target_status, instance.activity_status, instance.error_status];
};
const exists = (file: string) =>
  access(file).then(
    () => true,
    () => false,
  );

describe('config-agent --once: deploy with conflict', () => {
  it('same path: the file gets the new bytes, the old instance is reported removed, the new one deployed', async () => {
    const h = await harness();
    const a = (await h.createAndDeploy({ relative_filepath: 'app/a.json', content: { version: 'A' } }))
      .deploy;
    expect((await h.runOnce()).code).toBe(0);
    expect(await readFile(h.rootPath('app/a.json'), 'utf8')).toBe(json({ version: 'A' }));

    const b = await h.createInstance({
      relative_filepath: 'app/a.json',
      content: { version: 'B', extra: [1, 2] },
    });
    const deployed = await h.deploy(b.id);
    // The service queued A for removal because B took its path.
    expect(deployed.remove.map((r) => [r.config_instance.id, r.code])).toEqual([
      [a.id, 'device_file_path_conflict'],
    ]);

    const result = await h.runOnce(['--json']);

    expect(result.code).toBe(0);
    expect(await readFile(h.rootPath('app/a.json'), 'utf8')).toBe(json({ version: 'B', extra: [1, 2] }));
    expect(Object.keys(await snapshotTree(h.rootDir)).sort()).toEqual(['app', 'app/a.json']);
    expect(await statuses(h, a.id)).toEqual(['removed', 'removed', 'none']);
    expect(await statuses(h, b.id)).toEqual(['deployed', 'deployed', 'none']);
    expect((await h.reportsFor(a.id)).map((r) => r.activity_status)).toEqual(['deployed', 'removed']);
    expect((await h.reportsFor(b.id)).map((r) => [r.activity_status, r.error_status])).toEqual([
      ['deployed', 'none'],
    ]);
    const summary = JSON.parse(result.stdout) as { converged: boolean; instances: { instanceId: string }[] };
    expect(summary.converged).toBe(true);
    expect(summary.instances.map((i) => i.instanceId).sort()).toEqual([a.id, b.id].sort());
    expect(leaksApiKey(result)).toBe(false);

    // Converged means converged: the next pass has nothing to do.
    const before = await snapshotTree(h.rootDir, { identity: true });
    const again = await h.runOnce();
    expect(again.code).toBe(0);
    expect(await snapshotTree(h.rootDir, { identity: true })).toEqual(before);
    expect(await h.reports()).toHaveLength(3);
  });

  it('same config schema at another path: the old file is gone (its directory pruned), the new one written', async () => {
    const h = await harness();
    const a = (
      await h.createAndDeploy({
        relative_filepath: 'old/nested/motion.json',
        content: { pid: [1, 2, 3] },
        config_schema_id: 'cfs_motion',
      })
    ).deploy;
    const keep = (await h.createAndDeploy({ relative_filepath: 'old/keep.json', content: { keep: true } }))
      .deploy;
    expect((await h.runOnce()).code).toBe(0);
    expect(await exists(h.rootPath('old/nested/motion.json'))).toBe(true);

    const b = await h.createInstance({
      relative_filepath: 'new/motion.json',
      content: { pid: [4, 5, 6] },
      config_schema_id: 'cfs_motion',
    });
    const deployed = await h.deploy(b.id);
    expect(deployed.remove.map((r) => [r.config_instance.id, r.code])).toEqual([
      [a.id, 'device_config_schema_conflict'],
    ]);

    const result = await h.runOnce();

    expect(result.code).toBe(0);
    expect(await readFile(h.rootPath('new/motion.json'), 'utf8')).toBe(json({ pid: [4, 5, 6] }));
    // The agent created old/nested for A: pruned once empty. old/ still holds another instance's file.
    expect(Object.keys(await snapshotTree(h.rootDir)).sort()).toEqual([
      'new',
      'new/motion.json',
      'old',
      'old/keep.json',
    ]);
    expect(await statuses(h, a.id)).toEqual(['removed', 'removed', 'none']);
    expect(await statuses(h, b.id)).toEqual(['deployed', 'deployed', 'none']);
    expect(await statuses(h, keep.id)).toEqual(['deployed', 'deployed', 'none']);
    expect(result.stdout).toMatch(/^Converged: /);
    expect(result.stdout).toMatch(/removed\s+old\/nested\/motion\.json/);
    expect(result.stdout).toMatch(/written\s+new\/motion\.json/);
  });

  it('two instances targeting deployed at one path: the newer wins, the other is refused (retrying), exit 1', async () => {
    const deviceId = 'dvc_it_01';
    const h = await harness({
      devices: [{ id: deviceId }],
      config_instances: [
        {
          id: 'cfg_older',
          device_id: deviceId,
          relative_filepath: 'shared/x.json',
          content: { owner: 'older' },
          target_status: 'deployed',
          activity_status: 'queued',
          created_at: '2025-10-01T10:00:00Z',
          updated_at: '2025-10-01T10:00:00Z',
        },
        {
          id: 'cfg_newer',
          device_id: deviceId,
          relative_filepath: 'shared/x.json',
          content: { owner: 'newer' },
          target_status: 'deployed',
          activity_status: 'queued',
          created_at: '2025-10-01T09:00:00Z',
          updated_at: '2025-10-01T11:00:00Z',
        },
      ],
    });

    const result = await h.runOnce();

    expect(result.code).toBe(1);
    expect(await readFile(h.rootPath('shared/x.json'), 'utf8')).toBe(json({ owner: 'newer' }));
    expect(await statuses(h, 'cfg_newer')).toEqual(['deployed', 'deployed', 'none']);
    expect(await statuses(h, 'cfg_older')).toEqual(['deployed', 'queued', 'retrying']);
    const [refusal] = await h.reportsFor('cfg_older');
    expect(refusal?.error_status).toBe('retrying');
    expect(refusal?.message).toContain('cfg_older');
    expect(refusal?.message).toContain('cfg_newer');
    expect(result.stdout).toMatch(/^Not converged: /);
    expect(result.stdout).toMatch(/refused\s+shared\/x\.json \(cfg_older\)/);

    // The agent's own reports move `updated_at` on the service; they are not an operator's update, so the
    // winner stays the winner: no flip-flop, no rewrite, no new report on later passes.
    const identity = await snapshotTree(h.rootDir, { identity: true });
    const reportCount = (await h.reports()).length;
    for (let pass = 0; pass < 2; pass += 1) {
      expect((await h.runOnce()).code).toBe(1);
      expect(await snapshotTree(h.rootDir, { identity: true })).toEqual(identity);
    }
    expect(await h.reports()).toHaveLength(reportCount);

    // An operator's real update of the loser does make it the newer one.
    await h.deploy('cfg_older');
    expect((await h.runOnce()).code).toBe(0);
    expect(await readFile(h.rootPath('shared/x.json'), 'utf8')).toBe(json({ owner: 'older' }));
  });
});
