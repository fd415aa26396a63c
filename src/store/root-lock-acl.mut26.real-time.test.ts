// rootAcl's bound on a reader that never answers (mut26: execFile's options emptied survived): it ends it and goes on.
import { chmod, mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { expect, it } from 'vitest';
import { tempDirEachTest } from '../../test/helpers/temp-dir.js';
import { rootAcl } from './lock.js';

const temp = tempDirEachTest('root-acl-mut26-');

// Real time: the bound is execFile's own 2 s timeout (GETFACL_TIMEOUT_MS), which no fake clock moves.
it('a perl that never answers (rootDir on a mount that hangs) is ended after its bound: no ACL, nothing left running', async () => {
  const rootDir = path.join(temp.dir, 'root');
  await mkdir(rootDir);
  const pidFile = path.join(temp.dir, 'pid');
  const hung = path.join(temp.dir, 'perl');
  await writeFile(hung, `#!/bin/sh\necho $$ > ${pidFile}\nexec sleep 60\n`);
  await chmod(hung, 0o755);
  const acl = await rootAcl(rootDir, { perl: hung, getfacl: path.join(temp.dir, 'no-getfacl') });
  expect(acl).toBeUndefined();
  const pid = Number((await readFile(pidFile, 'utf8')).trim());
  // Ended by the bound (SIGTERM), not left asleep beside the agent.
  const state = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => 'gone');
  expect(state === 'gone' || state.split(' ')[2] === 'Z').toBe(true);
}, 20_000);
