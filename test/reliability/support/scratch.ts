// Where crash tests keep their worlds: tmpfs when it has room (fsync is free there), else the temp dir.
import { constants } from 'node:fs';
import { access, statfs } from 'node:fs/promises';
import os from 'node:os';

const TMPFS = '/dev/shm';
/** A few lanes of configs, their cached versions and state: containers often give /dev/shm only 64 MiB. */
const NEEDED_BYTES = 1024 ** 3;

export async function scratchParent(): Promise<string> {
  try {
    await access(TMPFS, constants.W_OK);
    const stats = await statfs(TMPFS);
    if (stats.bavail * stats.bsize >= NEEDED_BYTES) return TMPFS;
  } catch {
    // No usable tmpfs: the temp dir it is.
  }
  return os.tmpdir();
}
