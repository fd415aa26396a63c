// The own paths that may not take a state file's name, judged on real paths: a symlink on the way is followed.
import { mkdir, mkdtemp, realpath, rm, symlink } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ConfigError } from './errors.js';
import { parseAgentConfig } from './load.js';
import { assertOwnPathsOutsideRoot, ownPaths } from './own-paths.js';

let dir: string;
beforeEach(async () => {
  dir = await realpath(await mkdtemp(path.join(os.tmpdir(), 'config-agent-own-adv30-')));
  await mkdir(path.join(dir, 'root'));
  await mkdir(path.join(dir, 'state'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function issues(patch: Record<string, unknown>) {
  const config = parseAgentConfig(
    {
      deviceId: 'd',
      server: { baseUrl: 'https://x.example.com' },
      rootDir: path.join(dir, 'root'),
      stateDir: path.join(dir, 'state'),
      ...patch,
    },
    'test',
  );
  const error = await assertOwnPathsOutsideRoot(config, 'test', ownPaths(config, 'test', {}, [])).catch(
    (e: unknown) => e,
  );
  if (error === undefined) return [];
  if (error instanceof ConfigError) return error.issues;
  throw error;
}

describe('socketPath and metrics.textfile onto a state file through a symlink (adv30)', () => {
  it('a socket directory that is a symlink to stateDir: refused naming the real path and the state file', async () => {
    await symlink(path.join(dir, 'state'), path.join(dir, 'run'));
    expect(await issues({ socketPath: path.join(dir, 'run', 'state.json') })).toEqual([
      {
        path: 'socketPath',
        message: `${dir}/run/state.json (really ${dir}/state/state.json) must not be ${dir}/state/state.json: the agent keeps its state.json there`,
      },
    ]);
  });

  it('stateDir given through a symlink, the textfile in its real cache directory: refused', async () => {
    await symlink(path.join(dir, 'state'), path.join(dir, 'state-link'));
    const found = await issues({
      stateDir: path.join(dir, 'state-link'),
      metrics: { textfile: path.join(dir, 'state', 'cache', 'agent.prom') },
    });
    expect(found.map((issue) => issue.path)).toEqual(['metrics.textfile']);
    expect(found[0]?.message).toContain('the agent keeps its cache there');
  });

  it('a symlinked socket directory that leads beside the state files, not onto them: allowed', async () => {
    await symlink(path.join(dir, 'state'), path.join(dir, 'run'));
    expect(await issues({ socketPath: path.join(dir, 'run', 'agent.sock') })).toEqual([]);
  });
});
