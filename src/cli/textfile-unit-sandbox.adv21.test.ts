// adv21: init and doctor judge metrics.textfile as they judge rootDir: not where the unit hides it, not read-only for it.
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { scratchDoctor, scratchSystems, writeScratchConfig } from '../../test/helpers/scratch-system.js';
import { textSink } from '../../test/helpers/text-sink.js';
import { runInit } from './init.js';

/** Scratch systems whose "hidden" directory stands for /tmp (PrivateTmp=), "run" for /run. */
const systems = scratchSystems('textfile-sandbox', {
  hiddenSubdir: 'node-exporter',
  hides: (dir) => [
    { dir: path.join(dir, 'hidden'), directive: 'PrivateTmp=yes' },
    { dir: path.join(dir, 'run'), directive: 'ReadWritePaths=', reason: 'is emptied at every boot' },
  ],
  apiKey: 'sk_test_textfile_0123456789abcdef',
});
afterAll(() => systems.remove());
const scratch = systems.make;

const sink = textSink;

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
    writeScratchConfig(sys, rootDir, { metrics: { textfile } });
    const { text } = await scratchDoctor(sys, {
      unitHides: sys.hides,
      readWritePaths: `${rootDir} ${readWritePaths.replaceAll('DIR', path.dirname(textfile))}`,
    });
    return {
      textfile,
      line: text.split('\n').find((entry) => /^\S+ +metrics /.test(entry)) ?? '',
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
