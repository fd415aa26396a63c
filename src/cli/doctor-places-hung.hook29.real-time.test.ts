// `config-agent doctor` with rootDir on a real FUSE mount nobody serves: it ends within the bound, rootDir reported as
// not judged, naming the mount (root only). Before, its owner and mode line's stat waited in the kernel for good.
import { type ChildProcess, spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { doctorEnvironment, doctorOutput, writeDoctorConfig } from '../../test/helpers/doctor-config.js';
import { canMountFuse, hungFuseMount } from '../../test/helpers/hung-fuse.js';
import { ExitCode } from './exit-codes.js';

let dir: string | undefined;
let fuse: ChildProcess | undefined;

afterEach(async () => {
  fuse?.kill('SIGKILL');
  fuse = undefined;
  if (dir !== undefined) {
    spawnSync('umount', ['-l', path.join(dir, 'hung')]);
    await rm(dir, { recursive: true, force: true });
  }
  dir = undefined;
});

describe.runIf(canMountFuse)('doctor: rootDir on a hung mount (hook29)', () => {
  it('ends, naming rootDir as not judged and the mount, and exits as a failed check does', async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-doctor-fuse-'));
    const mountPoint = path.join(dir, 'hung');
    await mkdir(mountPoint);
    // Unserved for 30 s: far past the 0.3 s bound; the test ends it sooner (afterEach).
    fuse = await hungFuseMount(mountPoint, 30_000);
    // The agent's account, so that the owner and mode lines are made.
    await writeFile(path.join(dir, 'passwd'), 'config-agent:x:4242:4242::/:/usr/sbin/nologin\n');
    await writeFile(path.join(dir, 'group'), 'config-agent:x:4242:\n');
    const configPath = writeDoctorConfig(
      dir,
      { deviceId: 'dvc_1', key: 'sk-doctor-hung-hook-key\n' },
      { rootDir: path.join(mountPoint, 'root'), stateDir: path.join(dir, 'state') },
    );
    const { code, out } = await doctorOutput(
      configPath,
      doctorEnvironment(dir, {
        groupFile: path.join(dir, 'group'),
        passwdFile: path.join(dir, 'passwd'),
        mountAnswerMs: 300,
      }),
    );
    const rootDir = out.split('\n').filter((line) => /^FAIL {2}rootDir/.test(line));
    expect(rootDir).toEqual([
      expect.stringContaining(`${path.join(mountPoint, 'root')} not judged: ETIMEDOUT`),
    ]);
    expect(rootDir[0]).toContain(`the mount at ${mountPoint} did not answer within 0.3 s`);
    expect(code).toBe(ExitCode.NotConverged);
    expect(fuse.exitCode, 'the mount still hangs').toBeNull();
  }, 20_000);
});
