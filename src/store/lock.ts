// One agent per state directory: a pid lock file, so `--once` never sweeps a running daemon's temp files.

import { randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { AgentError, errnoCode } from '../lib/errors.js';
import type { FsPort } from '../lib/fs-port.js';

export const LOCK_FILE = 'agent.lock';

const LockContent = z.object({
  pid: z.number().int().positive(),
  procStart: z.string().optional(),
  /** Random per acquisition: a release only ever removes the lock it took, even within one process. */
  token: z.string().optional(),
});
type LockContent = z.infer<typeof LockContent>;

/** Another live agent holds the state directory. */
export class StateLockedError extends AgentError {
  readonly pid: number;
  constructor(stateDir: string, pid: number) {
    super(
      'state_locked',
      `another config-agent (pid ${pid}) is using ${stateDir}; ask it with 'config-agent sync' instead`,
      { retryable: false },
    );
    this.pid = pid;
  }
}

/** How the lock tells a live holder from a dead one: injected so tests need no second process. */
export interface ProcessProbe {
  self(): Promise<Omit<LockContent, 'token'>>;
  /** Whether the process that wrote `content` still runs (same pid and, where known, same start time). */
  alive(content: LockContent): Promise<boolean>;
}

export interface StateLock {
  release(): Promise<void>;
}

/**
 * Takes `stateDir/agent.lock` (O_EXCL). A lock left by a dead process (crash, power cut) is taken over; the
 * holder's start time guards against a recycled pid.
 */
export async function acquireStateLock(
  fs: FsPort,
  stateDir: string,
  probe: ProcessProbe = linuxProcessProbe,
): Promise<StateLock> {
  const file = path.join(stateDir, LOCK_FILE);
  const mine: LockContent = { ...(await probe.self()), token: randomBytes(12).toString('hex') };
  for (let attempt = 0; attempt < 3; attempt += 1) {
    try {
      const handle = await fs.open(file, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o600);
      try {
        await handle.writeFile(JSON.stringify(mine));
      } finally {
        await handle.close();
      }
      return { release: () => releaseLock(fs, file, mine) };
    } catch (error) {
      if (errnoCode(error) !== 'EEXIST') throw error;
    }
    const holder = await readLock(fs, file);
    if (holder !== undefined && holder.pid !== mine.pid && (await probe.alive(holder))) {
      throw new StateLockedError(stateDir, holder.pid);
    }
    await fs.unlink(file).catch((error: unknown) => {
      if (errnoCode(error) !== 'ENOENT') throw error;
    });
  }
  throw new StateLockedError(stateDir, 0);
}

async function readLock(fs: FsPort, file: string): Promise<LockContent | undefined> {
  try {
    const parsed = LockContent.safeParse(JSON.parse((await fs.readFile(file, 'utf8')) as string));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

async function releaseLock(fs: FsPort, file: string, mine: LockContent): Promise<void> {
  const holder = await readLock(fs, file);
  if (holder?.token === mine.token) {
    await fs.unlink(file).catch(() => undefined);
  }
}

/** Field 22 of /proc/<pid>/stat: the process's start time in clock ticks since boot. */
async function procStart(pid: number | 'self'): Promise<string | undefined> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces and parentheses: count fields after its closing one.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

export const linuxProcessProbe: ProcessProbe = {
  async self() {
    const start = await procStart('self');
    return start === undefined ? { pid: process.pid } : { pid: process.pid, procStart: start };
  },
  async alive(content) {
    try {
      process.kill(content.pid, 0);
    } catch (error) {
      if (errnoCode(error) !== 'EPERM') return false;
    }
    if (content.procStart === undefined) return true;
    return (await procStart(content.pid)) === content.procStart;
  },
};
