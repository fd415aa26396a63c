// The shipped bundle's pino without its transports (packaging/esbuild-build.mjs): the daemon logs, and loads no worker_threads.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { benchFixtures } from '../../bench/lib/fixtures.js';
import { type BenchWorld, createWorld } from '../../bench/lib/world.js';
import { bundleCli } from '../../packaging/bundle.mjs';
import { replaceEachOnce, TRANSPORT_LEFT_OUT } from '../../packaging/esbuild-build.mjs';
import {
  DAEMON_MALLOC_ARENA_MAX,
  DAEMON_MALLOC_MMAP_THRESHOLD,
  DAEMON_NODE_FLAGS,
} from '../../packaging/launcher.mjs';

const REPO = path.resolve(import.meta.dirname, '../..');
// Builtin modules only pino's transports or sonic-boom (a destination pino opens itself) load, and node:vm, which
// the release between polls needs only without the launcher's --expose-gc. (child_process and dgram stay: node:net
// loads them with node:cluster when the local API's socket listens.)
const LEFT_OUT = ['worker_threads', 'assert', 'vm'];
const PROBE = `process.on('exit', () => require('node:fs').writeSync(2, 'MODULES ' + JSON.stringify(${JSON.stringify(
  LEFT_OUT,
)}.filter((name) => process.moduleLoadList.includes('NativeModule ' + name))) + '\\n'));\n`;

let build: string;
let world: BenchWorld;
beforeAll(async () => {
  build = mkdtempSync(path.join(os.tmpdir(), 'config-agent-pino-bundle-'));
  bundleCli({ outdir: path.join(build, 'dist') });
  writeFileSync(path.join(build, 'package.json'), JSON.stringify({ version: '0.0.0-test', type: 'module' }));
  writeFileSync(path.join(build, 'probe.cjs'), PROBE);
  world = await createWorld(benchFixtures({ count: 20 }));
}, 120_000);
afterAll(async () => {
  await world?.close();
  rmSync(build, { recursive: true, force: true });
});

describe("the shipped bundle's pino", () => {
  it('the daemon as the launcher runs it logs its passes as JSON and loads neither worker_threads, assert nor vm', async () => {
    await world.writeConfig({
      // debug: the second pass is idle, and an idle pass's summary is a debug line (daemon/pass-log.ts).
      log: { level: 'debug' },
      poll: { intervalSeconds: 1, jitterRatio: 0, fullResyncSeconds: 86_400 },
    });
    const child = spawn(
      process.execPath,
      [
        ...DAEMON_NODE_FLAGS,
        '--require',
        path.join(build, 'probe.cjs'),
        path.join(build, 'dist/main.cjs'),
        '--config',
        world.configPath,
      ],
      {
        env: {
          PATH: process.env.PATH,
          HOME: os.tmpdir(),
          MALLOC_ARENA_MAX: DAEMON_MALLOC_ARENA_MAX,
          MALLOC_MMAP_THRESHOLD_: DAEMON_MALLOC_MMAP_THRESHOLD,
        },
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    let stderr = '';
    let passes = 0;
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      // The first pass and one poll after it; then a clean stop.
      passes = stderr.split('"msg":"pass finished"').length - 1;
      if (passes >= 2) child.kill('SIGTERM');
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    const status = await new Promise<number | null>((resolve) => child.on('close', resolve));
    clearTimeout(timer);
    expect(status, stderr).toBe(0);
    const lines = stderr.split('\n').filter((line) => line.startsWith('{'));
    const entries = lines.map((line) => JSON.parse(line) as { level?: string; msg?: string; pid?: number });
    expect(entries.filter((entry) => entry.msg === 'pass finished').length).toBeGreaterThanOrEqual(2);
    expect(entries.every((entry) => entry.pid === child.pid && typeof entry.level === 'string')).toBe(true);
    expect(world.server.state.reports.length).toBeGreaterThan(0);
    expect(stderr).toContain('MODULES []');
  }, 90_000);

  it("pino's transport() throws a clear error; a destination pino opens itself still writes, loading sonic-boom then", () => {
    const entry = path.join(build, 'uses-pino.mjs');
    writeFileSync(
      entry,
      [
        "import { pino } from 'pino';",
        "import { Writable } from 'node:stream';",
        "const loaded = (name) => process.moduleLoadList.includes('NativeModule ' + name);",
        "let streamed = '';",
        'const toStream = pino({ base: null, timestamp: false }, new Writable({ write(chunk, _e, done) { streamed += chunk; done(); } }));',
        "toStream.info('to a stream');",
        'let transportError;',
        "try { pino.transport({ target: 'pino/file' }); } catch (error) { transportError = error.message; }",
        'const before = { worker: loaded("worker_threads"), assert: loaded("assert") };',
        "pino({ base: null, timestamp: false }, pino.destination({ dest: 1, sync: true })).info('to stdout');",
        "process.stderr.write(JSON.stringify({ streamed, transportError, before, after: { assert: loaded('assert') } }));",
      ].join('\n'),
    );
    const out = path.join(build, 'uses-pino.bundle.mjs');
    const built = spawnSync(
      process.execPath,
      [
        path.join(REPO, 'packaging/esbuild-build.mjs'),
        JSON.stringify({
          entryPoints: [entry],
          bundle: true,
          platform: 'node',
          format: 'esm',
          outfile: out,
          nodePaths: [path.join(REPO, 'node_modules')],
          logLevel: 'warning',
          banner: {
            js: "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);",
          },
        }),
      ],
      { encoding: 'utf8' },
    );
    expect(built.status, built.stderr).toBe(0);
    const ran = spawnSync(process.execPath, [out], { encoding: 'utf8' });
    expect(ran.status, ran.stderr).toBe(0);
    expect(ran.stdout).toBe('{"level":30,"msg":"to stdout"}\n');
    expect(JSON.parse(ran.stderr)).toEqual({
      streamed: '{"level":30,"msg":"to a stream"}\n',
      transportError: TRANSPORT_LEFT_OUT,
      before: { worker: false, assert: false },
      after: { assert: true },
    });
  }, 60_000);

  it('a pino whose text moved fails the build instead of shipping half-changed', () => {
    expect(replaceEachOnce('a b c', [['b', 'B']], 'x.js')).toBe('a B c');
    expect(() => replaceEachOnce('a c', [['b', 'B']], 'tools.js')).toThrow(
      /tools\.js: expected exactly one "b"/,
    );
    expect(() => replaceEachOnce('b b', [['b', 'B']], 'tools.js')).toThrow(/exactly one/);
  });
});
