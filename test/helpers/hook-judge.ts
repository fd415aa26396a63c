// The world of the hook-argument tests (fix37, fix39): a temp rootDir, and one hook's `run` judged as start-up does.
import { mkdir, mkdtemp, realpath, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, expect } from 'vitest';
import { exitCodeForStartupError } from '../../src/cli/exit-codes.js';
import { ConfigError } from '../../src/config/errors.js';
import { parseAgentConfig } from '../../src/config/load.js';
import { assertOwnPathsOutsideRoot, type OwnPath, ownPaths } from '../../src/config/own-paths.js';

const NO_CODE: OwnPath[] = [];
const ENV = { PATH: '/usr/bin:/bin' };

export interface HookJudgeWorld {
  /** The temp dir of the running test (real path): `root` and `outside` below it. */
  readonly dir: string;
  /** rootDir, with an `etc` directory. */
  readonly root: string;
  /** The refusal's message for a config with one hook running `run` (`<root>` replaced both ways), or 'accepted'. */
  judge(run: string[]): Promise<string>;
}

/** Registers a fresh temp dir for each test of the calling file (`name` marks its directory). */
export function useHookJudgeWorld(name: string): HookJudgeWorld {
  let dir = '';
  let root = '';
  beforeEach(async () => {
    dir = await realpath(await mkdtemp(path.join(os.tmpdir(), `config-agent-${name}-`)));
    root = path.join(dir, 'root');
    await mkdir(path.join(root, 'etc'), { recursive: true });
    await mkdir(path.join(dir, 'outside'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  async function judge(run: string[]): Promise<string> {
    const cfg = parseAgentConfig(
      {
        deviceId: 'dvc_1',
        server: { baseUrl: 'https://x.example.com', apiKeyFile: path.join(dir, 'outside', 'api-key') },
        rootDir: root,
        stateDir: path.join(dir, 'outside', 'state'),
        socketPath: path.join(dir, 'outside', 'agent.sock'),
        hooks: [{ match: '**', run: run.map((arg) => arg.replaceAll('<root>', root)) }],
      },
      'test',
    );
    const configPath = path.join(dir, 'outside', 'c.json');
    try {
      await assertOwnPathsOutsideRoot(cfg, configPath, ownPaths(cfg, configPath, ENV, NO_CODE));
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error;
      expect(exitCodeForStartupError(error)).toBe(78);
      return error.message.replaceAll(root, '<root>');
    }
    return 'accepted';
  }

  return {
    get dir() {
      return dir;
    },
    get root() {
      return root;
    },
    judge,
  };
}
