// A drift fight on a fake clock: a local process rewrites a managed file every 500 ms; the agent restores it
// from the content cache, held off per file, and the service sees no request for it.
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createClient } from '../api/client.js';
import type { Clock } from '../lib/clock.js';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { type RunningMockServer, startMockServer } from '../mock-server/server.js';
import type { PassResult } from '../reconcile/pass-runner.js';
import { Reconciler } from '../reconcile/reconcile.js';
import { DriftWatcher } from './drift-watcher.js';
import { SingleFlight } from './single-flight.js';

const API_KEY = 'sk_test_drift_fight_0123456789';
const DEVICE = 'dvc_fight';
const FILE = 'app/app.json';
const BYTES = `${JSON.stringify({ port: 8080 }, null, 2)}\n`;
const POLL_MS = 30_000;

/** Monotonic time moves only when told; sleeps resolve when it passes their deadline. */
function fakeClock(): Clock & { advance(ms: number): Promise<void> } {
  let mono = 1_000;
  const sleepers: { until: number; resolve: () => void }[] = [];
  return {
    now: () => Date.parse('2026-06-01T00:00:00.000Z') + mono,
    monotonic: () => mono,
    sleep: (ms, signal) =>
      new Promise<void>((resolve, reject) => {
        signal?.addEventListener('abort', () => reject(signal.reason), { once: true });
        sleepers.push({ until: mono + ms, resolve });
      }),
    async advance(ms) {
      mono += ms;
      for (const sleeper of sleepers.splice(0)) {
        if (sleeper.until <= mono) sleeper.resolve();
        else sleepers.push(sleeper);
      }
      for (let turn = 0; turn < 5; turn += 1) await new Promise((resolve) => setImmediate(resolve));
    },
  };
}

let dir: string;
let server: RunningMockServer;
let reconciler: Reconciler;
let watcher: DriftWatcher;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-fight-'));
  await mkdir(path.join(dir, 'root'));
  await mkdir(path.join(dir, 'state'), { mode: 0o700 });
  server = await startMockServer({ apiKeys: [API_KEY] });
});

afterEach(async () => {
  await watcher?.close();
  await reconciler?.close();
  await server.close();
  await rm(dir, { recursive: true, force: true });
});

function requests(): number {
  return server.state.statsSnapshot().total;
}

async function setUp(options: { cached: boolean; gid?: number; fs?: FsPort }) {
  const clock = fakeClock();
  const rootDir = path.join(dir, 'root');
  const stateDir = path.join(dir, 'state');
  server.state.instances.set('cfg_app', {
    id: 'cfg_app',
    device_id: DEVICE,
    relative_filepath: FILE,
    config_schema_id: 'sch_app',
    config_type_id: 'typ',
    target_status: 'deployed',
    activity_status: 'queued',
    error_status: 'none',
    content: { port: 8080 },
    created_at: '2026-01-01T00:00:00.000Z',
    updated_at: '2026-01-01T00:00:00.000Z',
  });
  const client = createClient({
    baseUrl: server.url,
    apiKey: API_KEY,
    timeoutMs: 10_000,
    maxResponseBytes: 1 << 20,
  });
  reconciler = await Reconciler.open(
    { fs: options.fs ?? nodeFs, clock, random: () => 0.5, logger: silentLogger() },
    {
      deviceId: DEVICE,
      rootDir,
      stateDir,
      fileMode: 0o644,
      dirMode: 0o755,
      retry: { maxAttempts: 3, baseDelaySeconds: 10, maxDelaySeconds: 60 },
      requestRetries: 0,
      // files.rules giving every file a group of its own.
      ...(options.gid === undefined ? {} : { fileMeta: () => ({ mode: 0o640, gid: options.gid ?? 0 }) }),
    },
    client,
  );
  const passes = new SingleFlight<PassResult>(() => reconciler.runPass({ mode: 'full' }));
  expect((await passes.trigger()).converged).toBe(true);
  if (!options.cached) await rm(path.join(stateDir, 'cache'), { recursive: true, force: true });
  const restored: string[] = [];
  const repairPasses: string[][] = [];
  watcher = new DriftWatcher({
    fs: nodeFs,
    rootDir,
    policy: 'restore',
    logger: silentLogger(),
    managedFiles: () => reconciler.state.files,
    passes,
    onDrift: (paths) => {
      repairPasses.push(paths);
      void passes.trigger();
    },
    restore: {
      stateDir,
      dirMode: 0o755,
      clock,
      minHoldOffMs: 1_000,
      maxHoldOffMs: POLL_MS,
      onRestored: (paths) => restored.push(...paths),
      fileMeta: (relative) => reconciler.fileMeta(relative),
      rootMountGone: () => reconciler.rootMountGone(),
    },
    debounceMs: 1,
  });
  const target = path.join(rootDir, FILE);
  /** One round of the fight: the other process writes, the watcher notices and judges, time moves on. */
  const tamper = async (round: number) => {
    await writeFile(target, `{"tampered": ${round}}\n`);
    watcher.noticeChange(target);
    await watcher.judgeNow();
    await passes.idle();
    await clock.advance(500);
    await watcher.judgeNow();
    await passes.idle();
  };
  return { clock, target, restored, repairPasses, tamper, passes };
}

