// A FsPort that remembers what was made durable, to show what a power cut would leave on disk.
import { constants } from 'node:fs';
import path from 'node:path';
import type { FileHandle, FsPort } from '../../src/lib/fs-port.js';

interface DurableEntry {
  name: string;
  ino: number;
  kind: 'file' | 'dir' | 'symlink';
}

/**
 * Wraps a FsPort (memfs: its inode numbers are never reused) under `top` with the strict POSIX model of a power
 * cut: a file's bytes and mode survive as of its last fsync through a handle, a directory's entries (names →
 * inodes) as of its last fsync, a directory known by its inode (one removed and made again at its path is
 * another, with nothing durable in it yet); what existed when the model was made counts as durable. A file whose bytes were
 * never fsynced comes back empty; a directory whose entries were never fsynced comes back empty. Real
 * filesystems often keep more; nothing may rely on that.
 */
export class PowerCutFs {
  readonly fs: FsPort;
  readonly #base: FsPort;
  readonly #top: string;
  /** A directory's durable entries by its inode: a directory removed and made again at its path is another one. */
  readonly #entries = new Map<number, DurableEntry[]>();
  #topIno = -1;
  readonly #files = new Map<number, { data: Buffer; mode: number }>();
  /** Directory → names whose change a failed fsync dropped (see dropUnsynced), until changed again. */
  readonly #dropped = new Map<string, Set<string>>();

  private constructor(base: FsPort, top: string) {
    this.#base = base;
    this.#top = path.resolve(top);
    const open = (async (file: string, flags: number, mode?: number) => {
      const handle = await base.open(file, flags, mode);
      return this.#watch(handle, path.resolve(String(file)), (flags & constants.O_DIRECTORY) !== 0);
    }) as FsPort['open'];
    // A name changed (created, replaced, removed) is dirty again: a later fsync of its directory writes it.
    const touching =
      <K extends 'rename' | 'mkdir' | 'rmdir' | 'unlink'>(name: K, ...which: number[]) =>
      async (...args: Parameters<FsPort[K]>) => {
        await (base[name] as (...a: Parameters<FsPort[K]>) => Promise<unknown>)(...args);
        for (const index of which) {
          const absolute = path.resolve(String(args[index]));
          this.#dropped.get(path.dirname(absolute))?.delete(path.basename(absolute));
        }
      };
    this.fs = {
      ...base,
      open,
      rename: touching('rename', 0, 1) as FsPort['rename'],
      mkdir: touching('mkdir', 0) as FsPort['mkdir'],
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
    const own = (await this.#base.lstat(absolute)).ino;
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
