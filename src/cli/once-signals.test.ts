// `--once` stopped by SIGTERM, SIGINT or SIGHUP, in-process: the exit code of the first signal, a second one exiting at
// once, and no listener left behind (the spawned agent's side is test/integration/once-signals.test.ts).
import { type ChildProcess, spawnSync } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { mkdir, mkdtemp, readdir, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { AgentHarness } from '../../test/helpers/harness.js';
import { canMountFuse, hungFuseMount } from '../../test/helpers/hung-fuse.js';
import { LIST_PATH } from '../../test/helpers/outage.js';
import { PATIENCE_MS, waitFor } from '../../test/helpers/wait-for.js';
import { createSecretRegistry } from '../lib/secrets.js';
import { main } from '../main.js';
import { runOnce } from './compose.js';
import type { CommandIo } from './io.js';

let harness: AgentHarness | undefined;

afterEach(async () => {
  await harness?.close();
  harness = undefined;
});

/** `--once` in-process against a service whose listing hangs: started, and hanging in the listing. */
async function hangingOnce(): Promise<{ code: Promise<number>; events: EventEmitter; err: () => string }> {
  const h = await AgentHarness.create({ registerDevice: true });
  harness = h;
  await h.createAndDeploy({ relative_filepath: 'a.json', content: { a: 1 } });
  await h.fault({ match: LIST_PATH, count: 100, mode: 'hang' });
  const events = new EventEmitter();
  const stderr = new PassThrough();
  let err = '';
  stderr.on('data', (chunk: Buffer) => {
    err += chunk.toString();
  });
  const io: CommandIo = { stdout: new PassThrough(), stderr, env: {}, isTty: false };
  const code = main(['--once', '--config', h.configPath], io, events);
  await waitFor(() => (h.server.state.faults[0]?.remaining ?? 100) < 100, PATIENCE_MS, {
    what: 'the listing hanging in the fault',
    intervalMs: 2,
  });
  return { code, events, err: () => err };
}

describe('--once: SIGTERM, SIGINT and SIGHUP in-process', () => {
  it.each([
    ['SIGTERM', 143],
    ['SIGINT', 130],
    ['SIGHUP', 129],
  ] as const)('%s stops the pass: exit %i, nothing written, no listener left', async (signal, exit) => {
    const { code, events, err } = await hangingOnce();
    events.emit(signal);
    expect(await code).toBe(exit);
    expect(err()).toContain(`config-agent: ${signal}: stopping after the file in progress`);
    expect(err()).toContain(`(${signal} again to exit now)`);
    expect(await readdir(harness!.rootDir).catch(() => [])).toEqual([]);
    expect(['SIGTERM', 'SIGINT', 'SIGHUP'].map((name) => events.listenerCount(name))).toEqual([0, 0, 0]);
  });

  it('a second signal exits at once with the first one’s code; the pass left behind still lets go of stateDir', async () => {
    const { code, events, err } = await hangingOnce();
    events.emit('SIGTERM');
    events.emit('SIGINT');
    expect(await code).toBe(143);
    expect(err()).toContain('config-agent: SIGINT again: exiting now');
    await waitFor(
      () =>
        stat(`${harness!.stateDir}/agent.lock`).then(
          () => false,
          () => true,
        ),
      PATIENCE_MS,
      { what: 'the stopped pass releasing stateDir', intervalMs: 2 },
    );
    expect(['SIGTERM', 'SIGINT', 'SIGHUP'].map((name) => events.listenerCount(name))).toEqual([0, 0, 0]);
  });
});

describe('runOnce without an event source', () => {
  it('runs its pass to the end, listening to no signal: the file written, exit 0', async () => {
    const h = await AgentHarness.create({ registerDevice: true });
    harness = h;
    await h.createAndDeploy({ relative_filepath: 'a.json', content: { a: 1 } });
    const io: CommandIo = { stdout: new PassThrough(), stderr: new PassThrough(), env: {}, isTty: false };
    const command = { configPath: h.configPath, dryRun: false, json: false };
    expect(await runOnce(command, io, createSecretRegistry())).toBe(0);
    expect(await readdir(h.rootDir)).toEqual(['a.json']);
  });
});

describe.runIf(canMountFuse)('--once whose pass cannot stop (rootDir on a hung FUSE mount)', () => {
  let dir: string | undefined;
  let child: ChildProcess | undefined;
  afterEach(async () => {
    child?.kill('SIGKILL');
    if (dir !== undefined) {
      spawnSync('umount', ['-l', path.join(dir, 'hung')]);
      // The abandoned pass, its mkdir failed at last (ENOTCONN), may still be ending beside this removal.
      await rm(dir, { recursive: true, force: true, maxRetries: 20, retryDelay: 20 });
    }
    child = undefined;
    dir = undefined;
  });

  it('exits at the stop deadline with the signal’s code, saying so, while the mount still hangs', async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-once-hung-'));
    const mountPoint = path.join(dir, 'hung');
    await mkdir(mountPoint);
    child = await hungFuseMount(mountPoint, 30_000);
    const configPath = path.join(dir, 'config.json');
    await writeFile(
      configPath,
      JSON.stringify({
        deviceId: 'dvc_once_hung',
        server: { baseUrl: 'http://127.0.0.1:9', timeoutSeconds: 1 },
        rootDir: path.join(mountPoint, 'root'),
        stateDir: path.join(dir, 'state'),
      }),
    );
    const stderr = new PassThrough();
    let err = '';
    stderr.on('data', (chunk: Buffer) => {
      err += chunk.toString();
    });
    const io: CommandIo = {
      stdout: new PassThrough(),
      stderr,
      env: { CONFIG_AGENT_API_KEY: 'sk_test_once_hung' },
      isTty: false,
    };
    const events = new EventEmitter();
    const command = { configPath, dryRun: false, json: false };
    const exit = runOnce(command, io, createSecretRegistry(), events, 100);
    // Once the pass is under way (its directories being made under the hung mount): the first signal cannot stop it.
    await waitFor(() => events.listenerCount('SIGTERM') > 0, PATIENCE_MS, {
      what: 'listening',
      intervalMs: 2,
    });
    events.emit('SIGTERM');
    expect(await exit).toBe(143);
    expect(child.exitCode === null && child.signalCode === null, 'the mount still hangs').toBe(true);
    // Either the deadline cut it, or (mount22) its calls into the mount made after the signal were bounded by what
    // is left of that deadline (nothing, at 0.1 s) and the pass ended by itself, naming the mount.
    expect(err).toMatch(
      /config-agent: SIGTERM: the pass did not stop within 0\.1 s \(a hung file system or service\?\): exiting now; the next run finishes the job\n|did not answer within 0 s|had not answered when the agent was told to stop/,
    );
  }, 20_000);
});
