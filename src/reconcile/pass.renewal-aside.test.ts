// runPass below a directory a renewal left renamed aside: the agent's own unfinished renewal, never the instance's attempt.
import * as nodeFs from 'node:fs/promises';
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createClient } from '../api/client.js';
import type { Clock } from '../lib/clock.js';
import type { Deps } from '../lib/deps.js';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { type RunningMockServer, startMockServer } from '../mock-server/server.js';
import { ASIDES_FILE } from '../store/directory-asides.js';
import { DirectorySyncLedger } from '../store/directory-syncs.js';
import { removeManagedFile } from '../store/durable-writer.js';
import { rootConditionOf } from '../store/errors.js';
import { TEMP_PREFIX } from '../store/path-guard.js';
import { StateDir } from '../store/state-dir.js';
import { Reconciler } from './reconcile.js';

const API_KEY = 'sk_test_aside_0123456789abcdef';
const DEVICE = 'dvc_1';
const T0 = '2026-01-01T00:00:00.000Z';
const ASIDE = `${TEMP_PREFIX}${'cd'.repeat(12)}`;

let dir: string;
let rootDir: string;
let server: RunningMockServer;
let reconciler: Reconciler | undefined;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-pass-aside-'));
  rootDir = path.join(dir, 'root');
  // A run killed between a renewal's two renames: app at its aside name, with an operator's file in it.
  await mkdir(path.join(rootDir, ASIDE), { recursive: true, mode: 0o755 });
  await chmod(rootDir, 0o755);
  await writeFile(path.join(rootDir, ASIDE, 'operator.conf'), 'the operator wrote this\n');
  await mkdir(path.join(dir, 'state'), { mode: 0o700 });
  await writeFile(
    path.join(dir, 'state', ASIDES_FILE),
    JSON.stringify({ version: 1, asides: [{ rootDir, dir: '', name: 'app', aside: ASIDE }] }),
  );
  server = await startMockServer({ apiKeys: [API_KEY] });
});

afterEach(async () => {
  await reconciler?.close();
  await server.close();
  await rm(dir, { recursive: true, force: true });
});

describe('runPass: a write below a directory the start could not put back', () => {
  it('is retried as the device condition it is, never failed for good, and written once the directory is back', async () => {
    server.state.instances.set('cfg_a', {
      id: 'cfg_a',
      device_id: DEVICE,
      relative_filepath: 'app/a.json',
      config_schema_id: 'sch_a',
      config_type_id: 'typ',
      target_status: 'deployed',
      activity_status: 'queued',
      error_status: 'none',
      content: { v: 1 },
      created_at: T0,
      updated_at: T0,
    });
    // The restore's rename fails (EIO: a passing disk error) until the test lets it.
    let renameFails = true;
    const fs: FsPort = {
      ...(nodeFs as unknown as FsPort),
      directorySyncs: new DirectorySyncLedger(),
      rename: (async (from: string, to: string) => {
        if (renameFails && String(from) === path.join(rootDir, ASIDE))
          throw Object.assign(new Error('EIO: simulated, rename'), { code: 'EIO' });
        return nodeFs.rename(from, to);
      }) as FsPort['rename'],
    };
    let monotonic = 1_000;
    const clock: Clock = {
      now: () => Date.parse('2026-06-01T00:00:00.000Z') + monotonic,
      monotonic: () => monotonic,
      sleep: async () => undefined,
    };
    const deps: Deps = { fs, clock, random: () => 0.5, logger: silentLogger() };
    const client = createClient({
      baseUrl: server.url,
      apiKey: API_KEY,
      timeoutMs: 10_000,
      maxResponseBytes: 1 << 20,
    });
    reconciler = await Reconciler.open(
      deps,
      {
        deviceId: DEVICE,
        rootDir,
        stateDir: path.join(dir, 'state'),
        fileMode: 0o640,
        dirMode: 0o755,
        // One attempt: a write that counted one was `failed` for good at once.
        retry: { maxAttempts: 1, baseDelaySeconds: 10, maxDelaySeconds: 60 },
        requestRetries: 0,
      },
      client,
    );

    await reconciler.runPass({ mode: 'full' });

    // Before: `failed` (final at the service, never tried again) after the one attempt.
    expect(server.state.instance('cfg_a').error_status).toBe('retrying');
    expect(reconciler.state.instances.get('cfg_a')?.attempts).toBe(0);
    expect(await nodeFs.readdir(rootDir)).toEqual([ASIDE]);

    renameFails = false;
    monotonic += 3_600_000;
    await reconciler.runPass({ mode: 'full' });

    expect(await readFile(path.join(rootDir, 'app/a.json'), 'utf8')).toBe(
      `${JSON.stringify({ v: 1 }, null, 2)}\n`,
    );
    expect(await readFile(path.join(rootDir, 'app/operator.conf'), 'utf8')).toBe('the operator wrote this\n');
    expect(server.state.instance('cfg_a').activity_status).toBe('deployed');
    expect(server.state.instance('cfg_a').error_status).toBe('none');
  });

  it('a removal below it that finds its file gone is held back the same way: the condition, not an attempt', async () => {
    const fs: FsPort = {
      ...(nodeFs as unknown as FsPort),
      directorySyncs: new DirectorySyncLedger(),
      rename: (async (from: string, to: string) => {
        if (String(from) === path.join(rootDir, ASIDE))
          throw Object.assign(new Error('EIO: simulated, rename'), { code: 'EIO' });
        return nodeFs.rename(from, to);
      }) as FsPort['rename'],
    };
    const state = await StateDir.open(
      fs,
      { rootDir, stateDir: path.join(dir, 'state'), deviceId: DEVICE },
      silentLogger(),
      { clock: { now: () => 0 } },
    );
    try {
      const error = await removeManagedFile(fs, {
        rootDir,
        relativePath: 'app/operator.conf',
        pruneDirs: ['app'],
      }).catch((caught: unknown) => caught);
      // Before: no condition, so record.ts counted the removal an attempt of the instance.
      expect(rootConditionOf(error)).toBe('renamed_aside');
    } finally {
      await state.close();
    }
    expect(await readFile(path.join(rootDir, ASIDE, 'operator.conf'), 'utf8')).toBe(
      'the operator wrote this\n',
    );
  });
});
