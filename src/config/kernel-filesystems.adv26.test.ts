// adv26: rootDir or stateDir on a kernel filesystem (proc, sysfs, cgroup, devtmpfs, ...) is refused at start and reload.
import { existsSync } from 'node:fs';
import { mkdtemp, realpath, rm, symlink } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { exitCodeForStartupError } from '../cli/exit-codes.js';
import { ConfigError } from './errors.js';
import { parseAgentConfig } from './load.js';
import {
  assertOwnPathsOutsideRoot,
  nodeOwnPathsPort,
  type OwnPathsPort,
  parseMountinfo,
} from './own-paths.js';

const cfg = (rootDir: string, stateDir: string) =>
  parseAgentConfig(
    { deviceId: 'd', server: { baseUrl: 'https://x.example.com' }, rootDir, stateDir },
    'test',
  );

async function refusal(
  rootDir: string,
  stateDir: string,
  port?: OwnPathsPort,
): Promise<ConfigError | undefined> {
  try {
    await assertOwnPathsOutsideRoot(cfg(rootDir, stateDir), '/etc/agent/config.json', [], port);
    return undefined;
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
}

describe('rootDir and stateDir on a kernel filesystem, judged from mountinfo (no mount needed)', () => {
  const MOUNTINFO = [
    '22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw',
    '23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw',
    '24 22 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:2 - sysfs sysfs rw',
    '25 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw',
    '26 22 0:5 / /dev rw,nosuid shared:8 - devtmpfs udev rw,size=4000k',
    '27 26 0:27 / /dev/shm rw,nosuid,nodev shared:9 - tmpfs tmpfs rw',
    '28 22 0:40 / /run rw - tmpfs tmpfs rw',
    '29 24 0:7 / /sys/kernel/debug rw - debugfs debugfs rw',
  ].join('\n');
  const port: OwnPathsPort = {
    ...nodeOwnPathsPort,
    // Every path exists as written, nothing is a symlink: the mount table alone decides.
    realpath: async (file) => file,
    readlink: async () => {
      throw Object.assign(new Error('EINVAL'), { code: 'EINVAL' });
    },
    stat: async () => {
      throw Object.assign(new Error('ENOENT'), { code: 'ENOENT' });
    },
    mountinfo: async () => MOUNTINFO,
  };

  it('parses the filesystem type of each mount', () => {
    expect(parseMountinfo(MOUNTINFO).map((mount) => mount.type)).toEqual([
      'ext4',
      'proc',
      'sysfs',
      'cgroup2',
      'devtmpfs',
      'tmpfs',
      'tmpfs',
      'debugfs',
    ]);
  });

  it('refuses a rootDir on proc, sysfs, cgroup2, devtmpfs or debugfs, naming the key and the filesystem', async () => {
    for (const [rootDir, type] of [
      ['/proc', 'proc'],
      ['/proc/sys/kernel', 'proc'],
      ['/sys/kernel/mm', 'sysfs'],
      ['/sys/fs/cgroup/configs', 'cgroup2'],
      ['/dev/configs', 'devtmpfs'],
      ['/sys/kernel/debug/x', 'debugfs'],
    ] as const) {
      const error = await refusal(rootDir, '/var/lib/agent', port);
      expect(error, rootDir).toBeInstanceOf(ConfigError);
      expect(error?.issues.map((issue) => issue.path)).toEqual(['rootDir']);
      expect(error?.message).toContain(`${rootDir} is on ${type}, a kernel filesystem`);
      expect(exitCodeForStartupError(error)).toBe(78);
    }
  });

  it('refuses a stateDir on one too', async () => {
    const error = await refusal('/srv/configs', '/sys/fs/cgroup/agent', port);
    expect(error?.issues.map((issue) => issue.path)).toEqual(['stateDir']);
    expect(error?.message).toContain('/sys/fs/cgroup/agent is on cgroup2, a kernel filesystem');
  });

  it('accepts directories on a disk or a tmpfs', async () => {
    expect(await refusal('/srv/configs', '/var/lib/agent', port)).toBeUndefined();
    expect(await refusal('/run/configs', '/var/lib/agent', port)).toBeUndefined();
    expect(await refusal('/srv/proc', '/var/lib/sys', port)).toBeUndefined();
  });
});

describe('on this machine', () => {
  let dir: string;
  beforeEach(async () => {
    dir = await realpath(await mkdtemp(path.join(os.tmpdir(), 'config-agent-kfs-')));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it.skipIf(!existsSync('/proc/self'))(
    'refuses rootDir /proc, and a rootDir that is a symlink into /sys',
    async () => {
      const error = await refusal('/proc', path.join(dir, 'state'));
      expect(error?.message).toContain('/proc is on proc, a kernel filesystem');
      await symlink('/sys/kernel', path.join(dir, 'root'));
      const through = await refusal(path.join(dir, 'root'), path.join(dir, 'state'));
      expect(through?.message).toContain(`${path.join(dir, 'root')} (really /sys/kernel) is on sysfs`);
      expect(await refusal(path.join(dir, 'plain'), path.join(dir, 'state'))).toBeUndefined();
    },
  );
});
