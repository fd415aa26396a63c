// lock25: rootDir's ACL read from its xattr by perl's getxattr(2), so trusting a holder by it needs no getfacl.
import { spawnSync } from 'node:child_process';
import { chmod, mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { skipWithoutRoot } from '../../test/helpers/built-packages.js';
import { holdRootName, killRootHolders } from '../../test/helpers/root-lock-holder.js';
import { aclLetsWrite, acquireRootLock, parseAcl, parseAclXattr, RootLockedError, rootAcl } from './lock.js';

const NOBODY = 65534;
const AS_ROOT = process.getuid?.() === 0;
const HAS_SETFACL = spawnSync('setfacl', ['--version']).status === 0;
const NO_SETFACL = 'setfacl missing (apt package acl): an ACL cannot be set, and reading it is NOT tested';
const NOWHERE = '/nonexistent/lock25';

let dir: string;
let rootDir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'root-lock-acl-'));
  await chmod(dir, 0o755);
  rootDir = path.join(dir, 'root');
  await mkdir(rootDir, { mode: 0o755 });
});

afterEach(async () => {
  killRootHolders();
  await rm(dir, { recursive: true, force: true });
});

/** `setfacl -m u:65534:rwx,g:4242:r-x` on a 0755 directory, as the kernel keeps it (read by getfattr). */
const XATTR = Buffer.from(
  '02000000' +
    '01000700ffffffff' + // user:: rwx
    '02000700feff0000' + // user:65534: rwx
    '04000500ffffffff' + // group:: r-x
    '0800050092100000' + // group:4242: r-x
    '10000700ffffffff' + // mask:: rwx
    '20000500ffffffff', // other:: r-x
  'hex',
);
const SAME_BY_GETFACL = 'user::rwx\nuser:65534:rwx\ngroup::r-x\ngroup:4242:r-x\nmask::rwx\nother::r-x\n';

describe("rootDir's ACL without getfacl (lock25)", () => {
  it('parseAclXattr reads the kernel format as parseAcl reads getfacl -n', async () => {
    expect(parseAclXattr(XATTR)).toStrictEqual(parseAcl(SAME_BY_GETFACL));
    expect(parseAclXattr(XATTR)?.[1]).toStrictEqual({ tag: 'user', id: NOBODY, write: true });
    expect(parseAclXattr(XATTR)?.[3]).toStrictEqual({ tag: 'group', id: 4242, write: false });
    // No xattr: no entries beyond the mode.
    expect(parseAclXattr(Buffer.alloc(0))).toStrictEqual([]);
    // Not the format: another version, a cut entry, an unknown tag, a header alone cut.
    const other = Buffer.from(XATTR);
    other.writeUInt32LE(1, 0);
    expect(parseAclXattr(other)).toBeUndefined();
    expect(parseAclXattr(XATTR.subarray(0, XATTR.length - 1))).toBeUndefined();
    const tag = Buffer.from(XATTR);
    tag.writeUInt16LE(0x40, 4);
    expect(parseAclXattr(tag)).toBeUndefined();
    expect(parseAclXattr(XATTR.subarray(0, 3))).toBeUndefined();
    // Arguments no process takes (a NUL): not read, not thrown.
    expect(await rootAcl(`${rootDir}\0x`)).toBeUndefined();
    // The header alone: an ACL of no entries.
    expect(parseAclXattr(XATTR.subarray(0, 4))).toStrictEqual([]);
  });

  it('rootAcl reads a real ACL with perl alone, with getfacl alone, and the same', async (ctx) => {
    if (!HAS_SETFACL) {
      ctx.skip(skipWithoutRoot(NO_SETFACL));
      return;
    }
    const plain = await rootAcl(rootDir, { perl: '/usr/bin/perl', getfacl: NOWHERE });
    expect(plain).toStrictEqual([]);
    expect(spawnSync('setfacl', ['-m', `u:${NOBODY}:rwx,g:4242:r-x`, rootDir]).status).toBe(0);
    const byPerl = await rootAcl(rootDir, { perl: '/usr/bin/perl', getfacl: NOWHERE });
    expect(byPerl).toStrictEqual(parseAcl(SAME_BY_GETFACL));
    const byGetfacl = await rootAcl(rootDir, { perl: NOWHERE, getfacl: 'getfacl' });
    expect(byGetfacl).toStrictEqual(byPerl);
    const { uid, gid, mode } = await stat(rootDir);
    expect(aclLetsWrite({ uid: NOBODY, groups: [NOBODY] }, { uid, gid, mode }, byPerl ?? [])).toBe(true);
    // Neither can read it (no such directory; no tools): not known.
    expect(await rootAcl(path.join(dir, 'gone'))).toBeUndefined();
    expect(await rootAcl(rootDir, { perl: NOWHERE, getfacl: NOWHERE })).toBeUndefined();
  });

  // Where getxattr's number is known (lock.ts's table): elsewhere perl is not asked.
  const PERL_ASKED = ['x64', 'ia32', 'arm', 'arm64', 'riscv64', 'loong64'].includes(process.arch);
  it.skipIf(!PERL_ASKED)("perl's answer that is not hex is no answer: getfacl is asked instead", async () => {
    const fakePerl = path.join(dir, 'perl');
    await writeFile(fakePerl, "#!/bin/sh\nprintf '02000000zz'\n", { mode: 0o755 });
    expect(await rootAcl(rootDir, { perl: fakePerl, getfacl: NOWHERE })).toBeUndefined();
    // The same bytes in hex: an ACL of no entries.
    await writeFile(fakePerl, "#!/bin/sh\nprintf '02000000'\n", { mode: 0o755 });
    expect(await rootAcl(rootDir, { perl: fakePerl, getfacl: NOWHERE })).toStrictEqual([]);
  });

  // getfacl was the only reader: on a device without the acl package (neither package depends on it) a root
  // agent judged a service writing rootDir through an ACL entry a squatter, and started beside it (fails before).
  it.skipIf(!AS_ROOT)('a root agent without getfacl believes a holder the ACL lets write', async (ctx) => {
    if (!HAS_SETFACL) {
      ctx.skip(skipWithoutRoot(NO_SETFACL));
      return;
    }
    expect(spawnSync('setfacl', ['-m', `u:${NOBODY}:rwx`, rootDir]).status).toBe(0);
    const holder = await holdRootName(rootDir, { asUser: NOBODY });
    const keyOf = async (at: string) => {
      const stats = await stat(at);
      return { key: `${stats.dev}:${stats.ino}`, uid: stats.uid, gid: stats.gid, mode: stats.mode };
    };
    const saved = process.env.PATH;
    process.env.PATH = NOWHERE;
    try {
      const refused = await acquireRootLock(rootDir, keyOf, path.join(dir, 'mine')).catch(
        (error: unknown) => error,
      );
      expect(refused).toBeInstanceOf(RootLockedError);
      expect((refused as RootLockedError).refusal).toContain(`pid ${holder.pid}`);
    } finally {
      process.env.PATH = saved;
    }
  });
});
