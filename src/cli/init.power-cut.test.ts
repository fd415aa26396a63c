// config-agent init under the power-cut model: what it made and wrote survives a cut right after it said so.
import path from 'node:path';
import { Readable } from 'node:stream';
import { Volume } from 'memfs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { memfsPort } from '../../test/helpers/memfs.js';
import { PowerCutFs } from '../../test/helpers/power-cut-fs.js';
import { textSink } from '../../test/helpers/text-sink.js';
import type { FsPort } from '../lib/fs-port.js';
import { type RunningMockServer, startMockServer } from '../mock-server/server.js';
import { type InitEnvironment, type InitFs, runInit } from './init.js';

const KEY = 'sk_test_init_power_cut_0123456789';
const DEVICE = 'dvc_init_cut';
const UID = 4241;
const GID = 4242;

let server: RunningMockServer;
beforeAll(async () => {
  server = await startMockServer({
    port: 0,
    apiKeys: [KEY],
    fixtures: { devices: [{ id: DEVICE, name: 'robot' }] },
  });
});
afterAll(async () => {
  await server.close();
});

const capture = textSink;

/** A fresh system in memfs: /etc with the account, a key file to read, and nothing of config-agent yet. */
async function system() {
  const vol = Volume.fromJSON({
    '/etc/passwd': `root:x:0:0::/root:/bin/sh\nconfig-agent:x:${UID}:${GID}::/var/lib/config-agent:/usr/sbin/nologin\n`,
    '/etc/group': `root:x:0:\nconfig-agent:x:${GID}:\n`,
    '/root/key': `${KEY}\n`,
  });
  for (const dir of ['/', '/etc', '/root']) vol.chmodSync(dir, 0o755);
  const model = await PowerCutFs.over(memfsPort(vol), '/');
  return { vol, model };
}

async function init(fs: FsPort, rootDir = '/data/configs') {
  const stdout = capture();
  const stderr = capture();
  const env: InitEnvironment = {
    stdin: Readable.from(['']),
    stdinIsTty: false,
    groupFile: '/etc/group',
    passwdFile: '/etc/passwd',
    dropInDir: '/etc/systemd/system/config-agent.service.d',
    checkTimeoutMs: 5_000,
    uid: 0,
    fs: posixChown(fs) as InitFs,
  };
  const code = await runInit(
    {
      configPath: '/etc/config-agent/config.json',
      deviceId: DEVICE,
      baseUrl: server.url,
      rootDir,
      apiKeyFile: '/root/key',
    },
    { stdout: stdout.stream, stderr: stderr.stream, env: {}, isTty: false },
    env,
  );
  return { code, stdout: stdout.text(), stderr: stderr.text() };
}

/**
 * `fs` with chown's -1 (keep the owner) as POSIX has it: memfs stores -1 as the owner, after which the model's
 * read of a 0600 file (the key) is refused.
 */
function posixChown(fs: FsPort): FsPort {
  return {
    ...fs,
    open: (async (...args: Parameters<FsPort['open']>) => {
      const handle = await fs.open(...args);
      return new Proxy(handle, {
        get(inner, property) {
          const value = Reflect.get(inner, property) as unknown;
          if (property === 'chown') {
            return async (uid: number, gid: number) =>
              inner.chown(
                uid === -1 ? (await inner.stat()).uid : uid,
                gid === -1 ? (await inner.stat()).gid : gid,
              );
          }
          return typeof value === 'function' ? (value as () => unknown).bind(inner) : value;
        },
      });
    }) as FsPort['open'],
  };
}

/** `fs` whose mkdir filters the mode by a umask of 022, as Linux's does for init run from a root shell (memfs's does not). */
function umask022(fs: FsPort): FsPort {
  return {
    ...fs,
    mkdir: (async (dir: string, options?: { mode?: number; recursive?: boolean }) =>
      fs.mkdir(dir, { ...options, mode: (options?.mode ?? 0o777) & ~0o022 })) as FsPort['mkdir'],
  };
}

/** `fs` whose fsync of directory `failing` fails (EIO), dropping its unsynced entries as Linux may. */
function failingDirectorySync(model: PowerCutFs, failing: string): FsPort {
  return {
    ...model.fs,
    open: (async (...args: Parameters<FsPort['open']>) => {
      const handle = await model.fs.open(...args);
      if (path.resolve(String(args[0])) !== failing) return handle;
      return new Proxy(handle, {
        get(inner, property) {
          const value = Reflect.get(inner, property) as unknown;
          if (property === 'sync') {
            return async () => {
              await model.dropUnsynced(failing);
              throw Object.assign(new Error('EIO: i/o error, fsync'), { code: 'EIO' });
            };
          }
          return typeof value === 'function' ? (value as () => unknown).bind(inner) : value;
        },
      });
    }) as FsPort['open'],
  };
}

