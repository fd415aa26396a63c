// rootDir's mount, the mounts below it and its real path, remembered: a mount point that stops being one, or a rootDir swapped for a symlink, is waited out.
import { constants } from 'node:fs';
import path from 'node:path';
import type { FsPort } from '../lib/fs-port.js';
import { ownMountPoints, selfBoundMountPoints } from '../lib/own-mounts.js';
import { writeDurableJson } from './durable-writer.js';
import { DiskError } from './errors.js';
import { sameRoot } from './same-root.js';

/**
 * In stateDir: rootDir was seen as a mount point (`{"rootDir": ..., "mountPoint": true, "ownMount": true}`), and the
 * mount points seen below it (`"below": ["data", ...]`, relative to rootDir; `"mountPoint": false` when rootDir is
 * none). An agent before `below` reads only the first two. `ownMount` (review34): seen as a mount of its own, so
 * never the unit's bind of rootDir onto itself that agents before ownMountPoints recorded (those are forgotten).
 */
export const ROOT_MOUNT_FILE = 'root-mount.json';

/** A record is a rootDir (at most PATH_MAX) and a flag: anything far larger at its name is not one. */
const MAX_RECORD_BYTES = 64 * 1024;
const RECORD_READ_FLAGS = constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOFOLLOW;
/** At most this many mount points below rootDir are remembered (a record is small, its checks few). */
const MAX_BELOW = 256;
/**
 * And at most this many bytes of them as the record holds them (JSON): with rootDir (PATH_MAX) the record stays
 * under MAX_RECORD_BYTES. 256 long ones were ~260 KiB, which the reader then refused whole, rootDir's own mount
 * with it (review34).
 */
const MAX_BELOW_BYTES = 32 * 1024;

/** A mount point below rootDir as this process knows it. */
interface MountBelow {
  /** Its `st_dev` when last seen as a mount point; undefined while not seen by this process (from the record). */
  dev: number | bigint | undefined;
  /** The device's condition while it is no mount point any more; undefined while it is one (or not judged). */
  gone: DiskError | undefined;
  /**
   * Gone and nothing at all at its path (the directory removed, as an automounter removes a card's): only such a
   * one may be forgotten (mount27). A bare directory left there is where the mount comes back.
   */
  absent: boolean;
}

/** Where RootMountWatch remembers across restarts that rootDir is a mount point; readOnly: it only reads. */
export interface MountMemory {
  stateDir: string;
  readOnly: boolean;
  /**
   * Whether a file the agent manages, or an instance or declared write it records, lies at or below a mount point
   * below rootDir (relative to it): one gone that holds none and is not there at all any more is forgotten (fix34,
   * mount27), so a transient mount once seen (a USB stick whose directory went with it) neither keeps a slot nor
   * says "gone" for good.
   */
  holdsManaged?: (mountPoint: string) => boolean;
  /**
   * The devices (`st_dev`, decimal) the agent's files lay on as stateDir recorded them before this process read any
   * (its file fingerprints): an older record found with rootDir bound onto itself is the unit's self-bind only when
   * they lay on rootDir's device now (mount27).
   */
  managedDevices?: () => ReadonlySet<string>;
}

