// state24: a rootDir truly moved to another directory keeps the old root's records as a former root: an instance
// retired since whose file the agent wrote there is reported `retrying`, naming the file, while the agent's bytes
// are there (it never deletes outside rootDir), and `removed` once they are gone. Before, it was `removed` at once
// ("file left in place: it is not recorded as written by this agent") while the file stayed.
import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';

let world: PassWorld | undefined;

afterEach(async () => {
  await world?.close();
  world = undefined;
});

/** The last report the service received for `id`: `activity/error message`. */
function lastReport(w: PassWorld, id: string): string {
  const report = w.server.state.reports.filter((r) => r.config_instance_id === id).at(-1);
  return report === undefined
    ? ''
    : `${report.activity_status}/${report.error_status} ${report.message ?? ''}`.trim();
}

async function stateFile(w: PassWorld): Promise<{ rootDir: string; formerRoot?: { rootDir: string } }> {
  return JSON.parse(await readFile(path.join(w.stateDir, 'state.json'), 'utf8'));
}

/** cfg_a written in the world's root, then rootDir moved to `<dir>/<name>`; answers the new root. */
async function deployThenMove(w: PassWorld, name: string): Promise<string> {
  w.put({ id: 'cfg_a' });
  await w.runOnce();
  const moved = path.join(w.dir, name);
  await mkdir(moved);
  return moved;
}

describe('a rootDir moved to another directory', () => {
  it('a retired instance whose file stays in the old root is retrying, naming it, until it is gone', async () => {
    world = await createPassWorld({ name: 'state24-former', parent: '/dev/shm', open: false });
    const moved = await deployThenMove(world, 'elsewhere');
    const old = path.join(world.rootDir, 'cfg_a.json');
    world.put({ id: 'cfg_a', target_status: 'removed', activity_status: 'deployed' });

    await world.runOnce({ settings: { rootDir: moved } });
    expect(lastReport(world, 'cfg_a')).toBe(
      `deployed/retrying file left in place outside rootDir: ${old} (written there before rootDir moved; the agent deletes nothing outside rootDir): remove it by hand`,
    );
    expect(await readFile(old, 'utf8')).toContain('cfg_a');
    expect(await stateFile(world)).toMatchObject({ rootDir: moved, formerRoot: { rootDir: world.rootDir } });

    // Still there at the next run: nothing else said, nothing deleted.
    const sent = world.server.state.reports.length;
    await world.runOnce({ settings: { rootDir: moved } });
    expect(world.server.state.reports.length).toBe(sent);
    expect(await readFile(old, 'utf8')).toContain('cfg_a');

    // The operator removes it: removed, and once the service shows it so, the former root is forgotten.
    await rm(old);
    await world.runOnce({ settings: { rootDir: moved } });
    expect(lastReport(world, 'cfg_a')).toBe('removed/none');
    await world.runOnce({ settings: { rootDir: moved } });
    expect(await stateFile(world)).not.toHaveProperty('formerRoot');
  });

  it('other bytes at its path in the old root are not the agent’s: removed', async () => {
    world = await createPassWorld({ name: 'state24-former-edit', parent: '/dev/shm', open: false });
    const moved = await deployThenMove(world, 'elsewhere');
    await writeFile(path.join(world.rootDir, 'cfg_a.json'), 'an operator’s own file now\n');
    world.put({ id: 'cfg_a', target_status: 'removed', activity_status: 'deployed' });
    await world.runOnce({ settings: { rootDir: moved } });
    expect(lastReport(world, 'cfg_a')).toBe('removed/none');
    expect(await readFile(path.join(world.rootDir, 'cfg_a.json'), 'utf8')).toBe(
      'an operator’s own file now\n',
    );
  });

  it('a second move: the root left becomes the former one, the first one’s records are dropped', async () => {
    world = await createPassWorld({ name: 'state24-former-twice', parent: '/dev/shm', open: false });
    const second = await deployThenMove(world, 'second');
    world.put({ id: 'cfg_a', target_status: 'removed', activity_status: 'deployed' });
    world.put({ id: 'cfg_b' });
    await world.runOnce({ settings: { rootDir: second } });
    expect(lastReport(world, 'cfg_a')).toContain(
      `deployed/retrying file left in place outside rootDir: ${world.rootDir}/`,
    );
    const third = path.join(world.dir, 'third');
    await mkdir(third);
    world.put({ id: 'cfg_b', target_status: 'removed', activity_status: 'deployed' });
    await world.runOnce({ settings: { rootDir: third } });
    expect(lastReport(world, 'cfg_b')).toContain(
      `deployed/retrying file left in place outside rootDir: ${second}/`,
    );
    // The first root's file: reported as before the former root was kept (its record dropped by the second move).
    expect(lastReport(world, 'cfg_a')).toBe(
      'removed/none file left in place: it is not recorded as written by this agent',
    );
    expect(await stateFile(world)).toMatchObject({ formerRoot: { rootDir: second } });
  });

  it('moved back to the former root: it is no former root any more (its files are under rootDir)', async () => {
    world = await createPassWorld({ name: 'state24-former-back', parent: '/dev/shm', open: false });
    const moved = await deployThenMove(world, 'elsewhere');
    world.put({ id: 'cfg_a', target_status: 'removed', activity_status: 'deployed' });
    await world.runOnce({ settings: { rootDir: moved } });
    expect(await stateFile(world)).toMatchObject({ formerRoot: { rootDir: world.rootDir } });
    // The root moved to recorded no file: the former root stays the same one, and is dropped on the way back.
    await world.runOnce();
    expect(await stateFile(world)).not.toHaveProperty('formerRoot');
    expect(await world.exists('cfg_a.json')).toBe(true);
  });

  it('the old root renamed to the new one (`mv`): its file is under rootDir now, not recorded, and left in place', async () => {
    world = await createPassWorld({ name: 'state24-former-mv', parent: '/dev/shm', open: false });
    world.put({ id: 'cfg_a' });
    await world.runOnce();
    const moved = path.join(world.dir, 'renamed');
    await rename(world.rootDir, moved);
    world.put({ id: 'cfg_a', target_status: 'removed', activity_status: 'deployed' });
    await world.runOnce({ settings: { rootDir: moved } });
    expect(lastReport(world, 'cfg_a')).toBe(
      'removed/none file left in place: it is not recorded as written by this agent',
    );
    expect(await readFile(path.join(moved, 'cfg_a.json'), 'utf8')).toContain('cfg_a');
  });
});
