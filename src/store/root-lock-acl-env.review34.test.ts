// rootDir's ACL is read by a perl that takes no code from the agent's environment (review34).
import { spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { skipWithoutRoot } from '../../test/helpers/built-packages.js';
import { rootAcl } from './lock.js';

const HAS_PERL = spawnSync('/usr/bin/perl', ['-e', '1']).status === 0;

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'root-lock-acl-env-'));
  await mkdir(path.join(dir, 'root'));
  await mkdir(path.join(dir, 'lib'));
  // A module that leaves a file behind when perl loads it: what PERL5OPT=-M... with PERL5LIB makes it do.
  await writeFile(
    path.join(dir, 'lib', 'Review34Planted.pm'),
    `package Review34Planted; open(my $f, '>', '${path.join(dir, 'ran')}'); close $f; 1;\n`,
  );
});

afterEach(async () => {
  vi.unstubAllEnvs();
  await rm(dir, { recursive: true, force: true });
});

describe("rootAcl's perl and the agent's environment (review34)", () => {
  it('runs none of PERL5OPT/PERL5LIB: an environment that reached the agent (su, doas keepenv) runs no code as it', async (ctx) => {
    // perl-base is essential on Debian: under .ci/run a missing perl fails the run instead of hiding the case.
    if (!HAS_PERL) ctx.skip(skipWithoutRoot('/usr/bin/perl missing'));
    // The launcher drops NODE_* and OpenSSL's variables for this reason; perl's own were passed on to rootAcl's perl.
    vi.stubEnv('PERL5OPT', '-MReview34Planted');
    vi.stubEnv('PERL5LIB', path.join(dir, 'lib'));
    const acl = await rootAcl(path.join(dir, 'root'), {
      perl: '/usr/bin/perl',
      getfacl: '/nonexistent/getfacl',
    });
    expect(await readdir(dir)).not.toContain('ran');
    // Still read: a directory without an ACL has none beyond its mode.
    expect(acl).toEqual([]);
  });
});
