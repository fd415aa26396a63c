// Two agents on one rootDir with different stateDirs (adv24): the second refuses to start, naming the holder, and sweeps nothing.
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { holdRootName, killRootHolders } from '../../test/helpers/root-lock-holder.js';
import { createLogger, silentLogger } from '../lib/logger.js';
import { createSecretRegistry } from '../lib/secrets.js';
import { holdsName, RootLockedError, StateLockedError } from './lock.js';
import { StateDir } from './state-dir.js';

let dir: string;
let rootDir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'root-lock-adv24-'));
  rootDir = path.join(dir, 'root');
  await mkdir(rootDir);
});

afterEach(async () => {
  killRootHolders();
  await rm(dir, { recursive: true, force: true });
});

async function stateDirAt(name: string) {
  const stateDir = path.join(dir, name);
  await mkdir(stateDir, { mode: 0o700 });
  return { stateDir, rootDir, deviceId: 'dvc_adv24' };
}

/**
 * Another process holding rootDir as an agent does (lock.ts's abstract socket), its stateDir `/srv/other/state`,
 * its rootDir `holderRootDir` (another path when the holder's rootDir was removed and its inode number reused).
 */
const otherAgent = (holderRootDir = rootDir) => holdRootName(rootDir, { holderRootDir });

const open = (settings: { stateDir: string; rootDir: string; deviceId: string }) =>
  StateDir.open(nodeFs, settings, silentLogger(), { clock: { now: () => 0 } });

describe('one rootDir, two stateDirs (adv24)', () => {
  it('refused while another agent holds rootDir: its in-flight temp file is kept, the refusal names it', async () => {
    const other = await otherAgent();
    const inFlight = path.join(rootDir, `.config-agent.tmp-${'ab'.repeat(12)}`);
    await writeFile(inFlight, '{"half":');
    const refused = await open(await stateDirAt('mine')).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(RootLockedError);
    // Handled where a held stateDir is: --once prints the one line, the daemon waits for it.
    expect(refused).toBeInstanceOf(StateLockedError);
    const line = (refused as RootLockedError).refusal;
    expect(line).toContain(rootDir);
    expect(line).toContain(`pid ${other.pid}`);
    expect(line).toContain('/srv/other/state');
    expect(await readdir(rootDir)).toEqual([path.basename(inFlight)]);
    // Nothing left in the refused agent's stateDir either: its lock released.
    expect(await readdir(path.join(dir, 'mine'))).toEqual([]);
  });

  it('taken once the other agent has ended; released at close, for the next', async () => {
    const other = await otherAgent();
    await expect(open(await stateDirAt('mine'))).rejects.toBeInstanceOf(RootLockedError);
    await other.end();
    const mine = await open({ stateDir: path.join(dir, 'mine'), rootDir, deviceId: 'dvc_adv24' });
    // The same process reopening rootDir (a reload to another stateDir) shares its lock.
    const reload = await open(await stateDirAt('reloaded'));
    await mine.close();
    await reload.close();
    const next = await open(await stateDirAt('next'));
    await next.close();
    expect(await readdir(rootDir)).toEqual([]);
  });

  it('a holder whose rootDir is another directory now (its inode number reused by this one) does not hold this one', async () => {
    await otherAgent(path.join(dir, 'removed-long-ago'));
    const mine = await open(await stateDirAt('mine'));
    await mine.close();
    expect(await readdir(path.join(dir, 'mine'))).not.toContain('agent.lock');
  });

  it.each([
    [
      'answers naming another process (not the holder of the name)',
      () => JSON.stringify({ pid: process.pid, stateDir: '/x', rootDir }),
    ],
    ['answers nothing an agent would', () => ''],
  ])(
    'a local process squatting the name that %s does not keep the agent from starting',
    async (_name, answer) => {
      await holdRootName(rootDir, { answer: answer() });
      const lines: Array<{ msg: string }> = [];
      const destination = new Writable({
        write(chunk: Buffer, _encoding, done) {
          for (const line of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(line));
          done();
        },
      });
      const logger = createLogger({ level: 'info', secrets: createSecretRegistry(), destination });
      const mine = await StateDir.open(nodeFs, await stateDirAt('mine'), logger, { clock: { now: () => 0 } });
      await mine.close();
      expect(await readdir(rootDir)).toEqual([]);
      // Said, naming rootDir: the operator learns that something holds its lock name.
      const said = lines.find((line) => line.msg.includes('not shown to be another config-agent'));
      expect(said?.msg).toContain(rootDir);
    },
  );
});

describe('holdsName: is the process that names itself the one listening on the name', () => {
  /** A /proc stand-in: net/unix lists the name at inode 4242 (NUL-padded, as Node binds it), process 7's fds. */
  async function fakeProc(links: string[]): Promise<string> {
    const proc = path.join(dir, `proc-${links.length}-${links.join('').length}`);
    await mkdir(path.join(proc, 'net'), { recursive: true });
    await mkdir(path.join(proc, '7/fd'), { recursive: true });
    await writeFile(
      path.join(proc, 'net/unix'),
      'Num       RefCount Protocol Flags    Type St Inode Path\n' +
        '0000000000000000: 00000002 00000000 00010000 0001 01 4242 @config-agent-root-1:2@@@@\n' +
        '0000000000000000: 00000002 00000000 00010000 0001 01 5151 @config-agent-root-1:20@@@\n',
    );
    for (const [fd, link] of links.entries()) await symlink(link, path.join(proc, `7/fd/${fd}`));
    return proc;
  }
  const name = '\0config-agent-root-1:2';

  it("only with the name's own socket among its descriptors", async () => {
    expect(await holdsName(name, 7, await fakeProc(['/dev/null', 'socket:[4242]']))).toBe(true);
    // A longer name's socket, a socket of nothing listed, no such process, a name nobody lists.
    const other = await fakeProc(['socket:[5151]', 'socket:[424]']);
    expect(await holdsName(name, 7, other)).toBe(false);
    expect(await holdsName(name, 8, other)).toBe(false);
    expect(await holdsName('\0config-agent-root-9:9', 7, other)).toBe(false);
  });

  it('not when /proc cannot tell (a squatter could name a process this one may not look at)', async () => {
    const proc = await fakeProc(['socket:[4242]']);
    await rm(path.join(proc, 'net/unix'));
    expect(await holdsName(name, 7, proc)).toBe(false);
  });
});
