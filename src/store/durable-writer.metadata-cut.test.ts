// The writer's new directories keep dirMode after a power cut: their chmod is written by a later fsync of each.
import path from 'node:path';
import { Volume } from 'memfs';
import { describe, expect, it } from 'vitest';
import { memfsPort } from '../../test/helpers/memfs.js';
import { PowerCutFs } from '../../test/helpers/power-cut-fs.js';
import { writeStep } from '../../test/helpers/write-steps.js';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { applySteps } from '../reconcile/apply.js';
import { ContentCache } from './content-cache.js';
import { publishFile } from './durable-writer.js';

const ROOT = '/srv/config';
const STATE_DIR = '/var/lib/config-agent';

/** `fs` whose mkdir filters the mode by a umask of 022, as Linux's does (memfs's does not). */
function umask022(fs: FsPort): FsPort {
  return {
    ...fs,
    mkdir: (async (dir: string, options?: { mode?: number; recursive?: boolean }) =>
      fs.mkdir(dir, { ...options, mode: (options?.mode ?? 0o777) & ~0o022 })) as FsPort['mkdir'],
  };
}

async function system() {
  const vol = new Volume();
  vol.mkdirSync(ROOT, { recursive: true });
  vol.mkdirSync(STATE_DIR, { recursive: true });
  const model = await PowerCutFs.over(umask022(memfsPort(vol)), '/');
  return { vol, model };
}

describe('directories the writer makes, and a power cut', () => {
  it('publishFile: each directory made on the way comes back with dirMode, not the umask’s', async () => {
    const { vol, model } = await system();
    await publishFile(model.fs, {
      rootDir: ROOT,
      relativePath: 'a/b/c/app.json',
      data: Buffer.from('{}\n'),
      mode: 0o664,
      dirMode: 0o775,
    });
    const metadata = model.metadataAfterPowerCut();
    for (const dir of ['a', 'a/b', 'a/b/c']) {
      expect(((vol.statSync(path.join(ROOT, dir)).mode as number) & 0o7777).toString(8)).toBe('775');
      expect([dir, metadata[`srv/config/${dir}`]?.split(' ')[0]]).toEqual([dir, '775']);
    }
    expect(metadata['srv/config/a/b/c/app.json']?.split(' ')[0]).toBe('664');
  });

  it('a batch of writes with deferred directory fsyncs: the same', async () => {
    const { model } = await system();
    const steps = Array.from({ length: 6 }, (_, i) =>
      writeStep(`cfg_${i}`, `top/g${i % 2}/s${i % 3}/f${i}.json`),
    );
    const outcome = await applySteps(
      steps,
      {
        fs: model.fs,
        logger: silentLogger(),
        rootDir: ROOT,
        fileMode: 0o640,
        dirMode: 0o775,
        files: new Map(),
        cache: new ContentCache(model.fs, STATE_DIR),
        batchSteps: 4,
      },
      () => undefined,
    );
    expect(outcome.applied.map((applied) => applied.result.kind)).toEqual(steps.map(() => 'written'));
    const modes = Object.entries(model.metadataAfterPowerCut())
      .filter(([relative]) => relative.startsWith('srv/config/top'))
      .map(([relative, shown]) => [relative, shown.split(' ')[0]] as const);
    expect(modes.length).toBe(1 + 2 + 6 + 6);
    for (const [relative, mode] of modes) {
      expect([relative, mode]).toEqual([relative, relative.endsWith('.json') ? '640' : '775']);
    }
  });
});
