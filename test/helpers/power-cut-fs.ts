// A FsPort that remembers what was made durable, to show what a power cut would leave on disk.
import { constants } from 'node:fs';
import path from 'node:path';
import type { FileHandle, FsPort } from '../../src/lib/fs-port.js';

interface DurableEntry {
  name: string;
  ino: number;
  kind: 'file' | 'dir' | 'symlink';
}

/** An inode's permission bits and owner: metadata a chmod/chown changes and only an fsync of the inode writes. */
interface InodeMetadata {
  mode: number;
  uid: number;
  gid: number;
}

function metadataOf(stats: { mode: number; uid: number; gid: number }): InodeMetadata {
  return { mode: stats.mode & 0o7777, uid: stats.uid, gid: stats.gid };
}

/**
 * Wraps a FsPort (memfs: its inode numbers are never reused) under `top` with the strict POSIX model of a power
 * cut: a file's bytes and mode survive as of its last fsync through a handle, a directory's entries (names →
 * inodes) as of its last fsync, a directory known by its inode (one removed and made again at its path is
 * another, with nothing durable in it yet); what existed when the model was made counts as durable. A file whose bytes were
 * never fsynced comes back empty; a directory whose entries were never fsynced comes back empty. An inode's mode
 * and owner (metadataAfterPowerCut) survive as of its last fsync, else as it was made (mkdir's mode, the maker's
 * owner): a chmod or chown nobody fsynced is lost. Real filesystems often keep more; nothing may rely on that.
 */
export class PowerCutFs {
  readonly fs: FsPort;
  readonly #base: FsPort;
  readonly #top: string;
  /** A directory's durable entries by its inode: a directory removed and made again at its path is another one. */
  readonly #entries = new Map<number, DurableEntry[]>();
  #topIno = -1;
  readonly #files = new Map<number, { data: Buffer; mode: number }>();
  /** An inode's mode and owner as of its last fsync (or as the model found it). */
  readonly #metadata = new Map<number, InodeMetadata>();
  /** An inode's mode and owner as made (mkdir, open with O_CREAT): what a cut leaves when it was never fsynced. */
  readonly #made = new Map<number, InodeMetadata>();
  /** Directory → names whose change a failed fsync dropped (see dropUnsynced), until changed again. */
  readonly #dropped = new Map<string, Set<string>>();

