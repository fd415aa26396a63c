// `config-agent doctor` judges rootDir and stateDir (owner and mode, whether the unit can write rootDir) through
// start-up's bounds: a directory on a mount that does not answer is a FAIL line naming the mount (exit 1), never a
// doctor held for good. A port whose calls under the "dead" directories never answer stands in for the mounts.

import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { deadBelow } from '../../test/helpers/dead-below-fs.js';
import { doctorEnvironment, doctorOutput, writeDoctorConfig } from '../../test/helpers/doctor-config.js';
import { ExitCode } from './exit-codes.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** doctor's output for a config whose rootDir and stateDir are where `place` puts them, under a strict unit. */
async function doctorWith(place: (dir: string) => { rootDir: string; stateDir: string; dead: string[] }) {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'config-agent-doctor-places-hung-'));
  dirs.push(dir);
  const { rootDir, stateDir, dead } = place(dir);
  for (const mount of dead) mkdirSync(path.join(mount, 'sub'), { recursive: true });
  writeFileSync(
    path.join(dir, 'passwd'),
    'root:x:0:0::/root:/bin/sh\nconfig-agent:x:4242:4242::/:/usr/sbin/nologin\n',
  );
  writeFileSync(path.join(dir, 'group'), 'root:x:0:\nconfig-agent:x:4242:\n');
  const configPath = writeDoctorConfig(
    dir,
    { deviceId: 'dvc_places', key: 'sk-doctor-places-test-key\n' },
    { rootDir, stateDir },
  );
  const { fs, calls, ask, asks } = deadBelow(dead);
  const { code, out } = await doctorOutput(
    configPath,
    doctorEnvironment(dir, {
      groupFile: path.join(dir, 'group'),
      passwdFile: path.join(dir, 'passwd'),
      // A loaded unit under ProtectSystem=strict with no ReadWritePaths=: doctor resolves rootDir to judge it.
      systemctl: async () => ({
        status: 0,
        stdout:
          'LoadState=loaded\nProtectSystem=strict\nReadWritePaths=\nActiveState=active\nSubState=running\nUnitFileState=enabled\n',
      }),
      placesFs: fs,
      mountTable: {
        mountinfo: async () =>
          dead.map((mount, i) => `${90 + i} 27 0:${60 + i} / ${mount} rw - fuse dead${i} rw`).join('\n'),
      },
      mountAnswerMs: 50,
      askElsewhere: ask,
    }),
  );
  const line = (name: string) => out.split('\n').find((each) => each.slice(6).startsWith(`${name} `)) ?? '';
  return { code, line, calls, asks };
}

describe('doctor: rootDir and stateDir on mounts that do not answer (hook29)', () => {
  it('says each is not judged, naming its mount, with at most one call into each', async () => {
    let mounts: string[] = [];
    const { code, line, calls, asks } = await doctorWith((dir) => {
      mounts = [path.join(dir, 'nfs-root'), path.join(dir, 'nfs-state')];
      return {
        rootDir: path.join(mounts[0] ?? '', 'sub'),
        stateDir: path.join(mounts[1] ?? '', 'sub'),
        dead: mounts,
      };
    });
    const [rootMount = '', stateMount = ''] = mounts;
    expect(line('rootDir')).toMatch(/^FAIL {2}rootDir {3}\S+ not judged: ETIMEDOUT/);
    expect(line('rootDir')).toContain(rootMount);
    expect(line('stateDir')).toMatch(/^FAIL {2}stateDir {2}\S+ not judged: ETIMEDOUT/);
    expect(line('stateDir')).toContain(stateMount);
    // Each mount asked once from "another process" (doctor28), none called by doctor itself.
    expect([...asks.values()]).toEqual([1, 1]);
    expect(calls.size).toBe(0);
    expect(code).toBe(ExitCode.NotConverged);
  }, 20_000);

  it('does not take a rootDir it could not resolve as one the unit may write, nor wait on it', async () => {
    let mount = '';
    const { code, line, calls, asks } = await doctorWith((dir) => {
      mount = path.join(dir, 'fuse-root');
      // stateDir local: only rootDir's mount is dead, so its realpath is asked (and refused at once: its lane late).
      return { rootDir: path.join(mount, 'sub'), stateDir: path.join(dir, 'state'), dead: [mount] };
    });
    expect(line('rootDir')).toMatch(/^FAIL {2}rootDir {3}\S+ not judged: ETIMEDOUT: the mount at /);
    expect(line('rootDir')).toContain(mount);
    expect(line('stateDir')).not.toContain('not judged');
    expect(asks.get(mount)).toBe(1);
    expect(calls.has(mount)).toBe(false);
    expect(code).toBe(ExitCode.NotConverged);
  }, 20_000);
});