/**
 * Whether rootDir is still the mount point this process saw it be. rootDir is a mount point when its `st_dev`
 * differs from its parent's (`<rootDir>/..`, resolved by the kernel, so a symlinked rootDir is judged where it
 * points). Once seen as one, a rootDir that is a plain directory of its parent's filesystem again (a lazy
 * unmount, a card pulled, an NFS share gone, leaving the bare mountpoint underneath) is the device's condition:
 * `check` answers a DiskError (`mountGone`) and nothing is written or removed there, so the files never land on
 * the filesystem under the mountpoint. A mount point again (the same or another device: a remount gets a new
 * `st_dev`) is accepted. With a `MountMemory`, a rootDir seen as a mount point is recorded in stateDir
 * (ROOT_MOUNT_FILE, once): an agent (re)started while the mount is gone finds rootDir a plain directory and the
 * record saying it was a mount point, and waits the same way (the record names the file to remove when the mount
 * was given up on purpose). Without one, or before the first record, a start takes rootDir as it finds it.
 * A bind mount of a directory of the same filesystem has its parent's `st_dev`: it is told by
 * `/proc/self/mountinfo` listing rootDir's real path as a mount point, read at the first check and then only
 * while rootDir is known as a mount point of its parent's device (by this process or the record), so a rootDir
 * that is no mount point costs one read of it per process. Before, such a bind mount gone left the bare
 * directory under it to be written.
 *
 * Where rootDir resolves (`realpath`) is remembered the same way, from the first answer: rootDir, or a directory
 * above it, replaced by a symlink to another directory under the running agent (`mv root root.old && ln -s /etc
 * root`) is the device's condition too (`rootMoved`), so nothing is written into, removed from or restored into
 * the symlink's target. Before, `stat` followed the symlink and every file went there. Removed and made again
 * where it was (an operator's `rm -rf`, the agent's own remake) it resolves as before and is accepted; a
 * rootDir configured as a symlink is taken where it points at the first check.
 *
 * The mount points below rootDir (a data disk at `rootDir/data`, an SD card, a tmpfs for one directory) are held to
 * the same rule, each for the files under it (mount26): each one the mount table lists (`FsPort.mountsBelow`,
 * read by cli/hang-safe-fs.ts at start and reload and at most every 10 s: no read of it here) is remembered, in the
 * record too, and judged at every check by its `st_dev` against its parent's (two stats each, and none at all while
 * there are no mounts below rootDir); one of its parent's device is asked of `/proc/self/mountinfo` (a bind mount),
 * one that may hang (NFS, FUSE) of the mount table as last read (a stat of it could wait for good). One that is a
 * plain directory again, or not there at all, is the device's condition for every write and removal under it
 * (`goneAt`): `retrying` naming that mount, nothing written into or removed from the bare directory; a mount point
 * again (any device) is accepted. An agent (re)started while it is gone finds it in the record and waits too; an
 * operator gives it up by deleting its entry from the record's `below` (or the whole file) and restarting.
 */
export class RootMountWatch {
  readonly #fs: FsPort;
  readonly #rootDir: string;
  /** rootDir's `st_dev` when last seen as a mount point; undefined while never seen as one. */
  #mountDev: number | bigint | undefined;
  /** Whether mountinfo has been read: at the first check, then only while rootDir may be a bind mount. */
  #mountinfoRead = false;
  /** Whether the last check found the mount gone: a mount point seen after that is a mount come back. */
  #gone = false;
  /** The mount table's mount points below rootDir as the last check that judged them read it (forgetUnheld's). */
  #expiryDue: { listed: ReadonlySet<string> | undefined } | undefined;
  /** Where rootDir first resolved; undefined until a realpath of it succeeded. */
  #realRoot: string | undefined;

  readonly #memory: MountMemory | undefined;
  /** The record says rootDir was a mount point; undefined until read. Absent once, absent for good: only we write it. */
  #recorded: boolean | undefined;
  /**
   * The record says so as an agent since review34 writes it (`ownMount`): seen as a mount of its own, never a
   * directory bound onto itself. Only a record without it may be the one an older agent made of its unit's self-bind.
   */
  #recordedOwn = false;
  /** The mount points seen below rootDir (relative to it), by this process or the record. */
  readonly #below = new Map<string, MountBelow>();
  /** Whether the record's `below` has been read (once, at the first check). */
  #belowRecalled = false;
  /** The bytes `#below`'s keys take in the record (MAX_BELOW_BYTES). */
  #belowBytes = 0;

  constructor(fs: FsPort, rootDir: string, memory?: MountMemory) {
    this.#fs = fs;
    this.#rootDir = rootDir;
    this.#memory = memory;
  }

