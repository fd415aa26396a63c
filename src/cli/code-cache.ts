// V8's code cache of the shipped agent bundle: where it lives, whose file may be read, its bytes checked, its atomic write.
import { createHash, randomBytes } from 'node:crypto';
import {
  chmodSync,
  closeSync,
  constants,
  fchmodSync,
  fstatSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readSync,
  renameSync,
  type Stats,
  statSync,
  unlinkSync,
  utimesSync,
  writeSync,
} from 'node:fs';
import path from 'node:path';
import { resolveConfigPath } from '../config/config-path.js';
import { errnoCode } from '../lib/errors.js';

/** The cache's directory inside stateDir (docs/operations.md says how to clear it). */
export const CODE_CACHE_DIR = 'code-cache';
/** V8's cache of the whole agent after a pass is ~1 MB on Node 20 and 24; a larger file is neither written nor read. */
const MAX_CODE_CACHE_BYTES = 16 * 1024 * 1024;
/** Cache files of the running bundle kept (one per runtime and flag set: the daemon's and `--once`'s differ). */
export const MAX_CODE_CACHE_FILES = 4;
/** A temp file older than this is a crashed write's and is removed by the next write. */
const STALE_TEMP_MS = 10 * 60 * 1000;
/** The configuration file is read here only for stateDir and the log level; a larger one is not read. */
const MAX_CONFIG_BYTES = 1024 * 1024;
const MAGIC = Buffer.from('config-agent v8 code cache 1\n', 'latin1');
const DIGEST_BYTES = 32;

/**
 * What a cache belongs to. `bundle` is the agent bundle's content-hashed file name; `runtime` is Node's and V8's
 * versions, the architecture, the node binary itself (`runtimeBinary`) and every V8 flag the process runs with:
 * V8 rejects a cache made under other flags or another V8, so each gets a file of its own instead of overwriting
 * the other's.
 */
export interface CodeCacheKey {
  bundle: string;
  runtime: string;
}

export function codeCacheKey(
  bundle: string,
  setFlags: readonly string[],
  binary = runtimeBinary(process.execPath),
): CodeCacheKey {
  const { version, arch, execArgv } = process;
  return {
    bundle,
    runtime: [version, arch, `v8-${process.versions.v8}`, binary, ...execArgv, ...setFlags].join(' '),
  };
}

/**
 * The node binary as a file (inode, size, mtime). V8 checks a cache's version, flags and source length, not the
 * build: a distribution's rebuilt or patched Node of the same version (a security update of the system runtime)
 * would be handed the cache of the binary it replaced, whose layout may differ. A new binary is a new file.
 */
export function runtimeBinary(file: string): string {
  try {
    const stats = statSync(file);
    return `node-file-${stats.ino}-${stats.size}-${Math.trunc(stats.mtimeMs)}`;
  } catch {
    return 'node-file-unknown';
  }
}

/** `<bundle stem>.<hash of the runtime>.v8cache`. */
export function codeCacheFileName(key: CodeCacheKey): string {
  const runtime = createHash('sha256').update(key.runtime).digest('hex').slice(0, 16);
  return `${bundleStem(key.bundle)}.${runtime}.v8cache`;
}

function bundleStem(bundle: string): string {
  return bundle.replace(/\.c?js$/, '');
}

/**
 * Whose files a cache may be read from. `own`: the running user's alone (stateDir's cache, which this user
 * writes). `own-or-root`: root's too (the install's cache, which the package's postinst writes as root): root can
 * replace the node binary and the bundle themselves, so its files add no one who could change the code run.
 */
export type CodeCacheOwners = 'own' | 'own-or-root';

/** Why `stats` may not be trusted as this user's own (owner, or writable by group or others), or undefined. */
function distrust(stats: Stats, euid: number, owners: CodeCacheOwners = 'own'): string | undefined {
  const trusted = stats.uid === euid || (owners === 'own-or-root' && stats.uid === 0);
  if (!trusted)
    return `owned by uid ${stats.uid}, not ${owners === 'own' || euid === 0 ? euid : `${euid} or 0`}`;
  if ((stats.mode & 0o022) !== 0)
    return `writable by group or others (mode ${(stats.mode & 0o777).toString(8)})`;
  return undefined;
}

export type CodeCacheDirectory = { dir: string } | { unusable: string };

/**
 * `stateDir/code-cache`, when both are directories of `euid` that no group or other user may write (the cache is
 * code this user will run); `create` makes the missing `code-cache` (0700) in such a stateDir. A stateDir of
 * another user — root running `--once` on the agent's — is never written into.
 */
