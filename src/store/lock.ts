// One agent per state directory (a pid lock file) and per rootDir (an abstract socket), so none sweeps another's temp files.

import { randomBytes } from 'node:crypto';
import { constants, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import * as z from 'zod';
import { AgentError, errnoCode } from '../lib/errors.js';
import type { FsPort } from '../lib/fs-port.js';
import { JsonWeigher } from '../lib/json-weigher.js';
import { makeDirectoryDurably } from './durable-writer.js';
import { StateDirError } from './errors.js';
import { TEMP_PREFIX } from './path-guard.js';
import { MAX_STATE_FILE_DEPTH, STATE_FILE } from './state.js';

export { StateDirError };

export const LOCK_FILE = 'agent.lock';

/** Built the first time a lock file is read (once or twice a process: at release, or when another holds it). */
const buildLockContent = () =>
  z.object({
    pid: z.number().int().positive(),
    procStart: z.string().optional(),
    /** The kernel's boot id when the lock was taken: a lock of an earlier boot belongs to no live process. */
    bootId: z.string().optional(),
    /** Random per acquisition: a release only ever removes the lock it took, even within one process. */
    token: z.string().optional(),
    /**
     * Random per process (ProcessProbe.self): what tells this process's locks from another's. Not the pid: two
     * containers sharing one stateDir (a bind mount) both run their agent as pid 1. Absent in a lock an agent
     * before this field wrote; such a lock is this process's when its pid is (as those agents judged).
     */
    instance: z.string().optional(),
  });
type LockContent = z.infer<ReturnType<typeof buildLockContent>>;
let lockContent: ReturnType<typeof buildLockContent> | undefined;

/** Another live agent holds the state directory. */
export class StateLockedError extends AgentError {
  /** The holder's pid from the lock; 0 when not known (the lock kept changing hands while it was read). */
  readonly pid: number;
  readonly stateDir: string;
  constructor(stateDir: string, pid: number) {
    super(
      'state_locked',
      `another config-agent (pid ${pid}) is using ${stateDir}; ask it with 'config-agent sync' instead`,
      { retryable: false },
    );
    this.pid = pid;
    this.stateDir = stateDir;
  }

  /** The one line `--once` prints for it: which lock, held by whom. */
  get refusal(): string {
    const holder = this.pid > 0 ? `pid ${this.pid}` : 'pid not known';
    return (
      `${this.stateDir} is in use: ${path.join(this.stateDir, LOCK_FILE)} is held by another config-agent ` +
      `(${holder}); nothing was done: ask it with 'config-agent sync', or run --once again once it has stopped`
    );
  }
}

/**
 * Another live agent, with another stateDir, writes the same rootDir (two configs copied from one, a --once with
 * another --config beside the daemon): each would sweep the other's temp files and overwrite its files.
 */
export class RootLockedError extends StateLockedError {
  readonly rootDir: string;
  readonly holderStateDir: string | undefined;
  constructor(rootDir: string, stateDir: string, pid: number, holderStateDir: string | undefined) {
    super(stateDir, pid);
    this.rootDir = rootDir;
    this.holderStateDir = holderStateDir;
    this.message = this.refusal;
  }

  override get refusal(): string {
    const holder = this.pid > 0 ? `pid ${this.pid}` : 'pid not known';
    const its = this.holderStateDir === undefined ? '' : `, stateDir ${this.holderStateDir}`;
    return (
      `${this.rootDir} is in use: another config-agent (${holder}${its}) writes it; nothing was done: one rootDir ` +
      `takes one agent (give each config its own rootDir, or run --once with the daemon's --config)`
    );
  }
}

/** How the lock tells a live holder from a dead one: injected so tests need no second process. */
export interface ProcessProbe {
  self(): Promise<Omit<LockContent, 'token'>>;
  /** Whether the process that wrote `content` still runs (same pid and, where known, same start time). */
  alive(content: LockContent): Promise<boolean>;
}

export interface StateLock {
  release(): Promise<void>;
  /**
   * Makes sure the lock at stateDir is still this one, before a pass writes: an operator's `rm -rf stateDir`
   * (or of the lock alone) while the agent runs took it away, and a `--once` or a second agent then ran beside
   * it, sweeping its temp files and writing state.json under it. A lock that is gone or not a live agent's is
   * taken again (stateDir made again, 0700); one another live agent holds throws StateLockedError. True when it
   * had to be taken again. A stateDir that resolves to another directory than when the lock was taken (it, or a
   * directory above it, swapped for a symlink) throws StateDirError: nothing is written there.
   */
  ensureHeld(): Promise<boolean>;
}

/**
 * Takes `stateDir/agent.lock`. The lock appears whole or not at all: it is written and fsynced under a temp
 * name, then link()ed into place (link fails with EEXIST when a lock exists), so no other agent ever sees a
 * created but still empty lock and takes it over. A lock left by a dead process (crash, power cut) is taken
 * over by renaming it aside first: of two agents racing for one stale lock, only the one that moved exactly
 * that stale lock goes on. The holder's start time guards against a recycled pid.
 */
export async function acquireStateLock(
  fs: FsPort,
  stateDir: string,
  probe: ProcessProbe = linuxProcessProbe,
): Promise<StateLock> {
  const file = path.join(stateDir, LOCK_FILE);
  const mine: LockContent = { ...(await probe.self()), token: randomBytes(12).toString('hex') };
  await takeLock(fs, stateDir, mine, probe);
  const realStateDir = await realpathOrUndefined(fs, stateDir);
  return {
    release: () => releaseLock(fs, file, mine),
    ensureHeld: async () => {
      // Removed (ENOENT) it is made again below, where it was; resolving elsewhere, someone put a symlink there.
      const resolved = realStateDir === undefined ? undefined : await realpathOrUndefined(fs, stateDir);
      if (resolved !== undefined && resolved !== realStateDir) {
        throw new StateDirError(
          stateDir,
          'check where it resolves',
          undefined,
          `it resolves to ${resolved} now (it resolved to ${realStateDir} when the agent took its lock): it or a directory above it was replaced by a symlink while the agent ran, and nothing is written there; put the directory back, or restart the agent to use the new place`,
        );
      }
      const holder = await readLock(fs, file);
      // Another lock of this process (a reload that reopened stateDir) holds it for us just as well; another
      // process's with our pid (another pid namespace) does not, and is judged as any other holder.
      if (typeof holder === 'object' && (holder.token === mine.token || sameInstance(holder, mine)))
        return false;
      try {
        await makeDirectoryDurably(fs, stateDir, 0o700);
      } catch (error) {
        throw new StateDirError(stateDir, `cannot create ${LOCK_FILE}`, error);
      }
      await takeLock(fs, stateDir, mine, probe);
      return true;
    },
  };
}

/** Where `dir` resolves, or undefined where the port has no realpath or it fails (a directory removed). */
async function realpathOrUndefined(fs: FsPort, dir: string): Promise<string | undefined> {
  try {
    return await fs.realpath?.(dir);
  } catch {
    return undefined;
  }
}

/** Publishes `mine` as the lock: link() of a complete temp file, a stale lock taken over, a live one refused. */
async function takeLock(fs: FsPort, stateDir: string, mine: LockContent, probe: ProcessProbe): Promise<void> {
  const file = path.join(stateDir, LOCK_FILE);
  const temp = path.join(stateDir, `${TEMP_PREFIX}${LOCK_FILE}-${mine.token}`);
  await writeLockTemp(fs, stateDir, temp, mine);
  try {
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt += 1) {
      try {
        await fs.link(temp, file);
        return;
      } catch (error) {
        const code = errnoCode(error);
        // The temp file is the agent's own, just made in stateDir: a link refused here is the filesystem's.
        if (code === 'EPERM' || code === 'ENOTSUP' || code === 'EOPNOTSUPP') {
          throw new StateDirError(
            stateDir,
            `cannot create ${LOCK_FILE}`,
            error,
            `its filesystem refuses hard links (link() ${code}: exFAT, vfat and other FAT filesystems have none), which the lock needs: put stateDir on a Linux filesystem (ext4, f2fs, xfs, btrfs, tmpfs)`,
          );
        }
        if (code !== 'EEXIST') throw new StateDirError(stateDir, `cannot create ${LOCK_FILE}`, error);
      }
      const holder = await readLock(fs, file);
      if (holder === 'missing') continue;
      if (holder !== undefined && !ofThisProcess(holder, mine) && (await probe.alive(holder))) {
        throw new StateLockedError(stateDir, holder.pid);
      }
      await moveStaleLockAside(fs, stateDir, file, holder, mine.token ?? '');
    }
  } finally {
    await fs.unlink(temp).catch(() => undefined);
  }
  throw new StateLockedError(stateDir, 0);
}

