// The built agent with rootDir itself on a network or FUSE mount that stops answering and comes back (gate19).
import { mkdir, readdir, readFile, readlink } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { TEMP_PREFIX } from '../../src/store/path-guard.js';
import { DaemonProcess, killAllDaemons } from '../helpers/daemon.js';
import { AgentHarness } from '../helpers/harness.js';
import { canPauseFuse, type PausableMount, pausableFuseMount } from '../helpers/pausable-fuse.js';
import { PATIENCE_MS, waitFor } from '../helpers/wait-for.js';

/** The descriptors process `pid` holds open on files under `dir`. */
async function descriptorsUnder(pid: number, dir: string): Promise<string[]> {
  const open: string[] = [];
  for (const fd of await readdir(`/proc/${pid}/fd`).catch(() => [])) {
    const target = await readlink(`/proc/${pid}/fd/${fd}`).catch(() => '');
    if (target === dir || target.startsWith(`${dir}/`)) open.push(target);
  }
  return open;
}

/** Whether a thread of `pid` waits for the FUSE daemon that does not answer (a call has reached the hang). */
async function waitsOnFuse(pid: number): Promise<boolean> {
  for (const task of await readdir(`/proc/${pid}/task`).catch(() => [])) {
    const wchan = await readFile(`/proc/${pid}/task/${task}/wchan`, 'utf8').catch(() => '');
    // fuse_* (a mount nobody serves) or FUSE's request_wait_answer (a daemon stopped), by kernel.
    if (wchan.startsWith('fuse_') || wchan === 'request_wait_answer') return true;
  }
  return false;
}

/** Every name under `dir` that is a temp file of the writer. */
async function tempFilesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true });
  return entries.filter((entry) => path.basename(entry).startsWith(TEMP_PREFIX));
}

const POLL = { poll: { intervalSeconds: 1, jitterRatio: 0.1, fullResyncSeconds: 600 } };
/** A call into the mount waits its 15 s bound first: patience for that on a busy machine. */
const HANG_PATIENCE_MS = 4 * PATIENCE_MS;

