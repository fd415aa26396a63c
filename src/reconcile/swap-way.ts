// Whether a swap's removals would clear the way of its write, asked before the swap removes anything.
import type { Dirent } from 'node:fs';
import path from 'node:path';
import type { FsPort } from '../lib/fs-port.js';
import { hashRegularFile } from '../store/durable-writer.js';
import { PathRejectedError } from '../store/errors.js';
import { foldKey } from '../store/path-aliases.js';
import type { ManagedFile } from '../store/state.js';
import type { RemoveStep } from './plan.js';

/**
 * What a swap's write (one with displaced files: an instance of the same config schema retired, a nested path
 * conflict's losers, plan.ts) would meet once the swap removed those files and pruned the directories the agent
 * made for them: the writer's own error (the same rule, so the same judgement) for an entry that would stay in
 * the way — a symlink on the way or at the path, a file or directory of someone else's where a directory or the
 * file goes — or undefined when nothing would. Asked first, so a write blocked by what the agent must never remove
 * leaves the displaced files untouched at each retry: removed and put back every time, they were new inodes each
 * time (a changed file to hooks, the drift watcher and the file's readers). A prediction only: the swap still puts
 * the files back if the write fails all the same (a full disk, a failing one, an entry made since).
 */
export async function swapObstacle(
  fs: FsPort,
  rootDir: string,
  writePath: string,
  displaces: readonly RemoveStep[],
  files: ReadonlyMap<string, ManagedFile>,
): Promise<PathRejectedError | undefined> {
  /** The displaced paths by fold key. */
  const removed = new Map<string, string>();
  const madeDirs = new Set<string>();
  for (const remove of displaces) {
    // A path naming another instance's file keeps it: only the record goes.
    if (remove.aliasOf !== undefined) continue;
    removed.set(foldKey(remove.path), remove.path);
    for (const dir of files.get(remove.path)?.createdDirs ?? []) madeDirs.add(foldKey(dir));
  }
  const blocked = (entry: string, what: string) =>
    new PathRejectedError(
      'target_is_directory',
      writePath,
      `${JSON.stringify(entry)} ${what}: the file it replaces stays while it is there`,
    );
  /**
   * A displaced file changed by someone else since the agent wrote it is left in place by its removal (apply.ts
   * removeFile, the same rule: another length, or other bytes), so it stays in the way: without this the others
   * were removed and put back at every retry. A file that cannot be read is left to the removal to judge.
   */
  const keptAsChanged = async (relative: string): Promise<PathRejectedError | undefined> => {
    const displaced = removed.get(foldKey(relative));
    const record = displaced === undefined ? undefined : files.get(displaced);
    if (displaced === undefined || record === undefined) return undefined;
    const options = record.size === undefined ? {} : { onlySizes: new Set([record.size]) };
    const hashed = await hashRegularFile(fs, rootDir, displaced, options).catch(() => undefined);
    if (hashed === undefined || hashed.sha256 === record.sha256) return undefined;
    return blocked(
      relative,
      'was changed by someone else since this agent wrote it, so its removal leaves it in place',
    );
  };
  try {
    let relative = '';
    for (const segment of writePath.split('/').slice(0, -1)) {
      relative = relative === '' ? segment : `${relative}/${segment}`;
      const stats = await fs.lstat(path.join(rootDir, relative));
      if (stats.isDirectory()) continue;
      // A displaced file where the write needs a directory (`a.json` of `a.json/b.json`): the swap clears it.
      if (stats.isFile() && removed.has(foldKey(relative))) return await keptAsChanged(relative);
      if (stats.isSymbolicLink()) return new PathRejectedError('crosses_symlink', writePath, relative);
      return new PathRejectedError('not_a_directory', writePath, relative);
    }
    const final = await fs.lstat(path.join(rootDir, writePath));
    if (final.isFile()) return undefined;
    if (final.isSymbolicLink())
      return new PathRejectedError('crosses_symlink', writePath, 'the target itself');
    if (!final.isDirectory()) return new PathRejectedError('target_not_regular_file', writePath);
  } catch {
    // Nothing there (the write makes what is missing), or nothing a look can tell: the writer judges the path.
    return undefined;
  }
  const notMade = (dir: string) => {
    for (const [other, record] of files) {
      if (record.createdDirs.includes(dir))
        return blocked(
          dir,
          `holds the file of ${record.instanceId} at ${JSON.stringify(other)}, not removed for this write`,
        );
    }
    return blocked(dir, 'is a directory this agent did not make, which it never removes');
  };
  if (!madeDirs.has(foldKey(writePath))) return notMade(writePath);
  const pending = [writePath];
  for (let dir = pending.pop(); dir !== undefined; dir = pending.pop()) {
    let entries: AsyncIterable<Dirent> | Dirent[];
    try {
      // A few entries at a time where the port can (the first one in the way ends the walk): a directory of a
      // million local entries listed whole would hold ~300 MiB at each retry.
      const at = path.join(rootDir, dir);
      entries =
        fs.opendir === undefined ? await fs.readdir(at, { withFileTypes: true }) : await fs.opendir(at);
    } catch {
      return undefined;
    }
    try {
      for await (const entry of entries) {
        const relative = `${dir}/${entry.name}`;
        // By fold key: on a case-insensitive filesystem an entry may be spelled otherwise than its record (a
        // key shared by two distinct names on another filesystem only lets the swap try, and put the file back).
        if (entry.isDirectory()) {
          if (!madeDirs.has(foldKey(relative))) return notMade(relative);
          pending.push(relative);
        } else if (entry.isFile() && removed.has(foldKey(relative))) {
          const kept = await keptAsChanged(relative);
          if (kept !== undefined) return kept;
        } else {
          // Another instance's (one failed on the service is never touched): named, it is not a local file.
          const owner = entry.isFile() ? files.get(relative)?.instanceId : undefined;
          return blocked(
            relative,
            owner === undefined
              ? 'is not a file of this agent, which it never removes'
              : `is the file of ${owner}, not removed for this write`,
          );
        }
      }
    } catch {
      // A listing that fails part-way tells nothing: the swap tries, as without this look.
      return undefined;
    }
  }
  return undefined;
}
