// adv21: init and doctor refuse a rootDir the shipped unit hides from the agent or cannot write (ProtectHome=, PrivateTmp=, ProtectSystem=).
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { textSink } from '../../test/helpers/text-sink.js';
import { runDoctor } from './doctor.js';
import { type InitEnvironment, runInit } from './init.js';
import { type HiddenDir, hiddenFromUnit, rootDirHiddenFromUnit, UNIT_HIDDEN_DIRS } from './unit-sandbox.js';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const BASE = mkdtempSync(path.join(os.tmpdir(), 'config-agent-sandbox-'));
afterAll(() => rmSync(BASE, { recursive: true, force: true }));

const sink = textSink;

/** A scratch system whose "hidden" directory stands for /home (the real ones hold the test's own /tmp). */
function scratch(name: string) {
  const dir = path.join(BASE, name);
  mkdirSync(path.join(dir, 'etc'), { recursive: true });
  mkdirSync(path.join(dir, 'hidden/ops'), { recursive: true });
  writeFileSync(path.join(dir, 'etc/passwd'), 'root:x:0:0::/root:/bin/sh\nconfig-agent:x:4241:4242::/:/x\n');
  writeFileSync(path.join(dir, 'etc/group'), 'root:x:0:\nconfig-agent:x:4242:\n');
  const hides: HiddenDir[] = [{ dir: path.join(dir, 'hidden'), directive: 'ProtectHome=yes' }];
  const env: InitEnvironment = {
    stdin: Readable.from(['sk_test_sandbox_0123456789abcdef\n']),
    stdinIsTty: false,
    groupFile: path.join(dir, 'etc/group'),
    passwdFile: path.join(dir, 'etc/passwd'),
    dropInDir: path.join(dir, 'etc/systemd/system/config-agent.service.d'),
    checkTimeoutMs: 2_000,
    // Refused before init writes or chowns anything, so no root is needed.
    uid: 0,
    unitHides: hides,
  };
  return { dir, env, configPath: path.join(dir, 'etc/config-agent/config.json') };
}

