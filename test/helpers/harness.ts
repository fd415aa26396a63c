// Integration harness: a real temp dir, the real mock service on loopback, and the compiled agent binary.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { lstat, mkdir, mkdtemp, readdir, readFile, readlink, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import {
  AdminStats,
  type CreateConfigInstanceRequest,
  type FaultRequest,
  type Fixtures,
  ReceivedReport,
} from '../../src/api/admin-schemas.js';
import { ConfigInstance, DeployResponse } from '../../src/api/schemas.js';
import { parseFixtures } from '../../src/mock-server/fixtures.js';
import { type RunningMockServer, startMockServer } from '../../src/mock-server/server.js';

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const AGENT_BIN = path.join(REPO_ROOT, 'dist', 'main.js');
export const DEMO_FIXTURES = path.join(REPO_ROOT, 'test', 'fixtures', 'demo.json');
export const TEST_API_KEY = 'sk_test_integration_0123456789abcdef';

export interface RunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** The user a spawned agent runs as; absent fields keep the test process's own. */
export interface SpawnIdentity {
  uid?: number;
  gid?: number;
  /** The agent's main.js; default the repository's dist/. Another uid may need a copy it can reach. */
  bin?: string;
  /** The node binary; default this process's own. Another uid may need a copy it can reach. */
  node?: string;
  /** The child's working directory; default the test process's own. */
  cwd?: string;
}

export interface HarnessOptions {
  deviceId?: string;
  /** Fixtures file to load into the mock; default: an empty service. */
  fixturesFile?: string;
  /** Fixtures given inline (ignored when `fixturesFile` is set). */
  fixtures?: Fixtures;
  /** Registers the harness's device in the mock (merged into the fixtures), so `createInstance` works. */
  registerDevice?: boolean;
  /** Extra config keys, merged over the harness defaults (shallow per top-level key). */
  config?: Record<string, unknown>;
}

export class AgentHarness {
  readonly dir: string;
  readonly rootDir: string;
  readonly stateDir: string;
  readonly configPath: string;
  readonly keyPath: string;
  readonly deviceId: string;
  server: RunningMockServer;
  #config: Record<string, unknown>;

  private constructor(
    dir: string,
    server: RunningMockServer,
    deviceId: string,
    config: Record<string, unknown>,
  ) {
    this.dir = dir;
    this.rootDir = path.join(dir, 'root');
    this.stateDir = path.join(dir, 'state');
    this.configPath = path.join(dir, 'config.json');
    this.keyPath = path.join(dir, 'api-key');
    this.server = server;
    this.deviceId = deviceId;
    this.#config = config;
  }

  static async create(options: HarnessOptions = {}): Promise<AgentHarness> {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-it-'));
    const deviceId = options.deviceId ?? 'dvc_it_01';
    let fixtures =
      options.fixturesFile === undefined
        ? options.fixtures
        : parseFixtures(JSON.parse(await readFile(options.fixturesFile, 'utf8')));
    if (options.registerDevice === true && !(fixtures?.devices ?? []).some((d) => d.id === deviceId)) {
      fixtures = { ...fixtures, devices: [...(fixtures?.devices ?? []), { id: deviceId }] };
    }
    const server = await startMockServer({
      port: 0,
      host: '127.0.0.1',
      apiKeys: [TEST_API_KEY],
      ...(fixtures === undefined ? {} : { fixtures }),
    });
    const harness = new AgentHarness(dir, server, deviceId, options.config ?? {});
    await writeFile(harness.keyPath, `${TEST_API_KEY}\n`, { mode: 0o600 });
    await harness.writeConfig();
    return harness;
  }

  /** The config the agent runs with; `overrides` replace top-level keys. */
  configObject(overrides: Record<string, unknown> = {}): Record<string, unknown> {
    return {
      deviceId: this.deviceId,
      server: { baseUrl: this.server.url, apiKeyFile: this.keyPath, timeoutSeconds: 5 },
      rootDir: this.rootDir,
      stateDir: this.stateDir,
      retry: { maxAttempts: 3, baseDelaySeconds: 1, maxDelaySeconds: 2 },
      // debug: an idle pass's summary is logged there (daemon/pass-log.ts), and DaemonProcess counts every pass.
      log: { level: 'debug' },
      socketPath: path.join(this.dir, 'agent.sock'),
      ...this.#config,
      ...overrides,
    };
  }

