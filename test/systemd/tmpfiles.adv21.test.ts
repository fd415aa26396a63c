// adv21: the package's tmpfiles.d makes the default rootDir when missing and never changes an existing one's owner or mode.
import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const TMPFILES = readFileSync(path.join(REPO, 'systemd/config-agent.tmpfiles'), 'utf8');
const SCRATCH = mkdtempSync(path.join(os.tmpdir(), 'config-agent-tmpfiles-'));
afterAll(() => rmSync(SCRATCH, { recursive: true, force: true }));

const tmpfilesMissing = spawnSync('systemd-tmpfiles', ['--version']).error !== undefined;
const isRoot = process.getuid?.() === 0;

/** `systemd-tmpfiles --create` of the package's file on a scratch root, as its postinst and every boot run it. */
function create(root: string) {
  const result = spawnSync('systemd-tmpfiles', [`--root=${root}`, '--create', '-'], {
    input: TMPFILES,
    encoding: 'utf8',
    timeout: 10_000,
  });
  expect(result.stderr).toBe('');
  expect(result.status).toBe(0);
}

const state = (dir: string) => {
  const stats = statSync(dir);
  return `${(stats.mode & 0o7777).toString(8).padStart(4, '0')} ${stats.uid}:${stats.gid}`;
};

describe('the default rootDir under tmpfiles.d (adv21)', () => {
  it.skipIf(tmpfilesMissing || !isRoot)(
    "keeps an operator's owner and mode at the next boot or upgrade (skipped without systemd-tmpfiles or root)",
    () => {
      // Before: `d /srv/config-agent 0755 config-agent config-agent` put its owner and mode back at every boot
      // (systemd-tmpfiles-setup) and upgrade (postinst): a rootDir made 0750 (files.dirMode) for files readable
      // only through it, or a shared 2770 root:app, became 0755 config-agent's (seen under systemd 252).
      const root = mkdtempSync(path.join(SCRATCH, 'root-'));
      mkdirSync(path.join(root, 'etc'));
      // The agent's account where sysusers would make it (the user must exist for the line to apply).
      spawnSync('sh', ['-c', `printf 'config-agent:x:4241:4242::/:/x\\n' >> ${root}/etc/passwd`]);
      spawnSync('sh', ['-c', `printf 'config-agent:x:4242:\\n' >> ${root}/etc/group`]);
      create(root);
      const rootDir = path.join(root, 'srv/config-agent');
      expect(state(rootDir)).toBe('0755 4241:4242');

      chownSync(rootDir, 0, 4242);
      chmodSync(rootDir, 0o2750);
      create(root);
      expect(state(rootDir)).toBe('2750 0:4242');
    },
  );
});
