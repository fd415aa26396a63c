// The files the agent left in its former root (rootDir truly moved): which retired instances' bytes are still there.
import path from 'node:path';
import type { ConfigInstanceHead } from '../api/schemas.js';
import { errnoCode } from '../lib/errors.js';
import type { FsPort } from '../lib/fs-port.js';
import { hashRegularFile } from './durable-writer.js';
import { PathRejectedError } from './errors.js';
import type { LocalState } from './state.js';

/** A retired instance's file in the former root: where it is, and whether it still holds the agent's bytes. */
export interface FormerRootFile {
  at: string;
  present: boolean;
}

/**
 * Per instance the listing retires (`target_status` not `deployed`) while the service still shows it `deployed`,
 * its file recorded in the former root (`LocalState.formerRoot`, state.ts): whether the bytes the agent wrote
 * are still there (read, never changed: the agent deletes nothing outside rootDir). The plan reports it
 * `retrying`, naming the file, while they are, and `removed` once they are gone (plan.ts `planRemoval`).
 *
 * Records are forgotten once nothing more is to be told of them: their instance shown retired by the service
 * (not `deployed`), or left out of a complete listing (`complete`); the former root goes with its last record.
 * A dry run forgets nothing. Only retired instances' files are read: a pass costs nothing for the others.
 */
export async function formerRootLeftovers(
  fs: FsPort,
  state: LocalState,
  instances: readonly Pick<
    ConfigInstanceHead,
    'id' | 'relative_filepath' | 'target_status' | 'activity_status'
  >[],
  options: { complete: boolean; dryRun: boolean },
): Promise<Map<string, FormerRootFile>> {
  const found = new Map<string, FormerRootFile>();
  const former = state.formerRoot;
  if (former === undefined) return found;
  const byId = new Map<string, (typeof instances)[number]>();
  for (const instance of instances) byId.set(instance.id, instance);
  const forget = (relative: string) => {
    if (!options.dryRun) former.files.delete(relative);
  };
  for (const [relative, file] of [...former.files]) {
    const instance = byId.get(file.instanceId);
    if (instance === undefined) {
      if (options.complete) forget(relative);
      continue;
    }
    if (instance.target_status === 'deployed' || instance.relative_filepath !== relative) continue;
    if (instance.activity_status !== 'deployed') {
      forget(relative);
      continue;
    }
    found.set(instance.id, {
      at: path.join(former.rootDir, relative),
      present: await holdsBytes(fs, former.rootDir, relative, file.sha256),
    });
  }
  if (former.files.size === 0 && !options.dryRun) delete state.formerRoot;
  return found;
}

/**
 * Whether the file at `relative` under `rootDir` holds bytes hashing to `sha256`. Absent (or its root gone), other
 * bytes, or something else there (a symlink, a directory): no. One that cannot be read (EACCES, EIO, a mount
 * away) counts as there: the agent never says `removed` of bytes it could not look for.
 */
async function holdsBytes(fs: FsPort, rootDir: string, relative: string, sha256: string): Promise<boolean> {
  const look = async () => {
    // The root itself gone (renamed to the new one, removed): nothing of it is there.
    await fs.stat(rootDir);
    const file = await hashRegularFile(fs, rootDir, relative);
    return file?.sha256 === sha256;
  };
  try {
    // Bounded on a mount that may hang (a root moved off a dead NFS server): its calls waited in the kernel, and the
    // pass with them, for as long as the server stayed dead (review33). Past the bound: ETIMEDOUT, so still there.
    return await (fs.throughMountAt === undefined ? look() : fs.throughMountAt(rootDir, look));
  } catch (error) {
    if (error instanceof PathRejectedError) return false;
    const code = errnoCode(error);
    return code !== 'ENOENT' && code !== 'ENOTDIR';
  }
}
