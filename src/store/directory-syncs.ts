// Which directory entries this process changed and has not seen made durable, and which a failed fsync may have dropped.
import type { Logger } from '../lib/logger.js';

/**
 * Linux reports a writeback error once: an fsync of a directory that failed (EIO) may have dropped the entries
 * changed in it since its last good fsync, and a later fsync that succeeds says nothing about them (their dirty
 * state may be gone). So the writer records here every entry it changes (a rename into a directory, a mkdir, an
 * unlink, an rmdir) until a good fsync of that directory, begun after the change, covers it; a failed fsync
 * marks every entry then uncovered as dropped. A dropped entry counts as durable again only once it is changed
 * anew (a file published again: new temp file, rename) and a later fsync covers that change. One ledger per
 * process (FsPort.directorySyncs), for the life of the process: what survived a crash is on disk by definition,
 * and what did not is written again by the next run. Directories are named by their absolute path as the writer
 * built it (root or state directory joined with the relative path), never through /proc/self/fd.
 */
/** One renewal's record: where it stands. `aside` from the first rename's success until the second's. */
export interface RenewalAside {
  readonly aside: string;
  state: 'renaming' | 'aside' | 'back' | 'unmoved';
}

/**
 * Where a directory renewal (store/durable-writer.ts renewDroppedDirectories) records, durably and before its
 * first rename, the temp name it renames a directory to, so that the next start can rename it back should the
 * process die before the second rename (store/directory-asides.ts).
 */
export interface RenewalAsides {
  /**
   * `aside` (a temp name beside it) will stand for `name` in `dir` (relative to `rootDir`, '' for the root
   * itself); durable on return. The caller moves the answer's state on as its renames answer; a record is
   * kept until it is `unmoved`, or `back` and the entry `name` is settled in the ledger (the rename back
   * covered by a good fsync of `dir`).
   */
  record(rootDir: string, dir: string, name: string, aside: string): Promise<RenewalAside>;
  /**
   * The renewal of the entry `name` of `parent` (absolute) whose directory is at its aside name now (between
   * the two renames, or left there by a rename back that failed), if any: nothing may be made at that name.
   */
  asideAt(parent: string, name: string): RenewalAside | undefined;
  /** Whether any directory may be at an aside name now: one of `asideAt`'s, or one the start could not put back. */
  readonly holding: boolean;
  /** Whether the entry `name` of `parent` (absolute) may be at an aside name now: nothing may be made there. */
  holds(parent: string, name: string): boolean;
  /**
   * `holds`, after trying once more to put back a directory the start could not (a failure at start may have
   * been passing): false once it is back, its aside gone, or something else at its name.
   */
  stillHolds(parent: string, name: string): Promise<boolean>;
  /**
   * Before a directory is made at the entry `name` of `parent` (absolute): a record not put back that names it
   * (its file system was not mounted at start) is tried once more, so the directory aside comes back instead
   * of a new one being made beside it. Undefined when no record names it.
   */
  beforeMaking(parent: string, name: string): Promise<void> | undefined;
  /** How many directories recorded aside under this root are not put back yet (`retry` while any remain). */
  readonly pending: number;
  /** Tries once more to put back every directory not put back yet; answers how many remain. Never rejects. */
  retry(): Promise<number>;
}

/** Told of a failed renewal of the entry `name` of `directory` (DirectorySyncLedger.onRenewalFailure). */
export type RenewalFailureListener = (directory: string, name: string, cause: unknown) => void;

export class DirectorySyncLedger {
  #changes = 0;
  #asides: RenewalAsides | undefined;
  /** Directory → name → the change count when it last changed; until a good fsync begun after it. */
  readonly #uncovered = new Map<string, Map<string, number>>();
  /** Directory → names whose change a failed fsync may have dropped; until changed anew. */
  readonly #dropped = new Map<string, Set<string>>();
  /** Directory → name → why its last renewal failed (store/durable-writer.ts renewDroppedDirectories). */
  readonly #renewalFailures = new Map<string, Map<string, unknown>>();
  /**
   * Told when a renewal of the entry `name` of `directory` fails, once per entry and reason (the same failure
   * again at each pass is not told again): the process's logger (cli/compose.ts), so an operator reads the real
   * reason (say ENOSPC on renewal-asides.json) and not only the EIO the files below it are held back with.
   */
  onRenewalFailure: RenewalFailureListener | undefined;

