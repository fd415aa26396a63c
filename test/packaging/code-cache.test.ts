// The shipped bundle's V8 code cache (packaging/bundle.mjs, src/cli/agent-loader.ts): made, used, refused when untrusted.
import { spawn, spawnSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Script } from 'node:vm';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { benchFixtures } from '../../bench/lib/fixtures.js';
import { type BenchWorld, createWorld } from '../../bench/lib/world.js';
import { bundleCli } from '../../packaging/bundle.mjs';
import { CODE_CACHE_DIR, encodeCodeCache } from '../../src/cli/code-cache.js';

const isRoot = process.getuid?.() === 0;
const NOBODY = 65534;

function tryMount(args: string[]): string | undefined {
  const result = spawnSync('mount', args, { encoding: 'utf8' });
  if (result.error !== undefined) return result.error.message;
  return result.status === 0 ? undefined : result.stderr.trim() || `mount exited ${result.status}`;
}

let build: string;
let mainCjs: string;
let agentBundle: string;
beforeAll(() => {
  build = mkdtempSync(path.join(os.tmpdir(), 'config-agent-code-cache-bundle-'));
  const files = bundleCli({ outdir: path.join(build, 'dist') });
  writeFileSync(path.join(build, 'package.json'), JSON.stringify({ version: '0.0.0-test', type: 'module' }));
  mainCjs = files[0] as string;
  agentBundle =
    readdirSync(path.join(build, 'dist')).find((name) => /^agent-[0-9A-F]{12}\.cjs$/.test(name)) ?? '';
  expect(agentBundle).not.toBe('');
}, 120_000);
afterAll(() => {
  rmSync(build, { recursive: true, force: true });
});

let world: BenchWorld;
let cacheDir: string;
const mounts: string[] = [];
beforeEach(async () => {
  world = await createWorld(benchFixtures({ count: 20 }));
  await world.writeConfig({ log: { level: 'debug' } });
  cacheDir = path.join(world.stateDir, CODE_CACHE_DIR);
});
afterEach(async () => {
  for (const dir of mounts.splice(0)) spawnSync('umount', [dir]);
  await world.close();
});

interface Run {
  status: number | null;
  stdout: string;
  /** The loader's debug lines about the cache: msg and reason. */
  cache: string[];
}

function once(...extra: string[]): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [mainCjs, '--once', '--config', world.configPath, ...extra], {
      env: { PATH: process.env.PATH, HOME: os.tmpdir() },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    child.on('error', reject);
    child.on('close', (status) => {
      const cache = stderr
        .split('\n')
        .filter((line) => line.includes('"component":"code-cache"'))
        .map((line) => {
          const { msg, reason } = JSON.parse(line) as { msg: string; reason?: string };
          return reason === undefined ? msg : `${msg}: ${reason}`;
        });
      resolve({ status, stdout, cache });
    });
  });
}

function cacheFiles(): string[] {
  return existsSync(cacheDir) ? readdirSync(cacheDir) : [];
}

/** The first run syncs the 20 files and makes the cache; returns what an idle run prints, with the cache used. */
async function syncedWithCache(): Promise<Run> {
  const first = await once();
  // The agent creates stateDir: the cache's directory is found at exit.
  expect(first).toMatchObject({
    status: 0,
    cache: ['code cache not used: stateDir: ENOENT', 'code cache written'],
  });
  const idle = await once();
  expect(idle).toMatchObject({ status: 0, cache: ['code cache used'] });
  expect(idle.stdout).toMatch(/20 unchanged/);
  return idle;
}

