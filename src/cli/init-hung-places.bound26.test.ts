// `config-agent init` with rootDir or stateDir on a mount that does not answer: it ends within the bound with a clear
// error naming the directory and the mount (exit 78), nothing written, never held for good. A port whose calls under
// the "dead" directory never answer stands in for the mount (init's own port and the one its checks go through).

import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { deadBelow } from '../../test/helpers/dead-below-fs.js';
import { initEnvironment, initUsers } from '../../test/helpers/init-scratch.js';
import { bufferedIo } from '../../test/helpers/local-socket.js';
import { ExitCode } from './exit-codes.js';
import { type InitFs, runInit } from './init.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** init (uid 0 as far as it knows: nothing is chowned before the directories are judged) with `place`'s dirs. */
async function initWith(place: (dir: string) => { rootDir: string; stateDir?: string; dead: string }) {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'config-agent-init-hung-'));
  dirs.push(dir);
  const { rootDir, stateDir, dead } = place(dir);
  mkdirSync(dead);
  const configPath = initUsers(dir, 4244);
  if (stateDir !== undefined) writeFileSync(configPath, JSON.stringify({ stateDir }), { mode: 0o640 });
  const { fs, calls, ask, asks, ended } = deadBelow([dead]);
  const io = bufferedIo({}, false);
  const code = await runInit(
    { configPath, deviceId: 'dvc_hung', baseUrl: 'http://127.0.0.1:9', rootDir, apiKeyFile: '-' },
    io,
    {
      ...initEnvironment(dir, 'sk-init-hung-test-key-0123'),
      fs: fs as InitFs,
      placesFs: fs,
      mountTable: { mountinfo: async () => `90 27 0:60 / ${dead} rw - fuse dead rw` },
      mountAnswerMs: 50,
      askElsewhere: ask,
    },
  );
  return {
    code,
    out: io.out(),
    err: io.err(),
    calls,
    asks,
    ended,
    configPath,
    keyPath: path.join(dir, 'etc/config-agent/api-key'),
    dead,
  };
}

describe('init: rootDir or stateDir on a mount that does not answer (bound26)', () => {
  it('ends naming rootDir and its mount, exit 78, nothing written, the mount asked once and never called', async () => {
    const result = await initWith((dir) => ({
      rootDir: path.join(dir, 'nfs/configs'),
      dead: path.join(dir, 'nfs'),
    }));
    expect(result.err).toContain(`rootDir ${path.join(result.dead, 'configs')}`);
    expect(result.err).toContain(`the mount at ${result.dead} did not answer`);
    expect(result.err).toContain('nothing written');
    expect(result.code).toBe(ExitCode.Config);
    expect(existsSync(result.configPath)).toBe(false);
    expect(existsSync(result.keyPath)).toBe(false);
    // The mount asked once from "another process", given up at the end; no call of init's own went into it
    // (doctor28: one that did held a pool thread, and the exit became SIGTERM's 143).
    expect([...result.asks.values()]).toEqual([1]);
    expect(result.ended()).toBe(1);
    expect([...result.calls.values()]).toEqual([]);
  }, 20_000);

  it('ends naming stateDir and its mount, exit 78, the existing config.json kept as it was', async () => {
    const result = await initWith((dir) => ({
      rootDir: path.join(dir, 'root'),
      stateDir: path.join(dir, 'nfs/state'),
      dead: path.join(dir, 'nfs'),
    }));
    expect(result.err).toContain(`stateDir ${path.join(result.dead, 'state')}`);
    expect(result.err).toContain(`the mount at ${result.dead} did not answer`);
    expect(result.code).toBe(ExitCode.Config);
    expect(readFileSync(result.configPath, 'utf8')).toBe(
      JSON.stringify({ stateDir: path.join(result.dead, 'state') }),
    );
    expect(existsSync(result.keyPath)).toBe(false);
    expect(existsSync(path.join(path.dirname(result.dead), 'root'))).toBe(false);
    // The mount asked once from "another process", given up at the end; no call of init's own went into it
    // (doctor28: one that did held a pool thread, and the exit became SIGTERM's 143).
    expect([...result.asks.values()]).toEqual([1]);
    expect(result.ended()).toBe(1);
    expect([...result.calls.values()]).toEqual([]);
  }, 20_000);
});