  get #recordPath(): string {
    return `${this.#memory?.stateDir}/${ROOT_MOUNT_FILE}`;
  }

  /** Whether the record says rootDir was a mount point; read again while it does (an operator may remove it). */
  async #recall(): Promise<boolean> {
    if (this.#memory === undefined || this.#recorded === false) return false;
    try {
      const text = await this.#readRecord();
      const value: unknown = text === undefined ? undefined : JSON.parse(text);
      const record = value as
        | { rootDir?: unknown; mountPoint?: unknown; ownMount?: unknown }
        | null
        | undefined;
      this.#recorded =
        record?.mountPoint === true &&
        typeof record.rootDir === 'string' &&
        (await sameRoot(this.#fs, record.rootDir, this.#rootDir));
      this.#recordedOwn = this.#recorded && record?.ownMount === true;
    } catch {
      // Absent or unreadable: no record (the in-memory watch still holds while this process runs).
      this.#recorded = false;
    }
    return this.#recorded;
  }

  /**
   * The record's text; undefined when what is at its name is not a regular file of at most MAX_RECORD_BYTES,
   * which this agent never writes. Opened without following a symlink and without blocking: a FIFO put there
   * held the first check, and with it every pass and `--once`, for good (a read of `readFile` waits for a
   * writer), and a symlink to /dev/zero or a huge file was read whole.
   */
  async #readRecord(): Promise<string | undefined> {
    const handle = await this.#fs.open(this.#recordPath, RECORD_READ_FLAGS);
    try {
      const stats = await handle.stat();
      if (!stats.isFile() || stats.size > MAX_RECORD_BYTES) return undefined;
      return await handle.readFile({ encoding: 'utf8' });
    } finally {
      await handle.close().catch(() => undefined);
    }
  }

  /**
   * Records that rootDir is a mount point of its own, once (an older agent's record without `ownMount` is written
   * again); a failure leaves the in-memory watch only.
   */
  async #record(): Promise<void> {
    if (this.#memory === undefined || this.#memory.readOnly || (this.#recorded === true && this.#recordedOwn))
      return;
    if ((await this.#recall()) && this.#recordedOwn) return;
    try {
      await this.#writeRecord(true);
      this.#recorded = true;
      this.#recordedOwn = true;
    } catch {
      this.#recorded = undefined;
    }
  }

  /**
   * Whether the agent's files lay on `dev` (rootDir's device now) before this process read any, or nothing tells (no
   * fingerprints: an install without files, an agent before them), as before mount27.
   */
  #filesLayOn(dev: number | bigint): boolean {
    const devices = this.#memory?.managedDevices?.();
    return devices === undefined || devices.size === 0 || devices.has(String(dev));
  }

  /** An older record judged a real mount's: written again with `ownMount` (in memory only when read-only). */
  async #markOwn(): Promise<void> {
    this.#recordedOwn = true;
    if (this.#memory === undefined || this.#memory.readOnly) return;
    await this.#writeRecord(true).catch(() => undefined);
  }

  /** The record no longer says rootDir is a mount point (the mounts below it kept); in memory only when read-only. */
  async #forget(): Promise<void> {
    this.#recorded = false;
    this.#recordedOwn = false;
    if (this.#memory === undefined || this.#memory.readOnly) return;
    await this.#writeRecord(false).catch(() => undefined);
  }

  /** The record as this process knows it: rootDir a mount point or not, and the mount points below it. */
  async #writeRecord(mountPoint: boolean): Promise<void> {
    if (this.#memory === undefined) return;
    await writeDurableJson(this.#fs, this.#memory.stateDir, ROOT_MOUNT_FILE, {
      rootDir: this.#rootDir,
      mountPoint,
      // Only ever written true by a process that saw rootDir a mount of its own (never a self-bind: ownMountPoints).
      ...(mountPoint ? { ownMount: true } : {}),
      ...(this.#below.size === 0 ? {} : { below: [...this.#below.keys()] }),
    });
  }

  /** The record's `below` for this rootDir (well-formed relative paths only); empty when there is none. */
  async #recallBelow(): Promise<string[]> {
    if (this.#memory === undefined) return [];
    try {
      const text = await this.#readRecord();
      const record = (text === undefined ? undefined : JSON.parse(text)) as
        | { rootDir?: unknown; below?: unknown }
        | null
        | undefined;
      if (!Array.isArray(record?.below) || typeof record.rootDir !== 'string') return [];
      if (!(await sameRoot(this.#fs, record.rootDir, this.#rootDir))) return [];
      return record.below.filter(isMountBelowPath).slice(0, MAX_BELOW);
    } catch {
      return [];
    }
  }

  /**
   * Undefined while rootDir is the mount it was (or never was one) and resolves where it did; a stat or realpath
   * that fails is left to the writes.
   */
  async check(): Promise<DiskError | undefined> {
    if (!this.#belowRecalled) {
      // Before any record is written: rootDir's own would otherwise drop what the record holds below it.
      this.#belowRecalled = true;
      for (const relative of await this.#recallBelow()) this.#remember(relative);
    }
    const root = (await this.#checkMoved()) ?? (await this.#checkMount());
    // rootDir's own condition holds every write already.
    if (root === undefined) await this.#checkBelow();
    return root;
  }

  /**
   * The condition of the mount point below rootDir holding `relative` (a file's path, relative to rootDir) as the
   * last check found it: undefined while it is mounted (or no mount below rootDir holds it).
   */
  goneAt(relative: string): DiskError | undefined {
    if (this.#below.size === 0) return undefined;
    for (const [mountPoint, known] of this.#below) {
      if (known.gone !== undefined && isSameOrBelow(relative, mountPoint)) return known.gone;
    }
    return undefined;
  }

  /** Whether the last check found any mount point below rootDir gone. */
  anyGoneBelow(): boolean {
    for (const known of this.#below.values()) if (known.gone !== undefined) return true;
    return false;
  }

  /** What the last check found of each mount point below rootDir that is gone (health's `degraded`). */
  goneBelow(): string[] {
    const gone: string[] = [];
    for (const known of this.#below.values()) if (known.gone !== undefined) gone.push(known.gone.message);
    return gone;
  }

  /**
   * Every mount point below rootDir this watch knows (the record's and the mount table's), relative to rootDir, as
   * the last check found it: `gone` (its condition) while it is no mount point, `absent` when nothing at all is at
   * its path. For `config-agent doctor`, which says which are kept as gone and what to do.
   */
  belowConditions(): { mountPoint: string; gone: DiskError | undefined; absent: boolean }[] {
    return [...this.#below].map(([mountPoint, known]) => ({
      mountPoint,
      gone: known.gone,
      absent: known.absent,
    }));
  }

  /**
   * The mount point below rootDir (as `<rootDir>/<relative>`) holding `relative` (a file's path), the deepest of
   * those known; undefined when the file is on rootDir's own filesystem as far as the agent knows.
   */
  mountHolding(relative: string): string | undefined {
    let holding: string | undefined;
    for (const mountPoint of this.#below.keys()) {
      if (isSameOrBelow(relative, mountPoint) && mountPoint.length > (holding?.length ?? -1))
        holding = mountPoint;
    }
    return holding === undefined ? undefined : `${this.#rootDir}/${holding}`;
  }

  /** Takes in the mount points the mount table lists below rootDir, then judges each one known. */
  async #checkBelow(): Promise<void> {
    const listed = this.#fs.mountsBelow?.(this.#rootDir);
    let added = false;
    for (const relative of listed ?? []) {
      if (this.#below.has(relative) || !isMountBelowPath(relative)) continue;
      if (this.#remember(relative)) added = true;
    }
    if (this.#below.size === 0) return;
    if (added && this.#memory !== undefined && !this.#memory.readOnly) {
      // A failure leaves the in-memory watch only, as for rootDir's own record.
      await this.#writeRecord(this.#mountDev !== undefined).catch(() => undefined);
      if (this.#mountDev !== undefined) {
        this.#recorded = true;
        this.#recordedOwn = true;
      }
    }
    let table: Promise<string | undefined> | undefined;
    const mountTable = () => {
      table ??= this.#fs.readFile(MOUNTINFO, 'utf8').catch(() => undefined);
      return table;
    };
    for (const [relative, known] of this.#below) {
      const at = `${this.#rootDir}/${relative}`;
      if (this.#fs.mayHangAt?.(at) === true) {
        // A stat there could wait for good: the table as last read says whether it is mounted.
        this.#judgeBelow(relative, known, listed?.has(relative) === true ? (known.dev ?? 0) : undefined);
        continue;
      }
      let own: { dev: number | bigint; isDirectory(): boolean };
      let parent: { dev: number | bigint };
      try {
        own = await this.#fs.stat(at);
        // A file bound there (`mount --bind`, a container's secret): its directory is its parent; `..` of a file is
        // ENOTDIR, which judged it gone from the first check on and held restores and adoption for good (review34).
        parent = await this.#fs.stat(own.isDirectory() ? `${at}/..` : path.dirname(at));
      } catch (error) {
        // Not there at all (a mount point cannot be removed while mounted): gone. Anything else is left to the writes.
        const code = (error as { code?: unknown } | undefined)?.code;
        if (code === 'ENOENT' || code === 'ENOTDIR') this.#judgeBelow(relative, known, undefined, true);
        continue;
      }
      if (own.dev !== parent.dev) {
        this.#judgeBelow(relative, known, own.dev);
        continue;
      }
      // Of its parent's device: a bind mount if the kernel's table lists it now.
      const text = await mountTable();
      const real = `${this.#realRoot ?? this.#rootDir}/${relative}`;
      this.#judgeBelow(
        relative,
        known,
        text !== undefined && listsMountPoint(text, real) ? own.dev : undefined,
      );
    }
    this.#expiryDue = { listed };
  }

  /**
   * Forgets each mount point below rootDir the last check found gone that the mount table no longer lists and that
   * holds nothing the agent manages (fix34). Called by a pass once it has recorded what the service lists: at the
   * check itself (the pass's first, before any record of it) the first instance listed under a data disk missing
   * at a boot was not recorded yet, the mount was forgotten and that file written into the bare directory (review36).
   */
  async forgetUnheld(): Promise<void> {
    const due = this.#expiryDue;
    this.#expiryDue = undefined;
    if (due !== undefined) await this.#expireBelow(due.listed);
  }

  /**
   * Forgets each mount point below rootDir that is gone, not in the mount table, holds nothing the agent manages
   * (`holdsManaged`) and is not there at all any more: it holds nothing back and takes no slot (fix34). Mounted
   * again, it is taken in anew. One whose bare directory is still there is kept (mount27): fix34 forgot it too, and
   * an instance the service placed under it afterwards was written into that directory, on the filesystem beneath
   * (review35); a directory left where a mount was is where it comes back (fstab, a mount unit), so what lands under
   * it waits, `retrying` naming the mount and said in health and status, until it is mounted again or an operator
   * deletes its entry from the record.
   */
  async #expireBelow(listed: ReadonlySet<string> | undefined): Promise<void> {
    const holdsManaged = this.#memory?.holdsManaged;
    if (holdsManaged === undefined) return;
    let expired = false;
    for (const [relative, known] of this.#below) {
      // Absent is gone too (`#judgeBelow`).
      if (!known.absent || listed?.has(relative) === true || holdsManaged(relative)) continue;
      this.#below.delete(relative);
      this.#belowBytes -= JSON.stringify(relative).length + 1;
      expired = true;
    }
    if (expired && this.#memory !== undefined && !this.#memory.readOnly)
      await this.#writeRecord(this.#mountDev !== undefined).catch(() => undefined);
  }

  /** Takes a mount point below rootDir in, unless MAX_BELOW or MAX_BELOW_BYTES is reached; whether it did. */
  #remember(relative: string): boolean {
    const bytes = JSON.stringify(relative).length + 1;
    if (this.#below.size >= MAX_BELOW || this.#belowBytes + bytes > MAX_BELOW_BYTES) return false;
    this.#below.set(relative, { dev: undefined, gone: undefined, absent: false });
    this.#belowBytes += bytes;
    return true;
  }

  /**
   * Records what a check found of one mount point below rootDir: mounted on `dev`, or gone (undefined), `absent`
   * when nothing at all is at its path.
   */
  #judgeBelow(relative: string, known: MountBelow, dev: number | bigint | undefined, absent = false): void {
    known.absent = absent;
    if (dev !== undefined) {
      const anew = known.gone !== undefined || (known.dev !== undefined && known.dev !== dev);
      known.gone = undefined;
      known.dev = dev;
      const asides = this.#fs.directorySyncs?.asides;
      if (anew && asides !== undefined && asides.pending > 0) void asides.retry();
      return;
    }
    const at = `${this.#rootDir}/${relative}`;
    const seen =
      known.dev === undefined
        ? `was one when the agent last saw it (${this.#recordPath}): mount it again, or delete ${JSON.stringify(relative)} from that file's "below" and restart the agent to use the directory as it is`
        : `was one, st_dev ${known.dev}`;
    known.gone = new DiskError({
      operation: 'check mount',
      path: relative,
      errno: 'ENODEV',
      mountGone: `${at} is no mount point any more (a filesystem below rootDir ${this.#rootDir}; it ${seen})`,
    });
  }

  async #checkMoved(): Promise<DiskError | undefined> {
    if (this.#fs.realpath === undefined) return undefined;
    let real: string;
    try {
      real = await this.#fs.realpath(this.#rootDir);
    } catch {
      return undefined;
    }
    if (this.#realRoot === undefined) this.#realRoot = real;
    if (real === this.#realRoot) return undefined;
    return new DiskError({
      operation: 'check rootDir',
      path: '',
      errno: 'ELOOP',
      rootMoved: `rootDir ${this.#rootDir} resolves to ${real} now (it resolved to ${this.#realRoot})`,
    });
  }

  async #checkMount(): Promise<DiskError | undefined> {
    let root: { dev: number | bigint };
    let parent: { dev: number | bigint };
    try {
      [root, parent] = await Promise.all([
        this.#fs.stat(this.#rootDir),
        // Not path.join: it would drop `..` textually, and a symlinked rootDir's parent is its target's.
        this.#fs.stat(`${this.#rootDir}/..`),
      ]);
    } catch {
      return undefined;
    }
    // Of the parent's device: a bind mount of a directory of the same filesystem, if mountinfo lists it. Asked
    // at the first check and while rootDir is known as a mount point; a plain directory never again.
    const listed = () => {
      const first = !this.#mountinfoRead;
      this.#mountinfoRead = true;
      return first || this.#mountDev !== undefined ? this.#listedAsMountPoint() : Promise.resolve(false);
    };
    if (root.dev !== parent.dev || (await listed())) {
      this.#mounted(root.dev);
      await this.#record();
      return undefined;
    }
    if (this.#mountDev === undefined) {
      if (!(await this.#recall())) return undefined;
      if (await this.#listedAsMountPoint()) {
        this.#mounted(root.dev);
        return undefined;
      }
      if (!this.#recordedOwn && (await this.#boundOntoItself())) {
        // A record an agent before ownMountPoints made of its unit's ReadWritePaths= bind of rootDir onto itself:
        // this is the very directory it saw. Forgotten, so an agent outside the unit is not held back by it. Not one
        // marked `ownMount`: in the unit a data disk gone leaves the bare directory bound onto itself just the same,
        // and that one was forgotten and written into (review34). Nor one whose files lay on another device than
        // this directory's: they were on the disk, which is missing (mount27); it is marked so from now on, so a
        // later start whose fingerprints hold copies found in the bare directory does not take it for the bind.
        if (this.#filesLayOn(root.dev)) {
          await this.#forget();
          return undefined;
        }
        await this.#markOwn();
      }
      this.#gone = true;
      return new DiskError({
        operation: 'check mount',
        path: '',
        errno: 'ENODEV',
        mountGone:
          `rootDir ${this.#rootDir} is no mount point, and was one when the agent last saw it (${this.#recordPath}): ` +
          'mount it again, or remove that file to use the directory as it is',
      });
    }
    this.#gone = true;
    return new DiskError({
      operation: 'check mount',
      path: '',
      errno: 'ENODEV',
      mountGone: `rootDir ${this.#rootDir} is no mount point any more (it was one, st_dev ${this.#mountDev})`,
    });
  }

  /**
   * rootDir is a mount point of device `dev`. Mounted again after it was seen gone, or another device than the
   * one seen (a remount): directories a renewal left aside that were out of sight are tried again now
   * (store/directory-asides.ts), in the background: a pass never waits on that.
   */
  #mounted(dev: number | bigint): void {
    const anew = this.#gone || (this.#mountDev !== undefined && this.#mountDev !== dev);
    this.#gone = false;
    this.#mountDev = dev;
    const asides = this.#fs.directorySyncs?.asides;
    if (anew && asides !== undefined && asides.pending > 0) void asides.retry();
  }

  /** Whether `/proc/self/mountinfo` shows rootDir's real path bound onto itself (`selfBoundMountPoints`). */
  async #boundOntoItself(): Promise<boolean> {
    const real = this.#realRoot ?? this.#rootDir;
    try {
      return selfBoundMountPoints(await this.#fs.readFile(MOUNTINFO, 'utf8')).has(real);
    } catch {
      return false;
    }
  }

  /**
   * Whether `/proc/self/mountinfo` lists rootDir's real path as a mount point of its own (its fifth field, with
   * `\040`-style escapes undone; `ownMountPoints`). False where it cannot be read (no /proc).
   */
  async #listedAsMountPoint(): Promise<boolean> {
    // Where rootDir resolved at the first check: `check` has just found it resolving there still.
    const real = this.#realRoot ?? this.#rootDir;
    let text: string;
    try {
      text = await this.#fs.readFile(MOUNTINFO, 'utf8');
    } catch {
      return false;
    }
    return listsMountPoint(text, real);
  }
}

/**
 * Whether mountinfo's text lists `real` as a mount point of its own (`ownMountPoints`): not a directory bound onto
 * itself, as systemd's `ReadWritePaths=` does in the unit's namespace. Such a bind mount was recorded as rootDir's
 * mount by the daemon, and every agent outside the unit (an operator's `--once`) then found the mount "gone".
 */
function listsMountPoint(text: string, real: string): boolean {
  return ownMountPoints(text).has(real);
}

/** A mount point's path relative to rootDir as the record may hold it: no empty, `.` or `..` segment, no NUL. */
function isMountBelowPath(value: unknown): value is string {
  return (
    typeof value === 'string' &&
    value.length > 0 &&
    value.length <= 4096 &&
    !value.includes('\0') &&
    value.split('/').every((segment) => segment !== '' && segment !== '.' && segment !== '..')
  );
}

/** Whether `relative` is `mountPoint` or lies below it (both relative to rootDir, '/'-separated). */
function isSameOrBelow(relative: string, mountPoint: string): boolean {
  return relative === mountPoint || relative.startsWith(`${mountPoint}/`);
}

/** The kernel's table of this process's mounts (proc(5)). */
const MOUNTINFO = '/proc/self/mountinfo';
