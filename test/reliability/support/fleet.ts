// A device's world for crash tests: the mock service (in-process, loopback), a root and state dir anywhere
// (tmp, LazyFS), every version the service ever deployed per path, and the invariants checked after a crash.
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { lstat, mkdir, open, readdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { type RunningMockServer, startMockServer } from '../../../src/mock-server/server.js';
import type { ConfigInstanceRecord } from '../../../src/mock-server/state.js';
import { serializeContent } from '../../../src/reconcile/serialize.js';
import { TEMP_PREFIX } from '../../../src/store/path-guard.js';
import { AGENT_BIN, collect, type RunResult } from '../../helpers/harness.js';
import { pick, type Random, randomInt } from './random.js';

/** Runs through every reliability case; it must appear nowhere (output, logs, root, state dir). */
export const CANARY_KEY = 'sk_canary_7f3a9c1e5b2d4f6a8c0e1b3d5f7a9c2e';

/** Files an operator put in the root: the agent never wrote them, so it must never delete or change them. */
const FOREIGN_FILES: Record<string, string> = {
  'operator-notes.txt': 'planted by the operator; not the agent\u2019s\n',
  'etc/app/local.override': '{"operator": true}\n',
};

/** Managed paths: JSON and YAML, shallow and deep, sharing directories with each other and with foreign files. */
const SMALL_PATHS = [
  'etc/app/config.json',
  'etc/app/flags.yaml',
  'etc/db/pool.json',
  'srv/robot/arm/calibration.json',
  'srv/robot/arm/limits.yml',
  'opt/vendor/a/b/c/deep.json',
  'net.yaml',
  'srv/robot/leg/gait.json',
];
const BIG_PATH = 'var/lib/app/model-params.json';
/**
 * Two paths of one config schema: deploying at one retires the instance at the other, queued or deployed (the
 * service's schema conflict), so the agent swaps them — removes one file and writes the other, rolling back on
 * failure. A queued one retired may have had its file published by a killed run that never recorded it: the
 * write's declaration (`intent.json`, src/store/intent-journal.ts) must still get that file removed. Swaps were
 * once restricted to deployed instances, which hid that leak (RELIABILITY_SEED=2846312739, 150 kills).
 */
const SWAP_PATHS = ['srv/motion/left.json', 'srv/motion/right.json'];
const SWAP_SCHEMA = 'cfs_motion';

export interface FleetOptions {
  /** Where the config and key files go (never on the filesystem under test). */
  dir: string;
  rootDir: string;
  stateDir: string;
  /** Size of the one large config's payload; 0 leaves it out. */
  bigFileBytes: number;
  /** Extra config keys over the defaults below. */
  config?: Record<string, unknown>;
  /** Keys of `server` over the defaults (e.g. a short timeoutSeconds). */
  server?: Record<string, unknown>;
  /** Adds SWAP_PATHS, whose versions move between the two paths (swaps of one schema). */
  schemaSwaps?: boolean;
}

/**
 * Directories a crash left renamed aside by a directory renewal (docs/durable-writes.md): the relative aside path
 * (`srv/robot/.config-agent.tmp-…`) → the relative path of the name it stands for (`srv/robot/arm`). A file in an
 * aside is checked as the file at its name, which the next start puts back.
 */
export type AsidesView = ReadonlyMap<string, string>;

/** Where `relativePath` lies now: inside an aside when one of its directories is renamed aside. */
function asideOf(relativePath: string, asides: AsidesView): string {
  for (const [aside, name] of asides) {
    if (relativePath.startsWith(`${name}/`)) return asideOf(aside + relativePath.slice(name.length), asides);
  }
  return relativePath;
}

/** The path a file found at `found` stands for once every aside on its way is back at its name. */
function namedOf(found: string, asides: AsidesView): string {
  for (const [aside, name] of asides) {
    if (found.startsWith(`${aside}/`)) return namedOf(name + found.slice(aside.length), asides);
  }
  return found;
}

export interface Violation {
  path: string;
  problem: string;
}

/** `length` hex digits from the seeded generator: twin fleets built with one seed hold identical bytes. */
function randomHex(random: Random, length: number): string {
  const bytes = Buffer.alloc(Math.ceil(length / 2));
  for (let i = 0; i < bytes.length; i += 4) {
    const word = (random() * 2 ** 32) >>> 0;
    for (let b = 0; b < 4 && i + b < bytes.length; b += 1) bytes[i + b] = (word >>> (8 * b)) & 0xff;
  }
  return bytes.toString('hex').slice(0, length);
}

const sha = (data: Uint8Array) => createHash('sha256').update(data).digest('hex');

export class Fleet {
  readonly server: RunningMockServer;
  readonly deviceId = 'dvc_reliability';
  readonly dir: string;
  readonly rootDir: string;
  readonly stateDir: string;
  readonly configPath: string;
  readonly paths: readonly string[];
  readonly bigFileBytes: number;
  /** sha256 of the bytes of every version ever created, per path: after a crash a file must be one of them. */
  readonly #versions = new Map<string, Set<string>>();
  readonly #expected = new Map<string, Buffer>();
  #keyPath = '';
  #options: FleetOptions | undefined;
  #sequence = 0;

  private constructor(server: RunningMockServer, options: FleetOptions) {
    this.server = server;
    this.dir = options.dir;
    this.rootDir = options.rootDir;
    this.stateDir = options.stateDir;
    this.configPath = path.join(options.dir, 'config.json');
    this.bigFileBytes = options.bigFileBytes;
    this.paths = [
      ...SMALL_PATHS,
      ...(options.bigFileBytes > 0 ? [BIG_PATH] : []),
      ...(options.schemaSwaps === true ? SWAP_PATHS : []),
    ];
  }

  static async create(options: FleetOptions): Promise<Fleet> {
    const server = await startMockServer({
      port: 0,
      host: '127.0.0.1',
      apiKeys: [CANARY_KEY],
      fixtures: { devices: [{ id: 'dvc_reliability' }] },
    });
    const fleet = new Fleet(server, options);
    await mkdir(options.dir, { recursive: true });
    await mkdir(options.rootDir, { recursive: true });
    const keyPath = path.join(options.dir, 'api-key');
    await writeFile(keyPath, `${CANARY_KEY}\n`, { mode: 0o600 });
    fleet.#keyPath = keyPath;
    fleet.#options = options;
    await fleet.writeConfig(server.url);
    for (const [relative, text] of Object.entries(FOREIGN_FILES)) {
      await mkdir(path.dirname(path.join(options.rootDir, relative)), { recursive: true });
      // Synced: an operator's file that predates the agent is on the platter before any power cut.
      const handle = await open(path.join(options.rootDir, relative), 'w', 0o644);
      await handle.writeFile(text);
      await handle.sync();
      await handle.close();
    }
    return fleet;
  }

  /** Writes the agent's config, pointing it at `baseUrl` (the mock, or a proxy in front of it). */
  async writeConfig(baseUrl: string, extra: Record<string, unknown> = {}): Promise<void> {
    const options = this.#options;
    const config = {
      deviceId: this.deviceId,
      server: { baseUrl, apiKeyFile: this.#keyPath, timeoutSeconds: 10, ...options?.server },
      rootDir: this.rootDir,
      stateDir: this.stateDir,
      retry: { maxAttempts: 5, baseDelaySeconds: 1, maxDelaySeconds: 2 },
      log: { level: 'info' },
      socketPath: path.join(this.dir, 'agent.sock'),
      ...options?.config,
      ...extra,
    };
    await writeFile(this.configPath, JSON.stringify(config, null, 2), { mode: 0o644 });
  }

  // ---- the service side ----

  /** This device's instances on the service, oldest first. */
  instances(): ConfigInstanceRecord[] {
    return [...this.server.state.instances.values()].filter((i) => i.device_id === this.deviceId);
  }

  instancesAt(relativePath: string): ConfigInstanceRecord[] {
    return this.instances().filter((i) => i.relative_filepath === relativePath);
  }

  /** Creates and deploys a new version at `relativePath` (the service queues the old one for removal). */
  deployVersion(relativePath: string, random: Random): string {
    this.#sequence += 1;
    const size = relativePath === BIG_PATH ? this.bigFileBytes : randomInt(random, 8 * 1024);
    const content = {
      path: relativePath,
      version: this.#sequence,
      // Random hex: two versions differ almost everywhere, so a splice of two is never a third.
      payload: randomHex(random, size),
      nested: { list: [this.#sequence, randomInt(random, 1_000_000)], flag: random() < 0.5 },
    };
    const at = new Date().toISOString();
    const schema = SWAP_PATHS.includes(relativePath) ? { config_schema_id: SWAP_SCHEMA } : {};
    const record = this.server.state.createInstance(
      { device_id: this.deviceId, relative_filepath: relativePath, content, ...schema },
      at,
    );
    this.server.state.deploy(record.id, { dryRun: false, at });
    const bytes = serializeContent(relativePath, content);
    this.#expected.set(record.id, bytes);
    const versions = this.#versions.get(relativePath) ?? new Set<string>();
    versions.add(sha(bytes));
    this.#versions.set(relativePath, versions);
    return record.id;
  }

  /**
   * The service moves the instances deployed at `a` and `b` each to the other's path (fix31's swap), queued again:
   * each path may then hold either one's bytes, and the service hears `deployed` only for the one now listed there.
   */
  swapPaths(a: string, b: string): void {
    const at = new Date().toISOString();
    const moves = [
      [this.instancesAt(a).find((i) => i.target_status === 'deployed'), b],
      [this.instancesAt(b).find((i) => i.target_status === 'deployed'), a],
    ] as const;
    for (const [instance, to] of moves) {
      if (instance === undefined) throw new Error(`swapPaths: nothing deployed at ${a} or ${b}`);
      const bytes = this.#expected.get(instance.id);
      if (bytes !== undefined) this.#versions.get(to)?.add(sha(bytes));
      this.server.state.instances.set(instance.id, {
        ...instance,
        relative_filepath: to,
        activity_status: 'queued',
        error_status: 'none',
        updated_at: at,
      });
    }
  }

  /** The operator retires an instance (the service queues its removal). */
  retire(instanceId: string): void {
    this.server.state.removeInstance(instanceId, new Date().toISOString());
  }

  /** The bytes the agent must write for an instance this fleet created. */
  bytesOf(instanceId: string): Buffer | undefined {
    return this.#expected.get(instanceId);
  }

  /** The instance deployed on disk (as the service knows it) and the one replacing it, at a path. */
  versionsAt(relativePath: string): { deployed?: string; next?: string } {
    const here = this.instancesAt(relativePath);
    const deployed = here.find((i) => i.activity_status === 'deployed')?.id;
    const next = here.find((i) => i.target_status === 'deployed' && i.activity_status !== 'deployed')?.id;
    return { ...(deployed === undefined ? {} : { deployed }), ...(next === undefined ? {} : { next }) };
  }

  /** Every path gets a first version. */
  deployAll(random: Random): void {
    for (const relativePath of this.paths) this.deployVersion(relativePath, random);
  }

  /**
   * What an operator does between two runs: new versions at some paths, the live instance retired now and
   * then (deployed or still queued: a queued one's file, published by a killed run that never recorded it, must
   * go too, proven by its declaration in intent.json), a retired path brought back. After convergence every
   * retired instance's file is gone.
   */
  mutate(random: Random, changeRatio = 0.3): void {
    for (const relativePath of this.paths) {
      const here = this.instancesAt(relativePath);
      const live = here.find((i) => i.target_status === 'deployed');
      const roll = random();
      const ratio = relativePath === BIG_PATH ? changeRatio / 3 : changeRatio;
      if (live === undefined) {
        if (roll < 0.5) this.deployVersion(relativePath, random);
      } else if (roll < ratio) {
        this.deployVersion(relativePath, random);
      } else if (roll < ratio + 0.04) {
        this.server.state.removeInstance(live.id, new Date().toISOString());
      }
    }
  }

  /** Whether the service still expects the agent to act at this path (a write or a removal). */
  #pending(here: readonly ConfigInstanceRecord[]): boolean {
    return here.some(
      (i) =>
        (i.target_status === 'deployed' && i.activity_status !== 'deployed') ||
        (i.target_status !== 'deployed' && i.activity_status === 'deployed'),
    );
  }

  // ---- the agent ----

  spawnOnce(args: readonly string[] = [], env: NodeJS.ProcessEnv = {}): ChildProcess {
    return spawn(process.execPath, [AGENT_BIN, '--config', this.configPath, '--once', ...args], {
      env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
  }

  /** The daemon (no `--once`): it polls as the config says until a signal stops it. */
  spawnDaemon(env: NodeJS.ProcessEnv = {}): ChildProcess {
    return spawn(process.execPath, [AGENT_BIN, '--config', this.configPath], {
      env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
  }

  runOnce(args: readonly string[] = [], timeoutMs = 60_000): Promise<RunResult> {
    return collect(this.spawnOnce(args), timeoutMs);
  }

  // ---- the world on disk ----

  /** Regular files under a directory (relative paths), never following symlinks; other kinds are named too. */
  async #walk(dir: string): Promise<{ files: string[]; others: string[] }> {
    const files: string[] = [];
    const others: string[] = [];
    const pending = [''];
    while (pending.length > 0) {
      const relative = pending.pop()!;
      const entries = await readdir(path.join(dir, relative), { withFileTypes: true }).catch(() => []);
      for (const entry of entries) {
        const child = relative === '' ? entry.name : `${relative}/${entry.name}`;
        if (entry.isDirectory()) pending.push(child);
        else if (entry.isFile()) files.push(child);
        else others.push(child);
      }
    }
    return { files: files.sort(), others: others.sort() };
  }

  /** The agent's temp files under the root and the state directory. */
  async tempFiles(): Promise<string[]> {
    const found: string[] = [];
    for (const dir of [this.rootDir, this.stateDir]) {
      const { files } = await this.#walk(dir);
      found.push(
        ...files.filter((f) => path.basename(f).startsWith(TEMP_PREFIX)).map((f) => path.join(dir, f)),
      );
    }
    return found;
  }

  /** The bytes of a managed file now; undefined when absent. */
  fileBytes(relativePath: string): Promise<Buffer | undefined> {
    return this.#read(relativePath);
  }

  async #read(relativePath: string, asides?: AsidesView): Promise<Buffer | undefined> {
    const absolute = path.join(
      this.rootDir,
      asides === undefined ? relativePath : asideOf(relativePath, asides),
    );
    const stats = await lstat(absolute).catch(() => undefined);
    if (stats === undefined) return undefined;
    if (!stats.isFile()) throw new Error(`${relativePath} is not a regular file`);
    return readFile(absolute);
  }

  /**
   * The invariants that hold at any moment, a crash included: every managed file is absent or one complete
   * version the service deployed at that path; every instance the service was told is deployed, at a path where
   * the service expects nothing more, has exactly its bytes; foreign files are intact; nothing else appeared.
   */
  async checkAnyMoment(asides?: AsidesView): Promise<Violation[]> {
    const violations: Violation[] = [];
    for (const relativePath of this.paths) {
      let data: Buffer | undefined;
      try {
        data = await this.#read(relativePath, asides);
      } catch (error) {
        violations.push({ path: relativePath, problem: String(error) });
        continue;
      }
      const versions = this.#versions.get(relativePath) ?? new Set();
      if (data !== undefined && !versions.has(sha(data))) {
        violations.push({
          path: relativePath,
          problem: `${data.byteLength} bytes that are no version the service deployed (torn or empty)`,
        });
      }
      const here = this.instancesAt(relativePath);
      const told = here.filter((i) => i.activity_status === 'deployed');
      if (!this.#pending(here) && told.length === 1) {
        const instance = told[0]!;
        const expected = this.#expected.get(instance.id);
        if (data === undefined || expected === undefined || !data.equals(expected)) {
          violations.push({
            path: relativePath,
            problem: `the service was told ${instance.id} is deployed, but the file ${
              data === undefined ? 'is missing' : `holds ${data.byteLength} other bytes`
            }`,
          });
        }
      }
    }
    violations.push(...(await this.#checkForeign()));
    const { files, others } = await this.#walk(this.rootDir);
    const known = new Set([...this.paths, ...Object.keys(FOREIGN_FILES)]);
    for (const found of files) {
      const file = asides === undefined ? found : namedOf(found, asides);
      if (!known.has(file) && !path.basename(file).startsWith(TEMP_PREFIX)) {
        violations.push({ path: file, problem: 'a file nobody deployed appeared in the root' });
      }
    }
    for (const other of others) violations.push({ path: other, problem: 'not a regular file or directory' });
    return violations;
  }

  async #checkForeign(): Promise<Violation[]> {
    const violations: Violation[] = [];
    for (const [relative, text] of Object.entries(FOREIGN_FILES)) {
      const data = await readFile(path.join(this.rootDir, relative), 'utf8').catch(() => undefined);
      if (data !== text)
        violations.push({ path: relative, problem: 'a foreign file was changed or deleted' });
    }
    return violations;
  }

  /**
   * After a run that exited 0: no temp file anywhere; each path holds exactly the instance that targets
   * `deployed`, which the service has as deployed without error; a path with none is empty; plus every
   * any-moment invariant.
   */
  async checkConverged(): Promise<Violation[]> {
    const violations = await this.checkAnyMoment();
    for (const temp of await this.tempFiles()) violations.push({ path: temp, problem: 'temp file left' });
    for (const relativePath of this.paths) {
      const data = await this.#read(relativePath).catch(() => undefined);
      const live = this.instancesAt(relativePath).filter((i) => i.target_status === 'deployed');
      if (live.length > 1) violations.push({ path: relativePath, problem: 'the test deployed two at once' });
      const instance = live[0];
      if (instance === undefined) {
        if (data !== undefined)
          violations.push({ path: relativePath, problem: 'retired, yet the file is there' });
        continue;
      }
      if (data === undefined || !data.equals(this.#expected.get(instance.id) ?? Buffer.alloc(0))) {
        violations.push({ path: relativePath, problem: `does not hold ${instance.id}'s bytes` });
      }
      if (instance.activity_status !== 'deployed' || instance.error_status !== 'none') {
        violations.push({
          path: relativePath,
          problem: `${instance.id} is ${instance.activity_status}/${instance.error_status} on the service`,
        });
      }
    }
    for (const instance of this.instances()) {
      if (instance.target_status !== 'deployed' && instance.activity_status === 'deployed') {
        violations.push({
          path: instance.relative_filepath,
          problem: `${instance.id} was never reported removed`,
        });
      }
    }
    return violations;
  }

  /** Every file under the root and the state dir, and the given outputs, scanned for the canary key. */
  async canaryHits(outputs: readonly string[]): Promise<string[]> {
    const hits: string[] = [];
    outputs.forEach((output, index) => {
      if (output.includes(CANARY_KEY)) hits.push(`output #${index}`);
    });
    for (const dir of [this.rootDir, this.stateDir]) {
      const { files } = await this.#walk(dir);
      for (const file of files) {
        const data = await readFile(path.join(dir, file)).catch(() => Buffer.alloc(0));
        if (data.includes(CANARY_KEY)) hits.push(path.join(dir, file));
      }
    }
    return hits;
  }

  /** The directories a run writes in: the state dir, the root and every managed file's parent. */
  writtenDirs(): string[] {
    const dirs = new Set([this.stateDir, this.rootDir]);
    for (const relativePath of this.paths) dirs.add(path.dirname(path.join(this.rootDir, relativePath)));
    return [...dirs];
  }

  /** A random managed path, for tests that target one. */
  somePath(random: Random): string {
    return pick(random, this.paths);
  }

  async close(): Promise<void> {
    await this.server.close().catch(() => undefined);
  }
}