  async writeConfig(overrides: Record<string, unknown> = {}): Promise<void> {
    await writeFile(this.configPath, JSON.stringify(this.configObject(overrides), null, 2), { mode: 0o644 });
  }

  /** Runs the compiled agent with `args` (plus `--config`), bounded in time. */
  run(
    args: readonly string[],
    options: { env?: NodeJS.ProcessEnv; timeoutMs?: number } & SpawnIdentity = {},
  ): Promise<RunResult> {
    const identity: SpawnIdentity = {
      ...(options.uid === undefined ? {} : { uid: options.uid }),
      ...(options.gid === undefined ? {} : { gid: options.gid }),
      ...(options.bin === undefined ? {} : { bin: options.bin }),
      ...(options.node === undefined ? {} : { node: options.node }),
      ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
    };
    const child = this.spawn(args, options.env, identity);
    // Generous: a --once over hundreds of files on a machine whose cores are busy with other work.
    return collect(child, options.timeoutMs ?? 120_000);
  }

  runOnce(extraArgs: readonly string[] = [], env?: NodeJS.ProcessEnv): Promise<RunResult> {
    return this.run(['--once', ...extraArgs], env === undefined ? {} : { env });
  }

  /** `identity` runs the agent as another user (root only), e.g. to meet EACCES that root would bypass. */
  spawn(args: readonly string[], env?: NodeJS.ProcessEnv, identity: SpawnIdentity = {}): ChildProcess {
    const childEnv: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: process.env.HOME, ...env };
    const { bin = AGENT_BIN, node = process.execPath, ...processOptions } = identity;
    return spawn(node, [bin, '--config', this.configPath, ...args], {
      env: childEnv,
      stdio: ['ignore', 'pipe', 'pipe'],
      ...processOptions,
    });
  }

  // ---- the mock service's API, as a test sees it ----

  async api(method: string, route: string, body?: unknown): Promise<unknown> {
    const response = await fetch(`${this.server.url}${route}`, {
      method,
      headers: {
        'X-API-Key': TEST_API_KEY,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await response.text();
    if (!response.ok) throw new Error(`${method} ${route} → ${response.status}: ${text}`);
    return text === '' ? undefined : JSON.parse(text);
  }

  async createInstance(request: Omit<CreateConfigInstanceRequest, 'device_id'> & { device_id?: string }) {
    return ConfigInstance.parse(
      await this.api('POST', '/_admin/config_instances', { device_id: this.deviceId, ...request }),
    );
  }

  async deploy(id: string) {
    return DeployResponse.parse(
      await this.api('POST', `/v1/config_instances/${encodeURIComponent(id)}/deploy`),
    );
  }

  /** Creates an instance and deploys it, the way an operator would. */
  async createAndDeploy(request: Omit<CreateConfigInstanceRequest, 'device_id'> & { device_id?: string }) {
    const created = await this.createInstance(request);
    return this.deploy(created.id);
  }

  async removeInstance(id: string) {
    return ConfigInstance.parse(
      await this.api('POST', `/_admin/config_instances/${encodeURIComponent(id)}/remove`),
    );
  }

  async instance(id: string) {
    return ConfigInstance.parse(
      await this.api('GET', `/v1/config_instances?id=${encodeURIComponent(id)}`).then(
        (list) => (list as { data: unknown[] }).data[0],
      ),
    );
  }

  async reports() {
    const body = await this.api('GET', '/_admin/reports');
    return z.object({ data: z.array(ReceivedReport) }).parse(body).data;
  }

  async fault(request: FaultRequest): Promise<void> {
    await this.api('POST', '/_admin/faults', request);
  }

  async clearFaults(): Promise<void> {
    await this.api('DELETE', '/_admin/faults');
  }

  async stats() {
    return AdminStats.parse(await this.api('GET', '/_admin/stats'));
  }

  /** Stops the mock service (an outage); `restartServer` brings the same state back on the same port. */
  async stopServer(): Promise<void> {
    await this.server.close();
  }

  async restartServer(): Promise<void> {
    this.server = await startMockServer({
      port: this.server.port,
      host: '127.0.0.1',
      apiKeys: [TEST_API_KEY],
      state: this.server.state,
    });
  }

  /** The reports the mock accepted for one instance, oldest first. */
  async reportsFor(instanceId: string) {
    return (await this.reports()).filter((report) => report.config_instance_id === instanceId);
  }

  /** Requests the mock counted for one route key, e.g. `PATCH /v1/config_instances/:id`. */
  async requestCount(routeKey: string): Promise<number> {
    return (await this.stats()).requests[routeKey] ?? 0;
  }

  /** The agent's durable outbox (`stateDir/outbox.json`); empty when the file does not exist. */
  async outbox(): Promise<OutboxSnapshot['entries']> {
    const text = await readFile(path.join(this.stateDir, 'outbox.json'), 'utf8').catch((error: unknown) => {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw error;
    });
    return text === undefined ? [] : OutboxSnapshot.parse(JSON.parse(text)).entries;
  }

  /** Removes the agent's local state: the agent then cannot prove it wrote anything. */
  async forgetState(): Promise<void> {
    await rm(this.stateDir, { recursive: true, force: true });
  }

  rootPath(relativePath: string): string {
    return path.join(this.rootDir, relativePath);
  }

  async close(): Promise<void> {
    await this.server.close().catch(() => undefined);
    await rm(this.dir, { recursive: true, force: true });
  }
}

export async function collect(child: ChildProcess, timeoutMs: number): Promise<RunResult> {
  let stdout = '';
  let stderr = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk;
  });
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
  });
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

