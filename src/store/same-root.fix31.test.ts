// fix31: a rootDir spelled another way in the configuration (a trailing slash, `//`, a symlink to it) is the same
// root: what the agent recorded writing there is kept, so a retired instance's file is removed, never left on
// disk while the service is told `removed`. A rootDir truly moved elsewhere still starts empty (nothing of the
// new root deleted).
import { mkdir, readFile, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';

let world: PassWorld | undefined;

afterEach(async () => {
  await world?.close();
  world = undefined;
});

async function deployThenRetireUnder(respell: (world: PassWorld) => Promise<string>) {
  world = await createPassWorld({ name: 'fix31-respell', parent: '/dev/shm', open: false });
  world.put({ id: 'cfg_a' });
  await world.runOnce();
  expect(await world.fileAt('cfg_a.json')).toContain('cfg_a');
  world.put({ id: 'cfg_a', target_status: 'removed', activity_status: 'deployed' });
  const rootDir = await respell(world);
  await world.runOnce({ settings: { rootDir } });
  const state = JSON.parse(await readFile(path.join(world.stateDir, 'state.json'), 'utf8')) as {
    rootDir: string;
  };
  return {
    exists: await world.exists('cfg_a.json'),
    reports: world.reports(),
    recorded: state.rootDir,
    rootDir,
  };
}

describe('rootDir spelled another way', () => {
  it.each([
    ['a trailing slash', async (w: PassWorld) => `${w.rootDir}/`],
    ['a doubled slash', async (w: PassWorld) => w.rootDir.replace(/\/root$/, '//root')],
    [
      'a symlink to it',
      async (w: PassWorld) => {
        const link = path.join(w.dir, 'root-link');
        await symlink(w.rootDir, link);
        return link;
      },
    ],
  ])('%s: the retired instance’s file is removed before `removed` is reported', async (_name, respell) => {
    const seen = await deployThenRetireUnder(respell);
    expect(seen.exists).toBe(false);
    expect(seen.reports).toContain('cfg_a removed/none');
    // The records carry on under the configured spelling.
    expect(seen.recorded).toBe(seen.rootDir);
  });

  it('a root truly moved elsewhere starts empty there: nothing in the new root is removed', async () => {
    world = await createPassWorld({ name: 'fix31-moved', parent: '/dev/shm', open: false });
    world.put({ id: 'cfg_a' });
    await world.runOnce();
    const moved = path.join(world.dir, 'elsewhere');
    await mkdir(moved);
    // The same name in the new root, not written by the agent there: never removed for the old records.
    await writeFile(path.join(moved, 'cfg_a.json'), 'not the agent’s');
    world.put({ id: 'cfg_a', target_status: 'removed', activity_status: 'deployed' });
    await world.runOnce({ settings: { rootDir: moved } });
    expect(await readFile(path.join(moved, 'cfg_a.json'), 'utf8')).toBe('not the agent’s');
    expect(await world.exists('cfg_a.json')).toBe(true);
  });
});
