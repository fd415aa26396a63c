// The reconciler-against-the-mock world of the runPass tests: a temp root and state dir, the mock service, a Reconciler.
import { rmSync } from 'node:fs';
import { lstat, mkdir, mkdtemp, readFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { FaultRequest } from '../../src/api/admin-schemas.js';
import { type ClientOptions, createClient, type ServiceClient } from '../../src/api/client.js';
import { hangSafeFs } from '../../src/cli/hang-safe-fs.js';
import type { Clock } from '../../src/lib/clock.js';
import type { Deps } from '../../src/lib/deps.js';
import { silentLogger } from '../../src/lib/logger.js';
import { type RunningMockServer, startMockServer } from '../../src/mock-server/server.js';
import type { ConfigInstanceRecord } from '../../src/mock-server/state.js';
import type { PassOptions, PassResult, ReconcilerSettings } from '../../src/reconcile/pass-runner.js';
import { Reconciler } from '../../src/reconcile/reconcile.js';
import { DirectorySyncLedger } from '../../src/store/directory-syncs.js';
import { mockRecord } from './instances.js';

/** The listing route, for faults on the pull. */
export const LIST = '^/v1/config_instances$';

/** A clock that stands still on 2026-06-01 (monotonic 1,000 ms) and whose sleeps return at once. */
export function fixedClock(): Clock {
  return {
    now: () => Date.parse('2026-06-01T00:00:00.000Z'),
    monotonic: () => 1_000,
    sleep: async () => undefined,
  };
}

/** The settings every world's Reconciler opens with unless told otherwise: dvc_1, 0640/0750, 3 attempts, no request retries. */
export function worldSettings(rootDir: string, stateDir: string): ReconcilerSettings {
  return {
    deviceId: 'dvc_1',
    rootDir,
    stateDir,
    fileMode: 0o640,
    dirMode: 0o750,
    retry: { maxAttempts: 3, baseDelaySeconds: 10, maxDelaySeconds: 60 },
    requestRetries: 0,
  };
}

/** The client's options a test may change: where it sends (a proxy in front of the mock), its caps. */
export type WorldClientOptions = Partial<Pick<ClientOptions, 'baseUrl' | 'timeoutMs' | 'maxResponseBytes'>>;

/** What one Reconciler.open takes: each part over the world's defaults (settings merged key by key). */
export interface OpenOptions {
  /**
   * fs (the production port's local form, hangSafeFs without lanes, for the open's rootDir and stateDir: what ships;
   * a test injecting faults gives its own), clock (fixedClock), random (0.5), logger (silent), heapCheckpoint...
   */
  deps?: Partial<Deps>;
  settings?: Partial<ReconcilerSettings>;
  /** The response cap of the client and the settings' (the pull's byte budget) alike; unset: the client's 1 MiB. */
  maxResponseBytes?: number;
  clientOptions?: WorldClientOptions;
  /** A ready client, used as it is (clientOptions and wrapClient are then not used); default world.client. */
  client?: ServiceClient;
  /** Wraps the client made from clientOptions (a test that watches or fails reports). */
  wrapClient?: (client: ServiceClient) => ServiceClient;
  readOnly?: boolean;
}

export interface PassWorldOptions extends Omit<OpenOptions, 'client' | 'readOnly'> {
  /** The temp dir is `config-agent-<name>-XXXXXX`. */
  name: string;
  /** The mock's one key (default `sk_test_<name>_0123456789abcdef`). */
  apiKey?: string;
  /** Where the temp dir goes (default os.tmpdir(), /dev/shm in the unit tier). */
  parent?: string;
  /** Open a Reconciler before returning (default true); false when a test opens its own. */
  open?: boolean;
}

export interface PassWorld {
  readonly dir: string;
  /** `<dir>/root`, made empty. */
  readonly rootDir: string;
  /** `<dir>/state`, made 0700 and empty. */
  readonly stateDir: string;
  readonly server: RunningMockServer;
  readonly apiKey: string;
  /** The client of the world's clientOptions (unwrapped): what open uses unless told other client options. */
  readonly client: ServiceClient;
  /** The Reconciler last opened (throws when none is open). */
  readonly reconciler: Reconciler;
  /** Closes the open Reconciler, if any, and opens one with `options` over the world's defaults. */
  open(options?: OpenOptions): Promise<Reconciler>;
  /** Opens a Reconciler, runs one full pass and closes it: a run of `--once`. */
  runOnce(options?: OpenOptions): Promise<PassResult>;
  /** A pass of the open Reconciler (full unless told). */
  pass(options?: Partial<PassOptions>): Promise<PassResult>;
  /** Puts an instance on the service exactly as given over mockRecord's defaults (statuses included). */
  put(fields: Partial<ConfigInstanceRecord> & { id: string }): void;
  fault(request: FaultRequest): void;
  /** The reports the service received, as `id activity/error`. */
  reports(): string[];
  /** A file under rootDir, as text. */
  fileAt(relative: string): Promise<string>;
  /** Whether anything (a link too) is at that path under rootDir. */
  exists(relative: string): Promise<boolean>;
  /** Closes the Reconciler and the mock, removes the temp dir. */
  close(): Promise<void>;
}

export async function createPassWorld(options: PassWorldOptions): Promise<PassWorld> {
  const apiKey = options.apiKey ?? `sk_test_${options.name}_0123456789abcdef`;
  const dir = await mkdtemp(path.join(options.parent ?? os.tmpdir(), `config-agent-${options.name}-`));
  const rootDir = path.join(dir, 'root');
  const stateDir = path.join(dir, 'state');
  await mkdir(rootDir);
  await mkdir(stateDir, { mode: 0o700 });
  const server = await startMockServer({ apiKeys: [apiKey] });
  let current: Reconciler | undefined;

  const makeClient = (open: OpenOptions) =>
    createClient({
      baseUrl: server.url,
      apiKey,
      timeoutMs: 10_000,
      maxResponseBytes: open.maxResponseBytes ?? options.maxResponseBytes ?? 1 << 20,
      ...options.clientOptions,
      ...open.clientOptions,
    });
  const client = makeClient({});

  function clientFor(open: OpenOptions): ServiceClient {
    if (open.client !== undefined) return open.client;
    const made =
      open.clientOptions === undefined && open.maxResponseBytes === undefined ? client : makeClient(open);
    const wrap = open.wrapClient ?? options.wrapClient;
    return wrap === undefined ? made : wrap(made);
  }

  // One per world, as one per process (cli/compose.ts keeps it across reloads).
  const directorySyncs = new DirectorySyncLedger();

  async function openReconciler(open: OpenOptions = {}): Promise<Reconciler> {
    const cap = open.maxResponseBytes ?? options.maxResponseBytes;
    const settings: ReconcilerSettings = {
      ...worldSettings(rootDir, stateDir),
      ...(cap === undefined ? {} : { maxResponseBytes: cap }),
      ...options.settings,
      ...open.settings,
    };
    const given = open.deps?.fs ?? options.deps?.fs;
    const deps: Deps = {
      fs:
        given ??
        (await hangSafeFs(settings.rootDir, { monotonic: () => 1_000 }, undefined, directorySyncs, {
          stateDir: settings.stateDir,
        })),
      clock: fixedClock(),
      random: () => 0.5,
      logger: silentLogger(),
      ...options.deps,
      ...open.deps,
    };
    return Reconciler.open(deps, settings, clientFor(open), { readOnly: open.readOnly ?? false });
  }

  const world: PassWorld = {
    dir,
    rootDir,
    stateDir,
    server,
    apiKey,
    client,
    get reconciler(): Reconciler {
      if (current === undefined) throw new Error('no Reconciler is open in this world');
      return current;
    },
    async open(open = {}) {
      await current?.close();
      current = undefined;
      current = await openReconciler(open);
      return current;
    },
    async runOnce(open = {}) {
      const reconciler = await openReconciler(open);
      try {
        return await reconciler.runPass({ mode: 'full' });
      } finally {
        await reconciler.close();
      }
    },
    pass: (pass = {}) => world.reconciler.runPass({ mode: 'full', ...pass }),
    put(fields) {
      server.state.instances.set(fields.id, mockRecord(fields.id, fields));
    },
    fault(request) {
      server.state.addFault(request);
    },
    reports: () =>
      server.state.reports.map((r) => `${r.config_instance_id} ${r.activity_status}/${r.error_status}`),
    fileAt: (relative) => readFile(path.join(rootDir, relative), 'utf8'),
    exists: (relative) =>
      lstat(path.join(rootDir, relative)).then(
        () => true,
        () => false,
      ),
    async close() {
      try {
        await current?.close();
      } finally {
        current = undefined;
        await server.close();
        // On the calling thread: the promise rm is a pool round trip for each entry (a world of 100 files, ~300
        // entries with the content cache: 6.8 ms of CPU against 2.6 ms; one file: 0.8 against 0.2 ms).
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
  if (options.open ?? true) await world.open();
  return world;
}
