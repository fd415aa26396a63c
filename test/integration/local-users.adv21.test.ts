// adv21: what a local user or an operator's slip can put in the built --once's way, and held (kept as tests).
import { chmod, readFile, rename, stat, truncate, writeFile } from 'node:fs/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AgentHarness, leaksApiKey, TEST_API_KEY } from '../helpers/harness.js';

let h: AgentHarness;

beforeEach(async () => {
  h = await AgentHarness.create({ registerDevice: true });
});

afterEach(async () => {
  await h.close();
});

describe('the built --once against local users (adv21)', () => {
  it('a 4 TiB sparse file put at a managed path is replaced, never read', async () => {
    await h.createAndDeploy({ id: 'cfg_app', relative_filepath: 'app/a.json', content: { a: 1 } });
    expect((await h.runOnce()).code).toBe(0);
    const file = h.rootPath('app/a.json');
    const bytes = await readFile(file);
    // A user who can write app/ (an application's directory) swaps in a sparse file. Reading it to compare
    // would take hours; the run ending at all (within the test's bound) shows it is judged by its size.
    await chmod(h.rootPath('app'), 0o777);
    await rename(file, h.rootPath('app/old'));
    await writeFile(file, '');
    await truncate(file, 4 * 1024 ** 4);
    const run = await h.runOnce();
    expect(run.code).toBe(0);
    expect(await readFile(file)).toEqual(bytes);
    expect((await stat(file)).size).toBe(bytes.length);
  });

  it('an API key file with a byte order mark and CRLF is read; one with a NUL is refused unprinted', async () => {
    await h.createAndDeploy({ id: 'cfg_app', relative_filepath: 'a.json', content: { a: 1 } });
    await writeFile(h.keyPath, `\ufeff${TEST_API_KEY}\r\n`, { mode: 0o600 });
    expect((await h.runOnce()).code).toBe(0);
    await writeFile(h.keyPath, `${TEST_API_KEY}\0`, { mode: 0o600 });
    const refused = await h.runOnce();
    expect(refused.code).toBe(78);
    expect(refused.stderr).toContain('must hold only the key');
    expect(leaksApiKey(refused)).toBe(false);
  });

  it('a config file holding the API key (an operator swapped the two) exits 78 without printing the key', async () => {
    await writeFile(h.configPath, `${TEST_API_KEY}\n`, { mode: 0o600 });
    const run = await h.runOnce();
    expect(run.code).toBe(78);
    expect(run.stderr).toContain('invalid JSON');
    expect(leaksApiKey(run)).toBe(false);
  });
});
