// lock25: on Node 20, an agent before lock24 on Node 24 (the unpadded lock name) is found in /proc/net/unix.
import { spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readlink, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type AclEntry, RootLockedError, unreachableLegacyHolder } from './lock.js';

/** setfacl (package acl, which .ci/run installs) to give rootDir an ACL entry. */
const HAS_SETFACL = spawnSync('setfacl', ['--version']).status === 0;
let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'root-lock-lock25-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const LEGACY = '\0config-agent-root-1:2';
const HEADER = 'Num       RefCount Protocol Flags    Type St Inode Path';
/** A listening socket's line in /proc/net/unix (abstract names shown with '@' for each NUL). */
const line = (inode: number, shown: string) =>
  `0000000000000000: 00000002 00000000 00010000 0001 01 ${inode} ${shown}`;
/** /proc/<pid>/status's id lines for a process of `uid` (its gid the same). */
const statusOf = (uid: number) =>
  `Name:\tnode\nUid:\t${uid}\t${uid}\t${uid}\t${uid}\nGid:\t${uid}\t${uid}\t${uid}\t${uid}\nGroups:\t\n`;

/** A /proc stand-in: net/unix with `lines`, and each process's socket descriptors and user. */
async function fakeProc(
  lines: string[] | undefined,
  processes: { pid: number; sockets: number[]; uid: number | undefined }[],
): Promise<string> {
  const proc = await mkdtemp(path.join(dir, 'proc-'));
  await mkdir(path.join(proc, 'net'));
  if (lines !== undefined) await writeFile(path.join(proc, 'net/unix'), [HEADER, ...lines, ''].join('\n'));
  for (const { pid, sockets, uid } of processes) {
    await mkdir(path.join(proc, String(pid), 'fd'), { recursive: true });
    for (const [fd, inode] of sockets.entries()) {
      await symlink(`socket:[${inode}]`, path.join(proc, String(pid), 'fd', String(fd + 3)));
    }
    if (uid !== undefined) await writeFile(path.join(proc, String(pid), 'status'), statusOf(uid));
  }
  return proc;
}

/** rootDir root's own, 0755: only root (and this process's user) may write it by its mode. */
const ROOT = { uid: 0, gid: 0, mode: 0o40755 };
const NO_ACL = async () => undefined;

const judge = async (proc: string, acl: () => Promise<readonly AclEntry[] | undefined> = NO_ACL) =>
  await unreachableLegacyHolder(LEGACY, '/srv/root', ROOT, '/var/lib/mine', proc, acl);