function sameInstance(holder: LockContent, mine: LockContent): boolean {
  return mine.instance !== undefined && holder.instance === mine.instance;
}

/**
 * Whether a lock was taken by this very process (a reload's, or one it lost and finds again): its instance, or
 * for a lock without one (written before that field, or by a probe that gives none) its pid.
 */
function ofThisProcess(holder: LockContent, mine: LockContent): boolean {
  return holder.instance === undefined ? holder.pid === mine.pid : sameInstance(holder, mine);
}

/** Rounds of link → judge → take over before giving up: only agents starting in a tight loop get there. */
const MAX_ATTEMPTS = 5;

async function writeLockTemp(fs: FsPort, stateDir: string, temp: string, mine: LockContent): Promise<void> {
  let handle: Awaited<ReturnType<FsPort['open']>> | undefined;
  try {
    handle = await fs.open(
      temp,
      constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
      0o600,
    );
    // Not FileHandle.writeFile: its loop retries a write that takes no bytes (a FUSE stateDir) for good.
    const bytes = Buffer.from(JSON.stringify(mine));
    for (let written = 0; written < bytes.length; ) {
      const { bytesWritten } = await handle.write(bytes, written, bytes.length - written, null);
      if (bytesWritten === 0) throw Object.assign(new Error('write took no bytes'), { code: 'EIO' });
      written += bytesWritten;
    }
    await handle.sync();
  } catch (error) {
    await handle?.close().catch(() => undefined);
    handle = undefined;
    await fs.unlink(temp).catch(() => undefined);
    throw new StateDirError(stateDir, `cannot create ${LOCK_FILE}`, error);
  } finally {
    await handle?.close();
  }
}

/**
 * Renames the lock judged stale to a name of our own, then checks that what moved is that stale lock. If
 * another agent's fresh lock moved instead (it took the stale one over just before us), it is put back.
 */
async function moveStaleLockAside(
  fs: FsPort,
  stateDir: string,
  file: string,
  judged: LockContent | undefined,
  token: string,
): Promise<void> {
  const aside = path.join(stateDir, `${TEMP_PREFIX}${LOCK_FILE}-stale-${token}`);
  try {
    await fs.rename(file, aside);
  } catch (error) {
    if (errnoCode(error) === 'ENOENT') return;
    throw new StateDirError(stateDir, `cannot replace the stale ${LOCK_FILE}`, error);
  }
  const moved = await readLock(fs, aside);
  const same =
    moved === undefined || moved === 'missing'
      ? judged === undefined
      : judged !== undefined && moved.token === judged.token && moved.pid === judged.pid;
  if (!same) await fs.link(aside, file).catch(() => undefined);
  await fs.unlink(aside).catch(() => undefined);
}

/**
 * O_NONBLOCK and O_NOFOLLOW: a FIFO planted as the lock would otherwise block start-up forever waiting for a
 * writer, and a symlink to a device (/dev/zero) would be read without end.
 */
const LOCK_READ_FLAGS = constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOFOLLOW;
/** A lock is one small JSON object; anything bigger is not a lock, and is not read. */
const MAX_LOCK_BYTES = 4096;

/**
 * The lock's content; undefined when it is unreadable or not a lock (not a regular file, too large, not
 * JSON of a lock); 'missing' when it vanished.
 */