  private constructor(base: FsPort, top: string) {
    this.#base = base;
    this.#top = path.resolve(top);
    const open = (async (file: string, flags: number, mode?: number) => {
      const handle = await base.open(file, flags, mode);
      if ((flags & constants.O_CREAT) !== 0) {
        const stats = await handle.stat();
        if (!this.#made.has(stats.ino)) this.#made.set(stats.ino, metadataOf(stats));
      }
      return this.#watch(handle, path.resolve(String(file)), (flags & constants.O_DIRECTORY) !== 0);
    }) as FsPort['open'];
    const mkdir = (async (...args: Parameters<FsPort['mkdir']>) => {
      const made = await touching('mkdir', 0)(...args);
      // Every component mkdir -p made, as it was made (before any chmod or chown after it).
      for (let dir = path.resolve(String(args[0])); ; dir = path.dirname(dir)) {
        // A path the base cannot lstat (a /proc/self/fd name memfs lacks) is not known to the model: left out.
        const stats = await base.lstat(dir).catch(() => undefined);
        if (stats === undefined || this.#made.has(stats.ino) || this.#metadata.has(stats.ino)) break;
        this.#made.set(stats.ino, metadataOf(stats));
        if (path.dirname(dir) === dir) break;
      }
      return made;
    }) as FsPort['mkdir'];
    // A name changed (created, replaced, removed) is dirty again: a later fsync of its directory writes it.
    const touching =
      <K extends 'rename' | 'mkdir' | 'rmdir' | 'unlink'>(name: K, ...which: number[]) =>
      async (...args: Parameters<FsPort[K]>) => {
        const result = await (base[name] as (...a: Parameters<FsPort[K]>) => Promise<unknown>)(...args);
        for (const index of which) {
          const absolute = path.resolve(String(args[index]));
          this.#dropped.get(path.dirname(absolute))?.delete(path.basename(absolute));
        }
        return result;
      };
    this.fs = {
      ...base,
      open,
      rename: touching('rename', 0, 1) as FsPort['rename'],
      mkdir,
      rmdir: touching('rmdir', 0) as FsPort['rmdir'],
      unlink: touching('unlink', 0) as FsPort['unlink'],
    };
  }

  /**
   * A failed fsync of `directory` (absolute), as Linux may answer one: the changes of its entries since its last
   * good fsync are dropped for good (their dirty state cleared), so a later good fsync does not write them; only
   * a name changed again after this is written by the next one.
   */
  async dropUnsynced(directory: string): Promise<void> {
    const absolute = path.resolve(directory);
    const own = (await this.#base.lstat(absolute)).ino;
    const durable = new Map((this.#entries.get(own) ?? []).map((entry) => [entry.name, entry.ino]));
    const now = new Map<string, number>();
    for (const name of await this.#base.readdir(absolute)) {
      now.set(String(name), (await this.#base.lstat(path.join(absolute, String(name)))).ino);
    }
    const dropped = this.#dropped.get(absolute) ?? new Set<string>();
    for (const name of new Set([...durable.keys(), ...now.keys()])) {
      if (durable.get(name) !== now.get(name)) dropped.add(name);
    }
    this.#dropped.set(absolute, dropped);
  }

  /** The model over `base`, with everything under `top` as it is now taken as durable. */
  static async over(base: FsPort, top: string): Promise<PowerCutFs> {
    const model = new PowerCutFs(base, top);
    model.#topIno = (await base.lstat(model.#top)).ino;
    await model.#recordTree(model.#top);
    return model;
  }

  /**
   * What a power cut now would leave under `top`: path relative to `top` → `dir`, `symlink`, or
   * `<mode in octal> <content>` (the same shape as the tests' snapshots).
   */
  afterPowerCut(): Record<string, string> {
    const out: Record<string, string> = {};
    const walk = (dir: string, ino: number): void => {
      for (const entry of this.#entries.get(ino) ?? []) {
        const absolute = path.join(dir, entry.name);
        const relative = path.relative(this.#top, absolute);
        if (entry.kind === 'dir') {
          out[relative] = 'dir';
          walk(absolute, entry.ino);
        } else if (entry.kind === 'symlink') {
          out[relative] = 'symlink';
        } else {
          const file = this.#files.get(entry.ino);
          out[relative] =
            file === undefined
              ? '(never fsynced, empty)'
              : `${file.mode.toString(8)} ${file.data.toString('utf8')}`;
        }
      }
    };
    walk(this.#top, this.#topIno);
    return out;
  }

  /**
   * The mode and owner each entry a power cut now would leave under `top` comes back with: path relative to
   * `top` → `<mode in octal> <uid>:<gid>` (the paths of afterPowerCut, and '' for `top` itself).
   */
  metadataAfterPowerCut(): Record<string, string> {
    const out: Record<string, string> = {};
    const show = (relative: string, ino: number): void => {
      const metadata = this.#metadata.get(ino) ?? this.#made.get(ino);
      out[relative] =
        metadata === undefined ? '(unknown)' : `${metadata.mode.toString(8)} ${metadata.uid}:${metadata.gid}`;
    };
    const walk = (dir: string, ino: number): void => {
      for (const entry of this.#entries.get(ino) ?? []) {
        if (entry.kind === 'symlink') continue;
        const absolute = path.join(dir, entry.name);
        show(path.relative(this.#top, absolute), entry.ino);
        if (entry.kind === 'dir') walk(absolute, entry.ino);
      }
    };
    show('', this.#topIno);
    walk(this.#top, this.#topIno);
    return out;
  }

  #watch(handle: FileHandle, absolute: string, isDirectory: boolean): FileHandle {
    return new Proxy(handle, {
      get: (target, property, receiver) => {
        const value = Reflect.get(target, property, receiver) as unknown;
        if (typeof value !== 'function') return value;
        const bound = (value as (...args: unknown[]) => unknown).bind(target);
        if (property !== 'sync') return bound;
        return async () => {
          await bound();
          if (isDirectory) await this.#recordDirectory(absolute);
          else await this.#recordFile(absolute, (await target.stat()).ino);
        };
      },
    });
  }

  async #recordDirectory(absolute: string): Promise<void> {
    const entries: DurableEntry[] = [];
    const ownStats = await this.#base.lstat(absolute);
    const own = ownStats.ino;
    // An fsync of a directory writes its inode too: its mode and owner as they are now.
    this.#metadata.set(own, metadataOf(ownStats));
    const dropped = this.#dropped.get(absolute) ?? new Set<string>();
    // A dropped name keeps what was durable of it before.
    for (const entry of this.#entries.get(own) ?? []) if (dropped.has(entry.name)) entries.push(entry);
    for (const dirent of await this.#base.readdir(absolute, { withFileTypes: true })) {
      const name = String(dirent.name);
      if (dropped.has(name)) continue;
      const stats = await this.#base.lstat(path.join(absolute, name));
      const kind = stats.isDirectory() ? 'dir' : stats.isSymbolicLink() ? 'symlink' : 'file';
      entries.push({ name, ino: stats.ino, kind });
    }
    this.#entries.set(own, entries);
  }

  async #recordFile(absolute: string, ino: number): Promise<void> {
    const stats = await this.#base.lstat(absolute);
    // The handle's file is still at the path it was opened by in every use of this model; say so if not.
    if (stats.ino !== ino) throw new Error(`PowerCutFs: ${absolute} is no longer the file that was fsynced`);
    this.#files.set(ino, { data: await this.#base.readFile(absolute), mode: stats.mode & 0o7777 });
    this.#metadata.set(ino, metadataOf(stats));
  }

  async #recordTree(absolute: string): Promise<void> {
    await this.#recordDirectory(absolute);
    for (const entry of this.#entries.get((await this.#base.lstat(absolute)).ino) ?? []) {
      const child = path.join(absolute, entry.name);
      if (entry.kind === 'dir') await this.#recordTree(child);
      else if (entry.kind === 'file') await this.#recordFile(child, entry.ino);
    }
  }
}
