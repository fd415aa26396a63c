// Whether removing a nested path conflict's losers would clear the way of its winner, asked before the swap removes anything.
import type { Dirent } from 'node:fs';
import path from 'node:path';
import type { FsPort } from '../lib/fs-port.js';
import { PathRejectedError } from '../store/errors.js';
import { foldKey } from '../store/path-aliases.js';
import type { ManagedFile } from '../store/state.js';
import type { RemoveStep } from './plan.js';

/**
 * What the winner's write would meet once the swap removed the losers' files under its path (plan.ts
 * `refuseNested`: `a.json/b.json` loses to `a.json`) and pruned the directories the agent made for them: the
 * error of an entry that would stay in the way (a local file, a directory the agent did not make), or undefined
 * when nothing would. Asked first, so a winner blocked by what the agent must never remove leaves the losers'
 * files untouched at each retry: removed and put back every time, they were new inodes each time (a changed file
 * to hooks, the drift watcher and the file's readers). A prediction only: the swap still puts the files back if
 * the write fails all the same (a full disk, a failing one, an entry made since).
 */
export async function nestedObstacle(
  fs: FsPort,
  rootDir: string,
  winnerPath: string,
  displaces: readonly RemoveStep[],
  files: ReadonlyMap<string, ManagedFile>,
): Promise<PathRejectedError | undefined> {
  const below = `${winnerPath}/`;
  const losers = new Set<string>();
  const madeDirs = new Set<string>();
  for (const remove of displaces) {
    if (remove.makesWayFor === undefined || !remove.path.startsWith(below)) continue;
    losers.add(foldKey(remove.path));
    for (const dir of files.get(remove.path)?.createdDirs ?? []) madeDirs.add(foldKey(dir));
  }
  if (losers.size === 0) return undefined;
  const blocked = (entry: string, what: string) =>
    new PathRejectedError(
      'target_is_directory',
      winnerPath,
      `${JSON.stringify(entry)} ${what}: the file of the instance updated earlier stays while it is there`,
    );
  try {
    if (!(await fs.lstat(path.join(rootDir, winnerPath))).isDirectory()) return undefined;
  } catch {
    // Nothing there (the loser's file gone already), or nothing the walk can tell: the writer judges the path.
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
  if (!madeDirs.has(foldKey(winnerPath))) return notMade(winnerPath);
  const pending = [winnerPath];
  for (let dir = pending.pop(); dir !== undefined; dir = pending.pop()) {
    let entries: Dirent[];
    try {
      entries = await fs.readdir(path.join(rootDir, dir), { withFileTypes: true });
    } catch {
      return undefined;
    }
    for (const entry of entries) {
      const relative = `${dir}/${entry.name}`;
      // By fold key: on a case-insensitive filesystem an entry may be spelled otherwise than its record (a
      // key shared by two distinct names on another filesystem only lets the swap try, and put the file back).
      if (entry.isDirectory()) {
        if (!madeDirs.has(foldKey(relative))) return notMade(relative);
        pending.push(relative);
      } else if (!entry.isFile() || !losers.has(foldKey(relative))) {
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
  }
  return undefined;
}
