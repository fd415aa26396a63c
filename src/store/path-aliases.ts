// Paths that name one file: a case-insensitive filesystem (exFAT, vfat, ext4 casefold) or a bind mount in the root.
import path from 'node:path';
import { errnoCode } from '../lib/errors.js';
import type { FsPort } from '../lib/fs-port.js';
import { DiskError } from './errors.js';
import { validateRelativePath } from './path-guard.js';

/**
 * A key under which every spelling a case-insensitive filesystem may take for one name agrees: case and
 * compatibility forms folded, trailing dots of each name dropped. Only a hint of which paths to compare on disk (`findPathAliases`): two paths with
 * one key are distinct files on a case-sensitive filesystem, and a filesystem that folds differently still
 * folds no two names of different keys together as far as exFAT's, vfat's and ext4's tables go.
 */
export function foldKey(relative: string): string {
  // The kernel's vfat and exfat drop a name's trailing dots ("app.json." is "app.json").
  const name = TRAILING_DOTS.test(relative) ? relative.replace(TRAILING_DOTS_ALL, '') : relative;
  // Printable ASCII (nearly every path): lower case is the whole fold.
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the range is the whole of ASCII on purpose
  if (/^[\x00-\x7f]*$/.test(name)) return name.toLowerCase();
  return name.normalize('NFKD').toUpperCase().toLowerCase().normalize('NFKD');
}

const TRAILING_DOTS = /\.(?:\/|$)/;
const TRAILING_DOTS_ALL = /\.+(?=\/|$)/g;

/** A file as observed: device, inode and number of names (`nlink`). */
export interface ObservedIdentity {
  dev: bigint | number;
  ino: bigint | number;
  nlink: bigint | number;
}

/**
 * Which of `paths` (relative, valid) name one file on disk as it is now: a map from each such path to a key its
 * aliases share (the first of them in sorted order); a path with no alias is not in the map.
 *
 * Two paths are one file when
 * - their observed identities are one device and inode and the file has one name only (`nlink` 1: a bind mount
 *   of a directory of the root elsewhere in the root, or a filesystem whose inode numbers are its entries'); with
 *   more names (hard links) each path is an entry of its own, which a publish replaces and an unlink removes
 *   without touching the other;
 * - or they differ only in case (`foldKey`), both are found by lstat, their directories are one directory, and
 *   that directory's listing does not hold both names. This is what tells a case-insensitive filesystem whose
 *   inode numbers are not stable per file: exfat-fuse numbers each name it was asked for, so `etc/App.json` and
 *   `etc/app.json` lstat with two inodes while naming one entry.
 *
 * Costs nothing on disk unless two paths share a fold key (then a few lstats and one readdir per directory).
 * Throws a DiskError (retryable) when such a directory cannot be listed, or such a path's lstat fails otherwise
 * than ENOENT (EMFILE, EIO, EACCES): nothing else tells one file from two, and either guess is wrong somewhere
 * (two files on ext4 taken for one lost a record and were reported `removed` while the file stayed; one file on
 * exFAT taken for two deletes the other instance's).
 */