describe('the code cache of the shipped bundle', () => {
  it('is written by a run that exits 0, named by the bundle, and used by the next run, with the same result', async () => {
    await syncedWithCache();
    const files = cacheFiles();
    expect(files).toHaveLength(1);
    expect(files[0]).toMatch(new RegExp(`^${agentBundle.replace('.cjs', '')}\\.[0-9a-f]{16}\\.v8cache$`));
    const file = path.join(cacheDir, files[0] as string);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(statSync(cacheDir).mode & 0o777).toBe(0o700);
    const bytes = readFileSync(file);
    expect(bytes.includes(Buffer.from(agentBundle))).toBe(true);
    expect(bytes.includes(Buffer.from(process.version))).toBe(true);
    // Used, not rewritten.
    await once();
    expect(readFileSync(file).equals(bytes)).toBe(true);
  });

  it('the agent bundle is built without comments or indentation, and a pass run from it syncs the world', async () => {
    // Every `--once` reads and keeps the whole source (packaging/bundle.mjs, agentBundleCli: ~1.16 MB against ~1.62).
    const source = readFileSync(path.join(build, 'dist', agentBundle), 'utf8');
    // One line per statement and a line per comment before (~41,000 lines); only template literals keep theirs now.
    expect(source.split('\n').length).toBeLessThan(2_000);
    expect(source).not.toMatch(/^\s*\/\//m);
    const run = await once();
    expect(run.status).toBe(0);
    expect(world.server.state.reports).toHaveLength(20);
  });

  it('a corrupt or truncated cache is ignored, the run gives the same result, and the cache is made again', async () => {
    const idle = await syncedWithCache();
    const file = path.join(cacheDir, cacheFiles()[0] as string);
    const good = readFileSync(file);
    const flipped = Buffer.from(good);
    flipped[good.length >> 1] = (flipped[good.length >> 1] as number) ^ 0xff;
    writeFileSync(file, flipped);
    const corrupt = await once();
    expect(corrupt).toEqual({
      ...idle,
      cache: ['code cache ignored: checksum mismatch (truncated or corrupt)', 'code cache written'],
    });
    expect(await once()).toEqual(idle);
    // A cache that passes every check of its own but is another script's: V8 refuses it (its source differs).
    const magicLength = 'config-agent v8 code cache 1\n'.length;
    const identity = good.subarray(magicLength + 4, magicLength + 4 + good.readUInt32BE(magicLength));
    const [bundle, runtime] = identity.toString('utf8').split('\n') as [string, string];
    writeFileSync(file, encodeCodeCache({ bundle, runtime }, new Script('1 + 1').createCachedData()));
    expect(await once()).toEqual({
      ...idle,
      cache: ['code cache ignored: rejected by V8', 'code cache written'],
    });
    expect(await once()).toEqual(idle);
    writeFileSync(file, good.subarray(0, good.length >> 1));
    expect((await once()).cache).toEqual([
      'code cache ignored: checksum mismatch (truncated or corrupt)',
      'code cache written',
    ]);
    expect(await once()).toEqual(idle);
  });

  it('a cache others may write is not used: same result, replaced by a 0600 one', async () => {
    const idle = await syncedWithCache();
    const file = path.join(cacheDir, cacheFiles()[0] as string);
    chmodSync(file, 0o666);
    expect(await once()).toEqual({
      ...idle,
      cache: ['code cache ignored: writable by group or others (mode 666)', 'code cache written'],
    });
    expect(statSync(file).mode & 0o777).toBe(0o600);
    chmodSync(cacheDir, 0o777);
    expect(await once()).toEqual({
      ...idle,
      cache: [
        'code cache not used: writable by group or others (mode 777)',
        'code cache not written: writable by group or others (mode 777)',
      ],
    });
  });

  it.runIf(isRoot)("a cache of another user's is not used (needs root to chown)", async () => {
    const idle = await syncedWithCache();
    const file = path.join(cacheDir, cacheFiles()[0] as string);
    chownSync(file, NOBODY, NOBODY);
    expect(await once()).toEqual({
      ...idle,
      cache: [`code cache ignored: owned by uid ${NOBODY}, not 0`, 'code cache written'],
    });
    expect(statSync(file).uid).toBe(0);
  });

  it('a code-cache directory that cannot be written: the run works without a cache', async () => {
    const first = await once();
    expect(first.status).toBe(0);
    rmSync(cacheDir, { recursive: true, force: true });
    mkdirSync(cacheDir, { mode: 0o700 });
    let expected: string[];
    if (isRoot) {
      const reason =
        tryMount(['--bind', cacheDir, cacheDir]) ?? tryMount(['-o', 'remount,ro,bind', cacheDir]);
      if (reason !== undefined) {
        process.stderr.write(
          `code-cache.test: no read-only bind mount (${reason}); the directory is a file instead\n`,
        );
        rmSync(cacheDir, { recursive: true });
        writeFileSync(cacheDir, '');
        expected = ['code cache not used: not a directory', 'code cache not written: not a directory'];
      } else {
        mounts.push(cacheDir);
        expected = ['code cache not written: EROFS'];
      }
    } else {
      chmodSync(cacheDir, 0o500);
      expected = ['code cache not written: EACCES'];
    }
    const idle = await once();
    expect(idle).toMatchObject({ status: 0, cache: expected });
    expect(idle.stdout).toMatch(/20 unchanged/);
    expect(await once()).toEqual(idle);
    if (statSync(cacheDir).isDirectory()) expect(readdirSync(cacheDir)).toEqual([]);
  });

  it('a dry run, --once --help and a run that does not exit 0 write no cache', async () => {
    mkdirSync(world.stateDir, { mode: 0o700 });
    const dry = await once('--dry-run');
    expect(dry.status).toBe(0);
    expect(dry.cache).toEqual(['code cache not used: ENOENT', 'code cache not written: no pass']);
    const help = await once('--help');
    expect(help.status).toBe(0);
    expect(help.stdout).toMatch(/^config-agent: keeps/);
    expect(help.cache).toEqual(['code cache not used: ENOENT', 'code cache not written: no pass']);
    await world.writeConfig({ log: { level: 'debug' }, unknownField: true });
    const refused = await once();
    expect(refused.status).toBe(78);
    expect(refused.cache).toEqual(['code cache not used: ENOENT', 'code cache not written: exit code 78']);
    expect(cacheFiles()).toEqual([]);
  });
});

/** main.cjs `--once` under node flags `nodeFlags` with NODE_DEBUG_NATIVE=CODE_CACHE: its status and node's lines. */
function onceShowingBuiltins(
  nodeFlags: readonly string[],
): Promise<{ status: number | null; rejected: string[]; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...nodeFlags, mainCjs, '--once', '--config', world.configPath], {
      env: { PATH: process.env.PATH, HOME: os.tmpdir(), NODE_DEBUG_NATIVE: 'CODE_CACHE' },
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    child.on('error', reject);
    child.on('close', (status) => resolve({ status, rejected: rejectedBuiltins(stderr), stderr }));
  });
}

