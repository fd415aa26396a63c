// The install's V8 code cache (`config-agent --once --write-code-cache`, the package's postinst): written, used by a first sync, refused when untrusted.
import { spawn } from 'node:child_process';
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
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { benchFixtures } from '../../bench/lib/fixtures.js';
import { type BenchWorld, createWorld } from '../../bench/lib/world.js';
import { bundleCli } from '../../packaging/bundle.mjs';
import { ONCE_NODE_FLAGS } from '../../packaging/launcher.mjs';
import { CODE_CACHE_DIR } from '../../src/cli/code-cache.js';

const isRoot = process.getuid?.() === 0;
const NOBODY = 65534;

let build: string;
let mainCjs: string;
/** Where main.cjs looks for the install's cache (the package's /var/cache/config-agent). */
let installDir: string;
let installCache: string;
beforeAll(() => {
  build = mkdtempSync(path.join(os.tmpdir(), 'config-agent-install-cache-bundle-'));
  installDir = path.join(build, 'var-cache');
  installCache = path.join(installDir, CODE_CACHE_DIR);
  const files = bundleCli({ outdir: path.join(build, 'dist'), installCacheDir: installDir });
  writeFileSync(path.join(build, 'package.json'), JSON.stringify({ version: '0.0.0-test', type: 'module' }));
  mainCjs = files[0] as string;
}, 120_000);
afterAll(() => {
  rmSync(build, { recursive: true, force: true });
});

let world: BenchWorld;
beforeEach(async () => {
  rmSync(installDir, { recursive: true, force: true });
  world = await createWorld(benchFixtures({ count: 20 }));
  await world.writeConfig({ log: { level: 'debug' } });
});
afterEach(async () => {
  await world.close();
});

interface Run {
  status: number | null;
  stdout: string;
  stderr: string;
  /** The loader's debug lines about the cache: msg, reason, and `(install)` for the install's cache. */
  cache: string[];
}

/** main.cjs with `--once`'s node flags, as the launcher runs it. */
function run(args: readonly string[]): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...ONCE_NODE_FLAGS, mainCjs, ...args], {
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
          const { msg, reason, from } = JSON.parse(line) as { msg: string; reason?: string; from?: string };
          return `${msg}${reason === undefined ? '' : `: ${reason}`}${from === undefined ? '' : ` (${from})`}`;
        });
      resolve({ status, stdout, stderr, cache });
    });
  });
}

const once = () => run(['--once', '--config', world.configPath]);
const writeInstallCache = () => run(['--once', '--write-code-cache']);

function installFile(): string {
  const files = readdirSync(installCache);
  expect(files).toHaveLength(1);
  return path.join(installCache, files[0] as string);
}

