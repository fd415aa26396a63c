// The shipped bundle without a proxy: --once and the ESM chunks never load or initialise undici (api/transport.ts).
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { benchFixtures } from '../../bench/lib/fixtures.js';
import { type BenchWorld, createWorld } from '../../bench/lib/world.js';
import { bundleCli } from '../../packaging/bundle.mjs';

// At exit: whether node:http2 was loaded (undici's Client requires it at its initialisation, whatever the dispatcher).
const PROBE = `process.on('exit', () => require('node:fs').writeSync(2, 'HTTP2 ' + process.moduleLoadList.includes('NativeModule http2') + '\\n'));\n`;
// Every file of the bundle an ES module import resolves to (main.js and its chunks).
const HOOKS = `import { writeSync } from 'node:fs';
export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context);
  writeSync(2, 'LOADED ' + resolved.url + '\\n');
  return resolved;
}
`;
const REGISTER = `import { register } from 'node:module';
register('./hooks.mjs', import.meta.url);
`;

let build: string;
let dist: string;
let world: BenchWorld;
beforeAll(async () => {
  build = mkdtempSync(path.join(os.tmpdir(), 'config-agent-transport-bundle-'));
  dist = path.join(build, 'dist');
  bundleCli({ outdir: dist });
  writeFileSync(path.join(build, 'package.json'), JSON.stringify({ version: '0.0.0-test', type: 'module' }));
  writeFileSync(path.join(build, 'probe.cjs'), PROBE);
  writeFileSync(path.join(build, 'hooks.mjs'), HOOKS);
  writeFileSync(path.join(build, 'register.mjs'), REGISTER);
  world = await createWorld(benchFixtures({ count: 20 }));
}, 120_000);
afterAll(async () => {
  await world?.close();
  rmSync(build, { recursive: true, force: true });
});

function run(args: string[]): Promise<{ status: number | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    // HTTPS_PROXY is set, but the loopback service is http://: never proxied (api/proxy.ts).
    const child = spawn(process.execPath, [...args, '--once', '--config', world.configPath], {
      env: { PATH: process.env.PATH, HOME: os.tmpdir(), HTTPS_PROXY: 'http://127.0.0.1:9' },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('error', reject);
    child.on('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stderr });
    });
  });
}

describe('a device without a proxy', () => {
  it('--once through the one code-cached bundle never initialises undici', async () => {
    const { status, stderr } = await run([
      '--require',
      path.join(build, 'probe.cjs'),
      path.join(dist, 'main.cjs'),
    ]);
    expect(status, stderr).toBe(0);
    expect(stderr).toContain('HTTP2 false');
    expect(world.server.state.reports.length).toBeGreaterThan(0);
  });

  it('main.js (the daemon and every other command) keeps undici in a chunk of its own that --once never imports', async () => {
    const undiciChunks = readdirSync(dist).filter(
      (name) =>
        name.startsWith('chunk-') &&
        readFileSync(path.join(dist, name), 'utf8').includes('EnvHttpProxyAgent'),
    );
    expect(undiciChunks).toHaveLength(1);
    const { status, stderr } = await run([
      '--import',
      pathToFileURL(path.join(build, 'register.mjs')).href,
      '--require',
      path.join(build, 'probe.cjs'),
      path.join(dist, 'main.js'),
    ]);
    expect(status, stderr).toBe(0);
    const loaded = stderr
      .split('\n')
      .filter((line) => line.startsWith('LOADED '))
      .map((line) => path.basename(line));
    expect(loaded.some((name) => name.startsWith('chunk-'))).toBe(true);
    expect(loaded).not.toContain(undiciChunks[0]);
    expect(stderr).toContain('HTTP2 false');
  });
});
