// An invalid item whose problem would name the agent's API key (a content key a service echoes it in) is reported failed without it, and stateDir keeps none (adv33).
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createPassWorld, LIST, type PassWorld } from '../../test/helpers/pass-world.js';
import { apiKeyMatcher } from '../cli/compose.js';

const API_KEY = 'sk_test_adv33key_0123456789abcdef';

/** Everything the state directory holds, as text. */
async function stateText(stateDir: string): Promise<string> {
  const names = await readdir(stateDir);
  const texts = await Promise.all(
    names.map((name) => readFile(path.join(stateDir, name), 'utf8').catch(() => '')),
  );
  return texts.join('\n');
}

describe('an invalid item whose problem would name the API key (adv33)', () => {
  let world: PassWorld | undefined;
  afterEach(async () => {
    await world?.close();
    world = undefined;
  });

  async function keyWorld(): Promise<PassWorld> {
    const made = await createPassWorld({
      name: 'adv33-key',
      apiKey: API_KEY,
      settings: { holdsApiKey: apiKeyMatcher(API_KEY)! },
    });
    world = made;
    return made;
  }

  // The problem names the field at fault: `content.<key>: number 1e400 is out of range` went to the service in
  // the `failed` report (stored and shown there) and into state.json.
  it.each([
    ['a content key', (key: string) => `{"${key}":1e400}`],
    ['a nested content key, JSON-escaped', (key: string) => `{"x":{"\\u0073${key.slice(1)}":[1e400]}}`],
  ])('%s spelling the key: failed, the report and stateDir without it', async (_, content) => {
    const w = await keyWorld();
    w.put({ id: 'a' });
    w.put({ id: 'b' });
    w.fault({
      match: LIST,
      count: 100,
      mode: 'rewrite',
      replace: [{ find: '"content":{"owner":"a"}', with: `"content":${content(API_KEY)}` }],
    });
    await w.pass();
    expect(w.reports().sort()).toEqual(['a queued/failed', 'b deployed/none']);
    const sent = JSON.stringify(w.server.state.reports);
    expect(sent).not.toContain(API_KEY);
    expect(sent).toContain("holds the agent's API key");
    expect(await stateText(w.stateDir)).not.toContain(API_KEY);
    expect(await w.exists('a.json')).toBe(false);
  });

  it('an id listed twice holding the key: nothing reported or recorded for it', async () => {
    const w = await keyWorld();
    w.put({ id: 'a' });
    w.put({ id: 'b' });
    w.fault({
      match: LIST,
      count: 100,
      mode: 'rewrite',
      replace: [
        { find: '"id":"a"', with: `"id":"${API_KEY}"` },
        { find: '"id":"b"', with: `"id":"${API_KEY}"` },
      ],
    });
    const result = await w.pass();
    expect(result.outcomes.map((outcome) => outcome.action)).toEqual(['failed']);
    expect(w.reports()).toEqual([]);
    expect(await stateText(w.stateDir)).not.toContain(API_KEY);
  });
});
