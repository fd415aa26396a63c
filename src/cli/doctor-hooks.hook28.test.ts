// `config-agent doctor` judges hook programs as start-up does, bounded: one on a mount that does not answer is
// reported as not judged (a FAIL line, exit 1) instead of holding doctor for good, and no more than two such checks
// are left unanswered. A port whose calls under the "dead" directories never answer stands in for the mounts.

import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { skipWithoutRoot } from '../../test/helpers/built-packages.js';
import { deadBelow } from '../../test/helpers/dead-below-fs.js';
import { doctorEnvironment, doctorOutput, writeDoctorConfig } from '../../test/helpers/doctor-config.js';
import { initEnvironment, initUsers } from '../../test/helpers/init-scratch.js';
import { bufferedIo } from '../../test/helpers/local-socket.js';
import { ExitCode } from './exit-codes.js';
import { runInit } from './init.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe('doctor: hook programs on mounts that do not answer (hook28)', () => {
  it('reports each as not judged, within the bound, and leaves at most two checks unanswered', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'config-agent-doctor-hooks-'));
    dirs.push(dir);
    const dead = ['nfs1', 'nfs2', 'nfs3'].map((name) => path.join(dir, name));
    for (const mount of dead) mkdirSync(mount);
    mkdirSync(path.join(dir, 'root'));
    const configPath = writeDoctorConfig(
      dir,
      { deviceId: 'dvc_hooks', key: 'sk-doctor-hooks-test-key\n' },
      {
        rootDir: path.join(dir, 'root'),
        stateDir: path.join(dir, 'state'),
        hooks: dead.map((mount, i) => ({ match: `app${i}/**`, run: [path.join(mount, 'reload')] })),
      },
    );
    const { fs, calls, ask, asks } = deadBelow(dead);
    const { code, out } = await doctorOutput(
      configPath,
      doctorEnvironment(dir, {
        placesFs: fs,
        mountTable: {
          mountinfo: async () =>
            dead.map((mount, i) => `${90 + i} 27 0:${60 + i} / ${mount} rw - fuse dead${i} rw`).join('\n'),
        },
        mountAnswerMs: 50,
        askElsewhere: ask,
      }),
    );
    const lines = out.split('\n');
    expect(lines[0]).toMatch(/^ok {4}config/);
    const hooks = lines.filter((line) => /^FAIL {2}hooks/.test(line));
    expect(hooks).toHaveLength(3);
    for (const [i, mount] of dead.entries())
      expect(hooks[i]).toContain(`hooks[${i}].run[0] (${path.join(mount, 'reload')}) not judged`);
    // The first two mounts' calls (the agent's own paths are resolved first) went unanswered: nothing more is asked.
    expect(hooks[0]).toContain(`not checked: the mounts at ${dead[0]}, ${dead[1]} have not answered`);
    // Each of two mounts asked once from "another process" (doctor28), the third not at all; doctor itself called
    // none of them: no thread of its pool is held.
    expect([...asks.values()]).toEqual([1, 1]);
    expect(asks.has(dead[2] ?? '')).toBe(false);
    expect(calls.size).toBe(0);
    expect(code).toBe(ExitCode.NotConverged);
  }, 20_000);
});

describe('init: a kept hook program on a mount that does not answer (hook28; root: init chowns)', () => {
  it('ends, warning that it is not judged, and writes the configuration as start-up takes it', async (ctx) => {
    // init chowns what it writes: only root can; under .ci/run (root) this throws rather than skips.
    if (process.getuid?.() !== 0) ctx.skip(skipWithoutRoot('init chowns: root only'));
    const dir = mkdtempSync(path.join(os.tmpdir(), 'config-agent-init-hooks-'));
    dirs.push(dir);
    const dead = path.join(dir, 'nfs');
    mkdirSync(dead);
    const configPath = initUsers(dir, 4243);
    const program = path.join(dead, 'reload');
    // An existing configuration's hooks are kept by init: the one here lives on the dead mount.
    writeFileSync(configPath, JSON.stringify({ hooks: [{ match: '**', run: [program] }] }), {
      mode: 0o640,
    });
    const { fs, calls, ask, asks } = deadBelow([dead]);
    const io = bufferedIo({}, false);
    const code = await runInit(
      {
        configPath,
        deviceId: 'dvc_hooks',
        baseUrl: 'http://127.0.0.1:9',
        rootDir: path.join(dir, 'root'),
        apiKeyFile: '-',
      },
      io,
      {
        ...initEnvironment(dir, 'sk-init-hooks-test-key-0123'),
        placesFs: fs,
        mountTable: { mountinfo: async () => `90 27 0:60 / ${dead} rw - fuse dead rw` },
        mountAnswerMs: 50,
        askElsewhere: ask,
      },
    );
    const out = io.out();
    expect(out).toContain(`warning: hooks[0].run[0] (${program}) not judged`);
    expect(out).toContain(`the mount at ${dead} did not answer within 0.1 s`);
    expect(asks.get(dead)).toBe(1);
    expect(calls.has(dead)).toBe(false);
    expect(code).not.toBe(ExitCode.Config);
    expect(JSON.parse(readFileSync(configPath, 'utf8')).hooks).toEqual([{ match: '**', run: [program] }]);
  }, 20_000);
});
