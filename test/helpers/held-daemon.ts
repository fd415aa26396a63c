// A daemon's clock and pass runner held by a unit test: poll waits released by hand, each pass's writes scripted.
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { parseAgentConfig } from '../../src/config/load.js';
import type { AgentConfig } from '../../src/config/schema.js';
import type { Clock } from '../../src/lib/clock.js';
import type { PassOptions, PassResult, PassRunner } from '../../src/reconcile/pass-runner.js';
import { emptyState } from '../../src/store/state.js';

/** A wait of the held clock: called, it ends; `ms` is how long the daemon asked to wait. */
export type HeldWait = (() => void) & { readonly ms: number };

/** Every wait ends only when the test releases it (`waits.shift()?.()`); wall time stands still. */
export class HeldClock implements Clock {
  readonly waits: HeldWait[] = [];
  /** The monotonic time: moved by hand when a test sets it, the real one otherwise. */
  mono: number | undefined;
  constructor(mono?: number) {
    this.mono = mono;
  }
  now(): number {
    return Date.parse('2030-06-01T12:00:00Z');
  }
  monotonic(): number {
    return this.mono ?? Date.now();
  }
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const onAbort = () => reject(signal?.reason);
      const end = () => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      };
      this.waits.push(Object.assign(end, { ms }));
      if (signal?.aborted) onAbort();
      else signal?.addEventListener('abort', onAbort, { once: true });
    });
  }
}

/**
 * Each pass "writes" the next path of `writes` (none: a pass that changes nothing): pending for its hooks, as
 * record.ts keeps it in state.json, until the daemon settles it; paths kept back at a stop are pending again. A
 * `[path, content]` is written for real under `rootDir` first (a hook then reads it).
 */
export class ScriptedRunner implements PassRunner {
  readonly state = emptyState('dvc_unit', '/unused');
  readonly pending = new Set<string>();
  readonly writes: (string | [file: string, content: string])[] = [];
  passes = 0;
  pendingReports = 0;
  constructor(private readonly rootDir?: string) {}
  async runPass(options: PassOptions): Promise<PassResult> {
    this.passes += 1;
    const write = this.writes.shift();
    const file = typeof write === 'string' ? write : write?.[0];
    if (Array.isArray(write)) {
      if (this.rootDir === undefined)
        throw new Error('a ScriptedRunner that writes contents needs a rootDir');
      await writeFile(path.join(this.rootDir, write[0]), write[1]);
    }
    if (file !== undefined) this.pending.add(file);
    return {
      mode: options.mode,
      dryRun: false,
      startedAt: '2030-06-01T12:00:00.000Z',
      durationMs: 1,
      reachable: true,
      steps: [],
      outcomes:
        file === undefined
          ? []
          : [{ instanceId: `ins_${file}`, path: file, action: 'written', converged: true, reason: 'new' }],
      reports: { delivered: 0, rejected: 0, pending: 0 },
      sweptTempFiles: [],
      converged: true,
    };
  }
  hasDueRetries(): boolean {
    return false;
  }
  nextRetryAt(): number | undefined {
    return undefined;
  }
  pendingHookPaths(): string[] {
    return [...this.pending];
  }
  settleHookPaths(paths: readonly string[]): void {
    for (const changed of paths) this.pending.delete(changed);
  }
  keepHookPaths(paths: readonly string[]): void {
    for (const changed of paths) this.pending.add(changed);
  }
  async flushState(): Promise<void> {}
  async close(): Promise<void> {}
}

/**
 * The config of an in-process daemon on a held clock (startAgent): its local API at `socketPath`, 60 s polls, no drift
 * watch; rootDir and stateDir are named only (the ScriptedRunner touches neither).
 */
export function heldDaemonConfig(deviceId: string, socketPath: string, source: string): AgentConfig {
  return parseAgentConfig(
    {
      deviceId,
      server: { baseUrl: 'https://dcds.example.com' },
      rootDir: '/srv/config',
      stateDir: '/var/lib/config-agent',
      socketPath,
      poll: { intervalSeconds: 60 },
      drift: 'off',
    },
    source,
  );
}