export async function findPathAliases(
  fs: FsPort,
  rootDir: string,
  paths: Iterable<string>,
  identities: ReadonlyMap<string, ObservedIdentity> = new Map(),
): Promise<Map<string, string>> {
  const parent = new Map<string, string>();
  const find = (p: string): string => {
    let root = p;
    for (let up = parent.get(root); up !== undefined && up !== root; up = parent.get(root)) root = up;
    // Every path on the way points at the root now: a chain of k unions walked again at each find cost k².
    for (let at = p, up = parent.get(at); up !== undefined && up !== root; at = up, up = parent.get(at)) {
      parent.set(at, root);
    }
    return root;
  };
  const union = (a: string, b: string) => {
    const ra = find(a);
    const rb = find(b);
    if (ra === rb) return;
    if (ra < rb) parent.set(rb, ra);
    else parent.set(ra, rb);
  };

  // One string per fold key until a second path shares it: a pass of 10,000 paths allocates no array.
  const byFold = new Map<string, string | string[]>();
  const byIdentity = new Map<bigint, Map<bigint, string>>();
  /** The paths of groups of more than one, met: a hostile listing's thousands of spellings of one name were each
   * looked for in their group (`includes`), k² compares (20,000 spellings: 2.2 s of CPU a pass; adv23). */
  let grouped: Set<string> | undefined;
  for (const relative of paths) {
    const key = foldKey(relative);
    const group = byFold.get(key);
    if (group === undefined) byFold.set(key, relative);
    else if (group === relative) continue;
    else if (typeof group === 'string') {
      byFold.set(key, [group, relative]);
      grouped ??= new Set();
      grouped.add(group).add(relative);
    } else if (grouped?.has(relative)) continue;
    else {
      group.push(relative);
      grouped?.add(relative);
    }
    const identity = identities.get(relative);
    if (identity === undefined || Number(identity.nlink) !== 1) continue;
    const dev = BigInt(identity.dev);
    const ino = BigInt(identity.ino);
    let inodes = byIdentity.get(dev);
    if (inodes === undefined) {
      inodes = new Map();
      byIdentity.set(dev, inodes);
    }
    const first = inodes.get(ino);
    if (first === undefined) inodes.set(ino, relative);
    else if (first !== relative) union(first, relative);
  }

  // Each path of a shared fold key once (a hostile listing may hold thousands of spellings of one name).
  const entries = new EntryCheck(fs, path.resolve(rootDir));
  for (const group of byFold.values()) {
    if (typeof group === 'string') continue;
    const byEntry = new Map<string, string>();
    for (const relative of group) {
      const entry = await entries.canonical(relative);
      if (entry === undefined) continue;
      const first = byEntry.get(entry);
      if (first === undefined) byEntry.set(entry, relative);
      else union(first, relative);
    }
  }

  const aliases = new Map<string, string>();
  for (const p of parent.keys()) {
    const root = find(p);
    aliases.set(p, root);
    aliases.set(root, root);
  }
  return aliases;
}

/**
 * The directory entries paths name, read from the listings of their directories (see findPathAliases): a
 * listing of each directory once, folded once.
 */
export class EntryCheck {
  readonly #fs: FsPort;
  readonly #root: string;
  readonly #listings = new Map<string, Promise<Listing | undefined>>();
  /** Paths (their directories as listed) found missing by lstat since their directory was listed. */
  readonly #absent = new Set<string>();

  constructor(fs: FsPort, root: string) {
    this.#fs = fs;
    this.#root = root;
  }

  /** Whether two relative paths name one directory entry on disk now; throws a DiskError when a listing cannot be read. */
  async same(a: string, b: string): Promise<boolean> {
    if (a === b) return true;
    if (foldKey(a) !== foldKey(b)) return false;
    const entry = await this.canonical(a);
    return entry !== undefined && entry === (await this.canonical(b));
  }

