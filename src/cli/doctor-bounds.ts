// The checks of places that `doctor` and `init` make (hook programs, own paths, rootDir, stateDir), bounded on hung mounts.
import * as nodeFs from 'node:fs/promises';
import type { HookCheckUnanswered } from '../config/hook-programs.js';
import type { ConfigFs } from '../config/load.js';
import type { OwnPathsPort } from '../config/own-paths.js';
import { MAX_UNANSWERED_CHECKS } from '../daemon/hooks.js';
import { systemClock } from '../lib/clock.js';
import type { FsPort } from '../lib/fs-port.js';
import { hangSafeConfigCalls, type MountTablePort } from './hang-safe-fs.js';
import { MOUNT_ANSWER_MS, MountLanes, MountNotAnswering } from './mount-gate.js';

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
}

/**
 * The port doctor and init judge places on (`assertConfigPlaces`): start-up's gated calls (`hangSafeConfigCalls`:
 * one call at a time into each mount that may hang, failing with ETIMEDOUT after the bound), and no call at all once
 * MAX_UNANSWERED_CHECKS mounts have a call unanswered, as the daemon's hook checks stop there: the command's own later
 * calls (the key, the service's name lookup, init's writes) need a thread of libuv's pool too.
 */
export async function boundedPlaces(
  env: PlacesBounds,
): Promise<{ fs: ConfigFs; ownPathsPort: OwnPathsPort }> {
  const lanes = new MountLanes(systemClock, env.mountAnswerMs ?? MOUNT_ANSWER_MS);
  const calls = await hangSafeConfigCalls(
    lanes,
    env.placesFs ?? (nodeFs as unknown as FsPort),
    ...(env.mountTable === undefined ? [] : [env.mountTable]),
  );
  const refuse = (): void => {
    const late = lanes.lateMounts();
    if (late.length >= MAX_UNANSWERED_CHECKS) throw new ChecksNotAnswering(late);
  };
  const fs = new Proxy(calls.fs, {
    get(target, name, receiver) {
      const value: unknown = Reflect.get(target, name, receiver);
      if (typeof value !== 'function') return value;
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
  const capped =
    <A extends unknown[], T>(call: (...args: A) => Promise<T>) =>
    (...args: A): Promise<T> => {
      try {
        refuse();
      } catch (error) {
        return Promise.reject(error);
      }
      return call(...args);
    };
  return {
    fs: fs as ConfigFs,
    // The agent's own paths are resolved first (a hook program among them): as bounded, as capped.
    ownPathsPort: {
      ...own,
      realpath: capped((file: string) => own.realpath(file)),
      readlink: capped((file: string) => own.readlink(file)),
      stat: capped((file: string) => own.stat(file)),
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
