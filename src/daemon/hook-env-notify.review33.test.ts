// review33: a hook's environment carries none of systemd's notify and watchdog variables, which are the agent's own.
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { silentLogger } from '../lib/logger.js';
import { runHooks } from './hooks.js';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-review33-hook-env-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

// cit24's watchdog (e5d601b): systemd sets NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID for the agent, and
// config-agent-notify CONFIG_AGENT_NOTIFY_FD; every hook inherited them, and a hook's sd_notify spoke as the unit.
it('a hook gets none of NOTIFY_SOCKET, WATCHDOG_USEC, WATCHDOG_PID, CONFIG_AGENT_NOTIFY_FD; the rest is kept', async () => {
  const out = path.join(dir, 'env.txt');
  const runs = await runHooks(
    [{ match: '*.json', run: ['/bin/sh', '-c', `env > '${out}'`], timeoutSeconds: 20 }],
    ['app.json'],
    {
      cwd: dir,
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        KEEP: 'yes',
        NOTIFY_SOCKET: '/run/systemd/notify',
        WATCHDOG_USEC: '120000000',
        WATCHDOG_PID: '4242',
        CONFIG_AGENT_NOTIFY_FD: '3',
      },
      logger: silentLogger(),
    },
  );
  expect(runs.map((run) => run.exitCode)).toEqual([0]);
  const names = (await readFile(out, 'utf8')).split('\n').map((line) => line.split('=')[0]);
  expect(names).toContain('KEEP');
  expect(names).toContain('CONFIG_AGENT_CHANGED');
  // Before: all four there.
  expect(
    names.filter((name) =>
      ['NOTIFY_SOCKET', 'WATCHDOG_USEC', 'WATCHDOG_PID', 'CONFIG_AGENT_NOTIFY_FD'].includes(name ?? ''),
    ),
  ).toEqual([]);
});
