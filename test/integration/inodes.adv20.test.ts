// adv20: `config-agent --once` on a rootDir whose filesystem has bytes to spare but no inode left (a tiny tmpfs
// with nr_inodes): what lands is whole and reported, the rest waits without an attempt, and it converges.
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { TEMP_PREFIX } from '../../src/store/path-guard.js';
import { skipWithoutRoot } from '../helpers/built-packages.js';
import { AgentHarness, leaksApiKey, tryMount, unmount } from '../helpers/harness.js';

const PROBE = mkdtempSync(path.join(os.tmpdir(), 'config-agent-inode-probe-'));
function probeTmpfs(): string | undefined {
  const dir = path.join(PROBE, 'm');
  mkdirSync(dir);
  const reason = tryMount(['-t', 'tmpfs', '-o', 'size=1m,nr_inodes=8', 'tmpfs', dir]);
  if (reason === undefined) unmount(dir);
  return reason;
}
const probed = probeTmpfs();
rmSync(PROBE, { recursive: true, force: true });
const SKIP = probed === undefined ? undefined : skipWithoutRoot(probed);
if (SKIP !== undefined) process.stderr.write(`inodes.adv20.test: skipped: ${SKIP}\n`);

const harnesses: AgentHarness[] = [];
const mounted: string[] = [];

afterEach(async () => {
  for (const dir of mounted.splice(0)) unmount(dir);
  await Promise.all(harnesses.splice(0).map((h) => h.close()));
});

const json = (content: unknown) => `${JSON.stringify(content, null, 2)}\n`;

describe.skipIf(SKIP !== undefined)('rootDir out of inodes', { timeout: 120_000 }, () => {
  it('writes what fits whole, reports the rest retrying (no attempt), converges once inodes return', async () => {
    const h = await AgentHarness.create({ registerDevice: true });
    harnesses.push(h);
    await mkdir(h.rootDir);
    // The root directory takes one inode; a file takes one, and one more for its temp file while it is written.
    const mountArgs = ['-t', 'tmpfs', '-o', 'size=4m,nr_inodes=6,mode=0755', 'tmpfs', h.rootDir];
    const reason = tryMount(mountArgs);
    if (reason !== undefined) throw new Error(reason);
    mounted.push(h.rootDir);
    await h.writeConfig({ retry: { maxAttempts: 1, baseDelaySeconds: 0.01, maxDelaySeconds: 1 } });
    const ids: { id: string; file: string; content: unknown }[] = [];
    for (let i = 0; i < 12; i += 1) {
      const content = { n: i, pad: 'p'.repeat(200) };
      const file = `f${String(i).padStart(2, '0')}.json`;
      const { deploy } = await h.createAndDeploy({ relative_filepath: file, content });
      ids.push({ id: deploy.id, file, content });
    }

    for (let run = 0; run < 2; run += 1) {
      const result = await h.runOnce();
      expect(result.code).toBe(1);
      expect(leaksApiKey(result)).toBe(false);
      const names = await readdir(h.rootDir);
      expect(names.filter((name) => name.startsWith(TEMP_PREFIX))).toEqual([]);
      let written = 0;
      for (const { id, file, content } of ids) {
        const instance = await h.instance(id);
        const told = await h.reportsFor(id);
        // Never failed (final), however many runs: a disk out of inodes is the device's condition.
        expect(told.map((r) => r.error_status)).not.toContain('failed');
        if (names.includes(file)) {
          written += 1;
          expect(await readFile(h.rootPath(file), 'utf8')).toBe(json(content));
          expect([instance.activity_status, instance.error_status]).toEqual(['deployed', 'none']);
        } else {
          expect([instance.activity_status, instance.error_status]).toEqual(['queued', 'retrying']);
          expect(told.at(-1)?.message).toMatch(/ENOSPC.*the disk holding rootDir is full/);
        }
      }
      expect(written).toBeGreaterThan(0);
      expect(written).toBeLessThan(ids.length);
    }

    const more = tryMount(['-o', 'remount,nr_inodes=64', h.rootDir]);
    if (more !== undefined) throw new Error(more);
    const last = await h.runOnce();
    expect(last.code).toBe(0);
    for (const { id, file, content } of ids) {
      expect(await readFile(h.rootPath(file), 'utf8')).toBe(json(content));
      const instance = await h.instance(id);
      expect([instance.activity_status, instance.error_status]).toEqual(['deployed', 'none']);
    }
    expect((await readdir(h.rootDir)).filter((name) => name.startsWith(TEMP_PREFIX))).toEqual([]);
  });

  it('stateDir out of inodes: nothing is written or reported deployed that is not recorded; converges after', async () => {
    const h = await AgentHarness.create({ registerDevice: true });
    harnesses.push(h);
    await mkdir(h.stateDir, { recursive: true, mode: 0o700 });
    const reason = tryMount(['-t', 'tmpfs', '-o', 'size=4m,nr_inodes=64,mode=0700', 'tmpfs', h.stateDir]);
    if (reason !== undefined) throw new Error(reason);
    mounted.push(h.stateDir);
    await h.writeConfig({ retry: { maxAttempts: 1, baseDelaySeconds: 0.01, maxDelaySeconds: 1 } });
    const first = await h.createAndDeploy({ relative_filepath: 'a.json', content: { n: 'a' } });
    expect((await h.runOnce()).code).toBe(0);
    // Every inode left taken by files of someone else's.
    const filler = path.join(h.stateDir, 'filler');
    await mkdir(filler);
    for (let i = 0; ; i += 1) {
      const full = await writeFile(path.join(filler, String(i)), '').then(
        () => false,
        (error: NodeJS.ErrnoException) => {
          if (error.code !== 'ENOSPC') throw error;
          return true;
        },
      );
      if (full) break;
    }
    const later = [];
    for (let i = 0; i < 3; i += 1) {
      later.push((await h.createAndDeploy({ relative_filepath: `b${i}.json`, content: { n: i } })).deploy.id);
    }
    for (let run = 0; run < 2; run += 1) {
      const result = await h.runOnce();
      expect(result.code).not.toBe(0);
      expect(leaksApiKey(result)).toBe(false);
      // Nothing made in the root that the agent could not first declare in stateDir.
      expect((await readdir(h.rootDir)).sort()).toEqual(['a.json']);
      for (const id of later) {
        const instance = await h.instance(id);
        expect(instance.activity_status).toBe('queued');
        expect((await h.reportsFor(id)).map((r) => r.error_status)).not.toContain('failed');
      }
      expect((await h.instance(first.deploy.id)).activity_status).toBe('deployed');
    }
    await rm(filler, { recursive: true });
    expect((await h.runOnce()).code).toBe(0);
    for (const id of later) expect((await h.instance(id)).activity_status).toBe('deployed');
    for (let i = 0; i < 3; i += 1)
      expect(await readFile(h.rootPath(`b${i}.json`), 'utf8')).toBe(json({ n: i }));
  });
});
