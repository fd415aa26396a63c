// adv35: the config file or the API key file unreadable for a reason that may pass (a failing disk's EIO, no
// descriptors, no memory) exits 1, which systemd restarts, not 78, which it never restarts.
import { Volume } from 'memfs';
import { describe, expect, it } from 'vitest';
import { ExitCode, exitCodeForStartupError } from '../cli/exit-codes.js';
import { type ConfigFs, loadConfigFile, readKeyFile } from './load.js';

const CONFIG = '/etc/config-agent/config.json';
const KEY = '/etc/config-agent/api-key';
const TEXT = JSON.stringify({
  deviceId: 'dvc_1',
  server: { baseUrl: 'https://configs.example.com' },
  rootDir: '/srv/config-agent',
  stateDir: '/var/lib/config-agent',
});

function errno(code: string): NodeJS.ErrnoException {
  return Object.assign(new Error(`${code}: simulated`), { code });
}

/**
 * A memfs volume holding the config and the key, where `failing` fails with `code`: at its open (`at: 'open'`)
 * or at the read of its open handle (`at: 'read'`), as a failing disk or a process out of descriptors does.
 */
function volume(failing: string, code: string, at: 'open' | 'read'): ConfigFs {
  const vol = Volume.fromJSON({ [CONFIG]: TEXT, [KEY]: 'sk_live_0123456789abcdef' });
  for (const dir of ['/', '/etc', '/etc/config-agent']) vol.chmodSync(dir, 0o755);
  vol.chmodSync(CONFIG, 0o644);
  vol.chmodSync(KEY, 0o600);
  const fs = vol.promises as unknown as ConfigFs;
  const open = fs.open.bind(fs);
  return {
    ...fs,
    open: async (file: string, ...rest: unknown[]) => {
      if (file === failing && at === 'open') throw errno(code);
      const handle = await (open as (...args: unknown[]) => ReturnType<ConfigFs['open']>)(file, ...rest);
      if (file !== failing) return handle;
      return Object.assign(Object.create(handle) as typeof handle, {
        readFile: () => Promise.reject(errno(code)),
        stat: () => handle.stat(),
        close: () => handle.close(),
      });
    },
  } as ConfigFs;
}

async function configRefusal(fs: ConfigFs): Promise<unknown> {
  return loadConfigFile(fs, CONFIG).then(
    () => 'loaded',
    (error: unknown) => error,
  );
}

async function keyRefusal(fs: ConfigFs): Promise<unknown> {
  return readKeyFile(fs, KEY, { requirePrivate: false }).then(
    () => 'read',
    (error: unknown) => error,
  );
}

describe('a config file that cannot be read for now', () => {
  // Before: exit 78 for each, and the packaged unit never restarts on 78 (RestartPreventExitStatus=2 78).
  for (const code of ['EIO', 'ENFILE', 'EMFILE', 'ENOMEM']) {
    for (const at of ['open', 'read'] as const) {
      it(`${code} at its ${at} exits 1, naming the file and the errno`, async () => {
        const error = await configRefusal(volume(CONFIG, code, at));
        expect(String(error)).toContain(`config ${CONFIG}: cannot read the file: ${code}`);
        expect(exitCodeForStartupError(error)).toBe(ExitCode.NotConverged);
      });
    }
  }

  it('one the agent may not read, one that is not there, or a symlink loop still exits 78', async () => {
    for (const code of ['EACCES', 'ENOENT', 'ELOOP', 'EISDIR']) {
      const error = await configRefusal(volume(CONFIG, code, 'open'));
      expect(String(error)).toContain(`config ${CONFIG}: cannot read the file:`);
      expect(exitCodeForStartupError(error)).toBe(ExitCode.Config);
    }
  });

  it('one it reads whole still exits 78 for what it holds', async () => {
    const error = await configRefusal(volume('/nowhere', 'EIO', 'open'));
    expect(error).toBe('loaded');
    const vol = Volume.fromJSON({ [CONFIG]: '{"deviceId": ' });
    for (const dir of ['/', '/etc', '/etc/config-agent']) vol.chmodSync(dir, 0o755);
    vol.chmodSync(CONFIG, 0o644);
    const broken = await configRefusal(vol.promises as unknown as ConfigFs);
    expect(exitCodeForStartupError(broken)).toBe(ExitCode.Config);
  });
});

describe('an API key file that cannot be read for now', () => {
  for (const code of ['EIO', 'ENFILE', 'EMFILE', 'ENOMEM']) {
    for (const at of ['open', 'read'] as const) {
      it(`${code} at its ${at} exits 1`, async () => {
        const error = await keyRefusal(volume(KEY, code, at));
        expect(String(error)).toContain(KEY);
        expect(String(error)).toContain(code);
        expect(exitCodeForStartupError(error)).toBe(ExitCode.NotConverged);
      });
    }
  }

  it('one the agent may not read still exits 78', async () => {
    const error = await keyRefusal(volume(KEY, 'EACCES', 'open'));
    expect(String(error)).toContain('permission denied');
    expect(exitCodeForStartupError(error)).toBe(ExitCode.Config);
  });
});
