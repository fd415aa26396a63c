// One bench world: the mock service on loopback with fixtures, a root and a state dir, a config and a key file.
import { lstat, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { Fixtures } from '../../src/api/admin-schemas.js';
import { type RunningMockServer, startMockServer } from '../../src/mock-server/server.js';
import { BENCH_API_KEY, BENCH_DEVICE } from './fixtures.js';
import { removeAtExit } from './scratch.js';

export interface BenchWorld {
  dir: string;
  rootDir: string;
  stateDir: string;
  configPath: string;
  server: RunningMockServer;
  /** Writes the agent's config; `baseUrl` defaults to the mock's own. */
  writeConfig(overrides?: Record<string, unknown>, baseUrl?: string): Promise<void>;
  close(): Promise<void>;
}

export interface WorldOptions {
  /** Leave the world's files until the process exits (removeAtExit): what the timed first syncs use. */
  removeAtExit?: boolean;
}

export async function createWorld(fixtures: Fixtures, options: WorldOptions = {}): Promise<BenchWorld> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-bench-'));
  const server = await startMockServer({ port: 0, apiKeys: [BENCH_API_KEY], fixtures });
  const keyPath = path.join(dir, 'api-key');
  await writeFile(keyPath, `${BENCH_API_KEY}\n`, { mode: 0o600 });
  const world: BenchWorld = {
    dir,
    rootDir: path.join(dir, 'root'),
    stateDir: path.join(dir, 'state'),
    configPath: path.join(dir, 'config.json'),
    server,
    async writeConfig(overrides = {}, baseUrl = server.url) {
      const config = {
        deviceId: BENCH_DEVICE,
        server: { baseUrl, apiKeyFile: keyPath, timeoutSeconds: 120 },
        rootDir: world.rootDir,
        stateDir: world.stateDir,
        log: { level: 'warn' },
        socketPath: path.join(dir, 'agent.sock'),
        ...overrides,
      };
      await writeFile(world.configPath, JSON.stringify(config, null, 2), { mode: 0o644 });
    },
    async close() {
      await server.close();
      if (options.removeAtExit === true) removeAtExit(dir);
      else await rm(dir, { recursive: true, force: true });
    },
  };
  await world.writeConfig();
  return world;
}

/** Every regular file under `root` (relative path → inode, mtime, size), skipping nothing. */
export async function snapshotTree(root: string): Promise<Map<string, string>> {
  const snapshot = new Map<string, string>();
  const pending = [''];
  while (pending.length > 0) {
    const relative = pending.pop()!;
    const entries = await readdir(path.join(root, relative), { withFileTypes: true }).catch(() => []);
    for (const entry of entries) {
      const child = relative === '' ? entry.name : `${relative}/${entry.name}`;
      if (entry.isDirectory()) pending.push(child);
      else {
        const stats = await lstat(path.join(root, child));
        snapshot.set(child, `${stats.ino}:${stats.mtimeMs}:${stats.size}`);
      }
    }
  }
  return snapshot;
}

/** How many paths differ between two snapshots (added, removed, or another inode/mtime/size). */
export function changedEntries(before: Map<string, string>, after: Map<string, string>): number {
  let changed = 0;
  for (const [file, identity] of after) if (before.get(file) !== identity) changed += 1;
  for (const file of before.keys()) if (!after.has(file)) changed += 1;
  return changed;
}

/** Checks that `root` holds exactly the expected files with the expected bytes; returns what is wrong. */
export async function verifyTree(
  root: string,
  expected: readonly { path: string; data: Buffer }[],
  compare: 'bytes' | 'presence' = 'bytes',
): Promise<string | undefined> {
  for (const file of expected) {
    const data = await readFile(path.join(root, file.path)).catch(() => undefined);
    if (data === undefined) return `${file.path} is missing`;
    if (compare === 'bytes' && !data.equals(file.data)) return `${file.path} holds other bytes`;
  }
  return undefined;
}

/** A TCP proxy in front of the mock that counts the bytes both ways: what a poll costs on the wire. */
export interface ByteCounter {
  url: string;
  bytes(): number;
  close(): Promise<void>;
}

export async function startByteCounter(targetPort: number): Promise<ByteCounter> {
  let total = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(targetPort, '127.0.0.1');
    sockets.add(client).add(upstream);
    client.on('data', (chunk: Buffer) => {
      total += chunk.length;
    });
    upstream.on('data', (chunk: Buffer) => {
      total += chunk.length;
    });
    client.pipe(upstream).pipe(client);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    bytes: () => total,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