describe("the install's code cache", () => {
  it('is written 0644 in a 0755 directory, used by a first sync, which then writes its own; the idle run uses its own', async () => {
    const written = await writeInstallCache();
    expect(written).toMatchObject({ status: 0, stderr: '' });
    expect(written.stdout).toMatch(/^config-agent: code cache written into .*code-cache \(\d+ bytes\)\n$/);
    const file = installFile();
    expect(file).toMatch(/\/agent-[0-9A-F]{12}\.[0-9a-f]{16}\.v8cache$/);
    expect(statSync(file).mode & 0o777).toBe(0o644);
    expect(statSync(installCache).mode & 0o777).toBe(0o755);
    // Nothing else: the compiling run stopped at a configuration that does not exist, and touched no world.
    expect(readdirSync(installDir)).toEqual([CODE_CACHE_DIR]);
    expect(existsSync(world.stateDir)).toBe(false);
    const bytes = readFileSync(file);

    const first = await once();
    expect(first).toMatchObject({
      status: 0,
      cache: ['code cache not used: stateDir: ENOENT', 'code cache used (install)', 'code cache written'],
    });
    expect(world.server.state.reports).toHaveLength(20);
    const idle = await once();
    expect(idle).toMatchObject({ status: 0, cache: ['code cache used'] });
    expect(idle.stdout).toMatch(/20 unchanged/);
    // Read, never rewritten by a run.
    expect(readFileSync(file).equals(bytes)).toBe(true);
    // Written again (the next install): replaced, still one file.
    expect((await writeInstallCache()).status).toBe(0);
    installFile();
  });

  it('a corrupt or truncated one is ignored: the first sync runs the same and writes its own', async () => {
    expect((await writeInstallCache()).status).toBe(0);
    const file = installFile();
    const good = readFileSync(file);
    const flipped = Buffer.from(good);
    flipped[good.length >> 1] = (flipped[good.length >> 1] as number) ^ 0xff;
    writeFileSync(file, flipped);
    const first = await once();
    expect(first).toMatchObject({
      status: 0,
      cache: [
        'code cache not used: stateDir: ENOENT',
        'code cache not used: checksum mismatch (truncated or corrupt) (install)',
        'code cache written',
      ],
    });
    expect(world.server.state.reports).toHaveLength(20);
    writeFileSync(file, good.subarray(0, good.length >> 1));
    rmSync(world.stateDir, { recursive: true });
    expect((await once()).cache).toEqual([
      'code cache not used: stateDir: ENOENT',
      'code cache not used: checksum mismatch (truncated or corrupt) (install)',
      'code cache written',
    ]);
  });

  it('one that others may write, or in a directory others may write, is not used', async () => {
    expect((await writeInstallCache()).status).toBe(0);
    const file = installFile();
    chmodSync(file, 0o666);
    const first = await once();
    expect(first.status).toBe(0);
    expect(world.server.state.reports).toHaveLength(20);
    expect(first.cache).toEqual([
      'code cache not used: stateDir: ENOENT',
      'code cache not used: writable by group or others (mode 666) (install)',
      'code cache written',
    ]);
    chmodSync(file, 0o644);
    chmodSync(installCache, 0o777);
    rmSync(world.stateDir, { recursive: true });
    expect((await once()).cache).toEqual([
      'code cache not used: stateDir: ENOENT',
      'code cache not used: writable by group or others (mode 777) (install)',
      'code cache written',
    ]);
    chmodSync(installCache, 0o755);
    chmodSync(installDir, 0o777);
    rmSync(world.stateDir, { recursive: true });
    expect((await once()).cache).toEqual([
      'code cache not used: stateDir: ENOENT',
      'code cache not used: stateDir writable by group or others (mode 777) (install)',
      'code cache written',
    ]);
  });

  it.runIf(isRoot)("one of a third user's is not used (needs root to chown)", async () => {
    expect((await writeInstallCache()).status).toBe(0);
    chownSync(installFile(), NOBODY, NOBODY);
    expect((await once()).cache).toEqual([
      'code cache not used: stateDir: ENOENT',
      `code cache not used: owned by uid ${NOBODY}, not 0 (install)`,
      'code cache written',
    ]);
  });

  it('is written only by those exact words, and never past a configuration that exists', async () => {
    // Among other words it is main.ts's: an unknown option.
    const mixed = await run(['--once', '--write-code-cache', '--config', world.configPath]);
    expect(mixed.status).toBe(2);
    expect(mixed.stderr).toMatch(/--write-code-cache/);
    expect(existsSync(installCache)).toBe(false);
    // The compiling run's configuration path must not exist: a file there would be read (and a pass run).
    mkdirSync(path.join(installCache, '.no-config'), { recursive: true, mode: 0o755 });
    chmodSync(installDir, 0o755);
    const refused = await writeInstallCache();
    expect(refused.status).toBe(1);
    expect(refused.stderr).toMatch(/^config-agent: no code cache written into .*: .*\.no-config exists\n$/);
    expect(readdirSync(installCache)).toEqual(['.no-config']);
  });
});
