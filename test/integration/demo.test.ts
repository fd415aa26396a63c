// `npm start`: the demo runs end to end, twice in a row, with the same story and the same files.

import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { collect, REPO_ROOT } from '../helpers/harness.js';

const dirs: string[] = [];
afterAll(async () => {
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

async function runDemo(demoDir: string) {
  const child = spawn(process.execPath, [path.join(REPO_ROOT, 'dist', 'demo', 'demo.js')], {
    env: { PATH: process.env.PATH, CONFIG_AGENT_DEMO_DIR: demoDir },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return collect(child, 60_000);
}

describe('the demo', () => {
  it('syncs, stays idempotent, shows both conflict kinds, and a second run tells the same story', async () => {
    const demoDir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-demo-'));
    dirs.push(demoDir);

    const first = await runDemo(demoDir);
    expect(first.code).toBe(0);
    expect(first.stdout).toMatch(/Converged: 8 written\./);
    expect(first.stdout).toMatch(/Converged: 8 unchanged\./);
    expect(first.stdout).toMatch(/device_file_path_conflict/);
    expect(first.stdout).toMatch(/replaced\s+app\/settings\.json/);
    expect(first.stdout).toMatch(/device_config_schema_conflict/);
    expect(first.stdout).toMatch(/removed\s+robot\/motion\/limits\.yaml/);
    expect(first.stdout).toMatch(/Demo done\./);
    // The tree of written files, with sizes and modes.
    expect(first.stdout).toMatch(/^robot\/\n {2}motion\/\n {4}limits\.yaml {2}\(\d+ bytes, mode 644\)$/m);
    expect(first.stdout).toMatch(/^ {4}site\.json {2}\(\d+ bytes, mode 644\)$/m);
    const settings = await readFile(path.join(demoDir, 'root', 'app', 'settings.json'), 'utf8');
    expect(JSON.parse(settings)).toMatchObject({ station: 'line-b/cell-1' });

    const second = await runDemo(demoDir);
    expect(second.code).toBe(0);
    const story = (text: string) => text.replace(/http:\/\/127\.0\.0\.1:\d+/g, 'URL');
    expect(story(second.stdout)).toBe(story(first.stdout));
    // The key lives in a 0600 file, never in argv or output.
    const key = (await readFile(path.join(demoDir, 'api-key'), 'utf8')).trim();
    expect(`${first.stdout}${first.stderr}${second.stdout}${second.stderr}`).not.toContain(key);
  });
});
