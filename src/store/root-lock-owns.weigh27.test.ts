// A holder's named state.json is weighed before it is parsed: one nesting deeper than an agent writes proves nothing.
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ownsRecordedFile } from './lock.js';
import { MAX_STATE_FILE_DEPTH } from './state.js';

const me = process.getuid?.() ?? 0;
let dir: string;
let rootDir: string;
let stateDir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'root-lock-owns-weigh27-'));
  rootDir = path.join(dir, 'root');
  stateDir = path.join(dir, 'state');
  await mkdir(rootDir);
  await mkdir(stateDir);
  // A file of this process's user inside rootDir: a record naming it proves the holder's.
  await writeFile(path.join(rootDir, 'in.json'), '{}');
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const anyRoot = async () => ({ key: 'k', uid: 0, gid: 0, mode: 0o40755 });
const owns = () => ownsRecordedFile(me, stateDir, rootDir, 'k', anyRoot);

/** A state.json naming the owned file, with `extra` as one more member. */
const stateWith = (extra: string) =>
  writeFile(
    path.join(stateDir, 'state.json'),
    `{"rootDir":${JSON.stringify(rootDir)},"files":{"in.json":{}},"x":${extra}}`,
  );

describe("ownsRecordedFile weighs the holder's state.json (a squatter's to write)", () => {
  it('nested deeper than an agent writes: false, not parsed; at the depth bound it proves the holder', async () => {
    // The object is one level: `x` adds the rest.
    const nest = (levels: number) => `${'['.repeat(levels)}${']'.repeat(levels)}`;
    await stateWith(nest(MAX_STATE_FILE_DEPTH));
    expect(await owns()).toBe(false);
    await stateWith(nest(MAX_STATE_FILE_DEPTH - 1));
    expect(await owns()).toBe(true);
  });
});
