// `config-agent --once` against a stateDir a running agent holds: one clear line, the documented exit, no stack.
import { EventEmitter } from 'node:events';
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { main } from '../main.js';
import { acquireStateLock, linuxProcessProbe } from '../store/lock.js';
import { ExitCode } from './exit-codes.js';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-once-locked-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

// adv21: the refusal was printed, then logged again at error level with the error's whole stack (a JSON line
// of `"level":50` and `at acquireStateLock (...)` frames), which reads as a crash to an operator.
it('prints one line naming the lock and its holder, exits 1 (not converged), and logs no stack', async () => {
  const stateDir = path.join(dir, 'state');
  await mkdir(stateDir, { mode: 0o700 });
  // The running daemon is the parent process (alive to the probe), with its own start time (field 22 of its stat).
  const stat = await readFile(`/proc/${process.ppid}/stat`, 'utf8');
  const procStart = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? '';
  const other = await acquireStateLock(nodeFs, stateDir, {
    self: async () => ({ pid: process.ppid, procStart }),
    alive: linuxProcessProbe.alive,
  });
  try {
    const configPath = path.join(dir, 'config.json');
    await writeFile(
      configPath,
      JSON.stringify({
        deviceId: 'dvc_locked',
        server: { baseUrl: 'http://127.0.0.1:9', timeoutSeconds: 1 },
        rootDir: path.join(dir, 'root'),
        stateDir,
      }),
    );
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    let err = '';
    stderr.on('data', (chunk: Buffer) => {
      err += chunk.toString();
    });
    const io = { stdout, stderr, env: { CONFIG_AGENT_API_KEY: 'sk_test_locked_0a1b2c3d' }, isTty: false };
    const code = await main(['--once', '--config', configPath], io, new EventEmitter());

    expect(code).toBe(ExitCode.NotConverged);
    const lines = err.split('\n').filter((line) => line !== '');
    expect(lines).toEqual([
      `config-agent: ${stateDir} is in use: ${path.join(stateDir, 'agent.lock')} is held by another ` +
        `config-agent (pid ${process.ppid}); nothing was done: ask it with 'config-agent sync', or run --once ` +
        'again once it has stopped',
    ]);
    // The daemon's lock is untouched and nothing was written under rootDir.
    expect(JSON.parse(await readFile(path.join(stateDir, 'agent.lock'), 'utf8'))).toMatchObject({
      pid: process.ppid,
    });
    await expect(readFile(path.join(stateDir, 'state.json'))).rejects.toMatchObject({ code: 'ENOENT' });
  } finally {
    await other.release();
  }
});
