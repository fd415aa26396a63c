// The one object through which every side effect reaches the code: built in main.ts, faked in tests.
import type { Transport } from '../api/transport.js';
import type { Clock } from './clock.js';
import type { FsPort } from './fs-port.js';
import type { Logger } from './logger.js';

export interface Deps {
  fs: FsPort;
  clock: Clock;
  /** Uniform in [0, 1): jitter and temp-file names' entropy come from here or from crypto. */
  random: () => number;
  logger: Logger;
  /**
   * How the service client sends its requests (api/transport.ts: node:http, or undici through
   * dispatcherTransport); undefined means the client builds its own (createServiceTransport).
   */
  transport?: Transport;
  /**
   * The daemon calls this when it goes idle after a pass, with the wait ahead (ms), to give memory back to the
   * system (a full collection, lib/release-memory.ts); absent in tests and for `--once`, which exits instead.
   */
  releaseMemory?: (waitMs: number) => void;
  /**
   * A pass calls this between units of work (each pulled item, each applied step, before the last delivery):
   * a full collection once the used heap grew enough since the last (lib/release-memory.ts `heapCheckpoint`).
   * Absent in tests.
   */
  heapCheckpoint?: () => void;
}