// Root with /dev/fuse and exfat-fuse (Debian's exfat-fuse and exfatprogs, which .ci/run installs): exfat-fuse on a
// loop image is the mount, stopped (SIGSTOP) to hang as a dead NFS server does and continued to come back.
describe.runIf(canPauseFuse)('the built agent with rootDir on a mount that stops answering', () => {
  let harness: AgentHarness | undefined;
  let mount: PausableMount | undefined;
  afterEach(async () => {
    await killAllDaemons();
    mount?.close();
    await harness?.close();
    mount = undefined;
    harness = undefined;
  });

  // Before: --once never ended (killed by the test), and the daemon never started (no pass, no local API).
  it('hung before the start: --once ends non-zero naming ETIMEDOUT, the daemon starts, polls and reports retrying; once it answers, the file lands', async () => {
    harness = await AgentHarness.create({ registerDevice: true, config: POLL });
    const h = harness;
    await mkdir(h.rootDir);
    mount = await pausableFuseMount(path.join(h.dir, 'root.img'), h.rootDir);
    const { deploy: a } = await h.createAndDeploy({ relative_filepath: 'app/a.json', content: { a: 1 } });
    mount.pause();

    // Ends after the bound: not converged, and with that call still waiting in a thread of the pool, by SIGTERM
    // (endProcess: 143 to a shell).
    const once = await h.run(['--once'], { timeoutMs: HANG_PATIENCE_MS });
    expect(once.signal).not.toBe('SIGKILL');
    expect(once.code === 1 || once.signal === 'SIGTERM', `exit ${once.code} ${once.signal}`).toBe(true);
    expect(once.stdout).toMatch(/retrying\s+app\/a\.json .*ETIMEDOUT/);

    const daemon = DaemonProcess.start(h);
    await daemon.waitForPasses(2, HANG_PATIENCE_MS);
    const reports = await h.reportsFor(a.id);
    expect(reports.length).toBeGreaterThan(0);
    for (const report of reports) {
      expect(report).toMatchObject({ error_status: 'retrying' });
      expect(report.message).toMatch(/ETIMEDOUT/);
    }
    expect(await h.instance(a.id)).toMatchObject({ activity_status: 'queued', error_status: 'retrying' });
    const status = await h.run(['status', '--json'], { timeoutMs: PATIENCE_MS });
    expect(status.code).toBe(1);
    const errors = (
      JSON.parse(status.stdout) as { errors: { path: string; status: string; message: string }[] }
    ).errors;
    expect(errors).toEqual([expect.objectContaining({ path: 'app/a.json', status: 'retrying' })]);
    expect(errors[0]?.message).toMatch(/ETIMEDOUT/);

    mount.resume();
    await waitFor(async () => (await h.instance(a.id)).activity_status === 'deployed', HANG_PATIENCE_MS, {
      what: 'a.json deployed once the mount answers',
    });
    expect(JSON.parse(await readFile(h.rootPath('app/a.json'), 'utf8'))).toEqual({ a: 1 });
    expect(await tempFilesUnder(h.rootDir)).toEqual([]);
    expect(await descriptorsUnder(daemon.child.pid as number, h.rootDir)).toEqual([]);
    const exit = await daemon.stop('SIGTERM', PATIENCE_MS);
    expect({ code: exit.code, signal: exit.signal }).toEqual({ code: 0, signal: null });
  }, 600_000);

  // Before: the pass waited on the mount for as long as it hung: no pass ended, nothing was reported, `status`
  // still said converged.
  it('hung while the daemon runs: its passes go on and report the new file retrying, SIGTERM ends it; once it answers, --once converges', async () => {
    harness = await AgentHarness.create({ registerDevice: true, config: POLL });
    const h = harness;
    await mkdir(h.rootDir);
    mount = await pausableFuseMount(path.join(h.dir, 'root.img'), h.rootDir);
    await h.createAndDeploy({ relative_filepath: 'app/a.json', content: { a: 1 } });
    const daemon = DaemonProcess.start(h);
    await daemon.waitForPasses(1, PATIENCE_MS);

    mount.pause();
    const { deploy: b } = await h.createAndDeploy({
      relative_filepath: 'app/b.json',
      content: { b: 1 },
      config_schema_id: 'cfs_b',
    });
    await waitFor(async () => (await h.reportsFor(b.id)).length > 0, HANG_PATIENCE_MS, {
      what: 'b reported',
    });
    const [report] = await h.reportsFor(b.id);
    expect(report).toMatchObject({ error_status: 'retrying' });
    expect(report?.message).toMatch(/ETIMEDOUT/);
    const after = daemon.passes().length;
    await daemon.waitForPasses(2, HANG_PATIENCE_MS, { after });
    expect(await h.instance(b.id)).toMatchObject({ error_status: 'retrying' });

    // A call of the pass may wait on the mount: the stop gives up on it after its budget and ends by SIGTERM.
    const exit = await daemon.stop('SIGTERM', PATIENCE_MS);
    expect(exit.signal === 'SIGTERM' || exit.code === 0, `exit ${exit.code} ${exit.signal}`).toBe(true);

    mount.resume();
    const once = await h.run(['--once'], { timeoutMs: HANG_PATIENCE_MS });
    expect({ code: once.code, signal: once.signal }).toEqual({ code: 0, signal: null });
    expect(JSON.parse(await readFile(h.rootPath('app/b.json'), 'utf8'))).toEqual({ b: 1 });
    expect(await h.instance(b.id)).toMatchObject({ activity_status: 'deployed', error_status: 'none' });
    expect(await tempFilesUnder(h.rootDir)).toEqual([]);
  }, 600_000);

  // Before (stop21): the pass went on waiting for the call's 15 s bound, the stop's 7 s budget ran out first ("the
  // current pass did not stop in time"), and the daemon ended by SIGTERM 8-9 s after the signal.
  it('stopped while its pass waits on the mount: the pass is given up on at once, the stop ends without its budget running out', async () => {
    harness = await AgentHarness.create({ registerDevice: true, config: POLL });
    const h = harness;
    await mkdir(h.rootDir);
    mount = await pausableFuseMount(path.join(h.dir, 'root.img'), h.rootDir);
    await h.createAndDeploy({ relative_filepath: 'app/a.json', content: { a: 1 } });
    const daemon = DaemonProcess.start(h);
    await daemon.waitForPasses(1, PATIENCE_MS);

    mount.pause();
    await h.createAndDeploy({
      relative_filepath: 'app/b.json',
      content: { b: 1 },
      config_schema_id: 'cfs_b',
    });
    const pid = daemon.child.pid as number;
    await waitFor(() => waitsOnFuse(pid), HANG_PATIENCE_MS, {
      what: 'a call of the daemon waiting on the mount',
    });

    const exit = await daemon.stop('SIGTERM', PATIENCE_MS);
    // 0, or (the call still in a thread of the pool: endProcess) SIGTERM; never killed by the test.
    expect(exit.signal === 'SIGTERM' || exit.code === 0, `exit ${exit.code} ${exit.signal}`).toBe(true);
    expect(daemon.logsWith('shutdown requested')).toHaveLength(1);
    expect(daemon.logsWith(/did not stop in time|shutdown took too long/)).toEqual([]);
  }, 600_000);
});
