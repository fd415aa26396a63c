// fix30: a listed instance whose relative_filepath holds the agent's API key is refused, never written (adv25).
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import { reconcilerSettings } from '../cli/compose.js';
import { parseAgentConfig } from '../config/load.js';

let world: PassWorld;

beforeEach(async () => {
  world = await createPassWorld({ name: 'key-path-fix30', open: false });
  // As compose builds them for --once and the daemon: the key the agent was given.
  const config = parseAgentConfig(
    {
      deviceId: 'dvc_unit',
      server: { baseUrl: 'https://dcds.example.com' },
      rootDir: world.rootDir,
      stateDir: world.stateDir,
    },
    'key-path.fix30',
  );
  const { holdsApiKey } = reconcilerSettings(config, 0, false, undefined, world.apiKey);
  await world.open({ settings: { ...(holdsApiKey === undefined ? {} : { holdsApiKey }) } });
});

afterEach(async () => {
  await world.close();
});

// Before: written and reported deployed as any other, so the key was a file name under rootDir (listed by any
// local user who can read the directory) and a path in state.json.
it('refuses an instance whose path holds the API key: reported failed without the key, no file, no path kept', async () => {
  world.put({ id: 'u_key', relative_filepath: `app/${world.apiKey}.json` });
  world.put({ id: 'u_ok', relative_filepath: 'app/ok.json' });
  const result = await world.pass({ mode: 'full' });
  expect(await world.exists(`app/${world.apiKey}.json`)).toBe(false);
  expect(await readdir(path.join(world.rootDir, 'app'))).toEqual(['ok.json']);
  const report = world.server.state.reports.find((r) => r.config_instance_id === 'u_key');
  expect(report).toMatchObject({ error_status: 'failed' });
  expect(report?.message).toContain("relative_filepath holds the agent's API key");
  expect(report?.message).not.toContain(world.apiKey);
  expect(world.reports()).toContain('u_ok deployed/none');
  expect(result.outcomes.find((o) => o.instanceId === 'u_key')).toMatchObject({ action: 'failed' });
  const state = await readFile(path.join(world.stateDir, 'state.json'), 'utf8');
  expect(state).not.toContain(world.apiKey);
  // The next pass sends nothing more for it (the service holds its failed status).
  const before = world.server.state.reports.length;
  await world.pass({ mode: 'full' });
  expect(world.server.state.reports.length).toBe(before);
});
