// `config-agent init` on a real FUSE mount nobody serves (root only): its exit is 78, not SIGTERM's 143. The mount is
// asked from another process first, so no thread of this process's pool is left in the kernel for the exit to wait on.
import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { canMountFuse, hungFuseDir } from '../../test/helpers/hung-fuse.js';
import { initEnvironment } from '../../test/helpers/init-scratch.js';
import { bufferedIo } from '../../test/helpers/local-socket.js';
import { ExitCode } from './exit-codes.js';
import { runInit } from './init.js';
import { endProcess } from './process-exit.js';

const hung = hungFuseDir('config-agent-init-exit-');
afterEach(() => hung.clean());

/** How the process would end after init answered `code`: endProcess over this process's own pool, the end recorded. */
async function processEnd(code: number): Promise<string> {
  let ended = '';
  await endProcess(code, {
    activeResources: () => process.getActiveResourcesInfo(),
    exit: (exitCode) => {
      ended = `exit ${exitCode}`;
    },
    endBySignal: (signal) => {
      ended = `ended by ${signal}`;
    },
    sleep: (ms) => new Promise((resolve) => (ms === 0 ? setImmediate(resolve) : setTimeout(resolve, ms))),
  });
  return ended;
}

describe.runIf(canMountFuse)('init: the exit on a hung mount (doctor28)', () => {
  it('rootDir there: exit 78, no call left waiting in the kernel', async () => {
    const { dir, mountPoint, fuse } = await hung.make(30_000);
    await writeFile(path.join(dir, 'passwd'), 'config-agent:x:4246:4246::/:/usr/sbin/nologin\n');
    await writeFile(path.join(dir, 'group'), 'config-agent:x:4246:\n');
    await mkdir(path.join(dir, 'etc'));
    const rootDir = path.join(mountPoint, 'configs');
    const io = bufferedIo({}, false);
    const code = await runInit(
      {
        configPath: path.join(dir, 'etc/config.json'),
        deviceId: 'dvc_1',
        baseUrl: 'http://127.0.0.1:9',
        rootDir,
        apiKeyFile: '-',
      },
      io,
      { ...initEnvironment(dir, 'sk-init-exit-test-key-0123'), mountAnswerMs: 300 },
    );
    expect(io.err()).toContain(
      `rootDir ${rootDir}: ETIMEDOUT: the mount at ${mountPoint} did not answer within 0.3 s`,
    );
    expect(code).toBe(ExitCode.Config);
    // Before: the realpath of rootDir waited in a pool thread, and the exit took SIGTERM (143).
    expect(await processEnd(code)).toBe(`exit ${ExitCode.Config}`);
    expect(fuse.exitCode, 'the mount still hangs').toBeNull();
  }, 20_000);

  it('the config directory there (an NFS root, an /etc mount): exit 78 naming config.json, nothing written', async () => {
    const { dir, mountPoint, fuse } = await hung.make(30_000);
    await writeFile(path.join(dir, 'passwd'), 'config-agent:x:4246:4246::/:/usr/sbin/nologin\n');
    await writeFile(path.join(dir, 'group'), 'config-agent:x:4246:\n');
    const configPath = path.join(mountPoint, 'config-agent/config.json');
    const io = bufferedIo({}, false);
    const code = await runInit(
      {
        configPath,
        deviceId: 'dvc_1',
        baseUrl: 'http://127.0.0.1:9',
        rootDir: path.join(dir, 'srv'),
        apiKeyFile: '-',
      },
      io,
      { ...initEnvironment(dir, 'sk-init-exit-test-key-0123'), mountAnswerMs: 300 },
    );
    expect(io.err()).toContain(
      `config-agent init: ${configPath}: ETIMEDOUT: the mount at ${mountPoint} did not answer within 0.3 s`,
    );
    expect(io.err()).toContain('nothing written');
    expect(code).toBe(ExitCode.Config);
    expect(existsSync(path.join(dir, 'srv'))).toBe(false);
    // Before: its read of config.json waited in the kernel for good (the test's timeout).
    expect(await processEnd(code)).toBe(`exit ${ExitCode.Config}`);
    expect(fuse.exitCode, 'the mount still hangs').toBeNull();
  }, 20_000);
});
