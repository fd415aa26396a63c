// adv21: the temp files a killed `config-agent init` left beside config.json and the drop-in, removed by the next init.
import {
  chownSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { afterAll, describe, expect, it } from 'vitest';
import { textSink } from '../../test/helpers/text-sink.js';
import { type InitEnvironment, runInit } from './init.js';

const BASE = mkdtempSync(path.join(os.tmpdir(), 'config-agent-init-temp-'));
afterAll(() => rmSync(BASE, { recursive: true, force: true }));
const isRoot = process.getuid?.() === 0;
const temp = (c: string) => `.config-agent.tmp-${c.repeat(24)}`;

const sink = textSink;

describe.skipIf(!isRoot)(
  "init removes an interrupted init's temp files (adv21; skipped unless root: init chowns)",
  () => {
    it('only regular files of the writer’s name owned by root, in the directories it writes; no symlink followed', async () => {
      const etc = path.join(BASE, 'etc/config-agent');
      const dropInDir = path.join(BASE, 'etc/drop-in');
      mkdirSync(etc, { recursive: true });
      mkdirSync(dropInDir, { recursive: true });
      writeFileSync(path.join(BASE, 'passwd'), 'root:x:0:0::/root:/bin/sh\nconfig-agent:x:4241:4242::/:/x\n');
      writeFileSync(path.join(BASE, 'group'), 'root:x:0:\nconfig-agent:x:4242:\n');
      // What a kill between the writer's create and its rename leaves: root's, of the writer's name.
      writeFileSync(path.join(etc, temp('a')), '{"deviceId": "dvc_');
      writeFileSync(path.join(dropInDir, temp('e')), '# Written by config-agent init');
      // What is not init's to remove.
      writeFileSync(path.join(etc, temp('b')), 'another user');
      chownSync(path.join(etc, temp('b')), 65534, 65534);
      const target = path.join(BASE, 'precious');
      writeFileSync(target, 'precious');
      symlinkSync(target, path.join(etc, temp('c')));
      mkdirSync(path.join(etc, temp('d')));
      writeFileSync(path.join(etc, '.config-agent.tmp-notours'), 'other name');

      const env: InitEnvironment = {
        stdin: Readable.from(['sk_test_temp_files_0123456789abcdef\n']),
        stdinIsTty: false,
        groupFile: path.join(BASE, 'group'),
        passwdFile: path.join(BASE, 'passwd'),
        dropInDir,
        checkTimeoutMs: 2_000,
        uid: 0,
      };
      const out = sink();
      const configPath = path.join(etc, 'config.json');
      const code = await runInit(
        {
          configPath,
          deviceId: 'dvc_1',
          baseUrl: 'http://127.0.0.1:9',
          rootDir: path.join(BASE, 'srv'),
          apiKeyFile: '-',
        },
        { stdout: out.stream, stderr: sink().stream, env: {}, isTty: false },
        env,
      );

      expect(existsSync(configPath)).toBe(true);
      expect(JSON.parse(readFileSync(configPath, 'utf8'))).toMatchObject({ deviceId: 'dvc_1' });
      expect(code).not.toBe(2);
      expect(existsSync(path.join(etc, temp('a')))).toBe(false);
      expect(existsSync(path.join(dropInDir, temp('e')))).toBe(false);
      expect(out.text()).toContain(
        `removed ${path.join(etc, temp('a'))} (the temp file of an interrupted write)`,
      );
      expect(readFileSync(path.join(etc, temp('b')), 'utf8')).toBe('another user');
      expect(lstatSync(path.join(etc, temp('c'))).isSymbolicLink()).toBe(true);
      expect(readFileSync(target, 'utf8')).toBe('precious');
      expect(lstatSync(path.join(etc, temp('d'))).isDirectory()).toBe(true);
      expect(readFileSync(path.join(etc, '.config-agent.tmp-notours'), 'utf8')).toBe('other name');
    });
  },
);
