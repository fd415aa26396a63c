// adv21: init on a read-only /etc says so (exit 78), not "run it as root" to a command that runs only as root.
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PassThrough, Readable, Writable } from 'node:stream';
import { afterAll, describe, expect, it } from 'vitest';
import { ExitCode } from './exit-codes.js';
import { runInit } from './init.js';

const BASE = mkdtempSync(path.join(os.tmpdir(), 'config-agent-init-ro-'));
const etc = path.join(BASE, 'etc');
mkdirSync(etc);
/** A read-only tmpfs as /etc; undefined where mounting is not permitted (not root, a container). */
const mounted =
  process.getuid?.() === 0 &&
  spawnSync('mount', ['-t', 'tmpfs', '-o', 'ro,size=64k', 'tmpfs', etc]).status === 0;
afterAll(() => {
  if (mounted) spawnSync('umount', [etc]);
  rmSync(BASE, { recursive: true, force: true });
});

describe('init on a read-only file system (adv21)', () => {
  it.skipIf(!mounted)(
    'exits 78 saying the file system is read-only (skipped where mount is not permitted)',
    async () => {
      writeFileSync(path.join(BASE, 'passwd'), 'root:x:0:0::/root:/bin/sh\nconfig-agent:x:4241:4242::/:/x\n');
      writeFileSync(path.join(BASE, 'group'), 'root:x:0:\nconfig-agent:x:4242:\n');
      let stderr = '';
      const code = await runInit(
        {
          configPath: path.join(etc, 'config-agent/config.json'),
          deviceId: 'dvc_1',
          baseUrl: 'http://127.0.0.1:9',
          rootDir: path.join(BASE, 'root'),
          apiKeyFile: '-',
        },
        {
          stdout: new PassThrough(),
          stderr: new Writable({
            write(chunk, _encoding, done) {
              stderr += String(chunk);
              done();
            },
          }),
          env: {},
          isTty: false,
        },
        {
          stdin: Readable.from(['sk_test_read_only_0123456789abcdef\n']),
          stdinIsTty: false,
          groupFile: path.join(BASE, 'group'),
          passwdFile: path.join(BASE, 'passwd'),
          dropInDir: path.join(BASE, 'drop-in'),
          checkTimeoutMs: 2_000,
          uid: 0,
        },
      );
      // Before: `EROFS: read-only file system, mkdir '…' (run it as root)`, as root.
      expect(code).toBe(ExitCode.Config);
      expect(stderr).toContain('EROFS');
      expect(stderr).toContain('a read-only file system: remount it writable');
      expect(stderr).not.toContain('run it as root');
    },
  );
});
