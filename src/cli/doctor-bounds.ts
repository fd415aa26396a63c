// The checks of places that `doctor` and `init` make (hook programs, own paths, rootDir, stateDir), bounded on hung mounts.
import { spawn } from 'node:child_process';
import * as nodeFs from 'node:fs/promises';
import type { HookCheckUnanswered } from '../config/hook-programs.js';
import type { ConfigFs } from '../config/load.js';
import { KERNEL_FILESYSTEMS, type OwnPathsPort } from '../config/own-paths.js';
import { MAX_UNANSWERED_CHECKS } from '../daemon/hooks.js';
import { systemClock } from '../lib/clock.js';
import type { FsPort } from '../lib/fs-port.js';
import { unescapeMountPath } from '../lib/own-mounts.js';
import {
  hangSafeConfigCalls,
  type MountTablePort,
  mountHoldingThatMayHang,
  mountOnTheWay,
} from './hang-safe-fs.js';
import { MOUNT_ANSWER_MS, MountLanes, MountNotAnswering, PATH_CALLS } from './mount-gate.js';

/** A check not made: MAX_UNANSWERED_CHECKS calls into mounts that may hang have not answered (each holds a thread). */
class ChecksNotAnswering extends MountNotAnswering {
  constructor(mounts: readonly string[]) {
    super(mounts.join(', '), 0);
    this.message = `ETIMEDOUT: not checked: the mounts at ${mounts.join(', ')} have not answered (a dead NFS server, a wedged FUSE daemon?), and each holds one of the process's four fs threads`;
    this.name = 'ChecksNotAnswering';
  }
}

/** Where doctor's and init's checks of places are made; tests stand in for a dead mount. */
export interface PlacesBounds {
  /** The port the checks go through (node:fs/promises, or init's own), gated here. */
  placesFs?: FsPort | undefined;
  /** Which mounts may hang: /proc/self/mountinfo unless given. */
  mountTable?: Pick<MountTablePort, 'mountinfo'> | undefined;
  /** A call's bound into such a mount: MOUNT_ANSWER_MS unless given. */
  mountAnswerMs?: number | undefined;
  /** How a mount is asked from another process before this one's first call into it: askInChild unless given. */
  askElsewhere?: AskElsewhere | undefined;
}

/**
 * Asks from another process whether the mount holding `file` answers (a lookup of `file`): `answered` settles once it
 * did (or could not be asked at all); `end` gives the asking up (its process killed), for the command's end.
 */
export type AskElsewhere = (file: string) => { answered: Promise<void>; end(): void };

/**
 * `test -e <file>` in a `/bin/sh` of its own. A lookup on a dead NFS server or an unserved FUSE mount waits in the
 * kernel; in a child it holds no thread of this process's pool (whose exit would wait on it, ending the command by
 * SIGTERM, 143, instead of its own code), and SIGKILL ends it (those waits are killable).
 */
export const askInChild: AskElsewhere = (file) => {
  const child = spawn('/bin/sh', ['-c', 'test -e "$1"', 'sh', file], { stdio: 'ignore' });
  child.unref();
  const answered = new Promise<void>((resolve) => {
    child.once('exit', () => resolve());
    // No shell to ask with: this process asks itself, as before.
    child.once('error', () => resolve());
  });
  return {
    answered,
    end: () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    },
  };
};

/** The port's calls on a path (its first argument) that ask its mount first: the mount gate's, which all return promises. */
const ASKED_FIRST: ReadonlySet<string> = new Set(PATH_CALLS);

/** The mount points of mountinfo's text whose filesystems may hang and hold files (not local, not the kernel's). */
function mountsToAsk(mountinfo: string): Set<string> {
  const found = new Set<string>();
  for (const line of mountinfo.split('\n')) {
    const fields = line.split(' ');
    const dash = fields.indexOf('-', 6);
    const mountPoint = fields[4];
    const type = dash === -1 ? undefined : fields[dash + 1];
    if (mountPoint === undefined || type === undefined || KERNEL_FILESYSTEMS.has(type)) continue;
    const point = unescapeMountPath(mountPoint);
    // Not local (hang-safe-fs.ts's list): the mount holding its own point is itself.
    if (mountHoldingThatMayHang(mountinfo, point) === point) found.add(point);
  }
  return found;
}