describe('a rootDir the unit hides from the agent (adv21)', () => {
  it('is named for every directory the unit replaces, and only inside them', () => {
    for (const dir of [
      '/home/ops/configs',
      '/root/c',
      '/run/user/0/c',
      '/tmp/c',
      '/var/tmp/apps/c',
      '/dev/shm/c',
    ]) {
      expect([dir, hiddenFromUnit(dir) !== undefined]).toEqual([dir, true]);
    }
    for (const dir of [
      '/srv/config-agent',
      '/homes/c',
      '/data/home/c',
      '/tmpfs/c',
      '/var/lib/c',
      '/running/c',
    ]) {
      expect([dir, hiddenFromUnit(dir)]).toEqual([dir, undefined]);
    }
    // The list follows the unit: each directive it names is in systemd/config-agent.service.
    const unit = readFileSync(path.join(REPO, 'systemd/config-agent.service'), 'utf8');
    for (const { directive, reason } of UNIT_HIDDEN_DIRS) {
      if (reason === undefined) expect(unit).toMatch(new RegExp(`^${directive}$`, 'm'));
    }
    // /run is emptied at every boot: the drop-in would name a missing directory after the next reboot.
    expect(hiddenFromUnit('/run/cfg')?.reason).toContain('226/NAMESPACE');
    expect(hiddenFromUnit('/run/user/0/c')?.directive).toBe('ProtectHome=yes');
  });

  it('init refuses it (exit 78) before writing anything, on its path or where a symlink leads', async () => {
    // Before: init wrote the config, made the directory and the drop-in and said `ok`; the service then exited 78
    // (`cannot create /home/cfgs: permission denied`) under ProtectHome=, or failed 226/NAMESPACE every 30 s for a
    // rootDir under /var/tmp (PrivateTmp=): seen under systemd 252.
    const direct = scratch('direct');
    const rootDir = path.join(direct.dir, 'hidden/ops/configs');
    const out = sink();
    const err = sink();
    const code = await runInit(
      {
        configPath: direct.configPath,
        deviceId: 'dvc_1',
        baseUrl: 'http://127.0.0.1:9',
        rootDir,
        apiKeyFile: '-',
      },
      { stdout: out.stream, stderr: err.stream, env: {}, isTty: false },
      direct.env,
    );
    expect(code).toBe(78);
    expect(err.text()).toContain(`rootDir ${rootDir} is inside ${path.join(direct.dir, 'hidden')}`);
    expect(err.text()).toContain('ProtectHome=yes');
    expect(existsSync(direct.configPath)).toBe(false);
    expect(existsSync(rootDir)).toBe(false);
    expect(existsSync(direct.env.dropInDir)).toBe(false);

    const linked = scratch('linked');
    symlinkSync(path.join(linked.dir, 'hidden/ops'), path.join(linked.dir, 'data'));
    const viaLink = path.join(linked.dir, 'data/configs');
    const message = await rootDirHiddenFromUnit(nodeFs, viaLink, linked.env.unitHides);
    expect(message).toContain(`(it leads to ${path.join(linked.dir, 'hidden/ops/configs')})`);
    const linkErr = sink();
    const linkCode = await runInit(
      {
        configPath: linked.configPath,
        deviceId: 'dvc_1',
        baseUrl: 'http://127.0.0.1:9',
        rootDir: viaLink,
        apiKeyFile: '-',
      },
      { stdout: sink().stream, stderr: linkErr.stream, env: {}, isTty: false },
      linked.env,
    );
    expect(linkCode).toBe(78);
    expect(existsSync(linked.configPath)).toBe(false);
    expect(
      await rootDirHiddenFromUnit(nodeFs, path.join(linked.dir, 'elsewhere/c'), linked.env.unitHides),
    ).toBe(undefined);
  });

  it('doctor fails its rootDir line for it', async () => {
    const sys = scratch('doctor');
    const rootDir = path.join(sys.dir, 'hidden/ops/configs');
    mkdirSync(path.dirname(sys.configPath), { recursive: true });
    writeFileSync(
      sys.configPath,
      JSON.stringify({
        deviceId: 'dvc_1',
        server: { baseUrl: 'http://127.0.0.1:9', apiKeyFile: path.join(sys.dir, 'etc/key') },
        rootDir,
        stateDir: path.join(sys.dir, 'state'),
      }),
      { mode: 0o640 },
    );
    const out = sink();
    const code = await runDoctor(
      { configPath: sys.configPath },
      { stdout: out.stream, stderr: sink().stream, env: {}, isTty: false },
      {
        groupFile: sys.env.groupFile,
        passwdFile: sys.env.passwdFile,
        checkTimeoutMs: 2_000,
        unitHides: sys.env.unitHides ?? [],
        systemctl: async () => ({ status: 127, stdout: '' }),
        now: () => 0,
        unit: 'config-agent.service',
      },
    );
    expect(code).not.toBe(0);
    const line = out
      .text()
      .split('\n')
      .find((entry) => entry.includes(' rootDir '));
    expect(line).toMatch(/^FAIL {2}rootDir {3}rootDir .* is inside .*ProtectHome=yes/);
  });

  it('doctor fails its rootDir line when no ReadWritePaths= of the loaded unit covers it (ProtectSystem=strict)', async () => {
    // Before: rootDir moved in config.json without init's drop-in: every write failed EROFS (`retrying`) while
    // doctor printed `all checks passed` (seen under systemd 252).
    const run = async (name: string, readWritePaths: string) => {
      const sys = scratch(name);
      const rootDir = path.join(sys.dir, 'opt/cfg');
      mkdirSync(rootDir, { recursive: true });
      mkdirSync(path.dirname(sys.configPath), { recursive: true });
      writeFileSync(
        sys.configPath,
        JSON.stringify({
          deviceId: 'dvc_1',
          server: { baseUrl: 'http://127.0.0.1:9', apiKeyFile: path.join(sys.dir, 'etc/key') },
          rootDir,
          stateDir: path.join(sys.dir, 'state'),
        }),
        { mode: 0o640 },
      );
      const out = sink();
      await runDoctor(
        { configPath: sys.configPath },
        { stdout: out.stream, stderr: sink().stream, env: {}, isTty: false },
        {
          groupFile: sys.env.groupFile,
          passwdFile: sys.env.passwdFile,
          checkTimeoutMs: 2_000,
          unitHides: [],
          systemctl: async (args) => ({
            status: 0,
            stdout: args.some((arg) => arg.includes('ReadWritePaths'))
              ? `LoadState=loaded\nProtectSystem=strict\nReadWritePaths=${readWritePaths.replaceAll('ROOT', rootDir)}\n`
              : 'LoadState=loaded\nActiveState=active\nSubState=running\nUnitFileState=enabled\n',
          }),
          now: () => 0,
          unit: 'config-agent.service',
        },
      );
      return {
        rootDir,
        line:
          out
            .text()
            .split('\n')
            .find((entry) => entry.includes(' rootDir ')) ?? '',
      };
    };
    const uncovered = await run('strict', '/srv/config-agent -/var/lib/prometheus/node-exporter');
    expect(uncovered.line).toMatch(/^FAIL {2}rootDir {3}/);
    expect(uncovered.line).toContain(`${uncovered.rootDir} is read-only for config-agent.service`);
    expect(uncovered.line).toContain(`config-agent init --root-dir ${uncovered.rootDir}`);
    const covered = await run('covered', '/srv/config-agent -ROOT');
    expect(covered.line).not.toContain('read-only');
  });
});
