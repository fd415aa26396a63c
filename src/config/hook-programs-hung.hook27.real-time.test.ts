// A hook program on a real FUSE mount nobody serves: start-up's check is bounded and names the hook (root only).
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { canMountFuse, hungFuseDir } from '../../test/helpers/hung-fuse.js';
import { hangSafeConfigCalls } from '../cli/hang-safe-fs.js';
import { MountLanes } from '../cli/mount-gate.js';
import { systemClock } from '../lib/clock.js';
import { type ConfigFs, loadAgentConfig } from './load.js';

const hung = hungFuseDir('config-agent-hookprog-fuse-');
afterEach(() => hung.clean());

describe.runIf(canMountFuse)('a hook program on a hung mount at start (hook27)', () => {
  it('loads the configuration within the bound, naming the hook as not judged', async () => {
    // Unserved for 30 s: far past the 0.3 s bound; the test ends it sooner (afterEach).
    const { dir, mountPoint, fuse } = await hung.make(30_000);
    const configFile = path.join(dir, 'config.json');
    const program = path.join(mountPoint, 'reload');
    await writeFile(
      configFile,
      JSON.stringify({
        deviceId: 'dvc_1',
        server: { baseUrl: 'https://configs.example.com' },
        rootDir: path.join(dir, 'root'),
        stateDir: path.join(dir, 'state'),
        hooks: [{ match: '**', run: [program] }],
      }),
      { mode: 0o644 },
    );
    const calls = await hangSafeConfigCalls(new MountLanes(systemClock, 300));
    const loaded = await loadAgentConfig(calls.fs as ConfigFs, {
      configFlag: configFile,
      env: { CONFIG_AGENT_API_KEY: 'sk_test_4f9c2b7e1a8d' },
      ownPathsPort: calls.ownPathsPort,
    });
    expect(loaded.hookChecksUnanswered).toEqual([
      {
        hook: 'hooks[0].run[0]',
        program,
        why: expect.stringContaining(`the mount at ${mountPoint} did not answer within 0.3 s`),
      },
    ]);
    expect(fuse.exitCode, 'the mount still hangs').toBeNull();
  }, 20_000);
});
