// strace for the reliability tier: run the agent traced (optionally with injected syscall faults), parse the
// trace, and check the durable-publish protocol and what the service was told against it.

import { execFile, spawnSync } from 'node:child_process';
import { readdir, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { TEMP_PREFIX } from '../../../src/store/path-guard.js';
import { skipWithoutRoot } from '../../helpers/built-packages.js';
import { AGENT_BIN, REPO_ROOT } from '../../helpers/harness.js';

/** The syscalls the checks read; everything else is left out of the trace to keep it small. */
export const TRACED_SYSCALLS = [
  'open',
  'openat',
  'write',
  'writev',
  'pwrite64',
  'fsync',
  'fdatasync',
  'close',
  'rename',
  'renameat',
  'renameat2',
  'unlink',
  'unlinkat',
  'mkdir',
  'mkdirat',
  'fchmod',
];

/** Why strace cannot be used here, or undefined when it can (it needs ptrace, which containers may forbid). */
export function straceUnavailable(): string | undefined {
  const probe = spawnSync('strace', ['-f', '-e', 'trace=getpid', '-o', '/dev/null', 'true'], {
    encoding: 'utf8',
  });
  // As root in .ci/run (which installs strace) a test that needs it fails where it would skip: no silent skip in CI.
  if (probe.error)
    return skipWithoutRoot(`strace is not installed (${probe.error.message}); .ci/run installs it`);
  if (probe.status !== 0)
    return skipWithoutRoot(`strace cannot trace here: ${probe.stderr.trim() || `exit ${probe.status}`}`);
  return undefined;
}

export interface Syscall {
  /** Position in the trace at completion: the order the checks use. */
  index: number;
  /** Line of the trace where the call began: strace's `when=N` counts calls in this order. */
  entry: number;
  pid: number;
  name: string;
  args: string;
  /** The return value as printed: `0`, `20</path>`, `-1 EIO (Input/output error) (INJECTED)`. */
  result: string;
}

export function succeeded(call: Syscall): boolean {
  return !call.result.startsWith('-1');
}

// strace pads the pid column, so the gap after it is one space or more.
const LINE = /^(\d+)\s+(.*)$/;

/** Parses `strace -f -y -o` output, joining `<unfinished ...>` / `<... resumed>` halves of one call. */
export function parseStrace(text: string): Syscall[] {
  const calls: Syscall[] = [];
  const pending = new Map<number, { name: string; args: string; entry: number }>();
  const complete = (pid: number, name: string, body: string, entry: number) => {
    // strace pads before ` = ` to align columns (always after a `resumed>`); the greedy group keeps a `) = `
    // that a string argument may hold.
    const split = /^(.*)\)\s+= (.*)$/s.exec(body);
    if (split === null) return;
    calls.push({ index: calls.length, entry, pid, name, args: split[1] ?? '', result: split[2] ?? '' });
  };
  let lineNumber = -1;
  for (const line of text.split('\n')) {
    lineNumber += 1;
    const match = LINE.exec(line);
    if (match === null) continue;
    const pid = Number(match[1]);
    const rest = match[2] ?? '';
    if (rest.startsWith('<... ')) {
      const resumed = /^<\.\.\. (\w+) resumed>(.*)$/.exec(rest);
      const start = pending.get(pid);
      if (resumed === null || start === undefined) continue;
      pending.delete(pid);
      complete(pid, start.name, start.args + (resumed[2] ?? ''), start.entry);
      continue;
    }
    const call = /^(\w+)\((.*)$/.exec(rest);
    if (call === null) continue;
    const name = call[1] ?? '';
    const body = call[2] ?? '';
    if (body.endsWith('<unfinished ...>')) {
      pending.set(pid, {
        name,
        args: body.slice(0, -'<unfinished ...>'.length).trimEnd(),
        entry: lineNumber,
      });
    } else {
      complete(pid, name, body, lineNumber);
    }
  }
  return calls;
}

/** Every double-quoted string argument, unescaped enough for the ASCII paths of these tests. */
export function quoted(args: string): string[] {
  const out: string[] = [];
  for (const match of args.matchAll(/"((?:[^"\\]|\\.)*)"/g))
    out.push((match[1] ?? '').replace(/\\(.)/g, '$1'));
  return out;
}

