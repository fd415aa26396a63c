// A scratch system for `config-agent init` in a temp dir: passwd, group and its environment (the key on stdin, uid 0).
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import type { InitEnvironment } from '../../src/cli/init.js';

/**
 * init's environment over `dir`: its passwd and group files, dropin/ as the drop-in dir (not made), `apiKey` on
 * stdin (not a terminal), 1 s checks, uid 0 (as far as init knows: it chowns only what it writes).
 */
export function initEnvironment(dir: string, apiKey: string): InitEnvironment {
  return {
    stdin: Readable.from([`${apiKey}\n`]),
    stdinIsTty: false,
    groupFile: path.join(dir, 'group'),
    passwdFile: path.join(dir, 'passwd'),
    dropInDir: path.join(dir, 'dropin'),
    checkTimeoutMs: 1_000,
    uid: 0,
  };
}

/**
 * Writes `dir`'s passwd and group (root, and config-agent as `id`:`id`) and makes etc/config-agent: the path of
 * the config.json init writes there.
 */
export function initUsers(dir: string, id: number): string {
  mkdirSync(path.join(dir, 'etc/config-agent'), { recursive: true });
  writeFileSync(
    path.join(dir, 'passwd'),
    `root:x:0:0::/root:/bin/sh\nconfig-agent:x:${id}:${id}::/:/bin/false\n`,
  );
  writeFileSync(path.join(dir, 'group'), `root:x:0:\nconfig-agent:x:${id}:\n`);
  return path.join(dir, 'etc/config-agent/config.json');
}
