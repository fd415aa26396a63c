// A hook whose directory (rootDir) is on a mount that does not answer no longer stops the agent: libuv's spawn
// waited in the agent's one thread for the child's chdir, for good. A real hung FUSE mount (root only).
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { canMountFuse, hungFuseDir } from '../../test/helpers/hung-fuse.js';
import { silentLogger } from '../lib/logger.js';
import { runHooks } from './hooks.js';

const hung = hungFuseDir('config-agent-hook-hung-cwd-');
afterEach(() => hung.clean());

describe.runIf(canMountFuse)('a hook run in a directory on a hung mount (hook26)', () => {
  it('leaves the agent running: its own reads go on, and the hook ends at its timeout', async () => {
    // Unserved for 30 s: far past the hook's 1 s timeout; the test ends it sooner (afterEach).
    const { dir, mountPoint, fuse } = await hung.make(30_000);
    const local = path.join(dir, 'local.json');
    await writeFile(local, '{}');
    const events: string[] = [];
    const running = runHooks([{ match: '**', run: ['/bin/true'], timeoutSeconds: 1 }], ['a.conf'], {
      cwd: path.join(mountPoint, 'root'),
      env: { PATH: '/usr/bin:/bin' },
      logger: silentLogger(),
      killGraceMs: 200,
    }).then((runs) => {
      events.push('hook ended');
      return runs;
    });
    // A read of a local file while the hook's process waits in the mount: the agent's thread answers it.
    const read = readFile(local, 'utf8').then((text) => events.push(`local read ${text}`));
    const [run] = await running;
    await read;

    expect(events).toEqual(['local read {}', 'hook ended']);
    // Ended by its timeout (FUSE waits end on SIGKILL), with the mount still unserved.
    expect(run?.timedOut).toBe(true);
    expect(run?.abandoned).toBeUndefined();
    expect(fuse.exitCode).toBeNull();
  }, 20_000);
});
