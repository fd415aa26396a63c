// adv23: an instance the service moves to a path that nests with its own old file (`x/a.json` -> `x`): its own
// old file is in the way of its new one, which was retried for good (`retrying`, "something on the device is in the
// way") since the old file went only once the new one was in place.
import * as nodeFs from 'node:fs/promises';
import { lstat, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createClient } from '../api/client.js';
import type { Clock } from '../lib/clock.js';
import type { Deps } from '../lib/deps.js';
import { silentLogger } from '../lib/logger.js';
import { type RunningMockServer, startMockServer } from '../mock-server/server.js';
import type { ConfigInstanceRecord } from '../mock-server/state.js';
import type { PassResult } from './pass-runner.js';
import { Reconciler } from './reconcile.js';

const API_KEY = 'sk_test_adv23_0123456789abcdef';
const DEVICE = 'dvc_1';
const T0 = '2026-01-01T00:00:00.000Z';
const T1 = '2026-02-01T00:00:00.000Z';

let monotonic = 1_000;
const clock: Clock = {
  now: () => Date.parse('2026-06-01T00:00:00.000Z') + monotonic,
  monotonic: () => monotonic,
  sleep: async () => undefined,
};

/** The fs port, its renames failing with ENOSPC where `failRenameTo` says (a full disk at the new file). */
const fs = {
  ...nodeFs,
  failRenameTo: (_target: string) => false,
  rename: async (from: Parameters<typeof nodeFs.rename>[0], to: Parameters<typeof nodeFs.rename>[1]) => {
    if (fs.failRenameTo(String(to))) {
      throw Object.assign(new Error(`ENOSPC: simulated failure, rename '${String(to)}'`), { code: 'ENOSPC' });
    }
    return nodeFs.rename(from, to);
  },
};

let dir: string;
let rootDir: string;
let server: RunningMockServer;
let reconciler: Reconciler;

beforeEach(async () => {
  monotonic = 1_000;
  fs.failRenameTo = () => false;
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-adv23-'));
  rootDir = path.join(dir, 'root');
  await mkdir(rootDir);
  await mkdir(path.join(dir, 'state'), { mode: 0o700 });
  server = await startMockServer({ apiKeys: [API_KEY] });
  const client = createClient({
    baseUrl: server.url,
    apiKey: API_KEY,
    timeoutMs: 10_000,
    maxResponseBytes: 1 << 20,
  });
  const deps: Deps = { fs, clock, random: () => 0.5, logger: silentLogger() };
  reconciler = await Reconciler.open(
    deps,
    {
      deviceId: DEVICE,
      rootDir,
      stateDir: path.join(dir, 'state'),
      fileMode: 0o640,
      dirMode: 0o750,
      retry: { maxAttempts: 3, baseDelaySeconds: 10, maxDelaySeconds: 60 },
      requestRetries: 0,
      maxResponseBytes: 1 << 20,
    },
    client,
  );
});

afterEach(async () => {
  await reconciler.close();
  await server.close();
  await rm(dir, { recursive: true, force: true });
});

function put(fields: Partial<ConfigInstanceRecord> & { id: string }): void {
  const before = server.state.instances.get(fields.id);
  server.state.instances.set(fields.id, {
    device_id: DEVICE,
    relative_filepath: `${fields.id}.json`,
    config_schema_id: `sch_${fields.id}`,
    config_type_id: 'typ',
    target_status: 'deployed',
    activity_status: 'queued',
    error_status: 'none',
    content: { owner: fields.id },
    created_at: T0,
    updated_at: T0,
    ...(before ?? {}),
    ...fields,
  });
}

/** A full pass past every cooldown (a minute of the monotonic clock later). */
const pass = (): Promise<PassResult> => {
  monotonic += 3_600_000;
  return reconciler.runPass({ mode: 'full' });
};
const fileAt = (relative: string) => readFile(path.join(rootDir, relative), 'utf8');
const isFile = (relative: string) =>
  lstat(path.join(rootDir, relative)).then(
    (stats) => stats.isFile(),
    () => false,
  );
const reports = () =>
  server.state.reports.map((r) => `${r.config_instance_id} ${r.activity_status}/${r.error_status}`);

const json = (value: unknown) => `${JSON.stringify(value, null, 2)}\n`;
const MOVES = [
  ['into the directory that held it', 'x/a.json', 'x'],
  ['below the file it was', 'x.json', 'x.json/a.json'],
] as const;

async function deployThenMove(from: string, to: string): Promise<void> {
  put({ id: 'cfg_a', relative_filepath: from, content: { v: 1 } });
  expect((await pass()).converged).toBe(true);
  expect(await fileAt(from)).toBe(json({ v: 1 }));
  put({ id: 'cfg_a', relative_filepath: to, content: { v: 2 }, activity_status: 'queued', updated_at: T1 });
}

describe('an instance moved to a path that nests with its own old file', () => {
  it.each(MOVES)(
    '%s (%s -> %s): written in the next pass, the old file gone, converged',
    async (_name, from, to) => {
      await deployThenMove(from, to);

      const moved = await pass();

      expect(await isFile(to)).toBe(true);
      expect(await fileAt(to)).toBe(json({ v: 2 }));
      expect(await isFile(from)).toBe(false);
      expect(moved.converged).toBe(true);
      expect(reports()).toEqual(['cfg_a deployed/none', 'cfg_a deployed/none']);
      const state = JSON.parse(await readFile(path.join(dir, 'state', 'state.json'), 'utf8'));
      expect(Object.keys(state.files)).toEqual([to]);
      const again = await pass();
      expect(again.converged).toBe(true);
      expect(reports()).toHaveLength(2);
    },
  );

  it.each(MOVES)(
    '%s (%s -> %s), the new file failing: the old one is put back whole',
    async (_name, from, to) => {
      await deployThenMove(from, to);
      fs.failRenameTo = (target) => target === path.join(rootDir, to);

      const failed = await pass();

      expect(failed.converged).toBe(false);
      expect(await fileAt(from)).toBe(json({ v: 1 }));
      expect(reports().at(-1)).toBe('cfg_a queued/retrying');
      fs.failRenameTo = () => false;
      expect((await pass()).converged).toBe(true);
      expect(await fileAt(to)).toBe(json({ v: 2 }));
      expect(await isFile(from)).toBe(false);
    },
  );

  it('an operator file beside the old one keeps it in place: nothing removed until it goes', async () => {
    await deployThenMove('x/a.json', 'x');
    await writeFile(path.join(rootDir, 'x', 'mine.txt'), 'operator\n');
    const before = await lstat(path.join(rootDir, 'x', 'a.json'));

    for (let i = 0; i < 3; i += 1) expect((await pass()).converged).toBe(false);

    const after = await lstat(path.join(rootDir, 'x', 'a.json'));
    expect(after.ino).toBe(before.ino);
    expect(await fileAt('x/mine.txt')).toBe('operator\n');
    expect(reports().at(-1)).toMatch(/^cfg_a queued\/retrying$/);
    await rm(path.join(rootDir, 'x', 'mine.txt'));
    expect((await pass()).converged).toBe(true);
    expect(await fileAt('x')).toBe(json({ v: 2 }));
  });
});
