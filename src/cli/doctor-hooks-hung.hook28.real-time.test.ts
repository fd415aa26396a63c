// `config-agent doctor` with a hook program on a real FUSE mount nobody serves: it ends within the bound, the hook
// reported as not judged (root only). Before, its stat waited in the kernel and doctor never ended.
import { type ChildProcess, spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
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

describe.runIf(canMountFuse)('doctor: a hook program on a hung mount (hook28)', () => {
  it('ends, naming the hook as not judged, and exits as a failed check does', async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-doctor-fuse-'));
    const mountPoint = path.join(dir, 'hung');
    await mkdir(mountPoint);
    // Unserved for 30 s: far past the 0.3 s bound; the test ends it sooner (afterEach).
    fuse = await hungFuseMount(mountPoint, 30_000);
    const program = path.join(mountPoint, 'reload');
    const configPath = writeDoctorConfig(
      dir,
      { deviceId: 'dvc_1', key: 'sk-doctor-hung-hook-key\n' },
      {
        rootDir: path.join(dir, 'root'),
        stateDir: path.join(dir, 'state'),
        hooks: [{ match: '**', run: [program] }],
      },
    );
    const { code, out } = await doctorOutput(configPath, doctorEnvironment(dir, { mountAnswerMs: 300 }));
    const hooks = out.split('\n').filter((line) => /^FAIL {2}hooks/.test(line));
    expect(hooks).toEqual([expect.stringContaining(`hooks[0].run[0] (${program}) not judged`)]);
    expect(hooks[0]).toContain(`the mount at ${mountPoint} did not answer within 0.3 s`);
    expect(code).toBe(ExitCode.NotConverged);
    expect(fuse.exitCode, 'the mount still hangs').toBeNull();
  }, 20_000);
});
