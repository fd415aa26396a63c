// files.rules end to end with the built agent (as root, which may give any group): mode and group per path,
// and a rule change applied in place without rewriting the bytes.
import { stat } from 'node:fs/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { AgentHarness } from '../helpers/harness.js';

const isRoot = process.getuid?.() === 0;
const GID = 4242;
const harnesses: AgentHarness[] = [];
afterEach(async () => {
  await Promise.all(harnesses.splice(0).map((h) => h.close()));
});

const meta = async (file: string) => {
  const stats = await stat(file);
  return { mode: (stats.mode & 0o7777).toString(8), gid: stats.gid, ino: stats.ino, mtimeMs: stats.mtimeMs };
};

describe.skipIf(!isRoot)(
  'config-agent --once with files.rules (skipped unless root: it chowns to another group)',
  () => {
    it('gives matching files their rule mode and group; a rule change alone changes them in place', async () => {
      const h = await AgentHarness.create({
        registerDevice: true,
        config: {
          files: { mode: '0644', rules: [{ match: 'secrets/**', mode: '0640', group: String(GID) }] },
        },
      });
      harnesses.push(h);
      await h.createAndDeploy({ relative_filepath: 'secrets/db.json', content: { password: 'x' } });
      await h.createAndDeploy({ relative_filepath: 'app.json', content: { port: 1 } });
      expect((await h.runOnce()).code).toBe(0);
      const secret = await meta(h.rootPath('secrets/db.json'));
      expect({ mode: secret.mode, gid: secret.gid }).toEqual({ mode: '640', gid: GID });
      expect(await meta(h.rootPath('app.json'))).toMatchObject({ mode: '644', gid: 0 });

      // Same bytes, new rule: the file keeps its inode and mtime, only mode and group change.
      await h.writeConfig({
        files: { mode: '0644', rules: [{ match: 'secrets/**', mode: '0600', group: String(GID + 1) }] },
      });
      expect((await h.runOnce()).code).toBe(0);
      expect(await meta(h.rootPath('secrets/db.json'))).toEqual({ ...secret, mode: '600', gid: GID + 1 });
    });

    it('refuses a group that does not exist before touching anything (exit 78)', async () => {
      const h = await AgentHarness.create({
        registerDevice: true,
        config: { files: { rules: [{ match: '**', group: 'no-such-group-xyz' }] } },
      });
      harnesses.push(h);
      const result = await h.runOnce();
      expect(result.code).toBe(78);
      expect(result.stderr).toContain(
        'files.rules[0].group: group "no-such-group-xyz" does not exist on this system',
      );
    });
  },
);
