// lock25: ownsRecordedFile answers false, never throws, for whatever a holder's named state.json holds.
import { mkdir, mkdtemp, readdir, readlink, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ownsRecordedFile } from './lock.js';

const me = process.getuid?.() ?? 0;
let dir: string;
let rootDir: string;
let stateDir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'root-lock-owns-'));
  rootDir = path.join(dir, 'root');
  stateDir = path.join(dir, 'state');
  await mkdir(rootDir);
  await mkdir(stateDir);
  // Files of this process's user inside rootDir: any record naming them would prove the holder's.
  await writeFile(path.join(rootDir, 'in.json'), '{}');
  await writeFile(path.join(rootDir, '0'), '{}');
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A keyOf that keys every directory as rootDir: only ownsRecordedFile's own checks stand between. */
const anyRoot = async () => ({ key: 'k', uid: 0, gid: 0, mode: 0o40755 });
const stateIs = (text: string) => writeFile(path.join(stateDir, 'state.json'), text);
const owns = (root = rootDir) => ownsRecordedFile(me, stateDir, root, 'k', anyRoot);

describe('ownsRecordedFile on what a holder may name (lock25)', () => {
  it('true for its owned file recorded under a path rootDir (so each false below is for what it names)', async () => {
    await stateIs(JSON.stringify({ rootDir, files: { 'in.json': {} } }));
    expect(await owns()).toBe(true);
  });

  // JSON `null` threw a TypeError out of trusted(), so a local user squatting the name and naming a stateDir whose
  // state.json is `null` stopped the agent from starting at all (fails before: rejected).
  it('a state.json of JSON that is no object, not JSON, or empty: false, not thrown', async () => {
    for (const text of ['null', '5', '"text"', '[]', 'true', 'not json', '']) {
      await stateIs(text);
      await expect(owns(), text).resolves.toBe(false);
    }
  });

  it('a recorded rootDir that is not a path, or files that are not a map of paths, prove nothing', async () => {
    for (const recorded of [
      { rootDir: 5, files: { 'in.json': {} } },
      { rootDir: null, files: { 'in.json': {} } },
      { files: { 'in.json': {} } },
      // A string's keys are its indexes: '0' is a file of this user in rootDir.
      { rootDir, files: 'ab' },
      { rootDir, files: 0 },
      { rootDir, files: null },
      { rootDir },
    ]) {
      await stateIs(JSON.stringify(recorded));
      await expect(owns(), JSON.stringify(recorded)).resolves.toBe(false);
    }
  });

  it('a rootDir that no longer resolves (gone between its stat and its realpath): false, not thrown', async () => {
    await stateIs(JSON.stringify({ rootDir, files: { 'in.json': {} } }));
    await expect(owns(path.join(dir, 'gone'))).resolves.toBe(false);
  });

  it("a sibling whose name begins with rootDir's is not inside it", async () => {
    await mkdir(path.join(dir, 'root2'));
    await writeFile(path.join(dir, 'root2', 'x.json'), '{}');
    await stateIs(JSON.stringify({ rootDir, files: { '../root2/x.json': {} } }));
    expect(await owns()).toBe(false);
    await mkdir(path.join(rootDir, 'sub'));
    await writeFile(path.join(rootDir, 'sub', 'x.json'), '{}');
    await stateIs(JSON.stringify({ rootDir, files: { '../root2/x.json': {}, 'sub/x.json': {} } }));
    expect(await owns()).toBe(true);
  });

  it('leaves no descriptor of state.json open, whichever way it answers', async () => {
    const stateFile = path.join(stateDir, 'state.json');
    const openOnState = async () => {
      const fds = await readdir('/proc/self/fd');
      const targets = await Promise.all(fds.map((fd) => readlink(`/proc/self/fd/${fd}`).catch(() => '')));
      return targets.filter((target) => target === stateFile).length;
    };
    for (const text of [
      JSON.stringify({ rootDir, files: { 'in.json': {} } }),
      'not json',
      ' '.repeat(17 * 1024 * 1024),
    ]) {
      await stateIs(text);
      await owns();
      expect(await openOnState()).toBe(0);
    }
  });
});
