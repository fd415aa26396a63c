// rootAcl's bound on a reader that never answers (mut26: execFile's options emptied survived): it ends it and goes on.
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { rootAcl } from './lock.js';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'root-acl-mut26-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

// Real time: the bound is execFile's own 2 s timeout (GETFACL_TIMEOUT_MS), which no fake clock moves.
it('a perl that never answers (rootDir on a mount that hangs) is ended after its bound: no ACL, nothing left running', async () => {
  const rootDir = path.join(dir, 'root');
  await mkdir(rootDir);
  const pidFile = path.join(dir, 'pid');
  const hung = path.join(dir, 'perl');
  await writeFile(hung, `#!/bin/sh\necho $$ > ${pidFile}\nexec sleep 60\n`);
  await chmod(hung, 0o755);
  const acl = await rootAcl(rootDir, { perl: hung, getfacl: path.join(dir, 'no-getfacl') });
  expect(acl).toBeUndefined();
  const pid = Number((await readFile(pidFile, 'utf8')).trim());
  // Ended by the bound (SIGTERM), not left asleep beside the agent.
  const state = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => 'gone');
  expect(state === 'gone' || state.split(' ')[2] === 'Z').toBe(true);
}, 20_000);