describe('an agent before lock24 on Node 24, seen from Node 20 (lock25)', () => {
  it('a process shown holding the unpadded name is the holder: refused, naming its pid', async () => {
    const proc = await fakeProc(
      [line(4000, '@some-other-socket'), line(4242, '@config-agent-root-1:2')],
      [
        { pid: 6, sockets: [4000], uid: 0 },
        { pid: 7, sockets: [4100, 4242], uid: 0 },
      ],
    );
    const refused = await judge(proc);
    // Its table read synchronously and closed: no descriptor left on it.
    const fds = await readdir('/proc/self/fd');
    const targets = await Promise.all(fds.map((fd) => readlink(`/proc/self/fd/${fd}`).catch(() => '')));
    expect(targets.filter((target) => target === path.join(proc, 'net/unix'))).toStrictEqual([]);
    expect(refused).toBeInstanceOf(RootLockedError);
    expect(refused?.pid).toBe(7);
    expect(refused?.rootDir).toBe('/srv/root');
    expect(refused?.refusal).toContain('another config-agent (pid 7) writes it');
  });

  // Read in 64 KiB reads (tableShows): a name across two reads is found as well.
  it('found in a table of many sockets, wherever its line falls across the reads', async () => {
    const target = line(4242, '@config-agent-root-1:2');
    const shown = ' @config-agent-root-1:2\n';
    for (const before of [0, 1, 5, shown.length - 1, shown.length]) {
      // A filler line sized so the shown name starts `before` bytes before the 64 KiB boundary.
      const head = `${HEADER}\n${line(1, '@')}\n`.length + target.length + 1 - shown.length;
      const filler = line(1, `@${'x'.repeat(64 * 1024 - before - head)}`);
      const proc = await fakeProc([filler, target], [{ pid: 7, sockets: [4242], uid: 0 }]);
      expect((await judge(proc))?.pid, `${before} bytes before the boundary`).toBe(7);
    }
  });

  it('the padded name (Node 20 agents, this one included) and longer names are not the old agent', async () => {
    const proc = await fakeProc(
      [line(4242, `@config-agent-root-1:2${'@'.repeat(86)}`), line(4343, '@config-agent-root-1:20')],
      [{ pid: 7, sockets: [4242, 4343], uid: 0 }],
    );
    expect(await judge(proc)).toBeUndefined();
  });

  // Both in the table: only the unpadded name's socket is the old agent's; the padded one is a Node 20 agent's.
  it("the padded name's holder is not taken for the old agent's when both names are bound", async () => {
    const proc = await fakeProc(
      [line(4242, `@config-agent-root-1:2${'@'.repeat(86)}`), line(4343, '@config-agent-root-1:2')],
      [{ pid: 7, sockets: [4242], uid: 0 }],
    );
    expect(await judge(proc)).toBeUndefined();
  });

  it('a table that cannot be read (a directory there): not seen, not thrown', async () => {
    const proc = await fakeProc(undefined, [{ pid: 7, sockets: [4242], uid: 0 }]);
    await mkdir(path.join(proc, 'net/unix'));
    await expect(judge(proc)).resolves.toBeUndefined();
  });

  it('not when /proc cannot tell: no table, or no process shown holding the socket (hidepid)', async () => {
    const holder = { pid: 7, sockets: [4242], uid: 0 };
    expect(await judge(await fakeProc(undefined, [holder]))).toBeUndefined();
    expect(await judge(await fakeProc([line(4242, '@config-agent-root-1:2')], []))).toBeUndefined();
    // Shown holding it, but its user not shown: not believed.
    const unknown = await fakeProc([line(4242, '@config-agent-root-1:2')], [{ ...holder, uid: undefined }]);
    expect(await judge(unknown)).toBeUndefined();
  });

  it("another user's holder is believed as a silent holder is: when rootDir's ACL lets it write", async () => {
    const proc = await fakeProc(
      [line(4242, '@config-agent-root-1:2')],
      [{ pid: 7, sockets: [4242], uid: 4242 }],
    );
    // A squatter: neither the mode nor an ACL lets uid 4242 write rootDir.
    expect(await judge(proc)).toBeUndefined();
    const acl: AclEntry[] = [
      { tag: 'user', id: 4242, write: true },
      { tag: 'mask', id: undefined, write: true },
    ];
    expect((await judge(proc, async () => acl))?.pid).toBe(7);
    // Masked, the entry does not let it write.
    const masked = acl.map((entry) => (entry.tag === 'mask' ? { ...entry, write: false } : entry));
    expect(await judge(proc, async () => masked)).toBeUndefined();
    // By default rootDir's own ACL is read (rootAcl): an entry for uid 4242 on a real directory.
    if (HAS_SETFACL) {
      const rootDir = path.join(dir, 'root');
      await mkdir(rootDir, { mode: 0o755 });
      expect(await unreachableLegacyHolder(LEGACY, rootDir, ROOT, '/s', proc)).toBeUndefined();
      expect(spawnSync('setfacl', ['-m', 'u:4242:rwx', rootDir]).status).toBe(0);
      expect((await unreachableLegacyHolder(LEGACY, rootDir, ROOT, '/s', proc))?.pid).toBe(7);
    }
    // rootDir other-writable: anyone may write it anyway, and its lock is believed.
    expect(
      (await unreachableLegacyHolder(LEGACY, '/srv/root', { ...ROOT, mode: 0o40777 }, '/s', proc, NO_ACL))
        ?.pid,
    ).toBe(7);
  });
});
