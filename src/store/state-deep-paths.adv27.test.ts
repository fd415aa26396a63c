// adv27: state.json's size for a file at a deep path grew with the square of its depth (each directory the agent
// made was recorded by its whole path: a file at a 2,002-byte path 1,000 levels deep cost 1 MB). state24: the
// ancestors made are recorded by depth (`createdDepths`), and read back as the same directories.
import * as nodeFs from 'node:fs/promises';
import { stat } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import type { FsPort } from '../lib/fs-port.js';
import { silentLogger } from '../lib/logger.js';
import { loadLocalState } from './state.js';

let world: PassWorld | undefined;

afterEach(async () => {
  await world?.close();
  world = undefined;
});

const DEPTH = 400;

it('a file 400 levels deep costs state.json about its path, not a path per level', async () => {
  world = await createPassWorld({ name: 'adv27-deep', parent: '/dev/shm' });
  const relative = `${'a/'.repeat(DEPTH - 1)}x.json`;
  world.put({ id: 'cfg_deep', relative_filepath: relative });

  const result = await world.pass();

  expect(result.outcomes.map((o) => o.action)).toEqual(['written']);
  const size = (await stat(path.join(world.stateDir, 'state.json'))).size;
  // 162,505 bytes before: the 399 directories made were recorded as 399 paths of up to 798 bytes each.
  expect(size).toBeLessThan(64 * 1024);
  // Read back, the record names the same 399 directories as the agent's (pruned when the file is retired).
  const { state } = await loadLocalState(
    nodeFs as unknown as FsPort,
    world.stateDir,
    'dvc_1',
    silentLogger(),
    world.rootDir,
  );
  const made = Array.from({ length: DEPTH - 1 }, (_, index) => 'a/'.repeat(index + 1).slice(0, -1));
  expect(state.files.get(relative)?.createdDirs).toEqual(made);
}, 30_000);
