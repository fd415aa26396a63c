// rootDir's lock against a squatter that accepts no connection (review29): a full backlog must not refuse the agent.
import { spawn } from 'node:child_process';
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { rootNameOf } from '../../test/helpers/root-lock-holder.js';
import { createLogger } from '../lib/logger.js';
import { createSecretRegistry } from '../lib/secrets.js';
import { StateDir } from './state-dir.js';

let dir: string;
let rootDir: string;
const children: Array<ReturnType<typeof spawn>> = [];
const fillers: net.Socket[] = [];

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'root-lock-review29-'));
  rootDir = path.join(dir, 'root');
  await mkdir(rootDir);
});

afterEach(async () => {
  for (const socket of fillers.splice(0)) socket.destroy();
  for (const child of children.splice(0)) child.kill('SIGKILL');
  await rm(dir, { recursive: true, force: true });
});

// A local user binds the lock's abstract name and never accepts (its loop blocked here; a socket bound without
// listen() alike): once its backlog is full every connection fails at once, which askRootHolder took for a holder
// gone between the bind and the connection, and after five such attempts the agent was refused (RootLockedError,
// 'pid not known'): any local user kept every agent on that rootDir from starting, for good.
it('a squatter whose backlog is full does not keep the agent from starting, and is named', async () => {
  const { dev, ino } = await stat(rootDir);
  const name = rootNameOf(`${dev}:${ino}`);
  const script = `
    const server = require('node:net').createServer(() => {});
    server.listen({ path: ${JSON.stringify(name)}, backlog: 1 }, () => {
      require('node:fs').writeSync(1, 'held\\n');
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 60000);
    });`;
  const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(child);
  await new Promise<void>((resolve) => child.stdout?.once('data', () => resolve()));
  // Fill its backlog: these wait in the kernel's queue, as a squatter's own connections would.
  for (;;) {
    const socket = net.connect({ path: name });
    fillers.push(socket);
    const queued = await new Promise<boolean>((resolve) => {
      socket.once('connect', () => resolve(true));
      socket.once('error', () => resolve(false));
    });
    if (!queued) break;
  }
  const lines: Array<{ msg: string }> = [];
  const destination = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(line));
      done();
    },
  });
  const logger = createLogger({ level: 'info', secrets: createSecretRegistry(), destination });
  const settings = { stateDir: path.join(dir, 'mine'), rootDir, deviceId: 'dvc_review29' };
  await mkdir(settings.stateDir, { mode: 0o700 });
  const mine = await StateDir.open(nodeFs, settings, logger, { clock: { now: () => 0 } });
  await mine.close();
  expect(await readdir(rootDir)).toEqual([]);
  const said = lines.find((line) => line.msg.includes('not shown to be another config-agent'));
  expect(said?.msg).toContain(rootDir);
  // Judged as a holder gone at each of its five attempts (lock24: taken for an answer, it was 'it says pid undefined').
  expect(said?.msg).toContain('it accepts no connection');
});

// The holder's answer was bounded by 2 s of silence and 4 KiB, not in time: a squatter writing a byte every 1.9 s
// held the start (and --once) for over two hours. Here a byte every 50 ms: 205 s before, well under 5 s now.
it('a squatter trickling its answer a byte at a time does not hold the start', async () => {
  const { dev, ino } = await stat(rootDir);
  const name = rootNameOf(`${dev}:${ino}`);
  const script = `
    require('node:net').createServer((s) => {
      s.on('error', () => {});
      const timer = setInterval(() => s.write('x'), 50);
      s.on('close', () => clearInterval(timer));
    }).listen({ path: ${JSON.stringify(name)} }, () => process.stdout.write('held\\n'));`;
  const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(child);
  await new Promise<void>((resolve) => child.stdout?.once('data', () => resolve()));
  const settings = { stateDir: path.join(dir, 'mine'), rootDir, deviceId: 'dvc_review29' };
  await mkdir(settings.stateDir, { mode: 0o700 });
  const logger = createLogger({
    level: 'info',
    secrets: createSecretRegistry(),
    destination: new Writable({ write: (_c, _e, done) => done() }),
  });
  const mine = await StateDir.open(nodeFs, settings, logger, { clock: { now: () => 0 } });
  await mine.close();
  expect(await readdir(settings.stateDir)).toEqual([]);
}, 10_000);