export function codeCacheDirectory(
  stateDir: string,
  euid: number,
  create: boolean,
  owners: CodeCacheOwners = 'own',
): CodeCacheDirectory {
  let parent: Stats;
  try {
    parent = statSync(stateDir);
  } catch (error) {
    return { unusable: `stateDir: ${errnoCode(error) ?? String(error)}` };
  }
  if (!parent.isDirectory()) return { unusable: 'stateDir is not a directory' };
  const parentProblem = distrust(parent, euid, owners);
  if (parentProblem !== undefined) return { unusable: `stateDir ${parentProblem}` };
  const dir = path.join(stateDir, CODE_CACHE_DIR);
  let stats: Stats;
  try {
    stats = lstatSync(dir);
  } catch (error) {
    if (errnoCode(error) !== 'ENOENT' || !create) return { unusable: errnoCode(error) ?? String(error) };
    try {
      // The install's cache directory is read by the agent's own user too (its files are 0644, root's): 0755
      // whatever the umask.
      mkdirSync(dir, { mode: owners === 'own' ? 0o700 : 0o755 });
      if (owners === 'own-or-root') chmodSync(dir, 0o755);
      stats = lstatSync(dir);
    } catch (made) {
      return { unusable: `cannot create it: ${errnoCode(made) ?? String(made)}` };
    }
  }
  if (!stats.isDirectory()) return { unusable: 'not a directory' };
  const problem = distrust(stats, euid, owners);
  return problem === undefined ? { dir } : { unusable: problem };
}

export type CodeCacheRead = { found: Buffer } | { absent: true } | { ignored: string };

/**
 * The cache for `key` in `dir`: a regular file (never a symlink, never opened blocking, no other hard link) of
 * `euid`'s that no group or other user may write, holding this bundle's and runtime's cache whose checksum
 * matches. V8 itself checks its version and flags but not its payload's checksum (release builds): a flipped
 * byte would be run.
 */
export function readCodeCache(
  dir: string,
  key: CodeCacheKey,
  euid: number,
  owners: CodeCacheOwners = 'own',
): CodeCacheRead {
  const file = path.join(dir, codeCacheFileName(key));
  let fd: number;
  try {
    fd = openSync(file, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (error) {
    return errnoCode(error) === 'ENOENT' ? { absent: true } : { ignored: `cannot open: ${errnoCode(error)}` };
  }
  try {
    const stats = fstatSync(fd);
    if (!stats.isFile()) return { ignored: 'not a regular file' };
    const problem = distrust(stats, euid, owners);
    if (problem !== undefined) return { ignored: problem };
    // The agent's own cache has one name (a rename made it); another is a name someone else may write through.
    if (stats.nlink !== 1) return { ignored: `has ${stats.nlink} links` };
    if (stats.size > MAX_CODE_CACHE_BYTES + 4096) return { ignored: 'too large' };
    const bytes = Buffer.allocUnsafe(stats.size);
    let filled = 0;
    while (filled < bytes.length) {
      const read = readSync(fd, bytes, filled, bytes.length - filled, null);
      if (read === 0) break;
      filled += read;
    }
    return decodeCodeCache(bytes.subarray(0, filled), key);
  } catch (error) {
    return { ignored: `cannot read: ${errnoCode(error) ?? String(error)}` };
  } finally {
    closeSync(fd);
  }
}

/** The file: MAGIC, the key's length (u32 BE) and text, sha256 of key text and payload, then V8's payload. */
export function encodeCodeCache(key: CodeCacheKey, payload: Buffer): Buffer {
  const identity = Buffer.from(`${key.bundle}\n${key.runtime}`, 'utf8');
  const length = Buffer.alloc(4);
  length.writeUInt32BE(identity.length);
  const digest = createHash('sha256').update(identity).update(payload).digest();
  return Buffer.concat([MAGIC, length, identity, digest, payload]);
}

function decodeCodeCache(bytes: Buffer, key: CodeCacheKey): CodeCacheRead {
  if (bytes.length < MAGIC.length + 4 || !bytes.subarray(0, MAGIC.length).equals(MAGIC)) {
    return { ignored: 'not a code cache file' };
  }
  const identityLength = bytes.readUInt32BE(MAGIC.length);
  const identityStart = MAGIC.length + 4;
  const payloadStart = identityStart + identityLength + DIGEST_BYTES;
  if (payloadStart > bytes.length) return { ignored: 'truncated' };
  const identity = bytes.subarray(identityStart, identityStart + identityLength);
  if (identity.toString('utf8') !== `${key.bundle}\n${key.runtime}`) {
    return { ignored: 'made for another bundle or runtime' };
  }
  const payload = bytes.subarray(payloadStart);
  const digest = createHash('sha256').update(identity).update(payload).digest();
  if (!digest.equals(bytes.subarray(payloadStart - DIGEST_BYTES, payloadStart))) {
    return { ignored: 'checksum mismatch (truncated or corrupt)' };
  }
  return { found: payload };
}

/**
 * Writes the cache for `key` into `dir` atomically: a temp file (0600, O_EXCL, never through a symlink), then
 * rename. Not fsynced: a cache torn by a power cut fails its checksum and is made again. Then removes the caches
 * of other bundles (an upgrade's leftovers), crashed writes' temp files, and this bundle's oldest caches beyond
 * MAX_CODE_CACHE_FILES, so the directory stays bounded. `mode` is the file's (0600; the install's cache 0644, set
 * whatever the umask). Throws what the file system threw (EROFS, ENOSPC, EACCES).
 */
export function writeCodeCache(
  dir: string,
  key: CodeCacheKey,
  payload: Buffer,
  now = Date.now(),
  write: (fd: number, buffer: Buffer, offset: number, length: number) => number = writeSync,
  mode: 0o600 | 0o644 = 0o600,
): number {
  if (payload.length > MAX_CODE_CACHE_BYTES) throw new Error(`too large (${payload.length} bytes)`);
  const name = codeCacheFileName(key);
  // Not the pid alone: a crashed write's temp file under a pid that comes again (a container's --once is pid 1
  // every run) would fail every later write's O_EXCL, and the prune that removes it runs only after a write.
  const temp = path.join(dir, `.${name}.tmp-${process.pid}-${randomBytes(6).toString('hex')}`);
  const bytes = encodeCodeCache(key, payload);
  const fd = openSync(
    temp,
    constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
    0o600,
  );
  try {
    if (mode !== 0o600) fchmodSync(fd, mode);
    let written = 0;
    while (written < bytes.length) {
      const n = write(fd, bytes, written, bytes.length - written);
      // A write that takes no bytes (a FUSE filesystem may answer 0) looped for good: --once never exited.
      if (n === 0) throw Object.assign(new Error('write took no bytes'), { code: 'EIO' });
      written += n;
    }
    closeSync(fd);
    renameSync(temp, path.join(dir, name));
  } catch (error) {
    try {
      closeSync(fd);
    } catch {}
    try {
      unlinkSync(temp);
    } catch {}
    throw error;
  }
  pruneCodeCaches(dir, key, now);
  return bytes.length;
}

function pruneCodeCaches(dir: string, key: CodeCacheKey, now: number): void {
  const stem = `${bundleStem(key.bundle)}.`;
  const ours: { name: string; mtimeMs: number }[] = [];
  for (const name of readdirSync(dir)) {
    const file = path.join(dir, name);
    try {
      if (/^\..*\.v8cache\.tmp-[0-9a-f-]+$/.test(name)) {
        if (now - lstatSync(file).mtimeMs > STALE_TEMP_MS) unlinkSync(file);
      } else if (name.endsWith('.v8cache')) {
        if (!name.startsWith(stem)) unlinkSync(file);
        else ours.push({ name, mtimeMs: lstatSync(file).mtimeMs });
      }
    } catch {
      // Gone meanwhile, or another writer's: the next write tries again.
    }
  }
  // The one just written is the newest whatever the clock says (cit24): after a clock step back it was older than
  // the others and pruned at once, rewritten by every run and never read. Its mtime is put past theirs, so the
  // order kept is the order of writes (a generation), not of wall-clock times.
  const written = ours.find((cache) => cache.name === codeCacheFileName(key));
  const newest = Math.max(...ours.filter((cache) => cache !== written).map((cache) => cache.mtimeMs));
  if (written !== undefined && newest >= written.mtimeMs) {
    written.mtimeMs = newest + 1;
    try {
      utimesSync(path.join(dir, written.name), written.mtimeMs / 1000, written.mtimeMs / 1000);
    } catch {}
  }
  ours.sort((a, b) => b.mtimeMs - a.mtimeMs);
  for (const { name } of ours.slice(MAX_CODE_CACHE_FILES)) {
    try {
      unlinkSync(path.join(dir, name));
    } catch {}
  }
}

/** The configuration file the command line names: its --config/-c, then resolveConfigPath's rule. */
export function configPathOf(argv: readonly string[], env: NodeJS.ProcessEnv): string {
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i] as string;
    if (arg === '--') break;
    let value: string | undefined;
    if (arg === '--config' || arg === '-c') value = argv[i + 1];
    else if (arg.startsWith('--config=')) value = arg.slice('--config='.length);
    else if (arg.startsWith('-c') && !arg.startsWith('--')) value = arg.slice(2);
    if (value !== undefined && value !== '') return value;
  }
  return resolveConfigPath(undefined, env);
}

