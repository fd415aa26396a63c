// `config-agent init` with rootDir on a real FUSE mount nobody serves (root only): it ends within the bound, naming
// rootDir and the mount (exit 78), with nothing written. Before, its calls on rootDir waited in the kernel for good.
import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { canMountFuse, hungFuseDir } from '../../test/helpers/hung-fuse.js';
import { initEnvironment } from '../../test/helpers/init-scratch.js';
import { bufferedIo } from '../../test/helpers/local-socket.js';
import { ExitCode } from './exit-codes.js';
import { runInit } from './init.js';

const hung = hungFuseDir('config-agent-init-fuse-');
afterEach(() => hung.clean());

describe.runIf(canMountFuse)('init: rootDir on a hung mount (bound26)', () => {
  it('ends naming rootDir and the mount, exit 78, nothing written', async () => {
    // Unserved for 30 s: far past the 0.3 s bound; the test ends it sooner (afterEach).
    const { dir, mountPoint, fuse } = await hung.make(30_000);
    await writeFile(path.join(dir, 'passwd'), 'config-agent:x:4245:4245::/:/usr/sbin/nologin\n');
    await writeFile(path.join(dir, 'group'), 'config-agent:x:4245:\n');
    await mkdir(path.join(dir, 'etc'));
    const configPath = path.join(dir, 'etc/config.json');
    const rootDir = path.join(mountPoint, 'configs');
    const io = bufferedIo({}, false);
    const code = await runInit(
      { configPath, deviceId: 'dvc_1', baseUrl: 'http://127.0.0.1:9', rootDir, apiKeyFile: '-' },
      io,
      {
        ...initEnvironment(dir, 'sk-init-fuse-test-key-0123'),
        // The unit's hidden directories judged too: their realpath of rootDir goes into the mount first.
        unitHides: [{ dir: '/home', directive: 'ProtectHome=yes' }],
        mountAnswerMs: 300,
      },
    );
    const err = io.err();
    expect(err).toContain(
      `rootDir ${rootDir}: ETIMEDOUT: the mount at ${mountPoint} did not answer within 0.3 s`,
    );
    expect(err).toContain('nothing written');
    expect(code).toBe(ExitCode.Config);
    expect(existsSync(configPath)).toBe(false);
    expect(existsSync(path.join(dir, 'etc/api-key'))).toBe(false);
    expect(existsSync(path.join(dir, 'dropin'))).toBe(false);
    expect(fuse.exitCode, 'the mount still hangs').toBeNull();
  }, 20_000);
});
