// fix33: an environ read stuck for good (a FIFO nobody writes) does not hold the process's exit (review33's finding).
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, constants, openSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { bundleScript } from '../../test/helpers/bundled-script.js';

let dir: string | undefined;
let fifo: string | undefined;

afterEach(async () => {
  // The reader left in the FIFO's open gets its writer, and ends.
  if (fifo !== undefined) {
    try {
      closeSync(openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK));
    } catch {
      // No reader left on it.
    }
  }
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  dir = undefined;
  fifo = undefined;
});

/** Runs `script` (ESM, `procProcessTable` in scope) in a node of its own; its exit code, or 'held' past `boundMs`. */
async function runTo(
  script: string,
  boundMs: number,
): Promise<{ code: number | null | 'held'; out: string }> {
  if (dir === undefined) throw new Error('no directory');
  const entry = path.join(dir, 'entry.ts');
  const outfile = path.join(dir, 'entry.mjs');
  const module = fileURLToPath(new URL('./hook-processes.ts', import.meta.url));
  await bundleScript(
    `import { procProcessTable } from ${JSON.stringify(module)};\n${script}`,
    dir,
    entry,
    outfile,
  );
  const child = spawn(process.execPath, [outfile], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => {
    out += chunk.toString();
  });
  return new Promise((resolve) => {
    // A bound on the test, not a measured window: before fix33 this process never ended by itself.
    const bound = setTimeout(() => {
      child.kill('SIGKILL');
      resolve({ code: 'held', out });
    }, boundMs);
    child.on('exit', (code) => {
      clearTimeout(bound);
      resolve({ code, out });
    });
  });
}

describe('a stuck environ read and the exit (fix33)', () => {
  it('a process with a read stuck for good still exits, by process.exit and by an empty event loop', async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-fix33-exit-'));
    const procDir = path.join(dir, 'proc');
    await mkdir(path.join(procDir, '4242'), { recursive: true });
    fifo = path.join(procDir, '4242', 'environ');
    expect(spawnSync('mkfifo', [fifo]).status).toBe(0);
    const read = `const table = procProcessTable(${JSON.stringify(procDir)}, 100);
console.log(String(table.environ(4242)));
table.close?.();`;
    // Before: the reader thread, stuck in the FIFO's open, was joined at exit (even after terminate()): held.
    const exited = await runTo(`${read}\nprocess.exit(7);`, 15_000);
    expect(exited).toEqual({ code: 7, out: 'undefined\n' });
    const ended = await runTo(read, 15_000);
    expect(ended).toEqual({ code: 0, out: 'undefined\n' });
  }, 40_000);
});