async function readLock(fs: FsPort, file: string): Promise<LockContent | undefined | 'missing'> {
  let handle: Awaited<ReturnType<FsPort['open']>>;
  try {
    handle = await fs.open(file, LOCK_READ_FLAGS);
  } catch (error) {
    return errnoCode(error) === 'ENOENT' ? 'missing' : undefined;
  }
  let text: string;
  try {
    const stats = await handle.stat();
    if (!stats.isFile() || stats.size > MAX_LOCK_BYTES) return undefined;
    text = await handle.readFile({ encoding: 'utf8' });
  } catch {
    return undefined;
  } finally {
    await handle.close().catch(() => undefined);
  }
  try {
    lockContent ??= buildLockContent();
    // `jitless`: zod's generated fast path (`new Function`) does not pay back for a parse or two a process.
    const parsed = lockContent.safeParse(JSON.parse(text), { jitless: true });
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

async function releaseLock(fs: FsPort, file: string, mine: LockContent): Promise<void> {
  const holder = await readLock(fs, file);
  if (typeof holder === 'object' && holder.token === mine.token) {
    await fs.unlink(file).catch(() => undefined);
  }
}

/**
 * Field 22 of /proc/<pid>/stat: the process's start time in clock ticks since boot. procfs answers from the kernel's
 * memory and never hangs: read on the calling thread (one open, read and close instead of five pool round trips).
 */
async function procStart(pid: number | 'self'): Promise<string | undefined> {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces and parentheses: count fields after its closing one.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

/** A random id the kernel draws at every boot (procfs: read on the calling thread, as procStart). */
async function bootId(): Promise<string | undefined> {
  try {
    return readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim() || undefined;
  } catch {
    return undefined;
  }
}

/** Drawn once per process: this process's locks carry it (LockContent.instance), no other process's do. */
const PROCESS_INSTANCE = randomBytes(12).toString('hex');

/**
 * A pid and its start time (clock ticks since boot) name one process within one boot only. After a power cut,
 * the next boot can give the dead agent's pid, at the same tick, to another process (boots are alike, and a
 * tick is 10 ms), which then looked alive: the lock was never taken over and the agent could not start until
 * that process ended. A lock records the boot id, and one of another boot is stale.
 */
export const linuxProcessProbe: ProcessProbe = {
  async self() {
    const [start, boot] = await Promise.all([procStart('self'), bootId()]);
    return {
      pid: process.pid,
      instance: PROCESS_INSTANCE,
      ...(start === undefined ? {} : { procStart: start }),
      ...(boot === undefined ? {} : { bootId: boot }),
    };
  },
  async alive(content) {
    if (content.bootId !== undefined) {
      const boot = await bootId();
      if (boot !== undefined && boot !== content.bootId) return false;
    }
    try {
      process.kill(content.pid, 0);
    } catch (error) {
      if (errnoCode(error) !== 'EPERM') return false;
    }
    if (content.procStart === undefined) return true;
    return (await procStart(content.pid)) === content.procStart;
  },
};

/**
 * This process's rootDir locks by name: a reload reopening the same rootDir shares its lock, not takes it again.
 * `holders`: each sharer's rootDir and stateDir, newest last: the holder's answer names the newest (a reload to
 * another stateDir answered with the old one until fix30). `servers`: the name's, and the legacy name's where
 * this Node binds that one apart (rootLockNames).
 */
const rootLocks = new Map<
  string,
  {
    servers: import('node:net').Server[];
    holders: { rootDir: string; stateDir: string }[];
    /** On Node 20, for the daemon: the perl process holding the unpadded name (legacyNameHelper). */
    helper?: LegacyNameHelper;
  }
>();

/** How long a refused agent waits for the holder to say who it is (silent that long: it does not say). */
const ROOT_HOLDER_ANSWER_MS = 2000;
/** Reads of the holder's answer, at most: an agent's is one write of a few hundred bytes. */
const MAX_ANSWER_CHUNKS = 16;
/** Linux's sockaddr_un.sun_path: an abstract name is that many bytes at most, its leading NUL included. */
const SUN_PATH_BYTES = 108;

/**
 * rootDir's lock names for the key (`${dev}:${ino}`): `name`, padded with NULs to the whole sun_path, and
 * `legacy`, the name agents before lock24 bound. Node 20 binds an abstract name padded with NULs to the whole
 * sun_path and Node 24 at its own length, so the unpadded name was two names (an agent of `config-agent`, the
 * system's Node 20, and one of `config-agent-node`, its Node 24, did not see each other); padded, both bind the same
 * bytes. `legacy` is undefined on Node 20, where it is `name` already.
 */
export function rootLockNames(
  key: string,
  nodeMajor = Number(process.versions.node.split('.')[0]),
): { name: string; legacy: string | undefined } {
  const legacy = `\0config-agent-root-${key}`;
  return { name: legacy.padEnd(SUN_PATH_BYTES, '\0'), legacy: nodeMajor === 20 ? undefined : legacy };
}

/** What judging a name's holder came to: bind again ('gone'), refuse (thrown), or start without the lock. */
type HolderVerdict = 'gone' | RootLockedError | { unproven?: string };

/**
 * One agent per rootDir, whatever its stateDir: an abstract Unix socket named after rootDir's device and inode
 * (Linux; no file anywhere, so nothing for consumers to see in rootDir, and gone with the process however it ends,
 * so never stale). The holder answers a connection with its pid and stateDir, which the refusal names. Abstract
 * names are per network namespace: agents in two containers with their own networks sharing rootDir by a bind
 * mount are not told apart (docs/reliability.md). `keyOf` gives a directory's `${dev}:${ino}` and owner, group and mode, undefined
 * when they cannot be had (then no lock: a mount that does not answer). Off Node 20 the legacy name
 * (rootLockNames) is held too, so an agent before lock24 on Node 24 sees this one, and this one sees it. On Node 20
 * such an agent is looked for in /proc/net/unix (unreachableLegacyHolder): this one sees it, not it this one.
 */
export async function acquireRootLock(
  rootDir: string,
  keyOf: (dir: string) => Promise<({ key: string } & RootOwner) | undefined>,
  stateDir: string,
  deadline?: EvidenceBound,
  legacyHelper?: string,
): Promise<{ release(): Promise<void>; unproven?: string }> {
  const keyed = await keyOf(rootDir);
  if (keyed === undefined) return { release: async () => {} };
  const { name, legacy } = rootLockNames(keyed.key);
  const mine = { rootDir, stateDir };
  const release = async () => {
    const held = rootLocks.get(name);
    if (held === undefined) return;
    const at = held.holders.lastIndexOf(mine);
    if (at >= 0) held.holders.splice(at, 1);
    if (held.holders.length > 0) {
      held.helper?.tell();
      return;
    }
    rootLocks.delete(name);
    await Promise.all([closeServers(held.servers), held.helper?.stop()]);
  };
  const ours = rootLocks.get(name);
  if (ours !== undefined) {
    ours.holders.push(mine);
    ours.helper?.tell();
    return { release };
  }
  const holders = [mine];
  const answer = (pid = process.pid) => {
    const newest = holders.at(-1) ?? mine;
    return JSON.stringify({ pid, stateDir: newest.stateDir, rootDir: newest.rootDir });
  };
  for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt += 1) {
    const bound = await bindName(name, answer);
    if (bound instanceof Error) {
      // Not Linux, or sockets refused (a sandbox without AF_UNIX): no lock, as before it existed.
      if (errnoCode(bound) !== 'EADDRINUSE') return { release: async () => {} };
      const verdict = await judgeHolder(name, rootDir, keyed, keyOf, stateDir, deadline);
      if (verdict === 'gone') continue;
      if (verdict instanceof RootLockedError) throw verdict;
      return { release: async () => {}, ...verdict };
    }
    const servers = [bound];
    // On Node 20 the legacy name can be neither held nor asked: an agent before lock24 holding it is looked for
    // in /proc/net/unix (lock25).
    const old =
      legacy === undefined
        ? await unreachableLegacyHolder(name.replace(/\0+$/, ''), rootDir, keyed, stateDir)
        : await holdLegacyName(legacy, answer, rootDir, keyed, keyOf, stateDir, deadline);
    if (old instanceof RootLockedError) {
      await closeServers(servers);
      throw old;
    }
    if (old !== undefined) servers.push(old);
    for (const server of servers) server.unref();
    // An agent before lock24 on Node 24 started after this one would bind the unpadded name, which this Node
    // cannot: the daemon has perl hold it (not awaited: its start is not slowed; a --once asks for none).
    const helper =
      legacy === undefined && legacyHelper !== undefined
        ? legacyNameHelper(name, answer, legacyHelper)
        : undefined;
    rootLocks.set(name, { servers, holders, ...(helper === undefined ? {} : { helper }) });
    return { release };
  }
  // Bound each time and never connected to: a socket bound without listen(), or a full backlog (EAGAIN), which
  // no live agent's would be for five attempts in a row: a squat too, not a reason to refuse (review29).
  return {
    release: async () => {},
    unproven: `${rootDir}'s lock name is held by a process not shown to be another config-agent (it accepts no connection): started without the lock`,
  };
}

/** The perl the daemon on Node 20 runs as its legacyNameHelper (Debian's perl-base: Essential). */
export const LEGACY_HELPER_PERL = '/usr/bin/perl';

/**
 * Binds the abstract name `"\0" . $ARGV[0]` at its own length (perl's pack_sockaddr_un), prints `bound` (or `in
 * use`, or `error`, and exits), then answers each connection with the last line read from stdin; exits at stdin's
 * end, which is the agent's end however it ends (its pipe closed by the kernel). Signals of a terminal's process
 * group are ignored: the agent ends it.
 */
export const LEGACY_HELPER_SCRIPT =
  'use Socket; $| = 1; $SIG{$_} = "IGNORE" for qw(PIPE INT HUP QUIT TERM);' +
  'socket(my $s, AF_UNIX, SOCK_STREAM, 0) or do { print "error\\n"; exit 1 };' +
  'bind($s, pack_sockaddr_un("\\0" . $ARGV[0])) or do { print $!{EADDRINUSE} ? "in use\\n" : "error\\n"; exit 1 };' +
  'listen($s, 16) or do { print "error\\n"; exit 1 };' +
  'print "bound\\n"; my ($answer, $in) = ("", "");' +
  'while (1) {' +
  ' my $r = ""; vec($r, fileno(STDIN), 1) = 1; vec($r, fileno($s), 1) = 1;' +
  ' if (select($r, undef, undef, undef) < 0) { next if $!{EINTR}; exit 1 }' +
  ' if (vec($r, fileno(STDIN), 1)) {' +
  '  my $n = sysread(STDIN, $in, 65536, length $in); exit 0 unless $n;' +
  '  $answer = $1 while $in =~ s/^([^\\n]*)\\n//;' +
  ' }' +
  ' if (vec($r, fileno($s), 1) && accept(my $c, $s)) { syswrite($c, $answer); close($c) }' +
  '}';

/** The perl process holding the unpadded lock name for an agent on Node 20. */
export interface LegacyNameHelper {
  /** Tells it the newest answer (a reload's stateDir). */
  tell(): void;
  /** Ends it (SIGKILL) and resolves once it has exited: the name is free then. */
  stop(): Promise<void>;
  /** What it printed first: `bound` (it holds the name), `in use`, `error`; undefined when it ended without a word. */
  readonly started: Promise<string | undefined>;
}

/**
 * On Node 20, which pads every abstract name to the whole sun_path: the unpadded name (`name` without its trailing
 * NULs), which an agent before lock24 on Node 24 binds, held by perl (perl-base: on every Debian system; no
 * package's Node can bind it) and answered as this agent answers, with the helper's own pid, which the old agent
 * finds holding the name in /proc and believes as the same user's: refused, it names that pid and this agent's
 * stateDir (mut26). Its environment is empty (no key in it); its pipes and process do not keep this one alive.
 * Without perl it ends at once and nothing changes (the gap as it was).
 */
export function legacyNameHelper(
  name: string,
  answer: (pid?: number) => string,
  perl: string = LEGACY_HELPER_PERL,
): LegacyNameHelper {
  const { spawn } = process.getBuiltinModule('node:child_process');
  const unpadded = name.replace(/\0+$/, '').slice(1);
  const child = spawn(perl, ['-e', LEGACY_HELPER_SCRIPT, '--', unpadded], {
    stdio: ['pipe', 'pipe', 'ignore'],
    env: {},
  });
  const exited = new Promise<void>((resolve) => {
    // Its end frees the name (the kernel closes its socket); stdout's end may come later.
    child.once('exit', () => resolve());
    // Never spawned (no perl): no 'exit' follows.
    child.once('error', () => resolve());
  });
  const started = new Promise<string | undefined>((resolve) => {
    let out = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString('utf8');
      const line = out.indexOf('\n');
      if (line >= 0) resolve(out.slice(0, line));
    });
    child.stdout?.once('close', () => resolve(undefined));
    child.once('error', () => resolve(undefined));
  });
  child.stdin?.on('error', () => undefined);
  const tell = () => {
    if (child.pid !== undefined && child.stdin?.writable === true)
      child.stdin.write(`${answer(child.pid)}\n`);
  };
  tell();
  child.unref();
  (child.stdin as { unref?: () => void } | null)?.unref?.();
  (child.stdout as { unref?: () => void } | null)?.unref?.();
  return {
    tell,
    started,
    stop: async () => {
      // Held by its own handle again: awaited at a stop whose event loop holds nothing else, it must not end first.
      child.ref();
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
}

/** Listens on the abstract `name`, answering each connection with `answer()`; the error when it cannot. */
async function bindName(name: string, answer: () => string): Promise<import('node:net').Server | Error> {
  const net = process.getBuiltinModule('node:net');
  const server = net.createServer((socket) => {
    socket.on('error', () => {});
    socket.end(answer());
  });
  const bound = await new Promise<Error | undefined>((resolve) => {
    server.once('error', resolve);
    server.listen({ path: name }, () => resolve(undefined));
  });
  return bound ?? server;
}

async function closeServers(servers: readonly import('node:net').Server[]): Promise<void> {
  await Promise.all(servers.map((server) => new Promise<void>((resolve) => server.close(() => resolve()))));
}

/**
 * The legacy name held beside the padded one (rootLockNames): its server, or the refusal when an agent before
 * lock24 holds it (believed as any holder), or undefined when it cannot be held (a squat, or this Node binds it as
 * the padded name: then this process's own server answers, and the padded name is the lock).
 */
async function holdLegacyName(
  legacy: string,
  answer: () => string,
  rootDir: string,
  keyed: { key: string } & RootOwner,
  keyOf: (dir: string) => Promise<({ key: string } & RootOwner) | undefined>,
  stateDir: string,
  deadline?: EvidenceBound,
): Promise<import('node:net').Server | RootLockedError | undefined> {
  for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt += 1) {
    const bound = await bindName(legacy, answer);
    if (!(bound instanceof Error)) return bound;
    if (errnoCode(bound) !== 'EADDRINUSE') return undefined;
    const verdict = await judgeHolder(legacy, rootDir, keyed, keyOf, stateDir, deadline);
    if (verdict instanceof RootLockedError) return verdict.pid === process.pid ? undefined : verdict;
    if (verdict !== 'gone') return undefined;
  }
  return undefined;
}

/**
 * On Node 20, which pads every abstract name to the whole sun_path and so can neither bind nor connect to a shorter
 * one: the agent before lock24 on Node 24 (`config-agent-node` before its upgrade) holding the unpadded `legacy`
 * name, which would not see this one nor be seen by its bind (lock25). Found by its exact name in /proc/net/unix
 * (trailing '@' there are the padded name's NULs, so none is the old agent's), then the process holding that
 * socket among those /proc lets this one list, judged as a silent holder is: by its user and rootDir's ACL (its
 * stateDir is not known: it cannot be asked). Undefined (the lock is this one's) when no such name is bound, when
 * /proc/net/unix cannot be read (no /proc, another network namespace's table is not this one's anyway), when its
 * process is not shown (another user's under hidepid or ProtectProc=invisible) or not trusted (a squat).
 */
export async function unreachableLegacyHolder(
  legacy: string,
  rootDir: string,
  root: RootOwner,
  stateDir: string,
  proc = '/proc',
  acl: () => Promise<readonly AclEntry[] | undefined> = () => rootAcl(rootDir),
): Promise<RootLockedError | undefined> {
  if (!tableShows(` @${legacy.slice(1)}\n`, proc)) return undefined;
  const inodes = await nameInodes(legacy, proc, true);
  if (inodes.size === 0) return undefined;
  const pid = await processHolding(inodes, proc);
  if (pid === undefined || !(await trusted(pid, root, { ...NO_EVIDENCE, acl }, proc))) return undefined;
  return new RootLockedError(rootDir, stateDir, pid, undefined);
}

/** The holder of a name found bound (EADDRINUSE): asked, then believed, or not (a squat), or gone meanwhile. */
async function judgeHolder(
  name: string,
  rootDir: string,
  keyed: { key: string } & RootOwner,
  keyOf: (dir: string) => Promise<({ key: string } & RootOwner) | undefined>,
  stateDir: string,
  bound?: EvidenceBound,
): Promise<HolderVerdict> {
  const holder = await askRootHolder(name);
  // The holder ended between the bind and the connection: bind again.
  if (holder === 'gone') return 'gone';
  // Anyone may bind an abstract name: a holder that does not answer as an agent, names a process that does not
  // hold the name, or is another user's (not root, this process's or one that may write rootDir: a squatter naming itself,
  // which root's agent can see holds it; review30) is a local user's squat, which must not keep the agent from
  // starting (no lock then). Judged before its rootDir, which a squatter may name as it likes.
  if (holder === 'silent') {
    // Not a byte before the wait ran out, the connection kept open: a squatter, or an agent that cannot answer
    // now (stopped, its event loop blocked). One of a user who may write rootDir anyway is believed, as an
    // answering holder is: two agents on one rootDir is what the lock is for (adv26).
    const pid = await silentHolder(name);
    if (pid !== undefined && (await trusted(pid, keyed, { ...NO_EVIDENCE, acl: () => rootAcl(rootDir) })))
      return new RootLockedError(rootDir, stateDir, pid, undefined);
  }
  if (
    holder === undefined ||
    holder === 'silent' ||
    !(await holdsName(name, holder.pid)) ||
    !(await trusted(holder.pid, keyed, {
      acl: () => rootAcl(rootDir),
      ownsRecorded: (uid) => ownsRecordedFile(uid, holder.stateDir, rootDir, keyed.key, keyOf, bound),
    }))
  ) {
    const who =
      holder === undefined || holder === 'silent' ? 'it does not say who it is' : `it says pid ${holder.pid}`;
    return {
      unproven: `${rootDir}'s lock name is held by a process not shown to be another config-agent (${who}): started without the lock`,
    };
  }
  // The holder's rootDir is another directory now (removed, its inode number given to this one): not this one's.
  if (holder.rootDir !== undefined) {
    // A path the holder names: a late answer (a dead mount there) is not taken as this rootDir (fix33).
    const theirs = await withinBound(keyOf(holder.rootDir), bound, 'late' as const);
    if (theirs === 'late')
      return {
        unproven: `${rootDir}'s lock name is held by a process whose rootDir did not answer in time: started without the lock`,
      };
    if (theirs?.key !== keyed.key) return {};
  }
  return new RootLockedError(rootDir, stateDir, holder.pid, holder.stateDir);
}

/** /proc/<pid>/fd entries looked at, at most: an agent holds a few dozen descriptors. */
const MAX_HOLDER_DESCRIPTORS = 4096;

/**
 * Whether process `pid` is shown to hold the abstract socket `name`: a socket of that name (by inode, from
 * /proc/net/unix, this network namespace's as the name is) among its descriptors. Not shown, and so not given way
 * to, when /proc cannot tell: another user's process this one may not list (the unit's ProtectProc=invisible hides
 * them all), or no /proc/net/unix. A squatter could name such a process, so believing it would let any local user
 * keep the agent from starting; the price is that the service may start beside a `--once` run by root.
 */
export async function holdsName(name: string, pid: number, proc = '/proc'): Promise<boolean> {
  const held = await socketsOf(pid, proc);
  if (held.size === 0) return false;
  // Left at the first of the holder's sockets of that name.
  for await (const inode of nameSockets(name, proc)) if (held.has(inode)) return true;
  return false;
}

/**
 * The sockets (`socket:[inode]`, as /proc/<pid>/fd links show them) bound to the abstract name, from /proc/net/unix
 * read a line at a time: the whole table (a line per socket of every process) was read into memory until fix30.
 * None when there is no table or it cannot be read.
 */
async function* nameSockets(name: string, proc: string, exact = false): AsyncGenerator<string> {
  const { createReadStream } = process.getBuiltinModule('node:fs');
  const { createInterface } = process.getBuiltinModule('node:readline');
  // Shown with '@' for each NUL; compared without the trailing ones, so the padded name and the legacy one
  // (rootLockNames) both match either's sockets; `exact`: only a socket bound to `name` unpadded.
  const shown = `@${name.slice(1).replace(/\0+$/, '')}`;
  const matches = (field: string) => (exact ? field === shown : field.replace(/@+$/, '') === shown);
  const table = createReadStream(`${proc}/net/unix`, { encoding: 'utf8' });
  const lines = createInterface({ input: table, crlfDelay: Number.POSITIVE_INFINITY });
  table.on('error', () => lines.close());
  try {
    for await (const line of lines) {
      const fields = line.trim().split(/\s+/);
      // Node 20 binds an abstract name padded with NULs to the whole sun_path (shown as trailing '@').
      if (fields[7] !== undefined && matches(fields[7]) && fields[6] !== undefined)
        yield `socket:[${fields[6]}]`;
    }
  } catch {
    // Unreadable: none shown.
  } finally {
    lines.close();
    table.destroy();
  }
}

/**
 * Whether /proc/net/unix holds `text` (false when it cannot be read): read in 64 KiB reads on this thread, as every
 * start on Node 20 asks it (unreachableLegacyHolder), ~0.2 ms for a few hundred sockets, where nameSockets' stream
 * and readline took ~20 ms at their first use in a process.
 */
function tableShows(text: string, proc: string): boolean {
  const { openSync, readSync, closeSync } = process.getBuiltinModule('node:fs');
  const needle = Buffer.from(text);
  const buffer = Buffer.allocUnsafe(64 * 1024);
  let fd: number;
  try {
    fd = openSync(`${proc}/net/unix`, 'r');
  } catch {
    return false;
  }
  try {
    // `kept`: the previous read's last bytes, which may begin a match the next read ends.
    for (let kept = 0; ; ) {
      const read = readSync(fd, buffer, kept, buffer.length - kept, null);
      if (read === 0) return false;
      const end = kept + read;
      if (buffer.subarray(0, end).includes(needle)) return true;
      kept = Math.min(needle.length - 1, end);
      buffer.copy(buffer, 0, end - kept, end);
    }
  } catch {
    return false;
  } finally {
    closeSync(fd);
  }
}

/** The sockets bound to the abstract name (`nameSockets`), all of them. */
async function nameInodes(name: string, proc: string, exact = false): Promise<Set<string>> {
  const inodes = new Set<string>();
  for await (const inode of nameSockets(name, proc, exact)) inodes.add(inode);
  return inodes;
}

/** The sockets among process `pid`'s descriptors (none when /proc does not show them). */
async function socketsOf(pid: number, proc: string): Promise<Set<string>> {
  const { readdir, readlink } = process.getBuiltinModule('node:fs/promises');
  const descriptors = await readdir(`${proc}/${pid}/fd`).catch(() => [] as string[]);
  const held = new Set<string>();
  for (const fd of descriptors.slice(0, MAX_HOLDER_DESCRIPTORS)) {
    const target = await readlink(`${proc}/${pid}/fd/${fd}`).catch(() => undefined);
    if (target?.startsWith('socket:[') === true) held.add(target);
  }
  return held;
}

async function holdsAny(inodes: ReadonlySet<string>, pid: number, proc: string): Promise<boolean> {
  const held = await socketsOf(pid, proc);
  for (const inode of inodes) if (held.has(inode)) return true;
  return false;
}

/** Processes looked at, at most, for the holder of a name that does not answer: a device runs a few hundred. */
const MAX_HOLDER_PROCESSES = 8192;

/**
 * The process holding the abstract socket `name` when its holder did not answer (adv26): an agent stopped
 * (`kill -STOP`, a debugger) or whose event loop is blocked past ROOT_HOLDER_ANSWER_MS still holds the name, and
 * the kernel still queues a connection in its backlog, but nothing answers. Found among the processes /proc lets
 * this one list (every one as root; the agent's own user's otherwise: the only holders it would believe); undefined
 * when none is shown, as for a squatter whose process cannot be listed.
 */
async function silentHolder(name: string, proc = '/proc'): Promise<number | undefined> {
  const inodes = await nameInodes(name, proc);
  return inodes.size === 0 ? undefined : await processHolding(inodes, proc);
}

/** The first process but this one /proc shows holding one of the sockets `inodes`; undefined when none is shown. */
async function processHolding(inodes: ReadonlySet<string>, proc: string): Promise<number | undefined> {
  const { readdir } = process.getBuiltinModule('node:fs/promises');
  const entries = await readdir(proc).catch(() => [] as string[]);
  const pids = entries.filter((entry) => /^[1-9][0-9]*$/.test(entry)).map(Number);
  for (const pid of pids.slice(0, MAX_HOLDER_PROCESSES)) {
    if (pid !== process.pid && (await holdsAny(inodes, pid, proc))) return pid;
  }
  return undefined;
}

/** rootDir's owner, group and mode bits (stat), which tell who may write it. */
export interface RootOwner {
  uid: number;
  gid: number;
  mode: number;
}

/** One entry of rootDir's POSIX ACL (getfacl): `user:<uid>`, `group:<gid>` and `mask` are the ones the mode lacks. */
export interface AclEntry {
  tag: 'user' | 'group' | 'mask' | 'other';
  /** The named user's or group's id; undefined for the owner's, owning group's, mask and other entries. */
  id: number | undefined;
  write: boolean;
}

/**
 * What shows a holder's user may write rootDir besides its mode bits (review31): rootDir's ACL, and files the
 * holder recorded as written in rootDir that its user owns. Injected so tests need no ACL tools nor other users.
 */
export interface HolderEvidence {
  /** rootDir's ACL entries; undefined when they cannot be read (rootAcl: neither perl nor getfacl could). */
  acl(): Promise<readonly AclEntry[] | undefined>;
  /** Whether `uid` owns a file the holder recorded (its state.json) as written in rootDir. */
  ownsRecorded(uid: number): Promise<boolean>;
}

/** No evidence beyond the mode bits. */
const NO_EVIDENCE: HolderEvidence = { acl: async () => undefined, ownsRecorded: async () => false };

/** A user's identity from /proc/<pid>/status: its effective uid and every group it is in. */
export interface ProcessUser {
  uid: number;
  groups: readonly number[];
}

/** The effective uid, effective gid and supplementary groups of process `pid`; undefined when not shown. */
export async function processUser(pid: number, proc = '/proc'): Promise<ProcessUser | undefined> {
  const status = await readFile(`${proc}/${pid}/status`, 'utf8').catch(() => '');
  const field = (name: string) =>
    (status.split('\n').find((line) => line.startsWith(`${name}:`)) ?? '')
      .slice(name.length + 1)
      .split(/\s+/)
      .filter((value) => value !== '')
      .map(Number);
  const uid = field('Uid')[1];
  if (uid === undefined || Number.isNaN(uid)) return undefined;
  const groups = [field('Gid')[1], ...field('Groups')].filter(
    (gid): gid is number => gid !== undefined && !Number.isNaN(gid),
  );
  return { uid, groups };
}

/**
 * Whether rootDir's mode lets `user` write it: its owner always (it may chmod the bits: as good as the agent's
 * user, fix32), a member of its group when group-writable (the ACL's mask when it has one), anyone when
 * other-writable.
 */
export function modeLetsWrite(user: ProcessUser, root: RootOwner): boolean {
  if (user.uid === root.uid) return true;
  if (user.groups.includes(root.gid)) return (root.mode & 0o020) !== 0;
  return (root.mode & 0o002) !== 0;
}

/**
 * Whether rootDir's ACL lets `user` write it through a named entry (`setfacl -m u:svc:rwx`, or `g:<group>:rwx` of
 * one of its groups), masked by the ACL's mask as the kernel does. The owner's, owning group's and other entries
 * are the mode bits (modeLetsWrite). A named user entry decides alone: the kernel looks no further.
 */
export function aclLetsWrite(user: ProcessUser, root: RootOwner, acl: readonly AclEntry[]): boolean {
  if (user.uid === root.uid) return false;
  const mask = acl.find((entry) => entry.tag === 'mask');
  const masked = (entry: AclEntry) => entry.write && (mask === undefined || mask.write);
  const named = acl.find((entry) => entry.tag === 'user' && entry.id === user.uid);
  if (named !== undefined) return masked(named);
  return acl.some(
    (entry) =>
      entry.tag === 'group' && entry.id !== undefined && user.groups.includes(entry.id) && masked(entry),
  );
}

/**
 * Whether rootDir's ACL (entries beyond its mode) lets `user` write it as the kernel judges (acl(5)), for any user
 * but rootDir's owner: a named user entry decides alone; else the owning group's entry (`group::`, not the mode's
 * group bits, which are the mask) and the named groups' of the user's groups, masked, any of them; else `other`.
 * modeLetsWrite took the mask for the owning group's rights: a member whose `group::` lacks write was trusted (fix34).
 */
function aclDecides(user: ProcessUser, root: RootOwner, acl: readonly AclEntry[]): boolean {
  if (acl.some((entry) => entry.tag === 'user' && entry.id === user.uid))
    return aclLetsWrite(user, root, acl);
  const mask = acl.find((entry) => entry.tag === 'mask');
  const groups = acl.filter((entry) => entry.tag === 'group' && user.groups.includes(entry.id ?? root.gid));
  if (groups.length > 0) return groups.some((entry) => entry.write && (mask === undefined || mask.write));
  return acl.find((entry) => entry.tag === 'other')?.write ?? (root.mode & 0o002) !== 0;
}

/** getfacl's text (`user:998:rwx`, `mask::rwx`, ...; `-n`: numeric ids) as entries; comments and blanks skipped. */
export function parseAcl(text: string): AclEntry[] {
  const entries: AclEntry[] = [];
  for (const line of text.split('\n')) {
    const match = /^(user|group|mask|other):([0-9]*):([r-][w-][xX-])/.exec(line.trim());
    if (match === null) continue;
    const [, tag, id, perms] = match;
    entries.push({
      tag: tag as AclEntry['tag'],
      id: id === '' || id === undefined ? undefined : Number(id),
      write: perms?.[1] === 'w',
    });
  }
  return entries;
}

/** How long getfacl (or perl) may take on rootDir (a mount that answered its stat a moment ago). */
const GETFACL_TIMEOUT_MS = 2000;

/**
 * getxattr(2)'s number where it is known for sure (x86-64, i386 and arm's tables, and the generic table of arm64,
 * riscv64 and loong64): perl's `syscall` calls it by number, and a wrong number would be another system call.
 */
const GETXATTR_SYSCALL: Partial<Record<NodeJS.Architecture, number>> = {
  x64: 191,
  ia32: 229,
  arm: 229,
  arm64: 8,
  riscv64: 8,
  loong64: 8,
};

/**
 * Prints rootDir's `system.posix_acl_access` xattr as hex, nothing when it has none (ENODATA: its mode is its ACL)
 * or its filesystem keeps no ACLs (EOPNOTSUPP); exit 1 on any other error. Perl's own `syscall` (perl-base, which
 * Debian marks Essential: on every system the packages install on), since Node reads no xattrs.
 */
const PERL_ACL_SCRIPT =
  'my ($path, $name, $buf) = ($ARGV[1], "system.posix_acl_access", "\\0" x 65536);' +
  'my $n = syscall($ARGV[0] + 0, $path, $name, $buf, 65536);' +
  'if ($n < 0) { exit($!{ENODATA} || $!{EOPNOTSUPP} ? 0 : 1) }' +
  'print unpack("H*", substr($buf, 0, $n))';

/** The tags of the kernel's ACL xattr (include/uapi/linux/posix_acl.h) as AclEntry tags, named or not. */
const XATTR_TAGS = new Map<number, { tag: AclEntry['tag']; named: boolean }>([
  [0x01, { tag: 'user', named: false }],
  [0x02, { tag: 'user', named: true }],
  [0x04, { tag: 'group', named: false }],
  [0x08, { tag: 'group', named: true }],
  [0x10, { tag: 'mask', named: false }],
  [0x20, { tag: 'other', named: false }],
]);

/**
 * The `system.posix_acl_access` xattr's bytes (a little-endian u32 version 2, then per entry u16 tag, u16 perms,
 * u32 id) as entries; none for no bytes (no ACL); undefined when it is not that format.
 */
export function parseAclXattr(bytes: Buffer): AclEntry[] | undefined {
  if (bytes.length === 0) return [];
  if (bytes.length < 4 || (bytes.length - 4) % 8 !== 0 || bytes.readUInt32LE(0) !== 2) return undefined;
  const entries: AclEntry[] = [];
  for (let at = 4; at < bytes.length; at += 8) {
    const kind = XATTR_TAGS.get(bytes.readUInt16LE(at));
    if (kind === undefined) return undefined;
    entries.push({
      tag: kind.tag,
      id: kind.named ? bytes.readUInt32LE(at + 4) : undefined,
      write: (bytes.readUInt16LE(at + 2) & 0o2) !== 0,
    });
  }
  return entries;
}

/** Where rootAcl finds its tools: perl at Debian's path, getfacl on PATH (tests give others). */
export interface AclTools {
  perl: string;
  getfacl: string;
}

const ACL_TOOLS: AclTools = { perl: '/usr/bin/perl', getfacl: 'getfacl' };

/**
 * rootDir's ACL entries: its `system.posix_acl_access` xattr read by perl's getxattr(2) (lock25: no package to
 * install), else from getfacl (package `acl`: where this arch's getxattr number is not known, or there is no perl);
 * undefined when neither can read it.
 */
export async function rootAcl(rootDir: string, tools: AclTools = ACL_TOOLS): Promise<AclEntry[] | undefined> {
  const { execFile } = process.getBuiltinModule('node:child_process');
  // The tools' whole environment: the system's PATH (getfacl is looked up on it) and the C locale. Not the agent's:
  // perl takes code from PERL5OPT/PERL5LIB/PERL5DB, which an environment handed on by `su` or `doas keepenv` may
  // hold, as the launcher drops NODE_* for (review34), and that environment's PATH chose getfacl (a user's
  // ~/bin/getfacl ran as root; review36); nor the API key, when it came in CONFIG_AGENT_API_KEY.
  const env = { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', LC_ALL: 'C' };
  const run = async (file: string, args: string[]) =>
    await new Promise<string | undefined>((resolve) => {
      try {
        execFile(
          file,
          args,
          { timeout: GETFACL_TIMEOUT_MS, maxBuffer: 256 * 1024, encoding: 'utf8', env },
          (error, out) => resolve(error === null ? out : undefined),
        );
      } catch {
        // Arguments it refuses (a NUL in rootDir): not read, rather than a throw out of trusted().
        resolve(undefined);
      }
    });
  const syscall = GETXATTR_SYSCALL[process.arch];
  if (syscall !== undefined) {
    const hex = await run(tools.perl, ['-e', PERL_ACL_SCRIPT, '--', String(syscall), rootDir]);
    const entries =
      hex === undefined || !/^[0-9a-f]*$/.test(hex) ? undefined : parseAclXattr(Buffer.from(hex, 'hex'));
    if (entries !== undefined) return entries;
  }
  const text = await run(tools.getfacl, ['-n', '-p', '--', rootDir]);
  return text === undefined ? undefined : parseAcl(text);
}

/** A state.json larger than this is not read to trust its holder (an agent's of ~50,000 files). */
const MAX_RECORDED_STATE_BYTES = 16 * 1024 * 1024;
/**
 * What parsing that state.json may build, weighed on its bytes first (lib/json-weigher.ts): a squatter's file of
 * 16 MiB of `[[[[` would build ~700 MB. An agent's of 50,000 files at state.json's 53 tokens an instance (STATE_WEIGHT).
 */
const RECORDED_STATE_WEIGHT = { maxTokens: 53 * 50_000, maxDepth: MAX_STATE_FILE_DEPTH };
/** Recorded files looked at, at most, for one owned by the holder's user. */
const MAX_RECORDED_FILES_LOOKED_AT = 32;

/**
 * How long the paths a holder names (its stateDir's state.json, the rootDir recorded there, the files it lists, the
 * rootDir it answers) may take to tell anything: they are the holder's to choose, a squatter's too, and may lie on a
 * mount that does not answer. A late answer trusts nothing (fix33).
 */
export const HOLDER_EVIDENCE_MS = 2_000;

/** The injected clock's sleep and the bound it sets; without it (stand-in clocks of tests) no bound. */
export interface EvidenceBound {
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
  ms: number;
}

/** `work`'s answer, or `late` once `bound.ms` has passed first (its timer dropped when `work` answers). */
export async function withinBound<T, L>(
  work: Promise<T>,
  bound: EvidenceBound | undefined,
  late: L,
): Promise<T | L> {
  if (bound === undefined) return await work;
  const stop = new AbortController();
  const timer = bound.sleep(bound.ms, stop.signal).then(
    () => late,
    () => late,
  );
  try {
    return await Promise.race([work, timer]);
  } finally {
    stop.abort();
  }
}

/**
 * Whether `uid` owns a regular file that the state.json in `stateDir` (the holder's, as it answered) records as
 * written in rootDir: that state must be of this rootDir (its recorded root keyed as rootDir is), and each file is
 * looked up where it resolves inside rootDir (no `..`, no symlink out of it). A squatter may name any stateDir, its
 * own with any records, but cannot own a file inside rootDir without writing there.
 */
export async function ownsRecordedFile(
  uid: number,
  stateDir: string,
  rootDir: string,
  key: string,
  keyOf: (dir: string) => Promise<({ key: string } & RootOwner) | undefined>,
  bound?: EvidenceBound,
  fsp: RecordedFs = process.getBuiltinModule('node:fs/promises'),
): Promise<boolean> {
  // Every path here is the holder's to name: a late answer is no evidence (fix33).
  return await withinBound(recordedFileOwned(uid, stateDir, rootDir, key, keyOf, fsp), bound, false);
}

/** The node:fs/promises calls ownsRecordedFile makes; a stand-in in tests. */
export type RecordedFs = Pick<typeof import('node:fs/promises'), 'open' | 'realpath' | 'lstat'>;

async function recordedFileOwned(
  uid: number,
  stateDir: string,
  rootDir: string,
  key: string,
  keyOf: (dir: string) => Promise<({ key: string } & RootOwner) | undefined>,
  fsp: RecordedFs,
): Promise<boolean> {
  let text: string;
  try {
    const handle = await fsp.open(path.join(stateDir, STATE_FILE), LOCK_READ_FLAGS);
    try {
      const stats = await handle.stat();
      if (!stats.isFile() || stats.size > MAX_RECORDED_STATE_BYTES) return false;
      const bytes = await handle.readFile();
      if (new JsonWeigher(RECORDED_STATE_WEIGHT).add(bytes) !== undefined) return false;
      text = bytes.toString('utf8');
    } finally {
      await handle.close().catch(() => undefined);
    }
  } catch {
    return false;
  }
  let recorded: { rootDir?: unknown; files?: unknown };
  try {
    // `?? {}`: JSON `null` threw reading its fields, out of trusted(), so a squatter naming such a state.json kept
    // the agent from starting (lock25). Other JSON that is no object has neither field.
    recorded = (JSON.parse(text) ?? {}) as typeof recorded;
  } catch {
    return false;
  }
  const { files } = recorded;
  if (typeof recorded.rootDir !== 'string' || typeof files !== 'object' || files === null) return false;
  if ((await keyOf(recorded.rootDir))?.key !== key) return false;
  const realRoot = await fsp.realpath(rootDir).catch(() => undefined);
  if (realRoot === undefined) return false;
  for (const relative of Object.keys(files).slice(0, MAX_RECORDED_FILES_LOOKED_AT)) {
    // `..` and symlinks are resolved here: what lands outside rootDir proves nothing.
    const file = path.join(realRoot, relative);
    const parent = await fsp.realpath(path.dirname(file)).catch(() => undefined);
    if (parent === undefined || (parent !== realRoot && !parent.startsWith(`${realRoot}/`))) continue;
    const stats = await fsp.lstat(path.join(parent, path.basename(file))).catch(() => undefined);
    if (stats?.isFile() === true && stats.uid === uid) return true;
  }
  return false;
}

/**
 * Whether process `pid` runs as a user that may write rootDir anyway (so its squat costs nothing it could not do):
 * root, this process's user, one rootDir's mode lets write (its owner, the service's user a root `--once` sees;
 * a member of its group when group-writable), one a named entry of rootDir's ACL lets write (review31), or one
 * owning a file the holder recorded as written in rootDir (a service writing only in directories of its own under
 * a rootDir it cannot write: `/etc` with `/etc/app` its own; review31). From /proc/<pid>/status (effective uid and
 * gid, supplementary groups); not trusted when that cannot be read. Past root, this user and rootDir's owner, an
 * ACL (entries beyond the mode) decides instead of the mode bits, whose group bits are then its mask (fix34); the
 * recorded files are looked at last.
 */
export async function trusted(
  pid: number,
  root: RootOwner,
  evidence: HolderEvidence = NO_EVIDENCE,
  proc = '/proc',
  selfUid = process.geteuid?.(),
): Promise<boolean> {
  const user = await processUser(pid, proc);
  if (user === undefined) return false;
  if (user.uid === 0 || user.uid === selfUid) return true;
  if (user.uid === root.uid) return true;
  // With an ACL the mode's group bits are its mask, not the owning group's rights: the ACL decides (fix34).
  const acl = await evidence.acl();
  if (acl !== undefined && acl.length > 0 ? aclDecides(user, root, acl) : modeLetsWrite(user, root))
    return true;
  return await evidence.ownsRecorded(user.uid);
}

/**
 * The holder's answer: its pid and stateDir; undefined when it does not say; 'gone' when nobody holds the name;
 * 'silent' when it sent nothing at all before the wait ran out, the connection still open (a stopped agent's).
 */
async function askRootHolder(
  name: string,
): Promise<{ pid: number; stateDir: string; rootDir?: string | undefined } | undefined | 'gone' | 'silent'> {
  const net = process.getBuiltinModule('node:net');
  return await new Promise((resolve) => {
    let text = '';
    let connected = false;
    const socket = net.connect({ path: name }, () => {
      connected = true;
    });
    let silent = false;
    socket.setTimeout(ROOT_HOLDER_ANSWER_MS, () => {
      silent = connected && text === '';
      socket.destroy();
    });
    let chunks = 0;
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('utf8');
      // The timeout is one of silence: a squatter trickling a byte at a time held the start for hours (review29).
      chunks += 1;
      if (text.length > MAX_LOCK_BYTES || chunks > MAX_ANSWER_CHUNKS) socket.destroy();
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      if (!connected) return resolve('gone');
      if (silent) return resolve('silent');
      try {
        const parsed = z
          .object({ pid: z.number().int().positive(), stateDir: z.string(), rootDir: z.string().optional() })
          .safeParse(JSON.parse(text), { jitless: true });
        resolve(parsed.success ? parsed.data : undefined);
      } catch {
        resolve(undefined);
      }
    });
  });
}