  /**
   * The spelling of the entry `relative` names, as its directories list it: each name listed as given stays, a
   * name not listed that lstat finds anyway is the one listed name of its fold key (the filesystem folded it).
   * Undefined when the path is invalid or names nothing (or nothing a listing shows unambiguously).
   */
  async canonical(relative: string): Promise<string | undefined> {
    // Only paths under the root are looked at (a hostile one is refused by the plan anyway).
    if (!isValid(relative)) return undefined;
    let dir = '';
    for (const name of relative.split('/')) {
      const listing = await this.#list(dir);
      if (listing === undefined) return undefined;
      let entry = name;
      if (!listing.names.has(name)) {
        const folded = listing.byFold.get(foldKey(name));
        if (folded === undefined) return undefined;
        const here = joinRelative(dir, name);
        if (!(await this.#exists(here))) {
          this.#absent.add(here);
          return undefined;
        }
        if (folded.length !== 1) return undefined;
        entry = folded[0]!;
      }
      dir = joinRelative(dir, entry);
    }
    return dir;
  }

  /**
   * Before a write of `relative`: for each of its names the listings read so far do not hold but fold onto a
   * listed name, whether it exists (lstat), so that `written` knows whether the write made a new entry. Reads no
   * listing; costs nothing while none was read.
   */
  async beforeWrite(relative: string): Promise<void> {
    if (this.#listings.size === 0 || !isValid(relative)) return;
    let dir = '';
    for (const name of relative.split('/')) {
      const listing = await this.#cached(dir);
      if (listing === undefined || listing === null) return;
      const here = joinRelative(dir, name);
      if (listing.names.has(name)) {
        dir = here;
        continue;
      }
      const folded = listing.byFold.get(foldKey(name));
      if (folded === undefined) return;
      // Not known missing when lstat fails otherwise: `written` then reads the listings anew.
      if (!(await this.#exists(here).catch(() => true))) {
        this.#absent.add(here);
        return;
      }
      if (folded.length !== 1) return;
      dir = joinRelative(dir, folded[0]!);
    }
  }

  /**
   * A write of `relative` landed: the listings read so far take the names it created, so one listing per
   * directory serves a whole pass (a listing read anew per write made a hostile batch of thousands of spellings
   * of names in one directory quadratic). A name that folds onto a listed one and was not seen missing before the
   * write (it may have been written through that entry) forgets every listing: the next check reads them anew.
   */
  async written(relative: string): Promise<void> {
    if (this.#listings.size === 0 || !isValid(relative)) return;
    let dir = '';
    for (const name of relative.split('/')) {
      const listing = await this.#cached(dir);
      if (listing === undefined) return;
      // Listed as missing, and written into since.
      if (listing === null) {
        this.forget();
        return;
      }
      const here = joinRelative(dir, name);
      if (!listing.names.has(name)) {
        const folded = listing.byFold.get(foldKey(name));
        if (folded !== undefined && !this.#absent.has(here)) {
          this.forget();
          return;
        }
        this.#absent.delete(here);
        listing.names.add(name);
        if (folded === undefined) listing.byFold.set(foldKey(name), [name]);
        else folded.push(name);
      }
      dir = here;
    }
  }

  /** Drops every listing read (a removal or swap ran, which may remove entries and directories). */
  forget(): void {
    this.#listings.clear();
    this.#absent.clear();
  }

  /** The listing of `relativeDir` if one was read: null when it was missing, undefined when none is at hand. */
  async #cached(relativeDir: string): Promise<Listing | null | undefined> {
    const pending = this.#listings.get(relativeDir);
    if (pending === undefined) return undefined;
    const listing = await pending.catch(() => undefined);
    return listing === undefined ? (this.#listings.has(relativeDir) ? null : undefined) : listing;
  }

  /**
   * Whether lstat finds `relative`; a DiskError when it fails otherwise than ENOENT or ENOTDIR (EIO, EACCES): taken
   * for missing, a spelling of a listed entry would be no alias of it, as with a directory that cannot be listed.
   */
  async #exists(relative: string): Promise<boolean> {
    try {
      await this.#fs.lstat(path.join(this.#root, relative));
      return true;
    } catch (error) {
      if (errnoCode(error) === 'ENOENT' || errnoCode(error) === 'ENOTDIR') return false;
      throw new DiskError({
        operation: 'lstat (to tell two spellings of one name apart)',
        path: relative,
        cause: error,
      });
    }
  }

  #list(relativeDir: string): Promise<Listing | undefined> {
    let listing = this.#listings.get(relativeDir);
    if (listing === undefined) {
      listing = this.#fs.readdir(path.join(this.#root, relativeDir)).then(
        (entries) => {
          const names = new Set(entries.map(String));
          const byFold = new Map<string, string[]>();
          for (const name of names) {
            const key = foldKey(name);
            const same = byFold.get(key);
            if (same === undefined) byFold.set(key, [name]);
            else same.push(name);
          }
          return { names, byFold };
        },
        (error: unknown) => {
          if (errnoCode(error) === 'ENOENT' || errnoCode(error) === 'ENOTDIR') return undefined;
          throw new DiskError({
            operation: 'list (to tell two spellings of one name apart)',
            path: relativeDir,
            cause: error,
          });
        },
      );
      this.#listings.set(relativeDir, listing);
      // A listing that failed is read again by the next check (the failure may have passed).
      const failed = listing;
      failed.catch(() => {
        if (this.#listings.get(relativeDir) === failed) this.#listings.delete(relativeDir);
      });
    }
    return listing;
  }
}

/** A directory's names, and those names by fold key (with the names of the writes landed since, `written`). */
interface Listing {
  names: Set<string>;
  byFold: Map<string, string[]>;
}

function joinRelative(dir: string, name: string): string {
  return dir === '' ? name : `${dir}/${name}`;
}

function isValid(relative: string): boolean {
  try {
    validateRelativePath(relative);
    return true;
  } catch {
    return false;
  }
}
