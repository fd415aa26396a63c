// kill -9 loop over the compiled writer: the target must always be one complete version, and the sweep cleans up.
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, promises as nodeFs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FsPort } from '../../src/lib/fs-port.js';
import { publishFile, sweepTempFiles } from '../../src/store/durable-writer.js';
import { TEMP_PREFIX } from '../../src/store/path-guard.js';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const WRITER = path.join(REPO, 'dist/store/durable-writer.js');
const ITERATIONS = 30;
const PAYLOAD_BYTES = 256 * 1024;
const TARGET = 'etc/app/payload.bin';
const MAX_KILL_DELAY_MS = 40;

/** Three distinct complete versions; each byte also encodes its offset, so a splice of two is never a third. */
function payload(version: number): Buffer {
  const data = Buffer.alloc(PAYLOAD_BYTES);
  for (let i = 0; i < data.length; i += 1) data[i] = (i * 31 + version * 97) & 0xff;
  return data;
}

const sha = (data: Uint8Array) => createHash('sha256').update(data).digest('hex');

// The worker rebuilds the same payloads and publishes them in turn, forever, until it is killed.
const WORKER = `
import { promises as fs } from 'node:fs';
const { publishFile } = await import(process.argv[2]);
const [rootDir, relativePath] = [process.argv[3], process.argv[4]];
const payloads = [0, 1, 2].map((version) => {
  const data = Buffer.alloc(${PAYLOAD_BYTES});
  for (let i = 0; i < data.length; i += 1) data[i] = (i * 31 + version * 97) & 0xff;
  return data;
});
process.stdout.write('R');
for (let i = 1; ; i += 1) {
  await publishFile(fs, { rootDir, relativePath, data: payloads[i % 3], mode: 0o644, dirMode: 0o755 });
  process.stdout.write('.');
}
`;

/** Deterministic jitter (mulberry32) so a failing run can be replayed with the same kill timings. */
function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

let base = '';
beforeAll(async () => {
  base = await nodeFs.mkdtemp(path.join(os.tmpdir(), 'config-agent-crash-'));
});
afterAll(async () => {
  if (base) await nodeFs.rm(base, { recursive: true, force: true });
});

/** Starts the worker and resolves once it has loaded the writer, so each kill lands inside the publish loop. */
function startWorker(
  workerPath: string,
  root: string,
): Promise<{ child: ChildProcess; output: () => string }> {
  const child = spawn(process.execPath, [workerPath, pathToFileURL(WRITER).href, root, TARGET], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`worker not ready after 5 s: ${err}`)), 5_000);
    child.stderr?.on('data', (chunk: Buffer) => {
      err += chunk.toString();
    });
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.startsWith('R')) {
        clearTimeout(timer);
        resolve({ child, output: () => out });
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`worker exited early (${String(code)}): ${err}`));
    });
  });
}

async function killHard(child: ChildProcess): Promise<void> {
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGKILL');
  await exited;
}

describe('crash safety under kill -9', () => {
  it(`keeps the target one complete version over ${ITERATIONS} SIGKILLs, and the sweep clears every temp file`, async () => {
    expect(existsSync(WRITER), `${WRITER} is missing: test/global-setup.ts should have built dist/`).toBe(
      true,
    );
    const root = path.join(base, 'root');
    await nodeFs.mkdir(root);
    const workerPath = path.join(base, 'worker.mjs');
    await nodeFs.writeFile(workerPath, WORKER);
    const fs: FsPort = nodeFs;
    await publishFile(fs, {
      rootDir: root,
      relativePath: TARGET,
      data: payload(0),
      mode: 0o644,
      dirMode: 0o755,
    });

    const versions = new Set([0, 1, 2].map((version) => sha(payload(version))));
    const random = seededRandom(20261122);
    let publishes = 0;
    let swept = 0;
    const seen = new Set<string>();
    for (let iteration = 0; iteration < ITERATIONS; iteration += 1) {
      const { child, output } = await startWorker(workerPath, root);
      await new Promise((resolve) => setTimeout(resolve, Math.floor(random() * MAX_KILL_DELAY_MS)));
      await killHard(child);
      publishes += output().length - 1;

      const content = await nodeFs.readFile(path.join(root, TARGET));
      expect(content.byteLength, `iteration ${iteration}: torn length`).toBe(PAYLOAD_BYTES);
      expect(versions.has(sha(content)), `iteration ${iteration}: content is not one complete version`).toBe(
        true,
      );
      seen.add(sha(content));
      expect((await nodeFs.stat(path.join(root, TARGET))).mode & 0o7777).toBe(0o644);

      const leftovers = await sweepTempFiles(fs, root);
      swept += leftovers.length;
      for (const leftover of leftovers) expect(path.basename(leftover).startsWith(TEMP_PREFIX)).toBe(true);
      const remaining = await nodeFs.readdir(root, { recursive: true });
      expect(remaining.filter((name) => path.basename(String(name)).startsWith(TEMP_PREFIX))).toEqual([]);
    }
    process.stderr.write(
      `crash-loop: ${ITERATIONS} kills, ${publishes} completed publishes, ${swept} orphan temp files swept, ${seen.size} distinct versions observed\n`,
    );
    expect(publishes).toBeGreaterThan(0);
  });
});