describe('a drift fight', () => {
  it('a file rewritten every 500 ms for 2.5 minutes: restored from the cache, zero requests, held off per file', async () => {
    const { target, restored, repairPasses, tamper } = await setUp({ cached: true });
    const before = requests();

    // 2.5 minutes: the hold-off reaches the poll interval after ~31 s (1, 2, 4, 8, 16 s, then 30) and stays there
    // for four intervals.
    const fightSeconds = 150;
    for (let round = 0; round < fightSeconds * 2; round += 1) await tamper(round);

    // Not one request for the fight: the service's load stays at the poll rate (the poll loop is not part of
    // this test; it pulls every 30 s whatever happens on the disk).
    expect(requests()).toBe(before);
    expect(repairPasses).toEqual([]);
    // Held off: 1 s, 2 s, 4 s, ... up to the poll interval, so in 150 s far fewer than 300 restores (0, 1, 3, 7,
    // 15, 31, 61, 91, 121 s: 9), and no more than one per poll interval once the hold-off has grown.
    const steadyRestores = Math.ceil(fightSeconds / (POLL_MS / 1000)) + 6;
    expect(restored.length).toBeGreaterThan(5);
    expect(restored.length).toBeLessThanOrEqual(steadyRestores);
    expect(new Set(restored)).toEqual(new Set([FILE]));
    // The last restore put back the agent's bytes (the fight's last write may have come after it).
    await tamper(9999);
    await watcher.judgeNow();
    const text = await readFile(target, 'utf8');
    expect([BYTES, '{"tampered": 9999}\n']).toContain(text);
  });

  it('the first change is restored at once, with the mode too, and without a request', async () => {
    const { target, restored, clock } = await setUp({ cached: true });
    const before = requests();
    await writeFile(target, '{"edited": true}\n', { mode: 0o600 });
    await nodeFs.chmod(target, 0o600);
    watcher.noticeChange(target);
    await watcher.judgeNow();
    expect(await readFile(target, 'utf8')).toBe(BYTES);
    expect((await nodeFs.stat(target)).mode & 0o777).toBe(0o644);
    expect(restored).toEqual([FILE]);
    expect(requests()).toBe(before);
    // Changed again within the hold-off: left until it ends, then restored.
    await writeFile(target, '{"edited": 2}\n');
    watcher.noticeChange(target);
    await watcher.judgeNow();
    expect(await readFile(target, 'utf8')).toBe('{"edited": 2}\n');
    await clock.advance(1_000);
    await watcher.judgeNow();
    expect(await readFile(target, 'utf8')).toBe(BYTES);
    expect(restored).toEqual([FILE, FILE]);
    expect(requests()).toBe(before);
  });

  it("rootDir's mount gone: nothing restored into the bare mountpoint, the repair is a pass (which writes nothing there)", async () => {
    const rootDir = path.join(dir, 'root');
    // rootDir reported as a mount point (st_dev one past its parent's) while `mounted`: then unmounted.
    let mounted = true;
    const fs = {
      ...nodeFs,
      stat: (async (target: string, opts?: unknown) => {
        const stats = await nodeFs.stat(target, opts as never);
        if (mounted && target === rootDir) Object.assign(stats, { dev: Number(stats.dev) + 1 });
        return stats;
      }) as typeof nodeFs.stat,
    };
    const { target, restored, repairPasses, passes } = await setUp({ cached: true, fs });
    mounted = false;
    await rm(path.join(rootDir, 'app'), { recursive: true });
    await mkdir(path.join(rootDir, 'app'));

    watcher.noticeChange(target);
    await watcher.judgeNow();
    await passes.idle();

    expect(restored).toEqual([]);
    expect(repairPasses).toEqual([[FILE]]);
    expect(await nodeFs.readdir(path.join(rootDir, 'app'))).toEqual([]);
    expect(server.state.instance('cfg_app')).toMatchObject({ error_status: 'retrying' });
  });

  it('a mount below rootDir gone: the file deleted from the bare directory is not restored there, the repair is a pass (mount27)', async () => {
    const rootDir = path.join(dir, 'root');
    const at = path.join(rootDir, 'app');
    await mkdir(at);
    // A filesystem at rootDir/app (its own st_dev, listed in the mount table) while `mounted`: then unmounted.
    let mounted = true;
    const fs = {
      ...nodeFs,
      stat: (async (target: string, opts?: unknown) => {
        const stats = await nodeFs.stat(target, opts as never);
        if (mounted && target === at) Object.assign(stats, { dev: Number(stats.dev) + 1 });
        return stats;
      }) as typeof nodeFs.stat,
      mountsBelow: (of: string) => new Set(of === rootDir && mounted ? ['app'] : []),
    };
    const { target, restored, repairPasses, passes } = await setUp({ cached: true, fs });
    mounted = false;
    // The lazy unmount leaves the bare directory, without the file: a deletion the watcher sees.
    await rm(at, { recursive: true });
    await mkdir(at);

    watcher.noticeChange(target);
    await watcher.judgeNow();
    await passes.idle();

    expect(restored).toEqual([]);
    expect(repairPasses).toEqual([[FILE]]);
    expect(await nodeFs.readdir(at)).toEqual([]);
    expect(server.state.instance('cfg_app')).toMatchObject({ error_status: 'retrying' });
  });

  it.skipIf(process.getuid?.() !== 0)(
    "a file of a files.rules group is restored in that group, not the agent's (root only: chown to any gid)",
    async () => {
      // A gid no account uses: the readers of the file (nginx, say) are in it, and the mode is 0640.
      const { target, restored } = await setUp({ cached: true, gid: 4242 });
      expect((await nodeFs.stat(target)).gid).toBe(4242);
      // An editor saves the file as a new inode in its own group.
      await writeFile(`${target}.new`, '{"edited": true}\n');
      await nodeFs.chown(`${target}.new`, 0, 0);
      await nodeFs.rename(`${target}.new`, target);
      watcher.noticeChange(target);
      await watcher.judgeNow();

      expect(restored).toEqual([FILE]);
      expect(await readFile(target, 'utf8')).toBe(BYTES);
      const stats = await nodeFs.stat(target);
      // Restored in the agent's group, the file was unreadable to its readers until the next full pass.
      expect({ gid: stats.gid, mode: stats.mode & 0o777 }).toEqual({ gid: 4242, mode: 0o640 });
    },
  );

  it('without cached bytes the first repair is a pass (which caches them); every later one is local', async () => {
    const { restored, repairPasses, tamper } = await setUp({ cached: false });
    // Only the initial full pass has run so far: what one pass costs the service.
    const onePass = requests();
    for (let round = 0; round < 120; round += 1) await tamper(round);
    expect(repairPasses).toEqual([[FILE]]);
    expect(requests()).toBeGreaterThan(onePass);
    expect(requests()).toBeLessThanOrEqual(2 * onePass);
    // 60 s of fighting after it: hold-offs of 2, 4, 8, 16, 30 s: a handful of local restores, not 120.
    expect(restored.length).toBeGreaterThan(1);
    expect(restored.length).toBeLessThanOrEqual(6);
  });
});