export async function makeDir(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true });
}

// ---- resulting-world helpers shared by the integration tests ----

const OutboxSnapshot = z.object({
  entries: z.array(
    z.object({
      instanceId: z.string(),
      report: z.object({
        activity_status: z.string(),
        error_status: z.string(),
        message: z.string().optional(),
      }),
    }),
  ),
});
type OutboxSnapshot = z.infer<typeof OutboxSnapshot>;

export interface SnapshotOptions {
  /** Also record inode and mtime (ns): equal snapshots then mean not even a rewrite of identical bytes. */
  identity?: boolean;
}

/**
 * Every entry under `dir` (recursively, never following symlinks): type, mode, bytes (base64)
 * and symlink targets. Equal snapshots mean nothing under `dir` changed. A missing `dir`
 * snapshots as `{}`.
 */
export async function snapshotTree(
  dir: string,
  options: SnapshotOptions = {},
): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const walk = async (current: string, relative: string): Promise<void> => {
    let entries: string[];
    try {
      entries = (await readdir(current)).sort();
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT' && relative === '') return;
      throw error;
    }
    for (const name of entries) {
      const absolute = path.join(current, name);
      const key = relative === '' ? name : `${relative}/${name}`;
      const stats = await lstat(absolute, { bigint: true });
      const mode = (Number(stats.mode) & 0o7777).toString(8);
      const identity = options.identity === true ? ` ino=${stats.ino} mtime=${stats.mtimeNs}` : '';
      if (stats.isSymbolicLink()) {
        out[key] = `link ${mode} -> ${await readlink(absolute)}${identity}`;
      } else if (stats.isDirectory()) {
        out[key] = `dir ${mode}${identity}`;
        await walk(absolute, key);
      } else if (stats.isFile()) {
        out[key] = `file ${mode} ${(await readFile(absolute)).toString('base64')}${identity}`;
      } else {
        out[key] = `other ${mode}${identity}`;
      }
    }
  };
  await walk(dir, '');
  return out;
}

/** Whether the test API key appears anywhere in a run's stdout or stderr. */
export function leaksApiKey(result: RunResult): boolean {
  return result.stdout.includes(TEST_API_KEY) || result.stderr.includes(TEST_API_KEY);
}

/** `mount <args>`; resolves to a reason string when mounting is not permitted here, undefined on success. */
export function tryMount(args: readonly string[]): string | undefined {
  const result = spawnSync('mount', [...args], { encoding: 'utf8' });
  if (result.error) return `mount ${args.join(' ')} failed: ${result.error.message}`;
  if (result.status !== 0) {
    const output = `${result.stdout}${result.stderr}`.trim() || `exit ${result.status}`;
    return `mount ${args.join(' ')} not permitted here: ${output}`;
  }
  return undefined;
}

/** Unmounts `dir`, retrying a few times (a just-exited child may still hold it); never throws. */
export function unmount(dir: string): void {
  for (let attempt = 0; attempt < 5; attempt += 1) {
    if (spawnSync('umount', [dir], { encoding: 'utf8' }).status === 0) return;
    spawnSync('sleep', ['0.2']);
  }
  spawnSync('umount', ['-l', dir]);
}