/** The builtins node compiled from source in a process whose stderr is `stderr` ("Code cache of X (...) is rejected"). */
function rejectedBuiltins(stderr: string): string[] {
  return [...stderr.matchAll(/^Code cache of (\S+) .* is rejected$/gm)].map((match) => match[1] as string);
}

describe("node's builtins under --once's flags", () => {
  it("are compiled from node's own code cache, but for those node compiles before main.cjs's first line", async () => {
    const { ONCE_NODE_FLAGS } = (await import('../../packaging/launcher.mjs')) as {
      ONCE_NODE_FLAGS: string[];
    };
    // What a process under the same flags compiles from source before its main module's first line.
    const empty = path.join(build, 'empty.cjs');
    writeFileSync(empty, '');
    const bare = spawnSync(process.execPath, [...ONCE_NODE_FLAGS, empty], {
      encoding: 'utf8',
      env: { PATH: process.env.PATH, NODE_DEBUG_NATIVE: 'CODE_CACHE' },
    });
    expect(bare.status).toBe(0);
    const before = new Set(rejectedBuiltins(bare.stderr));
    const first = await onceShowingBuiltins(ONCE_NODE_FLAGS);
    expect(first.status).toBe(0);
    expect(world.server.state.reports).toHaveLength(20);
    // Before: crypto, net, fs/promises, perf_hooks, _http_common and ~40 more after the loader's flags; then
    // node:v8 and the ~20 stream modules it loads, which main.cjs loaded to set the semi-space flag back.
    expect(first.rejected.filter((name) => !before.has(name))).toEqual([]);
    // main.cjs sets the flag through process.binding('v8'), whose deprecation warning it keeps off stderr.
    expect(first.stderr).not.toMatch(/DEP0111|DeprecationWarning/);
    const idle = await onceShowingBuiltins(ONCE_NODE_FLAGS);
    expect(idle.status).toBe(0);
    expect(idle.rejected.filter((name) => !before.has(name))).toEqual([]);
  });

  // main.cjs sets the flag back on V8 11 (Node 20) alone. V8 13 (Node 24) does let new space grow after such a
  // reset (8.25-8.5 MiB against 8.0 without it): this test failed there, on a reset main.cjs never makes on it.
  it.runIf(process.versions.v8.startsWith('11.'))(
    'setting --max-semi-space-size back to its default keeps the semi-spaces node started with',
    () => {
      // main.cjs's reset (packaging/bundle.mjs) relies on V8 sizing the young generation once, at start.
      const program = [
        "require('node:v8').setFlagsFromString('--max-semi-space-size=0');",
        'let max = 0; let keep = [];',
        'for (let i = 0; i < 2e6; i += 1) {',
        "  keep.push({ i, s: 'x' + i }); if (keep.length > 200000) keep = [];",
        "  if (i % 10000 === 0) max = Math.max(max, require('node:v8').getHeapSpaceStatistics().find((s) => s.space_name === 'new_space').space_size);",
        '}',
        'process.stdout.write(String(max));',
      ].join('\n');
      const run = spawnSync(process.execPath, ['--max-semi-space-size=4', '-e', program], {
        encoding: 'utf8',
      });
      expect(run.status).toBe(0);
      // Two semi-spaces of at most 4 MiB (V8's default grows them to 16 on Node 20).
      expect(Number(run.stdout)).toBeGreaterThan(0);
      expect(Number(run.stdout)).toBeLessThanOrEqual(8 * 1024 * 1024);
    },
  );
});
