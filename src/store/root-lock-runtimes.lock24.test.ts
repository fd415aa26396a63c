// rootDir's lock between Node 20 and Node 24 (lock24): both bind one abstract name, padded to the whole sun_path.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, stat, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { skipWithoutPackages } from '../../test/helpers/built-packages.js';
import { holdRootName, killRootHolders, rootNameOf } from '../../test/helpers/root-lock-holder.js';
import { acquireRootLock, holdsName, RootLockedError, rootLockNames } from './lock.js';

const REPO = path.resolve(import.meta.dirname, '../..');
/** The Node 24 `npm run package` unpacks (config-agent-node's runtime); .ci/run packages before it tests. */
const UNPACKED_NODE = path.join(
  REPO,
  `dist-pkg/build/node-${process.arch === 'x64' ? 'amd64' : process.arch}/package/bin/node`,
);
const major = (version: string) => Number(version.replace(/^v/, '').split('.')[0]);
const THIS_MAJOR = major(process.versions.node);

/** The major version of the node at `binary`, or undefined when it does not run. */
function majorOf(binary: string): number | undefined {
  if (!existsSync(binary)) return undefined;
  const ran = spawnSync(binary, ['--version'], { encoding: 'utf8', timeout: 30_000 });
  return ran.status === 0 ? major(ran.stdout.trim()) : undefined;
}

/**
 * The other Node of the two the packages run on: on Node 24 (.ci/run's second stage, this process the unpacked
 * runtime) the system's /usr/bin/node (or another node on PATH), on Node 20 the unpacked Node 24. Undefined when
 * only one is here.
 */
const OTHER = [
  process.execPath,
  '/usr/bin/node',
  UNPACKED_NODE,
  ...(process.env.PATH ?? '').split(':').map((entry) => path.join(entry, 'node')),
]
  .map((binary) => ({ binary, major: majorOf(binary) }))
  .find((node) => node.major !== undefined && node.major !== THIS_MAJOR && [20, 24].includes(node.major));
const NODES = [{ binary: process.execPath, major: THIS_MAJOR }, ...(OTHER === undefined ? [] : [OTHER])];
const WITHOUT_OTHER = `only Node ${THIS_MAJOR} here (${process.execPath}; /usr/bin/node and ${UNPACKED_NODE} are missing or the same major): rootDir's lock between Node 20 and Node 24 is NOT tested (run npm run package, or run this on Node 24 with /usr/bin/node on Node 20)`;

let dir: string;
let rootDir: string;
let keyOf: (at: string) => Promise<{ key: string; uid: number; gid: number; mode: number }>;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'root-lock-lock24-'));
  rootDir = path.join(dir, 'root');
  await mkdir(rootDir);
  keyOf = async (at) => {
    const stats = await stat(at);
    return { key: `${stats.dev}:${stats.ino}`, uid: stats.uid, gid: stats.gid, mode: stats.mode };
  };
});

afterEach(async () => {
  killRootHolders();
  await rm(dir, { recursive: true, force: true });
});

async function keyOfRoot(): Promise<string> {
  return (await keyOf(rootDir)).key;
}

/**
 * What another process on `node` meets binding `name` as an agent does while this one holds the lock: 'in use'
 * (EADDRINUSE: it sees the holder), 'bound' (it does not), and who answers a connection to the name.
 */
async function contend(node: string, name: string): Promise<{ bind: string; answer: string }> {
  const script = `
    const net = require('node:net');
    const name = ${JSON.stringify(name)};
    const ask = (bind) => {
      const socket = net.connect({ path: name });
      let text = '';
      socket.on('data', (chunk) => { text += chunk; });
      socket.on('error', (error) => { console.log(JSON.stringify({ bind, answer: error.code })); process.exit(0); });
      socket.on('end', () => { console.log(JSON.stringify({ bind, answer: text })); process.exit(0); });
    };
    const server = net.createServer();
    server.once('error', (error) => ask(error.code === 'EADDRINUSE' ? 'in use' : error.code));
    server.listen({ path: name }, () => server.close(() => ask('bound')));`;
  const child = spawn(node, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => {
    out += chunk.toString('utf8');
  });
  await new Promise<void>((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', () => resolve());
  });
  return JSON.parse(out) as { bind: string; answer: string };
}

