// A listed instance whose id holds the agent's API key is refused: no file, nothing in stateDir holds the key.
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import { reconcilerSettings } from '../cli/compose.js';
import { parseAgentConfig } from '../config/load.js';

let world: PassWorld;

beforeEach(async () => {
  world = await createPassWorld({ name: 'key-id-misc25', open: false });
  // As compose builds them for --once and the daemon: the key the agent was given.
  const config = parseAgentConfig(
    {
      deviceId: 'dvc_unit',
      server: { baseUrl: 'https://dcds.example.com' },
      rootDir: world.rootDir,
      stateDir: world.stateDir,
    },
    'key-id.misc25',
  );
  const { holdsApiKey } = reconcilerSettings(config, 0, false, undefined, world.apiKey);
  await world.open({ settings: { ...(holdsApiKey === undefined ? {} : { holdsApiKey }) } });
});

afterEach(async () => {
  await world.close();
});

/** Every file under stateDir, as text. */
async function stateDirText(): Promise<string> {
  const names = await readdir(world.stateDir, { recursive: true, withFileTypes: true });
  const files = names.filter((entry) => entry.isFile());
  const texts = await Promise.all(
    files.map((entry) => readFile(path.join(entry.parentPath, entry.name), 'latin1')),
  );
  return texts.join('\n');
}

// Before: written and reported deployed as any other, its id (the key) in state.json and outbox.json.
for (const [spelling, id] of [
  ['inside it', (key: string) => `cfg_${key}_1`],
  ['as all of it', (key: string) => key],
] as const) {
  it(`refuses an instance whose id holds the API key (${spelling}): no file, failed, nothing of it in stateDir`, async () => {
    world.put({ id: id(world.apiKey), relative_filepath: 'app/keyed.json' });
    world.put({ id: 'u_ok', relative_filepath: 'app/ok.json' });
    const result = await world.pass({ mode: 'full' });
    expect(await world.exists('app/keyed.json')).toBe(false);
    expect(await readdir(path.join(world.rootDir, 'app'))).toEqual(['ok.json']);
    expect(world.reports()).toEqual(['u_ok deployed/none']);
    const refused = result.outcomes.filter((o) => o.action === 'failed');
    expect(refused).toHaveLength(1);
    expect(refused[0]?.message).toContain("its id holds the agent's API key");
    expect(JSON.stringify(result.outcomes)).not.toContain(world.apiKey);
    expect(result.converged).toBe(false);
    const text = await stateDirText();
    expect(text).toContain('u_ok');
    expect(text).not.toContain(world.apiKey);
    // Again: still nothing sent for it, nothing kept.
    await world.pass({ mode: 'full' });
    expect(world.reports()).toEqual(['u_ok deployed/none']);
    expect(await stateDirText()).not.toContain(world.apiKey);
  });
}
