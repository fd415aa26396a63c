// The start-up sweep over a directory of a million entries: it holds a few entries at a time, not the listing.
// Run in a worker with a small heap: a whole listing (node's readdir makes every Dirent at once, ~300 bytes an
// entry as measured on ext4) exhausts it, as a million entries under rootDir exhausted a 256 MiB device at every
// start.
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { build } from 'esbuild';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { TEMP_PREFIX } from './path-guard.js';

const ENTRIES = 1_000_000;
const HEAP_MB = 16;

/**
 * The worker: `sweepTempFiles` on the real root through node's fs, where the directory `big` lists ENTRIES junk
 * files besides what it really holds. Its `readdir` makes every entry at once, as node's does; its `opendir`
 * makes them as they are read, as node's does.
 */
const WORKER = `
import * as nodeFs from 'node:fs/promises';
import { parentPort, workerData } from 'node:worker_threads';
import { sweepTempFiles } from ${JSON.stringify(fileURLToPath(new URL('./durable-writer.ts', import.meta.url)))};

const { root, entries } = workerData;
const big = root + '/big';
class Junk {
  constructor(name) { this.name = name; }
  isFile() { return true; }
  isDirectory() { return false; }
  isSymbolicLink() { return false; }
}
const isBig = async (file) => (await nodeFs.realpath(file).catch(() => '')) === big;
const fs = {
  ...nodeFs,
  readdir: async (file, options) => {
    const real = await nodeFs.readdir(file, options);
    if (!(await isBig(file))) return real;
    const all = [];
    for (let i = 0; i < entries; i++) all.push(new Junk('junk-' + i));
    return [...all, ...real];
  },
  opendir: async (file, options) => {
    const dir = await nodeFs.opendir(file, options);
    if (!(await isBig(file))) return dir;
    let i = 0;
    return {
      read: async () => (i < entries ? new Junk('junk-' + i++) : dir.read()),
      close: () => dir.close(),
    };
  },
};
parentPort.postMessage(await sweepTempFiles(fs, root));
`;

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-sweep-large-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('the start-up sweep in a directory of a million entries', () => {
  it(`sweeps it within a ${HEAP_MB} MiB heap`, async () => {
    const root = await (await import('node:fs/promises')).realpath(dir);
    await mkdir(path.join(root, 'big'));
    await writeFile(path.join(root, 'big', `${TEMP_PREFIX}torn`), 'torn');
    await writeFile(path.join(root, 'big', 'app.conf'), 'kept');
    const script = path.join(root, 'worker.mjs');
    await build({
      stdin: { contents: WORKER, resolveDir: root, loader: 'js' },
      bundle: true,
      platform: 'node',
      format: 'esm',
      outfile: script,
      logLevel: 'silent',
    });
    const worker = new Worker(pathToFileURL(script), {
      workerData: { root, entries: ENTRIES },
      resourceLimits: { maxOldGenerationSizeMb: HEAP_MB },
    });
    const outcome = await new Promise<unknown>((resolve) => {
      worker.once('message', resolve);
      worker.once('error', (error) => resolve(String(error)));
    });
    await worker.terminate();
    expect(outcome).toEqual([`big/${TEMP_PREFIX}torn`]);
    expect(await readdir(path.join(root, 'big'))).toEqual(['app.conf']);
  });
});
