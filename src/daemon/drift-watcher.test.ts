// DriftWatcher in a real temp dir: a managed file changed by someone else is reported; one judged while a pass
// started is judged again after it (the pass generation of SingleFlight), so the agent's own write is not drift.
import { writeFileSync } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { FsPort } from '../lib/fs-port.js';
import { sha256Hex } from '../lib/hash.js';
import { silentLogger } from '../lib/logger.js';
import type { ManagedFile } from '../store/state.js';
import { DriftWatcher } from './drift-watcher.js';
import { SingleFlight } from './single-flight.js';

const ORIGINAL = '{"a":1}\n';
const cleanups: Array<() => Promise<void>> = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Turns of the event loop until `done` holds; bounded, and it asserts nothing about how long that took. */
async function eventually(done: () => boolean, what: string): Promise<void> {
  for (let turn = 0; turn < 400; turn += 1) {
    if (done()) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`never happened: ${what}`);
}

async function watchedRoot(fs: FsPort, passes: SingleFlight<unknown>) {
  const rootDir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-drift-'));
  await writeFile(path.join(rootDir, 'app.json'), ORIGINAL, { mode: 0o644 });
  const managed = new Map<string, ManagedFile>([
    [
      'app.json',
      {
        instanceId: 'cfg_1',
        sha256: sha256Hex(Buffer.from(ORIGINAL)),
        mode: 0o644,
        createdDirs: [],
        writtenAt: '2030-01-01T00:00:00.000Z',
      },
    ],
  ]);
  const drifts: string[][] = [];
  const watcher = new DriftWatcher({
    fs,
    rootDir,
    policy: 'report',
    logger: silentLogger(),
    managedFiles: () => managed,
    passes,
    onDrift: (paths) => drifts.push(paths),
    debounceMs: 20,
  });
  await watcher.start();
  cleanups.push(async () => {
    await watcher.close();
    await rm(rootDir, { recursive: true, force: true });
  });
  return { rootDir, drifts };
}

describe('DriftWatcher', () => {
  it('reports a managed file whose bytes someone else changed', async () => {
    const passes = new SingleFlight(async () => undefined);
    const { rootDir, drifts } = await watchedRoot(nodeFs, passes);
    await writeFile(path.join(rootDir, 'app.json'), '{"a":2}\n');
    await eventually(() => drifts.length > 0, 'a drift report');
    expect(drifts).toEqual([['app.json']]);
  });

  it('a verdict reached while a pass started is judged again: the pass restored the file, no drift', async () => {
    const passes = new SingleFlight(async () => undefined);
    let rootDir = '';
    let opens = 0;
    // The first read of the file sees the drifted bytes; meanwhile a pass starts and writes the file back
    // (a rename over it, as the durable writer does), so the verdict on those bytes is stale.
    const racingFs: FsPort = {
      ...nodeFs,
      open: (async (...args: Parameters<typeof nodeFs.open>) => {
        const handle = await nodeFs.open(...args);
        opens += 1;
        if (opens === 1) {
          void passes.trigger();
          writeFileSync(path.join(rootDir, '.restore'), ORIGINAL, { mode: 0o644 });
          await nodeFs.rename(path.join(rootDir, '.restore'), path.join(rootDir, 'app.json'));
        }
        return handle;
      }) as typeof nodeFs.open,
    };
    const watched = await watchedRoot(racingFs, passes);
    rootDir = watched.rootDir;
    await writeFile(path.join(rootDir, 'app.json'), '{"a":2}\n');
    await eventually(() => opens >= 2 || watched.drifts.length > 0, 'a second judgement or a verdict');
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(watched.drifts).toEqual([]);
    expect(passes.generation).toBe(1);
  });
});
