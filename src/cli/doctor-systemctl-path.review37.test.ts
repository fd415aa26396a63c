// doctor's systemctl is looked up on the system's PATH, never the caller's (review37; getfacl's sibling, review36).
import { chmod, mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { runSystemctl } from './doctor.js';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'doctor-systemctl-path-'));
  await mkdir(path.join(dir, 'bin'));
  // A user's own systemctl, first on the PATH a plain `su` or `sudo -E` hands on: it leaves a file when run.
  await writeFile(path.join(dir, 'bin', 'systemctl'), `#!/bin/sh\n: > '${path.join(dir, 'ran')}'\n`);
  await chmod(path.join(dir, 'bin', 'systemctl'), 0o755);
});

afterEach(async () => {
  vi.unstubAllEnvs();
  await rm(dir, { recursive: true, force: true });
});

describe("runSystemctl and the caller's PATH (review37)", () => {
  it("runs no systemctl from the caller's PATH", async () => {
    vi.stubEnv('PATH', `${path.join(dir, 'bin')}:/usr/sbin:/usr/bin:/sbin:/bin`);
    await runSystemctl(['--version']);
    expect(await readdir(dir)).not.toContain('ran');
  });
});
