// `config-agent init` with its own places under /etc (the config directory, the unit's drop-in directory) on a mount
// that does not answer (an NFS root): it ends within the bound, exit 78, naming the path and the mount. A port whose
// calls under the "dead" directory never answer stands in for the mount, and for asking it from another process.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { deadBelow } from '../../test/helpers/dead-below-fs.js';
import { initEnvironment } from '../../test/helpers/init-scratch.js';
import { bufferedIo } from '../../test/helpers/local-socket.js';
import { ExitCode } from './exit-codes.js';
import { type InitFs, runInit } from './init.js';

const KEY = 'sk-init-etc-hung-test-key-0123';
const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** init (uid 0 as far as it knows) on a scratch system whose `deadDir` (relative) is on a mount never answering. */
async function initWith(deadDir: string, rootDir = 'srv') {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'config-agent-init-etc-hung-'));
  dirs.push(dir);
  // Chowns to the agent's user are to this process's own: the test need not run as root.
  const id = process.getuid?.() ?? 0;
  writeFileSync(path.join(dir, 'passwd'), `config-agent:x:${id}:${id}::/:/bin/false\n`);
  writeFileSync(path.join(dir, 'group'), `config-agent:x:${process.getgid?.() ?? 0}:\n`);
  const dead = path.join(dir, deadDir);
  mkdirSync(dead, { recursive: true });
  const { fs, calls, ask, asks, ended } = deadBelow([dead]);
  const configPath = path.join(dir, 'etc/config-agent/config.json');
  const io = bufferedIo({}, false);
  const code = await runInit(
    {
      configPath,
      deviceId: 'dvc_etc',
      baseUrl: 'http://127.0.0.1:9',
      rootDir: path.join(dir, rootDir),
      apiKeyFile: '-',
    },
    io,
    {
      ...initEnvironment(dir, KEY),
      fs: fs as InitFs,
      placesFs: fs,
      mountTable: { mountinfo: async () => `90 27 0:60 / ${dead} rw - nfs4 server:/etc rw` },
      mountAnswerMs: 50,
      askElsewhere: ask,
    },
  );
  expect(io.out() + io.err()).not.toContain(KEY);
  return { dir, dead, code, err: io.err(), calls, asks, ended, configPath };
}

describe('init: its places under /etc on a mount that does not answer (doctor28)', () => {
  it('the config directory: exit 78 naming config.json and the mount, nothing written, no call of its own there', async () => {
    const result = await initWith('etc');
    expect(result.err).toBe(
      `config-agent init: ${result.configPath}: ETIMEDOUT: the mount at ${result.dead} did not answer within 0.1 s ` +
        '(a dead NFS server, a wedged FUSE daemon?): its files wait until it answers; init stops here: nothing ' +
        'written. Run config-agent init again once the mount answers\n',
    );
    expect(result.code).toBe(ExitCode.Config);
    expect(existsSync(path.join(result.dir, 'srv'))).toBe(false);
    expect([...result.asks.values()]).toEqual([1]);
    expect(result.ended()).toBe(1);
    expect(result.calls.size).toBe(0);
  }, 20_000);

  it("the unit's drop-in directory: exit 78 naming the drop-in, the configuration and the key written", async () => {
    const result = await initWith('dropin', 'srv/configs');
    const dropIn = path.join(result.dead, '50-root-dir.conf');
    expect(result.err).toContain(
      `config-agent init: ${dropIn}: ETIMEDOUT: the mount at ${result.dead} did not answer within 0.1 s`,
    );
    expect(result.err).toContain(
      `${dropIn} is not as it should be. Run config-agent init again once the mount answers`,
    );
    expect(result.code).toBe(ExitCode.Config);
    expect(JSON.parse(readFileSync(result.configPath, 'utf8')).deviceId).toBe('dvc_etc');
    expect(readFileSync(path.join(result.dir, 'etc/config-agent/api-key'), 'utf8')).toBe(`${KEY}\n`);
    expect([...result.asks.values()]).toEqual([1]);
    expect(result.calls.size).toBe(0);
  }, 20_000);
});
