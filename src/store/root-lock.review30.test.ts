// rootDir's lock against a local user squatting its name and naming itself (review30): it holds the name, but it is no agent.
import { spawn } from 'node:child_process';
import * as nodeFs from 'node:fs/promises';
import { chmod, chown, mkdir, mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { nodeOthersCanRun } from '../../test/helpers/reachable-install.js';
import { rootNameOf } from '../../test/helpers/root-lock-holder.js';
import { createLogger } from '../lib/logger.js';
import { createSecretRegistry } from '../lib/secrets.js';
import { RootLockedError } from './lock.js';
import { StateDir } from './state-dir.js';

let dir: string;
let rootDir: string;
const children: Array<ReturnType<typeof spawn>> = [];

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'root-lock-review30-'));
  await chmod(dir, 0o755);
  rootDir = path.join(dir, 'root');
  await mkdir(rootDir);
});

afterEach(async () => {
  for (const child of children.splice(0)) child.kill('SIGKILL');
  await rm(dir, { recursive: true, force: true });
});

/** Another user's process (nobody) on rootDir's lock name, answering as an agent with its own pid. */
async function squatAsNobody(answerRootDir: string): Promise<number> {
  const { dev, ino } = await stat(rootDir);
  const name = rootNameOf(`${dev}:${ino}`);
  const script = `
    const answer = JSON.stringify({ pid: process.pid, stateDir: '/home/mallory/state', rootDir: ${JSON.stringify(answerRootDir)} });
    require('node:net').createServer((s) => { s.on('error', () => {}); s.end(answer); })
      .listen({ path: ${JSON.stringify(name)} }, () => process.stdout.write('held\\n'));`;
  // A node nobody can run: the CI's Node 24 sits in the clone's .cache, out of nobody's reach in a 0700 dir.
  const child = spawn(await nodeOthersCanRun(), ['-e', script], {
    stdio: ['ignore', 'pipe', 'inherit'],
    uid: 65534,
    gid: 65534,
    cwd: '/',
  });
  children.push(child);
  await new Promise<void>((resolve, reject) => {
    child.stdout?.once('data', () => resolve());
    child.once('exit', () => reject(new Error('the squatter did not start')));
    child.once('error', (error) => reject(new Error(`the squatter did not start: ${error.message}`)));
  });
  return child.pid ?? 0;
}

async function openLogged(): Promise<string[]> {
  const lines: string[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString().split('\n').filter(Boolean))
        lines.push((JSON.parse(line) as { msg: string }).msg);
      done();
    },
  });
  const logger = createLogger({ level: 'info', secrets: createSecretRegistry(), destination });
  const settings = { stateDir: path.join(dir, 'mine'), rootDir, deviceId: 'dvc_review30' };
  await mkdir(settings.stateDir, { mode: 0o700 });
  const mine = await StateDir.open(nodeFs, settings, logger, { clock: { now: () => 0 } });
  await mine.close();
  expect(await readdir(settings.stateDir)).toEqual([]);
  return lines;
}

// An agent run as root (a root --once, a device whose service runs as root) can list any process's descriptors,
// so a squatter naming its own pid was shown to hold the name and believed: RootLockedError, --once exit 1 and
// the service waiting for good, for as long as any local user liked. Only root needs to run this (it makes
// the squatter another user); as another user holdsName cannot list the squatter at all.
it.skipIf(process.getuid?.() !== 0)(
  "a squatter of another user naming its own pid does not keep root's agent from starting, and is named",
  async () => {
    const pid = await squatAsNobody(rootDir);
    const lines = await openLogged();
    const said = lines.find((line) => line.includes('not shown to be another config-agent'));
    expect(said).toContain(rootDir);
    expect(said).toContain(`pid ${pid}`);
  },
);

// A squatter naming a rootDir that is gone was taken for an agent whose rootDir was removed (its inode reused):
// no lock and not a word, before anything showed it to be an agent.
it.skipIf(process.getuid?.() !== 0)('a squatter naming a rootDir that is gone is still named', async () => {
  await squatAsNobody(path.join(dir, 'gone'));
  const lines = await openLogged();
  expect(lines.find((line) => line.includes('not shown to be another config-agent'))).toContain(rootDir);
});

// The other side: a holder whose user may write rootDir anyway (here its group, rootDir group-writable; the
// service's user as a root --once sees it, rootDir being that user's) is believed: the open is refused.
it.skipIf(process.getuid?.() !== 0)('a holder of a user that may write rootDir is believed', async () => {
  await chown(rootDir, 0, 65534);
  await chmod(rootDir, 0o775);
  const pid = await squatAsNobody(rootDir);
  const refused = await openLogged().catch((error: unknown) => error);
  expect(refused).toBeInstanceOf(RootLockedError);
  expect((refused as RootLockedError).refusal).toContain(`pid ${pid}`);
});
