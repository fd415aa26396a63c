// stateDir's largest files loaded in a small heap: a state.json of 150,000 instances and an outbox of 200,000 reports are walked a record at a time, never held whole with their parse tree (stream28).
import { spawnSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../helpers/harness.js';

const dist = (relative: string) => JSON.stringify(pathToFileURL(path.join(REPO_ROOT, 'dist', relative)).href);

/**
 * Writes, with the agent's own writers, a state.json of 150,000 instances as a device's is (a file record with
 * its size, an instance record with its report's echo: ~460 bytes, 69 MB) and an outbox of 200,000 reports with
 * their listed echo (~210 bytes each, 43 MB) into the directory argv[1].
 */
const WRITE = `
import * as fs from 'node:fs/promises';
import { createHash } from 'node:crypto';
const { emptyState, saveLocalState } = await import(${dist('store/state.js')});
const dir = process.argv[1];
const state = emptyState('dvc_mem', '/srv/root');
const at = (ms) => new Date(Date.UTC(2026, 2, 1, 12) + ms).toISOString();
for (let i = 0; i < 150000; i += 1) {
  const relative = 'set' + (i % 10) + '/group' + (Math.floor(i / 1000) % 10) + '/conf' + i + '.json';
  const id = 'cfg_' + String(i).padStart(8, '0') + 'abcdef';
  const sha256 = createHash('sha256').update(String(i)).digest('hex');
  state.files.set(relative, { instanceId: id, sha256, mode: 0o644, createdDirs: [], writtenAt: at(i * 1000), size: 1000 + (i % 97) });
  state.instances.set(id, { relativePath: relative, activity: 'deployed', error: 'none', attempts: 0,
    reportEcho: { updatedAt: at(i * 1000), operatorUpdatedAt: at(i * 1000 - 3600000), version: String(1 + (i % 5)) } });
}
await saveLocalState(fs, dir, state);
const entries = Array.from({ length: 200000 }, (_, i) => ({ seq: i, instanceId: 'cfg_' + String(i).padStart(8, '0') + 'abcdef',
  report: { activity_status: 'deployed', error_status: 'none' }, queuedAt: at(i * 1000), listedUpdatedAt: at(i * 1000 - 3600000),
  listedVersion: String(1 + (i % 5)) }));
await fs.writeFile(dir + '/outbox.json', JSON.stringify({ version: 1, nextSeq: 200000, entries }));
`;

/** Loads argv[2] ('state' or 'outbox') of the directory argv[1] as the agent does; prints what it holds. */
const LOAD = `
import * as fs from 'node:fs/promises';
const { silentLogger } = await import(${dist('lib/logger.js')});
const [dir, which] = process.argv.slice(1);
if (which === 'state') {
  const { loadLocalState } = await import(${dist('store/state.js')});
  const { state, outcome } = await loadLocalState(fs, dir, 'dvc_mem', silentLogger(), '/srv/root');
  const last = state.instances.get('cfg_00149999abcdef');
  process.stdout.write([outcome, state.files.size, state.instances.size, last?.relativePath, last?.reportEcho?.version].join(' '));
} else {
  const { StatusOutbox } = await import(${dist('store/outbox.js')});
  const outbox = await StatusOutbox.open(fs, dir, silentLogger(), { now: () => 0 });
  const last = outbox.pending().at(-1);
  process.stdout.write([outbox.size, last?.seq, last?.instanceId, last?.listedVersion].join(' '));
}
`;

function node(args: string[]): { status: number | null; stdout: string; stderr: string } {
  const run = spawnSync(process.execPath, args, { encoding: 'utf8', timeout: 500_000 });
  return { status: run.status, stdout: run.stdout, stderr: run.stderr };
}

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'state-load-memory-'));
  const written = node(['--input-type=module', '-e', WRITE, dir]);
  expect(written.stderr).toBe('');
  expect(written.status).toBe(0);
}, 600_000);

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

// Seconds of CPU on an idle machine; minutes were seen at a load of 17: a bound for a hung test, not a speed check.
describe("stateDir's largest files in a small heap (stream28)", () => {
  // Parsed whole, the text, JSON.parse's tree and the records were held together: ~320 MB of heap (~400 MB of
  // RSS); walked, ~150 MB. Fails before: the child dies of heap exhaustion (SIGABRT) in a 200 MB old space.
  it('a state.json of 150,000 instances loads whole in a 200 MB old space', { timeout: 600_000 }, () => {
    const run = node(['--max-old-space-size=200', '--input-type=module', '-e', LOAD, dir, 'state']);
    expect(run.stderr).not.toContain('heap');
    expect(run.stdout).toBe('loaded 150000 150000 set9/group9/conf149999.json 5');
    expect(run.status).toBe(0);
  });

  // Parsed whole: ~145 MB of heap at its end (~230 MB of RSS); walked: ~85 MB.
  it('an outbox of 200,000 reports opens whole in a 120 MB old space', { timeout: 600_000 }, () => {
    const run = node(['--max-old-space-size=120', '--input-type=module', '-e', LOAD, dir, 'outbox']);
    expect(run.stderr).not.toContain('heap');
    expect(run.stdout).toBe('200000 199999 cfg_00199999abcdef 5');
    expect(run.status).toBe(0);
  });
});