/**
 * stateDir and log.level of the configuration file, read before the agent's modules load (the cache must be
 * found before they compile). Only a hint where to look and whether to log: the agent reads and checks the
 * file itself afterwards, and the cache's own checks do not depend on it. Undefined fields when unreadable.
 */
export function peekConfig(configPath: string): { stateDir?: string; logLevel?: string } {
  let text: string;
  let fd: number;
  try {
    fd = openSync(configPath, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch {
    return {};
  }
  try {
    const stats = fstatSync(fd);
    if (!stats.isFile() || stats.size > MAX_CONFIG_BYTES) return {};
    const bytes = Buffer.alloc(stats.size);
    const read = readSync(fd, bytes, 0, bytes.length, 0);
    text = bytes.subarray(0, read).toString('utf8');
  } catch {
    return {};
  } finally {
    closeSync(fd);
  }
  let config: unknown;
  try {
    config = JSON.parse(text);
  } catch {
    return {};
  }
  if (typeof config !== 'object' || config === null) return {};
  const { stateDir, log } = config as { stateDir?: unknown; log?: { level?: unknown } };
  const level = typeof log === 'object' && log !== null ? log.level : undefined;
  return {
    ...(typeof stateDir === 'string' && path.isAbsolute(stateDir) ? { stateDir } : {}),
    ...(typeof level === 'string' ? { logLevel: level } : {}),
  };
}
