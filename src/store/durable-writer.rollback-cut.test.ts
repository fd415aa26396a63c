// A publish whose write fails after it made a directory removes that directory durably: a power cut does not bring it back.
import path from 'node:path';
import { Volume } from 'memfs';
import { expect, it } from 'vitest';
import { memfsPort } from '../../test/helpers/memfs.js';
import { PowerCutFs } from '../../test/helpers/power-cut-fs.js';
import type { FsPort } from '../lib/fs-port.js';
import { publishFile } from './durable-writer.js';

const ROOT = '/srv/config';

it('the directories a failed publish made and removed stay removed after a power cut', async () => {
  const vol = new Volume();
  vol.mkdirSync(ROOT, { recursive: true });
  const model = await PowerCutFs.over(memfsPort(vol), ROOT);
  // The disk fills as the temp file is renamed in: new/deeper was made (and fsynced into new, new into the root).
  const fs: FsPort = {
    ...model.fs,
    rename: (async (from: string, to: string) => {
      if (path.relative(ROOT, String(to)) === 'new/deeper/a.json')
        throw Object.assign(new Error('ENOSPC: no space left on device, rename'), { code: 'ENOSPC' });
      return model.fs.rename(from, to);
    }) as FsPort['rename'],
  };
  await expect(
    publishFile(fs, {
      rootDir: ROOT,
      relativePath: 'new/deeper/a.json',
      data: Buffer.from('{}\n'),
      mode: 0o640,
      dirMode: 0o750,
    }),
  ).rejects.toMatchObject({ code: 'disk_error', errno: 'ENOSPC' });
  expect(vol.existsSync(path.join(ROOT, 'new'))).toBe(false);
  // Before: the rollback's rmdir was never fsynced, and a cut brought back new/ and new/deeper, empty, recorded nowhere.
  const after = model.afterPowerCut();
  expect(Object.keys(after).filter((entry) => entry.startsWith('new'))).toEqual([]);
});
