// rootDir's ACL is read by a getfacl the agent's PATH does not choose (review36).
import { chmod, mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { rootAcl } from './lock.js';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'root-lock-acl-path-'));
  await mkdir(path.join(dir, 'root'));
  await mkdir(path.join(dir, 'bin'));
  // A user's own getfacl, first on the PATH a plain `su` hands on: it leaves a file when run.
  await writeFile(path.join(dir, 'bin', 'getfacl'), `#!/bin/sh\n: > '${path.join(dir, 'ran')}'\n`);
  await chmod(path.join(dir, 'bin', 'getfacl'), 0o755);
});

afterEach(async () => {
  vi.unstubAllEnvs();
  await rm(dir, { recursive: true, force: true });
});

describe("rootAcl's getfacl and the agent's PATH (review36)", () => {
  // review34 kept PERL5OPT/PERL5LIB from the ACL's perl, for an environment a plain `su` or `doas keepenv` hands the
  // agent as root; the same environment's PATH still chose getfacl (its fallback: no perl, a perl that fails, or an
  // architecture whose getxattr number is not known), so a user's ~/bin/getfacl ran as root.
  it("runs no getfacl from the caller's PATH when perl cannot read the ACL", async () => {
    vi.stubEnv('PATH', `${path.join(dir, 'bin')}:/usr/sbin:/usr/bin:/sbin:/bin`);
    await rootAcl(path.join(dir, 'root'), { perl: '/nonexistent/perl', getfacl: 'getfacl' });
    expect(await readdir(dir)).not.toContain('ran');
  });
});
