// rootDir and stateDir in a temp dir, seen through the real fs but for the mount table and rootDir's st_dev, which the
// test sets: the world of RootMountWatch's unit tests (root-mount-*.test.ts).
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach } from 'vitest';
import { RootMountWatch } from '../../src/store/root-mount.js';

/** The root filesystem's line of /proc/self/mountinfo. */
export const ROOT_FS_MOUNT = '20 1 98:0 / / rw,relatime shared:1 - ext4 /dev/vda rw';
/** The unit's namespace: `real` (rootDir's real path) bound onto itself, on the root filesystem's device. */
export const selfBindMount = (real: string): string =>
  `31 20 98:0 ${real} ${real} rw,relatime shared:9 - ext4 /dev/vda rw`;

export interface MountTable {
  readonly dir: string;
  readonly root: string;
  readonly stateDir: string;
  /** What /proc/self/mountinfo holds (undefined, the default: the real one). Every other file is the real one. */
  mountinfo: string | undefined;
  /** Whether a disk is mounted at rootDir: its st_dev there one more than the real one. Default false. */
  mounted: boolean;
  /** The fs of the watch: node's, the two above stood in. */
  readonly fs: typeof nodeFs & { mountsBelow?: (of: string) => ReadonlySet<string> };
  /** A watch of rootDir over `fs`, recording in stateDir (read-only: never writing there). */
  watch(readOnly?: boolean): RootMountWatch;
}

/**
 * A fresh MountTable for each test of the file that calls it (temp dir named by `prefix`, root/ and state/ made,
 * removed after). `below`: the mount points FsPort.mountsBelow lists under rootDir while `mounted`; without it the
 * fs has no mountsBelow.
 */
export function mountTableEachTest(prefix: string, below?: ReadonlySet<string>): MountTable {
  let dir: string | undefined;
  const now = (): string => {
    if (dir === undefined) throw new TypeError('a mount table is there during a test only');
    return dir;
  };
  const table: MountTable = {
    get dir() {
      return now();
    },
    get root() {
      return path.join(now(), 'root');
    },
    get stateDir() {
      return path.join(now(), 'state');
    },
    mountinfo: undefined,
    mounted: false,
    fs: {
      ...nodeFs,
      readFile: (async (target: string, ...rest: never[]) =>
        target === '/proc/self/mountinfo' && table.mountinfo !== undefined
          ? table.mountinfo
          : nodeFs.readFile(target, ...rest)) as typeof nodeFs.readFile,
      stat: (async (target: string, options?: unknown) => {
        const stats = await nodeFs.stat(target, options as never);
        if (table.mounted && target === table.root) Object.assign(stats, { dev: Number(stats.dev) + 1 });
        return stats;
      }) as typeof nodeFs.stat,
      ...(below === undefined
        ? {}
        : { mountsBelow: (of: string) => (of === table.root && table.mounted ? below : new Set<string>()) }),
    },
    watch: (readOnly = false) =>
      new RootMountWatch(table.fs, table.root, { stateDir: table.stateDir, readOnly }),
  };
  beforeEach(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), prefix));
    table.mountinfo = undefined;
    table.mounted = false;
    await mkdir(table.root);
    await mkdir(table.stateDir);
  });
  afterEach(async () => {
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
    dir = undefined;
  });
  return table;
}
