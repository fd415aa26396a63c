// Who else could swap a file by its path: every directory on the way to it, symlinks followed (sshd's StrictModes).
import path from 'node:path';
import type { FsPort } from '../lib/fs-port.js';

/** lstat and readlink of node:fs/promises (or memfs): enough to walk a path one entry at a time. */
export type PathChainFs = Pick<FsPort, 'lstat'> & {
  readlink(file: string): Promise<string | Buffer>;
};

/** Linux's own limit on symlinks followed in one lookup (ELOOP past it). */
const MAX_SYMLINKS = 40;

interface EntryStats {
  uid: number;
  gid: number;
  mode: number;
  isSymbolicLink(): boolean;
}

/**
 * Why a user other than root and `euid` could replace `file` (its entry, or any directory or symlink on the way
 * to it), or undefined when nobody else can. Walks the path as the kernel resolves it, lstat by lstat, and judges
 * each directory that holds the next entry: it must be owned by root or `euid`, and writable by nobody else
 * (group write is fine for root's group, as for the file itself) — unless its sticky bit protects the entry,
 * which then must itself be owned by root or `euid` (a 0700 `mktemp -d` directory under /tmp). Whatever cannot
 * be looked at (a missing entry, EACCES) is left to the open that follows, which fails the same way.
 * The file's own owner and mode are the caller's to judge (on the descriptor it reads).
 */
export async function whoElseCanSwap(
  fs: PathChainFs,
  file: string,
  euid: number | undefined,
): Promise<string | undefined> {
  if (euid === undefined) return undefined;
  const pending = components(path.resolve(file));
  let directory = '/';
  let directoryStats: EntryStats;
  try {
    directoryStats = await fs.lstat(directory);
  } catch {
    return undefined;
  }
  let symlinks = 0;
  while (pending.length > 0) {
    const name = pending.shift() as string;
    if (name === '..') {
      directory = path.dirname(directory);
      try {
        directoryStats = await fs.lstat(directory);
      } catch {
        return undefined;
      }
      continue;
    }
    const entry = path.join(directory, name);
    let entryStats: EntryStats;
    try {
      entryStats = await fs.lstat(entry);
    } catch {
      return undefined;
    }
    const problem = directoryProblem(directory, directoryStats, entry, entryStats, euid);
    if (problem !== undefined) return problem;
    if (entryStats.isSymbolicLink()) {
      symlinks += 1;
      if (symlinks > MAX_SYMLINKS) return undefined;
      let target: string;
      try {
        target = String(await fs.readlink(entry));
      } catch {
        return undefined;
      }
      if (path.isAbsolute(target)) {
        directory = '/';
        try {
          directoryStats = await fs.lstat(directory);
        } catch {
          return undefined;
        }
      }
      pending.unshift(...components(target));
      continue;
    }
    directory = entry;
    directoryStats = entryStats;
  }
  return undefined;
}

/**
 * Why a user other than root and `euid` could create (or replace) an entry in `directory`: the way to it as in
 * whoElseCanSwap, then the directory itself, owned by root or `euid` and writable by nobody else. Its sticky bit
 * does not help here: it protects entries from others, not names from being taken first.
 */
export async function whoElseCanCreateIn(
  fs: PathChainFs & Pick<FsPort, 'stat'>,
  directory: string,
  euid: number | undefined,
): Promise<string | undefined> {
  if (euid === undefined) return undefined;
  const swappable = await whoElseCanSwap(fs, directory, euid);
  if (swappable !== undefined) return swappable;
  let stats: EntryStats;
  try {
    stats = await fs.stat(directory);
  } catch {
    return undefined;
  }
  const mode = (stats.mode & 0o7777).toString(8).padStart(4, '0');
  if (stats.uid !== 0 && stats.uid !== euid) {
    return `the directory ${directory} is owned by uid ${stats.uid}, neither root nor the agent's user (uid ${euid}): that user could put a file there`;
  }
  if ((stats.mode & 0o002) !== 0)
    return `the directory ${directory} is writable by others (mode ${mode}): any local user could put a file there`;
  if ((stats.mode & 0o020) !== 0 && stats.gid !== 0) {
    return `the directory ${directory} is writable by its group (gid ${stats.gid}, mode ${mode}): every member could put a file there`;
  }
  return undefined;
}

function components(file: string): string[] {
  return file.split('/').filter((name) => name !== '' && name !== '.');
}

function directoryProblem(
  directory: string,
  stats: EntryStats,
  entry: string,
  entryStats: EntryStats,
  euid: number,
): string | undefined {
  const trusted = (uid: number) => uid === 0 || uid === euid;
  const mode = (stats.mode & 0o7777).toString(8).padStart(4, '0');
  if (!trusted(stats.uid)) {
    return (
      `the directory ${directory} is owned by uid ${stats.uid}, neither root nor the agent's user (uid ${euid}): ` +
      `that user could replace ${entry}; keep the file in a directory only root can change (or chown root ${directory})`
    );
  }
  const othersWrite = (stats.mode & 0o002) !== 0;
  const groupWrite = (stats.mode & 0o020) !== 0 && stats.gid !== 0;
  if (!othersWrite && !groupWrite) return undefined;
  const sticky = (stats.mode & 0o1000) !== 0;
  if (sticky && trusted(entryStats.uid)) return undefined;
  const who = othersWrite ? 'any local user' : `every member of its group (gid ${stats.gid})`;
  if (sticky) {
    return (
      `${entry} is owned by uid ${entryStats.uid} in the shared directory ${directory} (mode ${mode}): ` +
      `that user could replace it; make root its owner`
    );
  }
  return (
    `the directory ${directory} is writable by ${othersWrite ? 'others' : 'its group'} (mode ${mode}): ${who} ` +
    `could replace ${entry}; remove that write permission (chmod ${othersWrite ? 'o-w' : 'g-w'} ${directory})`
  );
}
