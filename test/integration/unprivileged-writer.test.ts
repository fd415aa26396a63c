// The built durable writer run by an unprivileged user (uid 65534): EACCES in a 0555 dir, nothing changed.
// Root ignores permission bits, so the writer runs in a child process as nobody, from a copy that user can reach.
import { spawnSync } from 'node:child_process';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { snapshotTree } from '../helpers/harness.js';
import { type ReachableInstall, reachableInstall } from '../helpers/reachable-install.js';

const NOBODY = 65534;
const accessSkip =
  process.getuid?.() === 0 ? undefined : 'needs root to run the writer as uid 65534 against a root-owned dir';
if (accessSkip !== undefined) process.stderr.write(`unprivileged-writer.test: skipping: ${accessSkip}\n`);

const cleanups: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

describe('publishFile as an unprivileged agent', () => {
  it.skipIf(accessSkip !== undefined)(
    `fails with EACCES for an unprivileged agent in a 0555 dir${accessSkip ? ` (skipped: ${accessSkip})` : ''}`,
    async () => {
      const install: ReachableInstall = await reachableInstall();
      cleanups.push(install.remove);
      const base = await mkdtemp(path.join(os.tmpdir(), 'config-agent-eacces-'));
      cleanups.push(() => rm(base, { recursive: true, force: true }));
      const locked = path.join(base, 'root');
      await mkdir(locked);
      await writeFile(path.join(locked, 'app.conf'), 'old', { mode: 0o644 });
      await chmod(locked, 0o555);
      await chmod(base, 0o755);
      const before = await snapshotTree(base, { identity: true });
      const writer = pathToFileURL(install.dist('store/durable-writer.js')).href;
      const script = `
        import { promises as fs } from 'node:fs';
        const { publishFile } = await import(${JSON.stringify(writer)});
        const request = { rootDir: ${JSON.stringify(locked)}, relativePath: 'app.conf', data: Buffer.from('new'), mode: 0o644, dirMode: 0o755 };
        try { await publishFile(fs, request); console.log(JSON.stringify({ ok: true })); }
        catch (e) { console.log(JSON.stringify({ name: e.name, code: e.code, errno: e.errno, retryable: e.retryable, message: e.message })); }
      `;
      const child = spawnSync(install.node, ['--input-type=module', '-e', script], {
        cwd: install.dir,
        uid: NOBODY,
        gid: NOBODY,
        encoding: 'utf8',
        timeout: 30_000,
      });
      expect(child.stderr).toBe('');
      expect(JSON.parse(child.stdout)).toMatchObject({
        name: 'DiskError',
        code: 'disk_error',
        errno: 'EACCES',
        retryable: true,
      });
      expect(await snapshotTree(base, { identity: true })).toEqual(before);
    },
  );
});
