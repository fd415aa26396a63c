// adv21: init and doctor judge metrics.textfile as they judge rootDir: not where the unit hides it, not read-only for it.
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, describe, expect, it } from 'vitest';
import { textSink } from '../../test/helpers/text-sink.js';
import { runDoctor } from './doctor.js';
import { type InitEnvironment, runInit } from './init.js';
import type { HiddenDir } from './unit-sandbox.js';

const BASE = mkdtempSync(path.join(os.tmpdir(), 'config-agent-textfile-sandbox-'));
afterAll(() => rmSync(BASE, { recursive: true, force: true }));

const sink = textSink;

/** A scratch system whose "hidden" directory stands for /tmp (PrivateTmp=), "run" for /run. */
function scratch(name: string) {
  const dir = path.join(BASE, name);
  mkdirSync(path.join(dir, 'etc'), { recursive: true });
  mkdirSync(path.join(dir, 'hidden/node-exporter'), { recursive: true });
  writeFileSync(path.join(dir, 'etc/passwd'), 'root:x:0:0::/root:/bin/sh\nconfig-agent:x:4241:4242::/:/x\n');
  writeFileSync(path.join(dir, 'etc/group'), 'root:x:0:\nconfig-agent:x:4242:\n');
  const hides: HiddenDir[] = [
    { dir: path.join(dir, 'hidden'), directive: 'PrivateTmp=yes' },
    { dir: path.join(dir, 'run'), directive: 'ReadWritePaths=', reason: 'is emptied at every boot' },
  ];
  const env: InitEnvironment = {
    stdin: Readable.from(['sk_test_textfile_0123456789abcdef\n']),
    stdinIsTty: false,
    groupFile: path.join(dir, 'etc/group'),
    passwdFile: path.join(dir, 'etc/passwd'),
    dropInDir: path.join(dir, 'etc/systemd/system/config-agent.service.d'),
    checkTimeoutMs: 2_000,
    // Refused before init writes or chowns anything, so no root is needed.
    uid: 0,
    unitHides: hides,
  };
  return { dir, env, hides, configPath: path.join(dir, 'etc/config-agent/config.json') };
}

describe('metrics.textfile where the unit hides it or cannot write (adv21)', () => {
  it('init refuses it (exit 78) before writing anything', async () => {
    // Before: init wrote the configuration and said `ok`; the service then wrote the textfile into its own
    // private /tmp, where node_exporter never looks, and nothing said so.
    const sys = scratch('init');
    const textfile = path.join(sys.dir, 'hidden/node-exporter/config-agent.prom');
    mkdirSync(path.dirname(sys.configPath), { recursive: true });
    writeFileSync(sys.configPath, JSON.stringify({ metrics: { textfile } }));
    const err = sink();
    const code = await runInit(
      {
        configPath: sys.configPath,
        deviceId: 'dvc_1',
        baseUrl: 'http://127.0.0.1:9',
        rootDir: path.join(sys.dir, 'srv'),
        apiKeyFile: '-',
      },
      { stdout: sink().stream, stderr: err.stream, env: {}, isTty: false },
      sys.env,
    );
    expect(code).toBe(78);
    expect(err.text()).toContain(`metrics.textfile ${textfile} is inside ${path.join(sys.dir, 'hidden')}`);
    expect(err.text()).toContain('PrivateTmp=yes');
    expect(
      JSON.parse(await import('node:fs/promises').then((fs) => fs.readFile(sys.configPath, 'utf8'))),
    ).toEqual({
      metrics: { textfile },
    });
    expect(existsSync(path.join(sys.dir, 'srv'))).toBe(false);
    expect(existsSync(path.join(sys.dir, 'etc/config-agent/api-key'))).toBe(false);
  });

  const doctorLine = async (name: string, textfileDir: (dir: string) => string, readWritePaths: string) => {
    const sys = scratch(name);
    const textfile = path.join(textfileDir(sys.dir), 'config-agent.prom');
    const rootDir = path.join(sys.dir, 'srv');
    mkdirSync(rootDir, { recursive: true });
    mkdirSync(path.dirname(sys.configPath), { recursive: true });
    writeFileSync(
      sys.configPath,
      JSON.stringify({
        deviceId: 'dvc_1',
        server: { baseUrl: 'http://127.0.0.1:9', apiKeyFile: path.join(sys.dir, 'etc/key') },
        rootDir,
        stateDir: path.join(sys.dir, 'state'),
        metrics: { textfile },
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
        unitHides: sys.hides,
        systemctl: async (args) => ({
          status: 0,
          stdout: args.some((arg) => arg.includes('ReadWritePaths'))
            ? `LoadState=loaded\nProtectSystem=strict\nReadWritePaths=${rootDir} ${readWritePaths.replaceAll('DIR', path.dirname(textfile))}\n`
            : 'LoadState=loaded\nActiveState=active\nSubState=running\nUnitFileState=enabled\n',
        }),
        now: () => 0,
        unit: 'config-agent.service',
      },
    );
    return {
      textfile,
      line:
        out
          .text()
          .split('\n')
          .find((entry) => /^\S+ +metrics /.test(entry)) ?? '',
    };
  };

  it('doctor fails its metrics line where the unit hides it', async () => {
    const hidden = await doctorLine('hidden', (dir) => path.join(dir, 'hidden/node-exporter'), '-DIR');
    expect(hidden.line).toMatch(
      /^FAIL {2}metrics +metrics\.textfile: metrics\.textfile .* is inside .*PrivateTmp=yes/,
    );
  });

  it('doctor fails its metrics line when no ReadWritePaths= of the loaded unit covers its directory', async () => {
    const uncovered = await doctorLine(
      'uncovered',
      (dir) => path.join(dir, 'opt/prom'),
      '-/var/lib/prometheus/node-exporter',
    );
    expect(uncovered.line).toMatch(/^FAIL {2}metrics /);
    expect(uncovered.line).toContain(
      `${path.dirname(uncovered.textfile)} is read-only for config-agent.service`,
    );
    expect(uncovered.line).toContain(`ReadWritePaths=-${path.dirname(uncovered.textfile)}`);
    const covered = await doctorLine('covered', (dir) => path.join(dir, 'opt/prom'), '-DIR');
    expect(covered.line).toMatch(/^ok +metrics /);
    // Under /run (a node_exporter's own directory, made again at boot) with its drop-in: not refused as rootDir is.
    const run = await doctorLine('run', (dir) => path.join(dir, 'run/node-exporter'), '-DIR');
    expect(run.line).toMatch(/^ok +metrics /);
  });
});
