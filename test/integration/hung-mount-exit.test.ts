// The built agent on a hung mount: a stop past its deadline ends the process, although a thread of libuv's pool waits in the kernel.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { DaemonProcess, killAllDaemons } from '../helpers/daemon.js';
import { AGENT_BIN, AgentHarness, collect } from '../helpers/harness.js';
import { canMountFuse, hungFuseMount } from '../helpers/hung-fuse.js';
import { PATIENCE_MS, waitFor } from '../helpers/wait-for.js';

/** Whether a thread of `pid` waits for the FUSE daemon that never answers (the agent has reached the hang). */
async function waitsOnFuse(pid: number): Promise<boolean> {
  const tasks = await readdir(`/proc/${pid}/task`).catch(() => []);
  for (const task of tasks) {
    const wchan = await readFile(`/proc/${pid}/task/${task}/wchan`, 'utf8').catch(() => '');
    if (wchan.startsWith('fuse_')) return true;
  }
  return false;
}

// Root with /dev/fuse only (hungFuseMount), as compose.test.ts's start-up test.
describe.runIf(canMountFuse)('the built agent with rootDir on a hung FUSE mount, stopped by a signal', () => {
  let dir: string | undefined;
  let mount: ChildProcess | undefined;
  afterEach(async () => {
    mount?.kill('SIGKILL');
    if (dir !== undefined) {
      spawnSync('umount', ['-l', path.join(dir, 'hung')]);
      await rm(dir, { recursive: true, force: true, maxRetries: 20, retryDelay: 20 });
    }
    mount = undefined;
    dir = undefined;
  });

  // process.exit joins libuv's pool, whose thread waits on the mount for good: before, both said they were exiting
  // and stayed until the mount answered (here: killed by the test after 30 s).
  it('--once (SIGTERM) and the daemon (SIGTERM at start-up) end by the signal while the mount still hangs', async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-hung-exit-'));
    const mountPoint = path.join(dir, 'hung');
    await mkdir(mountPoint);
    mount = await hungFuseMount(mountPoint, 120_000);
    const configPath = path.join(dir, 'config.json');
    await writeFile(
      configPath,
      JSON.stringify({
        deviceId: 'dvc_hung_exit',
        server: { baseUrl: 'http://127.0.0.1:9', timeoutSeconds: 1 },
        rootDir: path.join(mountPoint, 'root'),
        stateDir: path.join(dir, 'state'),
        socketPath: path.join(dir, 'agent.sock'),
      }),
    );
    const run = async (args: string[]) => {
      const child = spawn(process.execPath, [AGENT_BIN, '--config', configPath, ...args], {
        env: { PATH: process.env.PATH, CONFIG_AGENT_API_KEY: 'sk_test_hung_exit' },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      const result = collect(child, PATIENCE_MS);
      // Its signal handlers are in before it touches rootDir.
      await waitFor(() => waitsOnFuse(child.pid as number), PATIENCE_MS, { what: 'the agent on the mount' });
      child.kill('SIGTERM');
      return result;
    };
    const [once, daemon] = await Promise.all([run(['--once']), run([])]);
    expect(mount.exitCode === null && mount.signalCode === null, 'the mount still hangs').toBe(true);
    expect({ signal: once.signal, code: once.code }).toEqual({ signal: 'SIGTERM', code: null });
    // Its calls into the mount are bounded now (gate19: 15 s, then the pass ends as stopped), so whichever comes
    // first, that bound or the stop deadline (10 s from the signal), ends it.
    expect(once.stderr).toMatch(
      /exiting now; the next run finishes the job|SIGTERM: stopping after the file in progress/,
    );
    expect({ signal: daemon.signal, code: daemon.code }).toEqual({ signal: 'SIGTERM', code: null });
    // Its start-up's call into the mount fails at the stop (stop21: MountAbandonedAtStop), so it ends about 1 s
    // after the signal; a call the gate does not hold yet still meets the start-up's 10 s stop deadline, and on a
    // busy machine the signal may come after the call's own 15 s bound (gate19) ran out.
    expect(daemon.stderr).toMatch(
      /had not answered when the agent was told to stop|start-up has not finished after 10 s|did not answer within [0-9.]+ s/,
    );
  }, 60_000);
});

describe.runIf(canMountFuse)('the built agent with a hung FUSE mount on a directory below rootDir', () => {
  let harness: AgentHarness | undefined;
  let mount: ChildProcess | undefined;
  afterEach(async () => {
    await killAllDaemons();
    mount?.kill('SIGKILL');
    if (harness !== undefined) spawnSync('umount', ['-l', path.join(harness.rootDir, 'share')]);
    await harness?.close();
    mount = undefined;
    harness = undefined;
  });

  // The start-up sweep opened the mount's root (and the daemon's drift watcher looked it up): both waited in the
  // kernel for good, so --once never finished and the daemon never polled, though no managed file lies there.
  it('--once converges and the daemon polls, restores drift and stops with 0, while the mount hangs', async () => {
    harness = await AgentHarness.create({ registerDevice: true, config: { drift: 'restore' } });
    const h = harness;
    await mkdir(path.join(h.rootDir, 'share'), { recursive: true });
    mount = await hungFuseMount(path.join(h.rootDir, 'share'), 120_000);
    await h.createAndDeploy({ relative_filepath: 'app/a.json', content: { a: 1 } });

    const once = await h.run(['--once'], { timeoutMs: PATIENCE_MS });
    expect({ code: once.code, signal: once.signal }).toEqual({ code: 0, signal: null });
    const written = await readFile(h.rootPath('app/a.json'), 'utf8');

    const daemon = DaemonProcess.start(h);
    await waitFor(() => daemon.passes().length > 0 || undefined, PATIENCE_MS, { what: 'a pass' });
    // The drift watcher is up before the first pass (the daemon's start awaits it): a change by hand is put back.
    await writeFile(h.rootPath('app/a.json'), '{"changed":true}');
    await waitFor(
      async () => (await readFile(h.rootPath('app/a.json'), 'utf8')) === written || undefined,
      PATIENCE_MS,
      { what: 'the changed file restored' },
    );
    const exit = await daemon.stop('SIGTERM', PATIENCE_MS);
    expect({ code: exit.code, signal: exit.signal }).toEqual({ code: 0, signal: null });
    expect(mount.exitCode === null && mount.signalCode === null, 'the mount still hangs').toBe(true);
  }, 120_000);

  // A managed file in the hung mount: its observation (and any write) waited in the kernel for good, so the pass
  // never ended: --once never exited, the daemon polled and reported nothing more, its other files included.
  it('a managed file inside it is retrying while the others are written: --once ends, the daemon keeps passing (gaps18)', async () => {
    harness = await AgentHarness.create({ registerDevice: true });
    const h = harness;
    await mkdir(path.join(h.rootDir, 'share'), { recursive: true });
    mount = await hungFuseMount(path.join(h.rootDir, 'share'), 180_000);
    const inside = await h.createInstance({
      relative_filepath: 'share/b.json',
      content: { b: 1 },
      config_schema_id: 'cfs_share',
    });
    const beside = await h.createInstance({ relative_filepath: 'app/a.json', content: { a: 1 } });
    await h.deploy(inside.id);
    await h.deploy(beside.id);

    // One call into the mount waits its 15 s bound, then the file is retrying and the pass ends: not converged
    // (1), and with that call still waiting in a thread of the pool, ended by SIGTERM (endProcess, README).
    const once = await h.run(['--once'], { timeoutMs: 4 * PATIENCE_MS });
    expect({ code: once.code, signal: once.signal }).toEqual({ code: null, signal: 'SIGTERM' });
    expect(once.stdout).toMatch(/ETIMEDOUT/);
    expect(JSON.parse(await readFile(h.rootPath('app/a.json'), 'utf8'))).toEqual({ a: 1 });
    expect(await h.instance(beside.id)).toMatchObject({ activity_status: 'deployed', error_status: 'none' });
    const [retrying] = await h.reportsFor(inside.id);
    expect(retrying).toMatchObject({ error_status: 'retrying' });
    expect(retrying?.message).toMatch(/ETIMEDOUT/);

    // The daemon: its passes end (the mount is known late: no second call goes in), and it stops on SIGTERM (by
    // the signal again, the late call still in the pool).
    const daemon = DaemonProcess.start(h);
    await waitFor(() => daemon.passes().length >= 2 || undefined, 4 * PATIENCE_MS, { what: 'two passes' });
    const exit = await daemon.stop('SIGTERM', PATIENCE_MS);
    expect({ code: exit.code, signal: exit.signal }).toEqual({ code: null, signal: 'SIGTERM' });
    expect(mount.exitCode === null && mount.signalCode === null, 'the mount still hangs').toBe(true);
  }, 300_000);
});
