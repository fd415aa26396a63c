// StateDir.open on a state.json it cannot parse: starts empty, and keeps the unreadable file aside for an operator.
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../lib/logger.js';
import { CORRUPT_STATE_FILE, StateDir } from './state-dir.js';

let dir: string;
let settings: { stateDir: string; rootDir: string; deviceId: string };

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'state-dir-corrupt-'));
  settings = { stateDir: path.join(dir, 'state'), rootDir: path.join(dir, 'root'), deviceId: 'dvc_corrupt' };
  await mkdir(settings.stateDir, { mode: 0o700 });
  await mkdir(settings.rootDir);
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const statePath = () => path.join(settings.stateDir, 'state.json');
const keptPath = () => path.join(settings.stateDir, CORRUPT_STATE_FILE);

describe('an unreadable state.json', () => {
  // A newer agent's state after a downgrade, a hand edit, a bad sector: the only record of which files are ours.
  it.each([
    ['garbage', '{"version":1,"files":{"a.json":'],
    ['another version', JSON.stringify({ version: 2, deviceId: 'dvc_corrupt', rootDir: '', files: {} })],
  ])('(%s) is kept aside byte for byte, not overwritten by the first persist', async (_what, text) => {
    await writeFile(statePath(), text);

    const opened = await StateDir.open(nodeFs, settings, silentLogger(), { clock: { now: () => 0 } });
    expect(opened.state.files.size).toBe(0);
    await opened.persist();
    await opened.close();

    expect(await readFile(keptPath(), 'utf8')).toBe(text);
    expect(JSON.parse(await readFile(statePath(), 'utf8'))).toMatchObject({ version: 1, files: {} });
    // A state that loads is not moved again.
    await (await StateDir.open(nodeFs, settings, silentLogger(), { clock: { now: () => 0 } })).close();
    expect(await readFile(keptPath(), 'utf8')).toBe(text);
  });

  it('a dry run moves nothing', async () => {
    await writeFile(statePath(), 'not json');
    await (
      await StateDir.open(nodeFs, settings, silentLogger(), { clock: { now: () => 0 }, readOnly: true })
    ).close();
    expect(await readdir(settings.stateDir)).toEqual(['state.json']);
    expect(await readFile(statePath(), 'utf8')).toBe('not json');
  });
});
