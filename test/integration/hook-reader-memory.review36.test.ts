// The hook environ reader's output parsed without an object per record: an environ of empty records costs no heap (review36).
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../helpers/harness.js';

/**
 * In a Node whose old space is 64 MB: the reader's 32 MiB cap of output (READ_MAX_BYTES) filled with one process's
 * empty records (`/proc/<pid>/environ:` and a NUL each, 1.5 million: an environ region a process rewrote with NULs),
 * as grep hands it back, read through boundedFileReader with a stand-in spawnSync. Prints the environ's length.
 */
const SCRIPT = `
const { boundedFileReader } = await import(${JSON.stringify(
  pathToFileURL(path.join(REPO_ROOT, 'dist', 'daemon', 'hook-processes.js')).href,
)});
const file = '/proc/4242424/environ';
const piece = Buffer.from(file + ':\\0', 'latin1');
const records = Math.floor((32 * 1024 * 1024 - 64) / piece.length);
const out = Buffer.alloc(piece.length * records + 64);
for (let i = 0; i < records; i += 1) piece.copy(out, i * piece.length);
const end = Buffer.from('/proc/version:Linux version\\n\\0', 'latin1').copy(out, piece.length * records);
const stdout = out.subarray(0, piece.length * records + end);
const spawnSync = () => ({ stdout, stderr: Buffer.from('pid 1'), status: 0, signal: null, output: [], pid: 1 });
const answer = boundedFileReader(500, () => undefined, () => ({ spawnSync })).readAll([file]).get(file);
process.stdout.write(String(answer.length));
`;

describe('the hook environ reader and an environ of empty records (review36)', () => {
  // bound26's reader kept a buffer per record plus a NUL buffer and a prefix: ~330 bytes of heap for each 21 bytes
  // of output, ~500 MB and 15 s of the daemon's thread at the cap, for any local user's process started while a
  // hook runs (every such process's environ is read as root). Fails before: the child dies of heap exhaustion.
  it('is read whole in a 64 MB heap: every record, one buffer', () => {
    const run = spawnSync(
      process.execPath,
      ['--max-old-space-size=64', '--input-type=module', '-e', SCRIPT],
      {
        encoding: 'utf8',
        timeout: 120_000,
      },
    );
    expect(run.stderr).not.toContain('heap');
    expect(run.stdout).toBe(String(Math.floor((32 * 1024 * 1024 - 64) / '/proc/4242424/environ:\0'.length)));
    expect(run.status).toBe(0);
  });
});
