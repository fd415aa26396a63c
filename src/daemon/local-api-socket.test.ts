// The socket's mode is set by bind itself: no chmod by path that a symlink swapped in could redirect.
import { lstat, mkdtemp, rename, rm, stat, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { systemClock } from '../lib/clock.js';
import { silentLogger } from '../lib/logger.js';
import { LocalApiServer, SOCKET_MODE } from './local-api.js';

/** Set by the test: what a local user does in the socket's directory once the socket exists. */
const race: { socketPath?: string; swap?: () => Promise<void> } = {};

// A local user who can write the socket's directory wins the race at its worst moment: just before any chmod
// of the socket's path, the socket is replaced by a symlink to a file of theirs choosing.
vi.mock('node:fs/promises', async (importOriginal) => {
  const real = await importOriginal<typeof import('node:fs/promises')>();
  return {
    ...real,
    chmod: async (file: Parameters<typeof real.chmod>[0], mode: Parameters<typeof real.chmod>[1]) => {
      if (file === race.socketPath && race.swap !== undefined) await race.swap();
      return real.chmod(file, mode);
    },
  };
});

describe('the local API socket in a directory another user can write', () => {
  let dir: string | undefined;
  let api: LocalApiServer | undefined;
  afterEach(async () => {
    await api?.close();
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
    delete race.socketPath;
    delete race.swap;
  });

  it("is made 0660 by bind; a symlink swapped in for it never has its target's mode changed", async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-sock-'));
    const socketPath = path.join(dir, 'agent.sock');
    const victim = path.join(dir, 'shadow');
    await writeFile(victim, 'secret\n', { mode: 0o600 });
    race.socketPath = socketPath;
    race.swap = async () => {
      await symlink(victim, `${socketPath}.evil`);
      await rename(`${socketPath}.evil`, socketPath);
    };
    const previousUmask = process.umask(0o022);
    try {
      api = new LocalApiServer(
        socketPath,
        {
          health: () => ({ healthy: true, lastLoopAt: null }),
          status: () => ({}),
          sync: async () => ({ converged: true, exitCode: 0, result: null }),
        },
        silentLogger(),
        {},
        systemClock,
      );
      await api.start();
    } finally {
      process.umask(previousUmask);
    }
    expect((await stat(victim)).mode & 0o7777).toBe(0o600);
    const socket = await lstat(socketPath);
    expect(socket.isSocket()).toBe(true);
    expect(socket.mode & 0o7777).toBe(SOCKET_MODE);
    expect(process.umask()).toBe(previousUmask);
  });
});
