// runPass below a directory a renewal left renamed aside: the agent's own unfinished renewal, never the instance's attempt.
import * as nodeFs from 'node:fs/promises';
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import type { Clock } from '../lib/clock.js';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { ASIDES_FILE } from '../store/directory-asides.js';
import { DirectorySyncLedger } from '../store/directory-syncs.js';
import { removeManagedFile } from '../store/durable-writer.js';
import { rootConditionOf } from '../store/errors.js';
import { TEMP_PREFIX } from '../store/path-guard.js';
import { StateDir } from '../store/state-dir.js';

const DEVICE = 'dvc_1';
const ASIDE = `${TEMP_PREFIX}${'cd'.repeat(12)}`;

let world: PassWorld;

beforeEach(async () => {
  world = await createPassWorld({ name: 'pass-aside', open: false });
  // A run killed between a renewal's two renames: app at its aside name, with an operator's file in it.
  await mkdir(path.join(world.rootDir, ASIDE), { recursive: true, mode: 0o755 });
  await chmod(world.rootDir, 0o755);
  await writeFile(path.join(world.rootDir, ASIDE, 'operator.conf'), 'the operator wrote this\n');
  await writeFile(
    path.join(world.stateDir, ASIDES_FILE),
    JSON.stringify({ version: 1, asides: [{ rootDir: world.rootDir, dir: '', name: 'app', aside: ASIDE }] }),
  );
});

afterEach(() => world.close());

describe('runPass: a write below a directory the start could not put back', () => {
  it('is retried as the device condition it is, never failed for good, and written once the directory is back', async () => {
    world.put({ id: 'cfg_a', relative_filepath: 'app/a.json', config_schema_id: 'sch_a', content: { v: 1 } });
    // The restore's rename fails (EIO: a passing disk error) until the test lets it.
    let renameFails = true;
    const fs: FsPort = {
      ...(nodeFs as unknown as FsPort),
      directorySyncs: new DirectorySyncLedger(),
      rename: (async (from: string, to: string) => {
        if (renameFails && String(from) === path.join(world.rootDir, ASIDE))
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
    await world.open({
      deps: { fs, clock },
      settings: {
        dirMode: 0o755,
        // One attempt: a write that counted one was `failed` for good at once.
        retry: { maxAttempts: 1, baseDelaySeconds: 10, maxDelaySeconds: 60 },
      },
    });

    await world.reconciler.runPass({ mode: 'full' });

    // Before: `failed` (final at the service, never tried again) after the one attempt.
    expect(world.server.state.instance('cfg_a').error_status).toBe('retrying');
    expect(world.reconciler.state.instances.get('cfg_a')?.attempts).toBe(0);
    expect(await nodeFs.readdir(world.rootDir)).toEqual([ASIDE]);

    renameFails = false;
    monotonic += 3_600_000;
    await world.reconciler.runPass({ mode: 'full' });

    expect(await readFile(path.join(world.rootDir, 'app/a.json'), 'utf8')).toBe(
      `${JSON.stringify({ v: 1 }, null, 2)}\n`,
    );
    expect(await readFile(path.join(world.rootDir, 'app/operator.conf'), 'utf8')).toBe(
      'the operator wrote this\n',
    );
    expect(world.server.state.instance('cfg_a').activity_status).toBe('deployed');
    expect(world.server.state.instance('cfg_a').error_status).toBe('none');
  });

  it('a removal below it that finds its file gone is held back the same way: the condition, not an attempt', async () => {
    const fs: FsPort = {
      ...(nodeFs as unknown as FsPort),
      directorySyncs: new DirectorySyncLedger(),
      rename: (async (from: string, to: string) => {
        if (String(from) === path.join(world.rootDir, ASIDE))
          throw Object.assign(new Error('EIO: simulated, rename'), { code: 'EIO' });
        return nodeFs.rename(from, to);
      }) as FsPort['rename'],
    };
    const state = await StateDir.open(
      fs,
      { rootDir: world.rootDir, stateDir: path.join(world.dir, 'state'), deviceId: DEVICE },
      silentLogger(),
      { clock: { now: () => 0 } },
    );
    try {
      const error = await removeManagedFile(fs, {
        rootDir: world.rootDir,
        relativePath: 'app/operator.conf',
        pruneDirs: ['app'],
      }).catch((caught: unknown) => caught);
      // Before: no condition, so record.ts counted the removal an attempt of the instance.
      expect(rootConditionOf(error)).toBe('renamed_aside');
    } finally {
      await state.close();
    }
    expect(await readFile(path.join(world.rootDir, ASIDE, 'operator.conf'), 'utf8')).toBe(
      'the operator wrote this\n',
    );
  });
});
