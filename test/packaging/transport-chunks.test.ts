// The shipped bundle without a proxy: --once and the ESM chunks never load or initialise undici (api/transport.ts).
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { benchFixtures } from '../../bench/lib/fixtures.js';
import { type BenchWorld, createWorld } from '../../bench/lib/world.js';
import { bundleCli } from '../../packaging/bundle.mjs';
import { skipWithoutPackages } from '../helpers/built-packages.js';

// At exit: whether node:http2 was loaded (undici's Client requires it at its initialisation, whatever the dispatcher),
// and whether Node's own bundled undici was (node:http's lazy WebSocket getter loads it on Node 22+).
const PROBE = `process.on('exit', () => require('node:fs').writeSync(2, 'HTTP2 ' + process.moduleLoadList.includes('NativeModule http2') + ' NODE_UNDICI ' + process.moduleLoadList.includes('NativeModule internal/deps/undici/undici') + '\\n'));\n`;
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

const REPO = path.resolve(import.meta.dirname, '../..');
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

function run(
  args: string[],
  interpreter = process.execPath,
): Promise<{ status: number | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    // HTTPS_PROXY is set, but the loopback service is http://: never proxied (api/proxy.ts).
    const child = spawn(interpreter, [...args, '--once', '--config', world.configPath], {
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

  // On Node 22+ an ES module's import of node:http reads every export, and its lazy WebSocket getter loads Node's own
  // undici with node:http2, node:tls and node:zlib: ~70 modules and 7 MiB of the idle daemon's RSS on the bundled
  // Node 24 (docs/performance-history.md "Idle daemon, ninth round"). The bundled Node 24 is unpacked by `npm run package`,
  // which .ci/run runs first; this process's Node is used when it is 22 or newer.
  it("main.js on the bundled Node 24 loads neither Node's own undici nor node:http2", async (ctx) => {
    const unpacked = path.join(
      REPO,
      `dist-pkg/build/node-${process.arch === 'x64' ? 'amd64' : process.arch}/package/bin/node`,
    );
    const interpreter = Number.parseInt(process.versions.node, 10) >= 22 ? process.execPath : unpacked;
    if (!existsSync(interpreter)) {
      ctx.skip(skipWithoutPackages(`no Node 22+ here (${unpacked}: run npm run package)`));
      return;
    }
    const { status, stderr } = await run(
      ['--require', path.join(build, 'probe.cjs'), path.join(dist, 'main.js')],
      interpreter,
    );
    expect(status, stderr).toBe(0);
    expect(stderr).toContain('HTTP2 false NODE_UNDICI false');
    expect(world.server.state.reports.length).toBeGreaterThan(0);
  });
});
