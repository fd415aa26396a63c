// syncRegularFileIf (the intent journal's adoption after a crash) makes the file's whole directory chain durable.
import path from 'node:path';
import { Volume } from 'memfs';
import { expect, it } from 'vitest';
import { memfsPort } from '../../test/helpers/memfs.js';
import { PowerCutFs } from '../../test/helpers/power-cut-fs.js';
import { sha256Hex } from '../lib/hash.js';
import { syncRegularFileIf } from './durable-writer.js';

const ROOT = '/srv/config';

it('bytes a killed run renamed into directories it made survive a power cut once adopted: the chain up to the root is fsynced', async () => {
  const vol = new Volume();
  vol.mkdirSync(ROOT, { recursive: true });
  const model = await PowerCutFs.over(memfsPort(vol), ROOT);
  // What the killed run left: directories made and the file renamed in, nothing of it fsynced.
  vol.mkdirSync(path.join(ROOT, 'x/y/z'), { recursive: true });
  vol.writeFileSync(path.join(ROOT, 'x/y/z/left.json'), 'left\n', { mode: 0o640 });
  const found = await syncRegularFileIf(model.fs, ROOT, 'x/y/z/left.json', sha256Hex(Buffer.from('left\n')));
  expect(found).toEqual({ mode: 0o640 });
  expect(model.afterPowerCut()['x/y/z/left.json']).toBe('640 left\n');
});