/** The path strace printed for the call's first fd argument (`-y`), e.g. `20</root/a.json>`. */
export function fdPath(args: string): string | undefined {
  return /^\d+<([^>]*)>/.exec(args)?.[1];
}

/** The open flags of an open/openat call. */
export function openFlags(call: Syscall): string[] {
  const flags = /"(?:[^"\\]|\\.)*", ([A-Z_|0-9]+)/.exec(call.args)?.[1] ?? '';
  return flags.split('|');
}

export function openedPath(call: Syscall): string | undefined {
  return quoted(call.args)[0];
}

const isOpen = (call: Syscall) => call.name === 'open' || call.name === 'openat';
const isRename = (call: Syscall) => call.name.startsWith('rename');
const isUnlink = (call: Syscall) => call.name === 'unlink' || call.name === 'unlinkat';
const isWrite = (call: Syscall) => ['write', 'writev', 'pwrite64'].includes(call.name);

const under = (file: string, dirs: readonly string[]) =>
  dirs.some((dir) => file === dir || file.startsWith(`${dir}/`));

/** The first successful open of `dir` as a directory after `from`, then its fsync; the fsync's index. */
function directoryFsyncAfter(
  calls: readonly Syscall[],
  dir: string,
  from: number,
  until = Infinity,
): number | undefined {
  for (const call of calls) {
    if (call.index <= from || call.index >= until) continue;
    if (call.name === 'fsync' && fdPath(call.args) === dir && succeeded(call)) return call.index;
  }
  return undefined;
}

export interface Publish {
  temp: string;
  target: string | undefined;
  problems: string[];
}

/**
 * Every temp file opened under `dirs`, checked against the protocol: open(O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW)
 * → write → fsync → close → rename → fsync(dir). A publish that failed part-way (an injected fault) must
 * have unlinked its temp file and never renamed it.
 */
export function checkPublishes(calls: readonly Syscall[], dirs: readonly string[]): Publish[] {
  const publishes: Publish[] = [];
  for (const open of calls) {
    if (!isOpen(open) || !succeeded(open)) continue;
    const temp = openedPath(open);
    if (temp === undefined || !under(temp, dirs) || !path.basename(temp).startsWith(TEMP_PREFIX)) continue;
    const problems: string[] = [];
    const flags = openFlags(open);
    for (const flag of ['O_WRONLY', 'O_CREAT', 'O_EXCL', 'O_NOFOLLOW']) {
      if (!flags.includes(flag)) problems.push(`opened without ${flag}`);
    }
    const on = calls.filter((c) => c.index > open.index && fdPath(c.args) === temp);
    const writes = on.filter(isWrite);
    const fsync = on.find((c) => c.name === 'fsync' || c.name === 'fdatasync');
    const close = on.find((c) => c.name === 'close');
    const rename = calls.find((c) => c.index > open.index && isRename(c) && quoted(c.args)[0] === temp);
    const unlink = calls.find((c) => c.index > open.index && isUnlink(c) && quoted(c.args)[0] === temp);
    const target = rename === undefined ? undefined : quoted(rename.args)[1];
    const failed = on.find((c) => !succeeded(c));
    if (rename !== undefined && succeeded(rename)) {
      const lastWrite = writes.at(-1);
      if (writes.length === 0) problems.push('renamed without a write');
      if (fsync === undefined || !succeeded(fsync)) problems.push('renamed without a successful fsync');
      else if (lastWrite !== undefined && fsync.index < lastWrite.index)
        problems.push('fsync before the last write');
      if (close === undefined || close.index > rename.index) problems.push('renamed before close');
      if (fsync !== undefined && fsync.index > rename.index) problems.push('renamed before fsync');
      if (failed !== undefined) problems.push(`renamed after a failed ${failed.name}`);
      if (
        target !== undefined &&
        directoryFsyncAfter(calls, path.dirname(target), rename.index) === undefined
      ) {
        problems.push(`no fsync of ${path.dirname(target)} after the rename`);
      }
    } else if (unlink === undefined || !succeeded(unlink)) {
      problems.push('temp file neither renamed nor unlinked');
    }
    publishes.push({ temp, target, problems });
  }
  return publishes;
}

