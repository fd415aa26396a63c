// A hook's environment holds the API key in no spelling, nor a key held before a reload (fix32): a real /bin/sh hook.
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { runHooks } from '../daemon/hooks.js';
import { silentLogger } from '../lib/logger.js';
import { withoutKeyValues } from './compose.js';

/** Printable ASCII as the configuration takes it, with characters that JSON escapes and a URL encodes. */
const KEY = 'sk_live_01/23+45"67\\89=ab';
const OLD_KEY = 'sk_live_old/0123+4567=cd';

/** Every spelling an output may carry (lib/secrets.ts): as written, JSON-escaped, percent-encoded. */
function spellings(key: string): string[] {
  const escaped = JSON.stringify(key).slice(1, -1);
  const twice = JSON.stringify(escaped).slice(1, -1);
  return [key, escaped, twice, encodeURIComponent(key), encodeURIComponent(escaped)];
}

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-hook-env-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("the hooks' environment and the API key (fix32)", () => {
  it('holds no spelling of the key, nor of the key held before a reload; the rest is kept', async () => {
    const env: NodeJS.ProcessEnv = {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      KEEP: 'yes',
      WRAPPER_ARGS: `--key=${KEY}`,
      SERVICE_URL: `https://dcds.example.com/v1?key=${encodeURIComponent(KEY)}`,
      SERVICE_JSON: JSON.stringify({ key: KEY }),
      NESTED_JSON: JSON.stringify({ config: JSON.stringify({ key: KEY }) }),
      OLD_TOKEN: `token ${encodeURIComponent(OLD_KEY)}`,
    };
    // As compose.ts builds it: at start with the key then, at a reload from the hooks' environment with the new one.
    const hookEnv = withoutKeyValues(withoutKeyValues(env, OLD_KEY), KEY);
    const out = path.join(dir, 'env.txt');
    const runs = await runHooks(
      [{ match: '*.json', run: ['/bin/sh', '-c', `env > '${out}'`], timeoutSeconds: 20 }],
      ['app.json'],
      { cwd: dir, env: hookEnv, logger: silentLogger() },
    );
    expect(runs.map((run) => run.exitCode)).toEqual([0]);
    const printed = await readFile(out, 'utf8');
    expect(printed).toContain('KEEP=yes');
    expect(printed).toContain('CONFIG_AGENT_CHANGED=app.json');
    for (const spelling of [...spellings(KEY), ...spellings(OLD_KEY)])
      expect(printed).not.toContain(spelling);
  });
});
