// FsPorts over the real fs as exFAT-like roots show it: two paths naming one file (case, a bind mount), no modes.
import { lstatSync, readdirSync } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import path from 'node:path';
import type { FsPort } from '../../src/lib/fs-port.js';

type PathArg = Parameters<typeof nodeFs.lstat>[0];

/** A port whose every path argument goes through `map` first (file handles are the real fs's). */
function mappedPort(map: (absolute: string) => string): FsPort {
  const m = (p: PathArg): string => map(String(p));
  return {
    open: ((p: PathArg, ...rest: unknown[]) =>
      (nodeFs.open as (...args: unknown[]) => unknown)(m(p), ...rest)) as FsPort['open'],
    rename: (from, to) => nodeFs.rename(m(from), m(to)),
    unlink: (p) => nodeFs.unlink(m(p)),
    link: (from, to) => nodeFs.link(m(from), m(to)),
    lstat: ((p: PathArg, options?: unknown) =>
      (nodeFs.lstat as (...args: unknown[]) => unknown)(m(p), options)) as FsPort['lstat'],
    stat: ((p: PathArg, options?: unknown) =>
      (nodeFs.stat as (...args: unknown[]) => unknown)(m(p), options)) as FsPort['stat'],
    mkdir: ((p: PathArg, options?: unknown) =>
      (nodeFs.mkdir as (...args: unknown[]) => unknown)(m(p), options)) as FsPort['mkdir'],
    readdir: ((p: PathArg, options?: unknown) =>
      (nodeFs.readdir as (...args: unknown[]) => unknown)(m(p), options)) as FsPort['readdir'],
    readFile: ((p: PathArg, options?: unknown) =>
      (nodeFs.readFile as (...args: unknown[]) => unknown)(m(p as PathArg), options)) as FsPort['readFile'],
    rmdir: (p, options) => nodeFs.rmdir(m(p), options),
    chmod: (p, mode) => nodeFs.chmod(m(p), mode),
    lstatSync: (p, options) => lstatSync(map(p), options),
    statfs: (p) => nodeFs.statfs(m(p)),
    access: (p, mode) => nodeFs.access(m(p), mode),
  };
}

/**
 * `root` as a case-insensitive directory tree (exFAT, vfat): each name below it finds an entry of any case (and
 * with its trailing dots dropped), and a rename onto a name of another case replaces that entry. Inode numbers are the real ones (as the kernel's exfat
 * gives them; exfat-fuse numbers names instead: test/integration/exfat-aliases.test.ts).
 */
export function caseInsensitiveFs(root: string): FsPort {
  return mappedPort((absolute) => {
    if (!absolute.startsWith(`${root}${path.sep}`)) return absolute;
    let current = root;
    for (const segment of absolute.slice(root.length + 1).split('/')) {
      let names: string[] = [];
      try {
        names = readdirSync(current);
      } catch {
        // Not a directory (yet): the rest of the path is taken as given.
      }
      // As the kernel's vfat and exfat, a name's trailing dots are dropped.
      const given = segment.replace(/\.+$/, '') || segment;
      const folded = given.toLowerCase();
      current = path.join(current, names.find((name) => name.toLowerCase() === folded) ?? given);
    }
    return current;
  });
}

/** `mountpoint` as a bind mount of `source` (both absolute): every path below the one reaches the other. */
export function bindMountFs(source: string, mountpoint: string): FsPort {
  return mappedPort((absolute) =>
    absolute === mountpoint || absolute.startsWith(`${mountpoint}${path.sep}`)
      ? source + absolute.slice(mountpoint.length)
      : absolute,
  );
}

/**
 * `base` with a root that keeps no permission bits (exFAT, vfat): every chmod under `root`, by path or on an open
 * file, succeeds and changes nothing. Files keep the mode they were created with.
 */
export function modelessFs(base: FsPort, root: string): FsPort {
  const under = (p: unknown) => String(p).startsWith(`${root}${path.sep}`);
  return {
    ...base,
    chmod: async (p, mode) => (under(p) ? undefined : base.chmod(p, mode)),
    open: (async (p: PathArg, ...rest: unknown[]) => {
      const handle = await (base.open as (...args: unknown[]) => Promise<nodeFs.FileHandle>)(p, ...rest);
      if (!under(p)) return handle;
      return new Proxy(handle, {
        get(target, key) {
          if (key === 'chmod') return async () => undefined;
          const value = Reflect.get(target, key, target) as unknown;
          return typeof value === 'function' ? value.bind(target) : value;
        },
      });
    }) as FsPort['open'],
  };
}