describe('one name on Node 20 and Node 24 (lock24)', () => {
  it('the name is padded with NULs to the whole sun_path; off Node 20 the unpadded one is held too', () => {
    const { name, legacy } = rootLockNames('8:9', 24);
    expect(name).toBe(`\0config-agent-root-8:9${'\0'.repeat(108 - 22)}`);
    expect(Buffer.byteLength(name)).toBe(108);
    expect(legacy).toBe('\0config-agent-root-8:9');
    expect(rootLockNames('8:9', 20)).toStrictEqual({ name, legacy: undefined });
    expect(rootLockNames('8:9', 22).legacy).toBe(legacy);
    // This process's own Node by default.
    expect(rootLockNames('8:9').legacy === undefined).toBe(THIS_MAJOR === 20);
  });

  // holdsName compared the table's name (its trailing NULs shown as '@' and cut) with the name as given, its NULs
  // kept: the padded name was never shown held, and every holder judged a squatter.
  it('holdsName: the padded name and the unpadded one each match a socket bound either way', async () => {
    const proc = path.join(dir, 'proc');
    await mkdir(path.join(proc, 'net'), { recursive: true });
    await mkdir(path.join(proc, '7', 'fd'), { recursive: true });
    await mkdir(path.join(proc, '8', 'fd'), { recursive: true });
    await symlink('socket:[501]', path.join(proc, '7', 'fd', '3'));
    await symlink('socket:[502]', path.join(proc, '8', 'fd', '3'));
    await writeFile(
      path.join(proc, 'net', 'unix'),
      [
        'Num       RefCount Protocol Flags    Type St Inode Path',
        `0000000000000000: 00000002 00000000 00010000 0001 01 501 @config-agent-root-8:9${'@'.repeat(86)}`,
        '0000000000000000: 00000002 00000000 00010000 0001 01 502 @config-agent-root-8:9',
        '',
      ].join('\n'),
    );
    const { name, legacy } = rootLockNames('8:9', 24);
    for (const pid of [7, 8]) {
      expect(await holdsName(name, pid, proc)).toBe(true);
      expect(await holdsName(legacy ?? '', pid, proc)).toBe(true);
      expect(await holdsName(rootLockNames('8:99', 24).name, pid, proc)).toBe(false);
      expect(await holdsName(rootLockNames('8:', 24).name, pid, proc)).toBe(false);
    }
  });

  // An answer without rootDir (agents before they named it) is of this rootDir: only a named other one is not.
  it('a holder whose answer names no rootDir is believed', async () => {
    const other = await holdRootName(rootDir, { holderRootDir: null });
    const refused = await acquireRootLock(rootDir, keyOf, path.join(dir, 'mine')).catch(
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(RootLockedError);
    expect((refused as RootLockedError).refusal).toContain(`pid ${other.pid}`);
  });

  for (const holder of NODES) {
    // Node 20 bound the unpadded name padded to 108 bytes, Node 24 at its 30-odd bytes: an agent of each on one
    // rootDir each took its own lock, and both wrote it (fails before on Node 24: opened).
    it(`an agent holding rootDir on Node ${holder.major} refuses this one on Node ${THIS_MAJOR}`, async () => {
      const other = await holdRootName(rootDir, { node: holder.binary });
      const refused = await acquireRootLock(rootDir, keyOf, path.join(dir, 'mine')).catch(
        (error: unknown) => error,
      );
      expect(refused).toBeInstanceOf(RootLockedError);
      expect((refused as RootLockedError).refusal).toContain(`pid ${other.pid}`);
    });

    it(`this one holding rootDir on Node ${THIS_MAJOR}, an agent on Node ${holder.major} finds it held`, async () => {
      const lock = await acquireRootLock(rootDir, keyOf, path.join(dir, 'mine'));
      try {
        const met = await contend(holder.binary, rootNameOf(await keyOfRoot()));
        expect(met.bind).toBe('in use');
        expect(JSON.parse(met.answer)).toStrictEqual({
          pid: process.pid,
          stateDir: path.join(dir, 'mine'),
          rootDir,
        });
      } finally {
        await lock.release();
      }
    });

    // The upgrade: an agent before lock24 bound the unpadded name (Node 20 padding it itself). Beside a new one they
    // see each other. An old agent on Node 24 beside a new one on Node 20, whose Node can neither bind nor reach a
    // name shorter than 108 bytes, is found in /proc/net/unix (lock25; opened beside it before), but does not see
    // the new one (docs/reliability.md, Known gaps).
    const unreachable = holder.major !== 20 && THIS_MAJOR === 20;
    it(`an agent before lock24 holding rootDir on Node ${holder.major} refuses this one on Node ${THIS_MAJOR}`, async () => {
      const other = await holdRootName(rootDir, { node: holder.binary, legacy: true });
      const refused = await acquireRootLock(rootDir, keyOf, path.join(dir, 'mine')).catch(
        (error: unknown) => error,
      );
      expect(refused).toBeInstanceOf(RootLockedError);
      expect((refused as RootLockedError).refusal).toContain(`pid ${other.pid}`);
    });

    if (unreachable) {
      it(`this one holding rootDir on Node 20, an agent before lock24 on Node 24 binds its own name (Known gaps)`, async () => {
        const lock = await acquireRootLock(rootDir, keyOf, path.join(dir, 'mine'));
        try {
          const met = await contend(holder.binary, rootNameOf(await keyOfRoot(), true));
          expect(met).toStrictEqual({ bind: 'bound', answer: 'ECONNREFUSED' });
        } finally {
          await lock.release();
        }
      });
      continue;
    }

    it(`this one holding rootDir on Node ${THIS_MAJOR}, an agent before lock24 on Node ${holder.major} finds it held`, async () => {
      const lock = await acquireRootLock(rootDir, keyOf, path.join(dir, 'mine'));
      try {
        const met = await contend(holder.binary, rootNameOf(await keyOfRoot(), true));
        expect(met.bind).toBe('in use');
        expect(JSON.parse(met.answer)).toMatchObject({ pid: process.pid, rootDir });
      } finally {
        await lock.release();
      }
      // Released: both names are free again.
      const after = await contend(holder.binary, rootNameOf(await keyOfRoot(), true));
      expect(after).toStrictEqual({ bind: 'bound', answer: 'ECONNREFUSED' });
    });
  }

  // Only without the other Node: skipped saying so (a failure under .ci/run, which has both).
  if (OTHER === undefined) {
    it(`Node 20 against Node 24: ${WITHOUT_OTHER}`, (ctx) => {
      ctx.skip(skipWithoutPackages(WITHOUT_OTHER));
    });
  }
});