/** Opens of anything under `dirs` with O_TRUNC, or creating a file without O_EXCL: neither is ever allowed. */
export function unsafeOpens(calls: readonly Syscall[], dirs: readonly string[]): string[] {
  const found: string[] = [];
  for (const call of calls) {
    if (!isOpen(call)) continue;
    const file = openedPath(call);
    if (file === undefined || !under(file, dirs)) continue;
    const flags = openFlags(call);
    if (flags.includes('O_TRUNC')) found.push(`${file} opened with O_TRUNC`);
    if (flags.includes('O_CREAT') && !flags.includes('O_EXCL')) found.push(`${file} created without O_EXCL`);
  }
  return found;
}

export interface StatusReport {
  index: number;
  instanceId: string;
  activity: string;
}

/** The status reports the agent sent (PATCH /v1/config_instances/{id}), from the socket writes in the trace. */
export function reportsSent(calls: readonly Syscall[]): StatusReport[] {
  const reports: StatusReport[] = [];
  for (const call of calls) {
    if (!isWrite(call)) continue;
    const id = /PATCH \/v1\/config_instances\/([^ ?"]+) HTTP/.exec(call.args)?.[1];
    const activity = /\\"activity_status\\":\\"(\w+)\\"/.exec(call.args)?.[1];
    if (id !== undefined && activity !== undefined)
      reports.push({ index: call.index, instanceId: id, activity });
  }
  return reports;
}

/**
 * For each report sent: `deployed` only after the file's last rename in this trace was followed by an fsync of
 * its directory; `removed` only after its unlink was. (An instance whose file was already in place has no
 * rename in the trace: what made it durable is a previous run's business.)
 */
export function reportsBeforeDurable(
  calls: readonly Syscall[],
  rootDir: string,
  pathOf: (instanceId: string) => string | undefined,
): string[] {
  const problems: string[] = [];
  for (const report of reportsSent(calls)) {
    const relative = pathOf(report.instanceId);
    if (relative === undefined) continue;
    const absolute = path.join(rootDir, relative);
    const before = calls.filter((c) => c.index < report.index && succeeded(c));
    const change =
      report.activity === 'deployed'
        ? before.filter((c) => isRename(c) && quoted(c.args)[1] === absolute).at(-1)
        : report.activity === 'removed'
          ? before.filter((c) => isUnlink(c) && quoted(c.args)[0] === absolute).at(-1)
          : undefined;
    if (change === undefined) continue;
    if (directoryFsyncAfter(calls, path.dirname(absolute), change.index, report.index) === undefined) {
      problems.push(
        `${report.instanceId} reported ${report.activity} before ${path.dirname(absolute)} was fsynced after its ${change.name}`,
      );
    }
  }
  return problems;
}

/**
 * Every directory created (mkdir/mkdirat) at or under `dirs` whose entry was not made durable by a successful
 * fsync of its parent in time: a power cut could take such a directory, with all it holds, after the service was
 * told its files are in place. In time is before the first status report of the run (or before the run's end,
 * with none); with `root`, a directory under `root.dir` only has to be synced before the first report of a file
 * below it (a pass reports each batch of files while it writes the next: docs/performance.md).
 */
export function directoriesNotSyncedInParent(
  calls: readonly Syscall[],
  dirs: readonly string[],
  root?: { dir: string; pathOf: (instanceId: string) => string | undefined },
): string[] {
  const reports = reportsSent(calls);
  const deadline = (created: string) => {
    const perFile = root !== undefined && under(created, [root.dir]);
    const first = reports.find((report) => {
      if (!perFile) return true;
      const relative = root.pathOf(report.instanceId);
      // A report whose file is unknown could be of a file below: it counts.
      return relative === undefined || path.join(root.dir, relative).startsWith(`${created}/`);
    });
    return first?.index ?? Infinity;
  };
  const problems: string[] = [];
  for (const call of calls) {
    if ((call.name !== 'mkdir' && call.name !== 'mkdirat') || !succeeded(call)) continue;
    const created = quoted(call.args)[0];
    if (created === undefined || !under(created, dirs)) continue;
    const parent = path.dirname(created);
    const before = deadline(created);
    const synced = calls.some(
      (c) =>
        c.index > call.index &&
        c.index < before &&
        c.name === 'fsync' &&
        fdPath(c.args) === parent &&
        succeeded(c),
    );
    if (!synced)
      problems.push(`${created} created, ${parent} not fsynced before a report of a file below it`);
  }
  return problems;
}

/** Whether strace injected a fault into this call. */
export function injected(call: Syscall): boolean {
  return call.result.includes('(INJECTED)');
}

/**
 * The `when=` value that makes strace hit the first call of `name` matching `predicate`: its rank among the calls
 * of that name, in the order they began.
 */
export function whenFor(
  calls: readonly Syscall[],
  name: string,
  predicate: (call: Syscall) => boolean,
): number | undefined {
  const ofName = calls.filter((c) => c.name === name).sort((a, b) => a.entry - b.entry);
  const at = ofName.findIndex(predicate);
  return at < 0 ? undefined : at + 1;
}

export interface TracedRun {
  code: number | null;
  stdout: string;
  stderr: string;
  calls: Syscall[];
}

/** Preloaded by `fixedTempNames` runs: randomBytes(12), the temp files' names, counts 1, 2, 3... */
export const FIXED_TEMP_NAMES = path.join(
  REPO_ROOT,
  'test',
  'reliability',
  'support',
  'fixed-temp-names.mjs',
);

/**
 * The temp paths a run preloaded with FIXED_TEMP_NAMES can use in `dirs`: the first `count` names in each. The
 * count is shared by every random name of the run (the lock's token, the state dir's temp files), so it only
 * has to exceed how many the run makes.
 */
export function fixedTempPaths(dirs: readonly string[], count: number): string[] {
  const paths: string[] = [];
  for (const dir of dirs) {
    for (let n = 1; n <= count; n += 1) {
      const name = Buffer.alloc(12);
      name.writeUInt32BE(n, 8);
      paths.push(path.join(dir, `${TEMP_PREFIX}${name.toString('hex')}`));
    }
  }
  return paths;
}

/** SIGKILL to every process strace (`tracer`) started. */
async function killTracees(tracer: number | undefined): Promise<void> {
  if (tracer === undefined) return;
  const children = async (pid: number): Promise<number[]> => {
    const tasks = await readdir(`/proc/${pid}/task`).catch(() => [] as string[]);
    const found: number[] = [];
    for (const task of tasks) {
      const text = await readFile(`/proc/${pid}/task/${task}/children`, 'utf8').catch(() => '');
      found.push(
        ...text
          .split(' ')
          .filter((word) => word !== '')
          .map(Number),
      );
    }
    return found;
  };
  for (const pid of await children(tracer)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // Gone already.
    }
  }
}

/**
 * Runs `config-agent --config <config> <args>` under strace, with UV_THREADPOOL_SIZE=1 so the order of fs calls
 * (and so "the Nth fsync") is reproducible. `inject` are strace `-e inject=` specs, e.g. `fsync:error=EIO:when=3`.
 *
 * `paths` narrows strace to calls on those paths (`-P`: by path argument, or by the path of an fd argument), and
 * an injected fault with it: `write:error=ENOSPC:when=1` then strikes the first write to one of those files and
 * nothing else (module loading, logs, sockets, eventfd wake-ups are not counted). The trace holds only those
 * calls. `fixedTempNames` preloads FIXED_TEMP_NAMES, so `fixedTempPaths` names the temp files in advance.
 */
export async function runTraced(options: {
  configPath: string;
  args: readonly string[];
  traceFile: string;
  inject?: readonly string[];
  paths?: readonly string[];
  fixedTempNames?: boolean;
  env?: NodeJS.ProcessEnv;
  timeoutMs?: number;
  /** Aborting it kills strace and the run (SIGKILL): a run that is not to end by itself (a daemon). */
  signal?: AbortSignal;
}): Promise<TracedRun> {
  const straceArgs = [
    '-f',
    '-y',
    // Enough for a report's request line, headers and the start of its body in one write (reportsSent).
    '-s',
    '1024',
    '-o',
    options.traceFile,
    '-e',
    `trace=${TRACED_SYSCALLS.join(',')}`,
  ];
  for (const spec of options.inject ?? []) {
    // strace injects only into calls it traces: a fault aimed at another call (rmdir, say) never fires, silently.
    const untraced = (spec.split(':')[0] ?? '').split(',').filter((name) => !TRACED_SYSCALLS.includes(name));
    if (untraced.length > 0) {
      throw new Error(
        `inject=${spec} names ${untraced.join(', ')}, not in TRACED_SYSCALLS: it would never fire`,
      );
    }
    straceArgs.push('-e', `inject=${spec}`);
  }
  for (const file of options.paths ?? []) straceArgs.push('-P', file);
  const nodeArgs = options.fixedTempNames === true ? ['--import', FIXED_TEMP_NAMES] : [];
  const { code, stdout, stderr } = await new Promise<{ code: number | null; stdout: string; stderr: string }>(
    (resolve) => {
      const child = execFile(
        'strace',
        [
          ...straceArgs,
          process.execPath,
          ...nodeArgs,
          AGENT_BIN,
          '--config',
          options.configPath,
          ...options.args,
        ],
        {
          env: { PATH: process.env.PATH, HOME: process.env.HOME, UV_THREADPOOL_SIZE: '1', ...options.env },
          maxBuffer: 64 * 1024 * 1024,
        },
        (error, out, err) => {
          const exitCode = error === null ? 0 : typeof error.code === 'number' ? error.code : null;
          resolve({ code: exitCode, stdout: out, stderr: err });
        },
      );
      // strace killed leaves its tracee running (detached, a daemon for good): the tracee is killed first, and
      // strace ends with it (SIGKILL to strace too, a little later, should it not).
      const end = () => {
        void killTracees(child.pid).finally(() => setTimeout(() => child.kill('SIGKILL'), 1_000).unref());
      };
      const timer = setTimeout(end, options.timeoutMs ?? 60_000);
      child.once('exit', () => clearTimeout(timer));
      options.signal?.addEventListener('abort', end, { once: true });
    },
  );
  const text = await readFile(options.traceFile, 'utf8').catch(() => '');
  const calls = parseStrace(text);
  if (calls.length === 0 && options.paths === undefined) {
    throw new Error(
      `strace recorded no calls (exit ${String(code)}, ${text.length} bytes of trace): ${stderr.slice(-1500)}`,
    );
  }
  // RELIABILITY_KEEP_TRACES=<dir> keeps every trace there, to read after a failure.
  const keep = process.env.RELIABILITY_KEEP_TRACES;
  if (keep !== undefined && keep !== '') {
    await writeFile(path.join(keep, `${Date.now()}-${path.basename(options.traceFile)}`), text);
  }
  await rm(options.traceFile, { force: true });
  return { code, stdout, stderr, calls };
}