describe('config-agent init and a power cut', () => {
  it('the directories it made survive a cut after it printed success, with the config, key and drop-in in them', async () => {
    const { vol, model } = await system();
    const result = await init(model.fs);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(result.stdout).toContain(`check: device ${DEVICE} ("robot") found`);
    // Modes and owners as before: the last directory made chowned and chmodded, its parents by mkdir's mode.
    const mode = (dir: string) => ((vol.statSync(dir).mode as number) & 0o7777).toString(8);
    expect([mode('/etc/config-agent'), vol.statSync('/etc/config-agent').gid]).toEqual(['750', GID]);
    expect([mode('/data/configs'), vol.statSync('/data/configs').uid]).toEqual(['755', UID]);

    const after = model.afterPowerCut();
    // Before: /etc/config-agent, /data, /etc/systemd... were never fsynced into their parents, and a cut took
    // them with config.json and the key that init had published durably inside.
    expect(after['etc/config-agent']).toBe('dir');
    expect(after['etc/config-agent/api-key']).toBe(`600 ${KEY}\n`);
    expect(JSON.parse((after['etc/config-agent/config.json'] ?? '').replace(/^640 /, ''))).toEqual({
      deviceId: DEVICE,
      server: { baseUrl: server.url, apiKeyFile: '/etc/config-agent/api-key' },
      rootDir: '/data/configs',
      stateDir: '/var/lib/config-agent',
    });
    expect(after['data/configs']).toBe('dir');
    expect(after['etc/systemd/system/config-agent.service.d/50-root-dir.conf']).toContain(
      'ReadWritePaths=/data/configs\n',
    );
  });

  it('the directories it made keep the owner and mode it gave them after a cut', async () => {
    const { vol, model } = await system();
    expect((await init(model.fs)).code).toBe(0);
    const metadata = model.metadataAfterPowerCut();
    // Before: rootDir's chown and chmod were never fsynced, so a cut gave it back as mkdir made it (root's, as
    // init runs), and the service user could not write it.
    expect(metadata['data/configs']).toBe(`755 ${UID}:${GID}`);
    expect(metadata['etc/config-agent']).toBe(`750 0:${GID}`);
    expect(metadata['etc/config-agent/config.json']).toBe(`640 0:${GID}`);
    expect(metadata['etc/config-agent/api-key']).toBe('600 0:0');
    expect(metadata['etc/systemd/system/config-agent.service.d/50-root-dir.conf']).toBe('644 0:0');
    // The same as the running system sees, for each of them.
    for (const [relative, shown] of Object.entries(metadata)) {
      if (relative === '' || !/^(data|etc\/config-agent|etc\/systemd)/.test(relative)) continue;
      const stats = vol.statSync(`/${relative}`);
      expect([relative, shown]).toEqual([
        relative,
        `${((stats.mode as number) & 0o7777).toString(8)} ${stats.uid}:${stats.gid}`,
      ]);
    }
  });

  it('a rootDir whose files.dirMode the umask narrows at mkdir comes back with files.dirMode after a cut', async () => {
    const { vol } = await system();
    vol.mkdirSync('/etc/config-agent', { mode: 0o750 });
    vol.writeFileSync('/etc/config-agent/config.json', JSON.stringify({ files: { dirMode: '0775' } }), {
      mode: 0o640,
    });
    const model = await PowerCutFs.over(umask022(memfsPort(vol)), '/');
    const result = await init(model.fs);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(((vol.statSync('/data/configs').mode as number) & 0o7777).toString(8)).toBe('775');
    // Before: the chmod to 0775 was never fsynced, and the group (the service's) could not write it after a cut.
    expect(model.metadataAfterPowerCut()['data/configs']).toBe(`775 ${UID}:${GID}`);
  });

  it('a failed fsync of rootDir after its chown is refused (exit 78), rootDir removed, and the next init makes it', async () => {
    const { vol, model } = await system();
    const result = await init(failingDirectorySync(model, '/data/configs'));
    expect(result.code).toBe(78);
    expect(result.stderr).toBe(
      'config-agent init: cannot make the owner and mode of /data/configs durable: its fsync failed (EIO), so a ' +
        'power cut could give it back as mkdir made it (owned by root); it was removed; init stops here. Check the ' +
        'disk (dmesg) and run config-agent init again\n',
    );
    // Still empty, it went again, and its removal is fsynced into /data: before, a cut brought it back root's.
    expect(vol.existsSync('/data/configs')).toBe(false);
    expect(model.afterPowerCut()['data/configs']).toBeUndefined();

    expect((await init(model.fs)).code).toBe(0);
    expect(model.metadataAfterPowerCut()['data/configs']).toBe(`755 ${UID}:${GID}`);
  });

  it("a rootDir a cut gave back as mkdir made it (empty, root's) gets its owner and mode from the next init", async () => {
    const { vol } = await system();
    // As a cut before its chown's fsync leaves it (or one init could not remove): root's, mkdir's mode.
    vol.mkdirSync('/data/configs', { recursive: true, mode: 0o755 });
    vol.chownSync('/data/configs', 0, 0);
    const model = await PowerCutFs.over(memfsPort(vol), '/');
    const result = await init(model.fs);
    expect(result.code).toBe(0);
    expect(result.stdout).toContain('settled /data/configs (0755 config-agent)');
    // Before: kept as found, and the service could never write rootDir.
    expect(model.metadataAfterPowerCut()['data/configs']).toBe(`755 ${UID}:${GID}`);
  });

  it('a rootDir an operator made is kept as found: files in it, another owner, a mode init would not make, a symlink', async () => {
    const { vol, model } = await system();
    const made = (dir: string, mode: number, uid: number) => {
      vol.mkdirSync(dir, { recursive: true, mode });
      vol.chmodSync(dir, mode);
      vol.chownSync(dir, uid, 0);
    };
    made('/data/with-files', 0o755, 0);
    vol.writeFileSync('/data/with-files/keep.conf', 'the operator wrote this\n');
    made('/data/other-owner', 0o755, 1234);
    made('/data/wider', 0o775, 0);
    // A symlink to an empty root's directory: the operator's choice of where rootDir lives, never init's mkdir.
    made('/data/target', 0o755, 0);
    vol.symlinkSync('/data/target', '/data/linked');
    for (const [rootDir, mode, uid] of [
      ['/data/with-files', '755', 0],
      ['/data/other-owner', '755', 1234],
      ['/data/wider', '775', 0],
      ['/data/linked', '755', 0],
    ] as const) {
      const result = await init(model.fs, rootDir);
      expect(result.code).toBe(0);
      expect(result.stdout).not.toContain(`settled ${rootDir}`);
      const stats = vol.statSync(rootDir);
      expect([rootDir, ((stats.mode as number) & 0o7777).toString(8), stats.uid]).toEqual([
        rootDir,
        mode,
        uid,
      ]);
    }
    expect(vol.readFileSync('/data/with-files/keep.conf', 'utf8')).toBe('the operator wrote this\n');
  });

  it('the drop-in it removes (rootDir the default again) stays removed after a cut', async () => {
    const { model } = await system();
    expect((await init(model.fs)).code).toBe(0);
    const again = await init(model.fs, '/srv/config-agent');
    expect(again.code).toBe(0);
    expect(again.stdout).toContain('removed /etc/systemd/system/config-agent.service.d/50-root-dir.conf');

    // Before: its unlink was never fsynced, so a cut brought back ReadWritePaths=/data/configs.
    const after = model.afterPowerCut();
    expect(after['etc/systemd/system/config-agent.service.d']).toBe('dir');
    expect(after['etc/systemd/system/config-agent.service.d/50-root-dir.conf']).toBeUndefined();
    expect(after['srv/config-agent']).toBe('dir');
  });

  it('a symlink put at the drop-in is unlinked as before, and its removal survives a cut too', async () => {
    const { vol, model } = await system();
    expect((await init(model.fs)).code).toBe(0);
    const dropIn = '/etc/systemd/system/config-agent.service.d/50-root-dir.conf';
    vol.unlinkSync(dropIn);
    vol.symlinkSync('/etc/group', dropIn);
    expect((await init(model.fs, '/srv/config-agent')).code).toBe(0);
    expect(vol.existsSync(dropIn)).toBe(false);
    expect(vol.readFileSync('/etc/group', 'utf8')).toContain('config-agent');
    expect(model.afterPowerCut()[dropIn.slice(1)]).toBeUndefined();
  });

  it('a failed fsync of a new directory into its parent is refused (exit 78) before anything is written below it', async () => {
    const { vol, model } = await system();
    const result = await init(failingDirectorySync(model, '/etc'));
    expect(result.code).toBe(78);
    expect(result.stderr).toBe(
      'config-agent init: cannot make /etc/config-agent durable: fsync directory of its parent failed (EIO), so a ' +
        'power cut could take it and what is written below it; init stops here. Check the disk (dmesg) and run ' +
        'config-agent init again\n',
    );
    expect(result.stdout).toBe('');
    // The directory whose entry may not survive went again, empty: the next init makes it anew.
    expect(vol.existsSync('/etc/config-agent')).toBe(false);
    expect(model.afterPowerCut()['etc/config-agent']).toBeUndefined();

    const again = await init(model.fs);
    expect(again.code).toBe(0);
    expect(model.afterPowerCut()['etc/config-agent/api-key']).toBe(`600 ${KEY}\n`);
  });
});
