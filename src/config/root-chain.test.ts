// rootDir and stateDir another user could swap for a symlink (a directory on the way they own or can write).
import * as nodeFs from 'node:fs/promises';
import { chmod, chown, mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { exitCodeForStartupError } from '../cli/exit-codes.js';
import { ConfigError } from './errors.js';
import { loadAgentConfig } from './load.js';

const KEY = 'sk_test_7c1d9e2b5a3f';
/** A user that is neither root nor the agent (the test runs as root). */
const OTHER = 4242;
const isRoot = process.geteuid?.() === 0;

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-root-chain-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function load(
  rootDir: string,
  stateDir: string,
  extra: Record<string, unknown> = {},
  servesSocket = true,
) {
  const configFile = path.join(dir, 'config.json');
  await writeFile(
    configFile,
    JSON.stringify({
      deviceId: 'dvc_1',
      server: { baseUrl: 'https://configs.example.com' },
      rootDir,
      stateDir,
      ...extra,
    }),
    { mode: 0o600 },
  );
  return loadAgentConfig(nodeFs, {
    configFlag: configFile,
    env: { CONFIG_AGENT_API_KEY: KEY },
    servesSocket,
  });
}

async function refusal(promise: Promise<unknown>): Promise<string> {
  const error = await promise.then(
    () => undefined,
    (caught: unknown) => caught,
  );
  expect(error).toBeInstanceOf(ConfigError);
  expect(exitCodeForStartupError(error)).toBe(78);
  return (error as ConfigError).message;
}

describe.runIf(isRoot)('rootDir and stateDir another user could swap', () => {
  // Swapped for a symlink, rootDir would take every file the service sends (as root: into /etc, anywhere).
  it('are refused under a 0777 directory or one another user owns, naming the key and the directory', async () => {
    const open = path.join(dir, 'open');
    await mkdir(open);
    await chmod(open, 0o777);
    const theirs = path.join(dir, 'theirs');
    await mkdir(theirs);
    await chown(theirs, OTHER, OTHER);
    const message = await refusal(load(path.join(open, 'root'), path.join(theirs, 'state')));
    expect(message).toContain(
      `rootDir: ${path.join(open, 'root')}: the directory ${open} is writable by others`,
    );
    expect(message).toContain(
      `stateDir: ${path.join(theirs, 'state')}: the directory ${theirs} is owned by uid ${OTHER}`,
    );
  });

  it('a socketPath in a directory others can create entries in (a 1777 /tmp, missing below one) is refused: its name could be taken first', async () => {
    const shared = path.join(dir, 'shared');
    await mkdir(shared);
    await chmod(shared, 0o1777);
    const inShared = path.join(shared, 'agent.sock');
    const belowShared = path.join(shared, 'missing', 'agent.sock');
    for (const socketPath of [inShared, belowShared]) {
      const message = await refusal(load(path.join(dir, 'root'), path.join(dir, 'state'), { socketPath }));
      expect(message).toContain(
        `socketPath: ${socketPath}: the directory ${shared} is writable by others (mode 1777)`,
      );
    }
    // `--once` opens no socket: not held to it.
    expect(
      (await load(path.join(dir, 'root'), path.join(dir, 'state'), { socketPath: inShared }, false)).config
        .socketPath,
    ).toBe(inShared);
    // Where only root and the agent's user can create entries (as systemd's RuntimeDirectory=): loaded.
    const own = path.join(dir, 'run', 'config-agent', 'agent.sock');
    const config = await load(path.join(dir, 'root'), path.join(dir, 'state'), { socketPath: own });
    expect(config.config.socketPath).toBe(own);
  });

  it('a rootDir planted as another user’s symlink in a sticky directory (before the first start) is refused', async () => {
    const shared = path.join(dir, 'shared');
    await mkdir(shared);
    await chmod(shared, 0o1777);
    const planted = path.join(shared, 'configs');
    await symlink(path.join(dir, 'elsewhere'), planted);
    await nodeFs.lchown(planted, OTHER, OTHER);
    const message = await refusal(load(planted, path.join(dir, 'state')));
    expect(message).toContain(
      `rootDir: ${planted}: ${planted} is owned by uid ${OTHER} in the shared directory`,
    );
  });

  it('load when only root and the agent can change the way: missing ones, a rootDir of its own owner in a 0700 tree', async () => {
    const root = path.join(dir, 'root');
    await mkdir(root);
    // The root itself may belong to someone else: what is inside it is the writer's to guard.
    await chown(root, OTHER, OTHER);
    const loaded = await load(root, path.join(dir, 'state', 'missing'));
    expect(loaded.config.rootDir).toBe(root);
  });
});
