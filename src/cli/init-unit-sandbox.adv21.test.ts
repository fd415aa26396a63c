// adv21: init and doctor refuse a rootDir the shipped unit hides from the agent or cannot write (ProtectHome=, PrivateTmp=, ProtectSystem=).
import { existsSync, mkdirSync, readFileSync, symlinkSync } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { scratchDoctor, scratchSystems, writeScratchConfig } from '../../test/helpers/scratch-system.js';
import { textSink } from '../../test/helpers/text-sink.js';
import { runInit } from './init.js';
import { hiddenFromUnit, rootDirHiddenFromUnit, UNIT_HIDDEN_DIRS } from './unit-sandbox.js';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
/** Scratch systems whose "hidden" directory stands for /home (the real ones hold the test's own /tmp). */
const systems = scratchSystems('sandbox', {
  hiddenSubdir: 'ops',
  hides: (dir) => [{ dir: path.join(dir, 'hidden'), directive: 'ProtectHome=yes' }],
  apiKey: 'sk_test_sandbox_0123456789abcdef',
});
afterAll(() => systems.remove());
const scratch = systems.make;

const sink = textSink;

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
    writeScratchConfig(sys, rootDir);
    const { code, text } = await scratchDoctor(sys, { unitHides: sys.env.unitHides ?? [] });
    expect(code).not.toBe(0);
    const line = text.split('\n').find((entry) => entry.includes(' rootDir '));
    expect(line).toMatch(/^FAIL {2}rootDir {3}rootDir .* is inside .*ProtectHome=yes/);
  });

  it('doctor fails its rootDir line when no ReadWritePaths= of the loaded unit covers it (ProtectSystem=strict)', async () => {
    // Before: rootDir moved in config.json without init's drop-in: every write failed EROFS (`retrying`) while
    // doctor printed `all checks passed` (seen under systemd 252).
    const run = async (name: string, readWritePaths: string) => {
      const sys = scratch(name);
      const rootDir = path.join(sys.dir, 'opt/cfg');
      mkdirSync(rootDir, { recursive: true });
      writeScratchConfig(sys, rootDir);
      const { text } = await scratchDoctor(sys, {
        unitHides: [],
        readWritePaths: readWritePaths.replaceAll('ROOT', rootDir),
      });
      return {
        rootDir,
        line: text.split('\n').find((entry) => entry.includes(' rootDir ')) ?? '',
      };
    };
    const uncovered = await run('strict', '/srv/config-agent -/var/lib/prometheus/node-exporter');
    expect(uncovered.line).toMatch(/^FAIL {2}rootDir {3}/);
    expect(uncovered.line).toContain(`${uncovered.rootDir} is read-only for config-agent.service`);
    expect(uncovered.line).toContain(`config-agent init --root-dir ${uncovered.rootDir}`);
    const covered = await run('covered', '/srv/config-agent -ROOT');
    expect(covered.line).not.toContain('read-only');
  });

  it("does not fail a rootDir inside the unit's own StateDirectory= (writable without ReadWritePaths=)", async () => {
    // Before (review28): only ReadWritePaths= counted, so a rootDir under /var/lib/config-agent failed doctor
    // although systemd makes the unit's StateDirectory= writable under ProtectSystem=strict.
    const sys = scratch('state-directory');
    const rootDir = path.join(sys.dir, 'var/lib/config-agent/files');
    mkdirSync(rootDir, { recursive: true });
    writeScratchConfig(sys, rootDir);
    const line = async (stateDirectory: string) => {
      const { text } = await scratchDoctor(sys, {
        unitHides: [],
        readWritePaths: '/srv/config-agent',
        stateDirectory,
      });
      return text.split('\n').find((entry) => entry.includes(' rootDir ')) ?? '';
    };
    expect(await line('config-agent')).not.toContain('read-only');
    expect(await line('config-agent:config-agent-link')).not.toContain('read-only');
    // Another unit directory's name, or a sibling that only starts alike, still fails.
    expect(await line('config-agent-other')).toContain(`${rootDir} is read-only for config-agent.service`);
    expect(await line('')).toMatch(/^FAIL {2}rootDir {3}/);
  });
});
