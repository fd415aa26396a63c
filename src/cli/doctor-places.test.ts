// doctor and init judge the configuration's places as start-up does: a config the agent refuses (exit 78) is never
// "ok", and init writes none.
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable, Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { doctorEnvironment, doctorOutput, writeDoctorConfig } from '../../test/helpers/doctor-config.js';
import { loadAgentConfig } from '../config/load.js';
import { runInit } from './init.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function scratch(): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'config-agent-doctor-'));
  dirs.push(dir);
  return dir;
}

/** Writes config.json (0600) and its key in `dir` with `places` (rootDir, stateDir) and returns its path. */
function configIn(dir: string, places: { rootDir: string; stateDir: string; hooks?: unknown[] }): string {
  return writeDoctorConfig(dir, { deviceId: 'dvc_places', key: 'sk-doctor-places-test\n' }, places);
}

async function doctorConfigLine(configPath: string, dir: string): Promise<string | undefined> {
  const { out } = await doctorOutput(configPath, doctorEnvironment(dir));
  return out.split('\n')[0];
}

async function startupRefusal(configPath: string): Promise<string> {
  return loadAgentConfig((await import('node:fs')).promises as never, {
    configFlag: configPath,
    env: {},
  }).then(
    () => 'accepted',
    (error: unknown) => String((error as Error).message),
  );
}

describe('doctor: the config line', () => {
  it('FAILs a stateDir inside rootDir through a symlink, as start-up refuses it (it said "valid")', async () => {
    const dir = scratch();
    mkdirSync(path.join(dir, 'real/state'), { recursive: true });
    symlinkSync(path.join(dir, 'real'), path.join(dir, 'root'));
    const configPath = configIn(dir, {
      rootDir: path.join(dir, 'root'),
      stateDir: path.join(dir, 'real/state'),
    });
    expect(await startupRefusal(configPath)).toContain('is inside rootDir');
    const line = await doctorConfigLine(configPath, dir);
    expect(line).toMatch(/^FAIL {2}config/);
    expect(line).toContain('is inside rootDir');
  });

  it('FAILs a rootDir in a directory others may write, as start-up refuses it (it said "valid")', async () => {
    const dir = scratch();
    mkdirSync(path.join(dir, 'open'));
    chmodSync(path.join(dir, 'open'), 0o777);
    const configPath = configIn(dir, {
      rootDir: path.join(dir, 'open/root'),
      stateDir: path.join(dir, 'state'),
    });
    expect(await startupRefusal(configPath)).toContain('writable by others');
    const line = await doctorConfigLine(configPath, dir);
    expect(line).toMatch(/^FAIL {2}config/);
    expect(line).toContain('writable by others');
  });

  it('FAILs a hook program others may change, as start-up refuses it (it said "valid")', async () => {
    const dir = scratch();
    const program = path.join(dir, 'reload.sh');
    writeFileSync(program, '#!/bin/sh\n', { mode: 0o755 });
    chmodSync(program, 0o777);
    const configPath = configIn(dir, {
      rootDir: path.join(dir, 'root'),
      stateDir: path.join(dir, 'state'),
      hooks: [{ match: '**', run: [program] }],
    });
    expect(await startupRefusal(configPath)).toContain('hooks[0].run[0]');
    const line = await doctorConfigLine(configPath, dir);
    expect(line).toMatch(/^FAIL {2}config/);
    expect(line).toContain('hooks[0].run[0]');
  });

  it('passes a configuration start-up accepts', async () => {
    const dir = scratch();
    const configPath = configIn(dir, { rootDir: path.join(dir, 'root'), stateDir: path.join(dir, 'state') });
    expect(await startupRefusal(configPath)).toBe('accepted');
    expect(await doctorConfigLine(configPath, dir)).toMatch(
      /^ok {4}config {4}.* valid \(device dvc_places\)$/,
    );
  });
});

/** runInit in `dir` as user `uid`, with rootDir `rootDir` and a config-agent account of its own. */
async function initIn(dir: string, uid: number, rootDir: string): Promise<{ code: number; err: string }> {
  writeFileSync(
    path.join(dir, 'passwd'),
    'root:x:0:0::/root:/bin/sh\nconfig-agent:x:4242:4242::/:/bin/false\n',
  );
  writeFileSync(path.join(dir, 'group'), 'root:x:0:\nconfig-agent:x:4242:\n');
  let err = '';
  const sink = (into: (text: string) => void) =>
    new Writable({
      write(chunk, _encoding, done) {
        into(String(chunk));
        done();
      },
    });
  const code = await runInit(
    {
      configPath: path.join(dir, 'etc/config.json'),
      deviceId: 'dvc_places',
      baseUrl: 'http://127.0.0.1:9',
      rootDir,
      apiKeyFile: '-',
    },
    { stdout: sink(() => {}), stderr: sink((text) => (err += text)), env: {}, isTty: false },
    {
      stdin: Readable.from(['sk-doctor-places-test\n']),
      stdinIsTty: false,
      groupFile: path.join(dir, 'group'),
      passwdFile: path.join(dir, 'passwd'),
      dropInDir: path.join(dir, 'dropin'),
      checkTimeoutMs: 1_000,
      uid,
    },
  );
  return { code, err };
}

// Both refusals come before init writes or chowns anything, so any user can run them with the uid injected.
describe('init', () => {
  it('refuses a rootDir start-up would refuse (exit 78) and writes nothing (it wrote all and said to start)', async () => {
    const dir = scratch();
    mkdirSync(path.join(dir, 'open'));
    chmodSync(path.join(dir, 'open'), 0o777);
    const { code, err } = await initIn(dir, 0, path.join(dir, 'open/root'));
    expect(code).toBe(78);
    expect(err).toContain('writable by others');
    expect(existsSync(path.join(dir, 'etc/config.json'))).toBe(false);
    expect(existsSync(path.join(dir, 'etc/api-key'))).toBe(false);
    expect(existsSync(path.join(dir, 'open/root'))).toBe(false);
  });

  it('refuses to run as any user but root (exit 78) and writes nothing', async () => {
    const dir = scratch();
    const { code, err } = await initIn(dir, 1000, path.join(dir, 'root'));
    expect(code).toBe(78);
    expect(err).toContain('run it as root');
    expect(existsSync(path.join(dir, 'etc/config.json'))).toBe(false);
    expect(existsSync(path.join(dir, 'root'))).toBe(false);
  });
});