/**
 * The port doctor and init judge places on (`assertConfigPlaces`): start-up's gated calls (`hangSafeConfigCalls`:
 * one call at a time into each mount that may hang, failing with ETIMEDOUT after the bound), and no call at all once
 * MAX_UNANSWERED_CHECKS mounts have a call unanswered, as the daemon's hook checks stop there: the command's own later
 * calls (the key, the service's name lookup, init's writes) need a thread of libuv's pool too.
 */
export async function boundedPlaces(
  env: PlacesBounds,
): Promise<{ fs: ConfigFs; ownPathsPort: OwnPathsPort; close(): void }> {
  const lanes = new MountLanes(systemClock, env.mountAnswerMs ?? MOUNT_ANSWER_MS);
  const calls = await hangSafeConfigCalls(
    lanes,
    env.placesFs ?? (nodeFs as unknown as FsPort),
    ...(env.mountTable === undefined ? [] : [env.mountTable]),
  );
  const mountinfo = (await calls.ownPathsPort.mountinfo()) ?? '';
  const toAsk = mountsToAsk(mountinfo);
  const ask = env.askElsewhere ?? askInChild;
  const asking = new Map<string, Promise<void>>();
  const askings: { end(): void }[] = [];
  /**
   * Before this process's first call into a mount that may hang, the mount is asked from another process through its
   * lane: one that does not answer within the bound leaves the lane late, so this process's calls into it are refused
   * at once and none of its pool threads waits there (a stuck one turned the command's exit into SIGTERM, 143).
   */
  const askedFirst = (file: unknown): Promise<void> => {
    if (toAsk.size === 0 || typeof file !== 'string') return Promise.resolve();
    const mount = mountOnTheWay(mountinfo, file);
    if (mount === undefined || !toAsk.has(mount)) return Promise.resolve();
    let asked = asking.get(mount);
    if (asked === undefined) {
      asked = lanes
        .through(mount, () => {
          const one = ask(file);
          askings.push(one);
          return one.answered;
        })
        .catch(() => undefined);
      asking.set(mount, asked);
    }
    return asked;
  };
  const refuse = (): void => {
    const late = lanes.lateMounts();
    if (late.length >= MAX_UNANSWERED_CHECKS) throw new ChecksNotAnswering(late);
  };
  /** `call(file, ...)` once its mount was asked, unless MAX_UNANSWERED_CHECKS mounts have not answered. */
  const guarded =
    <A extends unknown[], T>(call: (...args: A) => Promise<T>) =>
    async (...args: A): Promise<T> => {
      refuse();
      await askedFirst(args[0]);
      refuse();
      return call(...args);
    };
  const fs = new Proxy(calls.fs, {
    get(target, name, receiver) {
      const value: unknown = Reflect.get(target, name, receiver);
      if (typeof value !== 'function') return value;
      if (typeof name === 'string' && ASKED_FIRST.has(name))
        return guarded((...args: unknown[]) => Reflect.apply(value, target, args) as Promise<unknown>);
      // Anything else (a port's synchronous helpers) as it is, refused alike past the cap.
      return (...args: unknown[]) => {
        try {
          refuse();
        } catch (error) {
          return Promise.reject(error);
        }
        return Reflect.apply(value, target, args);
      };
    },
  });
  const own = calls.ownPathsPort;
  return {
    fs: fs as ConfigFs,
    // The agent's own paths are resolved first (a hook program among them): as bounded, as capped.
    ownPathsPort: {
      ...own,
      realpath: guarded((file: string) => own.realpath(file)),
      readlink: guarded((file: string) => own.readlink(file)),
      stat: guarded((file: string) => own.stat(file)),
    },
    // The askings still waiting in the kernel are given up (their processes killed): the command is ending.
    close: () => {
      for (const one of askings.splice(0)) one.end();
    },
  };
}

/** Whether `error` is a bounded call that did not answer (or was not made while two mounts have not): not judged. */
export function notAnswered(error: unknown): error is MountNotAnswering {
  return error instanceof MountNotAnswering;
}

/** What doctor and init say of a hook program whose check did not answer: the agent takes it unjudged. */
export function notJudgedText(unanswered: HookCheckUnanswered): string {
  return `${unanswered.hook} (${unanswered.program}) not judged: its check did not answer (${unanswered.why}); the agent takes it unjudged and refuses each run while the check does not answer`;
}