  /** The entry `name` of `directory` was just created, replaced or removed. */
  changed(directory: string, name: string): void {
    this.#changes += 1;
    let names = this.#uncovered.get(directory);
    if (names === undefined) {
      names = new Map();
      this.#uncovered.set(directory, names);
    }
    names.set(name, this.#changes);
    const dropped = this.#dropped.get(directory);
    if (dropped?.delete(name) === true && dropped.size === 0) this.#dropped.delete(directory);
    const failures = this.#renewalFailures.get(directory);
    if (failures?.delete(name) === true && failures.size === 0) this.#renewalFailures.delete(directory);
  }

  /**
   * A renewal of the dropped entry `name` of `directory` failed with `cause`: kept (until the entry changes
   * anew) for the error its files are held back with (`renewalFailure`), and told to `onRenewalFailure` unless
   * the last one of this entry failed the same way.
   */
  renewalFailed(directory: string, name: string, cause: unknown): void {
    let failures = this.#renewalFailures.get(directory);
    if (failures === undefined) {
      failures = new Map();
      this.#renewalFailures.set(directory, failures);
    }
    const previous = failures.get(name);
    failures.set(name, cause);
    if (previous === undefined || reason(previous) !== reason(cause))
      this.onRenewalFailure?.(directory, name, cause);
  }

  /** Why the last renewal of the entry `name` of `directory` failed, while it stays dropped. */
  renewalFailure(directory: string, name: string): unknown {
    return this.#renewalFailures.get(directory)?.get(name);
  }

  /** Called as an fsync of a directory begins: pass its answer to `synced`. */
  syncing(): number {
    return this.#changes;
  }

  /** The fsync of `directory` begun at `since` succeeded: every change made before it began is durable. */
  synced(directory: string, since: number): void {
    const names = this.#uncovered.get(directory);
    if (names === undefined) return;
    for (const [name, change] of names) if (change <= since) names.delete(name);
    if (names.size === 0) this.#uncovered.delete(directory);
  }

  /**
   * The fsync of `directory` failed: every change not yet covered, those made while it ran too (its writeback
   * may have taken them), may be lost for good, whatever a later fsync answers.
   */
  failed(directory: string): void {
    const names = this.#uncovered.get(directory);
    if (names === undefined) return;
    let dropped = this.#dropped.get(directory);
    if (dropped === undefined) {
      dropped = new Set();
      this.#dropped.set(directory, dropped);
    }
    for (const name of names.keys()) dropped.add(name);
    this.#uncovered.delete(directory);
  }

  /** Whether a failed fsync of `directory` may have dropped the last change of its entry `name`. */
  dropped(directory: string, name: string): boolean {
    return this.#dropped.get(directory)?.has(name) ?? false;
  }

  /**
   * Whether the last change of the entry `name` of `directory` is not known durable: dropped, or not yet covered
   * by a good fsync begun after it.
   */
  unsettled(directory: string, name: string): boolean {
    return this.dropped(directory, name) || (this.#uncovered.get(directory)?.has(name) ?? false);
  }

  /**
   * Where renewals record their temp names (the state directory's, set once it is open). Until one is set, no
   * directory is renewed: one renamed aside without a record would stay aside for good if the process died there.
   */
  keepAsidesIn(asides: RenewalAsides): void {
    this.#asides = asides;
  }

  get asides(): RenewalAsides | undefined {
    return this.#asides;
  }

  /** Whether any entry is dropped (when none, nothing needs asking). */
  get anyDropped(): boolean {
    return this.#dropped.size > 0;
  }
}

/** What tells one failure from another for `onRenewalFailure`: its message (operation, path and errno). */
function reason(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * The log line of a failed renewal of a directory entry a failed fsync may have dropped (store/directory-syncs.ts),
 * once per entry and reason: the files below it are held back with an EIO that names this as its cause.
 */
export function renewalFailureLog(logger: Logger): RenewalFailureListener {
  return (directory, name, cause) =>
    logger.error(
      { err: cause, directory, name },
      'could not write again a directory entry a failed fsync may have dropped: the files below it are held back',
    );
}
