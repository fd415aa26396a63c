// adv34: the power-cut model over memfs knows an inode by its number, so memfs must never give one number to two inodes.
import { constants } from 'node:fs';
import { Volume } from 'memfs';
import { describe, expect, it } from 'vitest';
import { memfsPort } from '../helpers/memfs.js';
import { PowerCutFs } from '../helpers/power-cut-fs.js';

const CREATE = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL;
const DIRECTORY = constants.O_RDONLY | constants.O_DIRECTORY;

async function fsynced(model: PowerCutFs, file: string, text?: string): Promise<void> {
  const handle = await model.fs.open(file, text === undefined ? DIRECTORY : CREATE, 0o644);
  if (text !== undefined) await handle.writeFile(text);
  await handle.sync();
  await handle.close();
}

describe('PowerCutFs over memfs: a removed inode is never taken for one made after it (adv34)', () => {
  it('a file unlinked comes back with its own bytes, not those of a file made after it', async () => {
    const vol = new Volume();
    vol.mkdirSync('/top', { recursive: true });
    vol.writeFileSync('/top/a', 'old');
    const model = await PowerCutFs.over(memfsPort(vol), '/top');
    await model.fs.unlink('/top/a');
    await fsynced(model, '/top/b', 'new');
    // Neither the unlink nor b's entry reached the disk: `a` is there with its old bytes.
    const after = model.afterPowerCut();
    expect(after.a).toMatch(/ old$/);
    expect(after.b).toBeUndefined();
  });
});
