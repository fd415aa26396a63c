// LazyFS mounts for power-cut tests: a FUSE filesystem that holds written data in its own cache until fsync, and
// drops every unsynced byte on `lazyfs::clear-cache`. Metadata (create, rename, unlink) goes straight through.

import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { constants, existsSync } from 'node:fs';
import { type FileHandle, mkdir, open, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { skipWithoutRoot } from '../../helpers/built-packages.js';
import { REPO_ROOT } from '../../helpers/harness.js';
import { waitFor } from '../../helpers/wait-for.js';

/** Where test/reliability/lazyfs/build.sh (run by .ci/run) leaves the binary; LAZYFS_BIN overrides it. */
export function lazyfsBinary(): string {
  return process.env.LAZYFS_BIN ?? path.join(REPO_ROOT, '.cache/lazyfs/lazyfs/lazyfs/build/lazyfs');
}

/** Why power cuts cannot be simulated here, or undefined when they can. */
export function lazyfsUnavailable(): string | undefined {
  const reason = lazyfsMissing();
  // As root in .ci/run (which builds LazyFS) a power-cut test fails where it would skip: no silent skip in CI.
  return reason === undefined ? undefined : skipWithoutRoot(reason);
}

function lazyfsMissing(): string | undefined {
  const binary = lazyfsBinary();
  if (!existsSync(binary))
    return `LazyFS is not built (${binary}); run test/reliability/lazyfs/build.sh (.ci/run does)`;
  if (!existsSync('/dev/fuse')) return 'no /dev/fuse: FUSE is not available here';
  if (process.getuid?.() !== 0) return 'mounting LazyFS needs root';
  return undefined;
}

async function isMounted(mountPoint: string): Promise<boolean> {
  const mounts = await readFile('/proc/self/mounts', 'utf8');
  return mounts.split('\n').some((line) => line.split(' ')[1] === mountPoint);
}

/** Processes in uninterruptible sleep (state D) and what they wait on: a mount or unmount stuck in the kernel. */
function stuckProcesses(): string {
  const ps = spawnSync('ps', ['-eo', 'pid,stat,wchan:32,args'], { encoding: 'utf8', timeout: 5_000 });
  const stuck = (ps.stdout ?? '')
    .split('\n')
    .filter((line) => /^\s*\d+\s+D/.test(line))
    .map((line) => line.trim().slice(0, 160));
  return stuck.length === 0 ? 'none' : stuck.join(' | ');
}

/** One LazyFS mount of `backing` at `mountPoint`; its control FIFOs and config live in `controlDir`. */
export class LazyFsMount {
  readonly mountPoint: string;
  readonly backing: string;
  readonly #controlDir: string;
  #process: ChildProcess | undefined;
  /**
   * Our end of `faults-done.fifo`, held open for as long as LazyFS runs. LazyFS writes each completion once,
   * into whatever reader the FIFO has at that instant: a reader opened per command could still be opening when
   * a fast clear-cache finished (seen at a load of 27), and the completion was lost. Opened read-write and
   * non-blocking, so opening never waits for LazyFS and a read with nothing there answers EAGAIN at once.
   */
  #completions: FileHandle | undefined;
  #log = '';

  private constructor(backing: string, mountPoint: string, controlDir: string) {
    this.backing = backing;
    this.mountPoint = mountPoint;
    this.#controlDir = controlDir;
  }

  static async mount(backing: string, mountPoint: string, controlDir: string): Promise<LazyFsMount> {
    const mount = new LazyFsMount(backing, mountPoint, controlDir);
    await Promise.all([backing, mountPoint, controlDir].map((dir) => mkdir(dir, { recursive: true })));
    await writeFile(
      path.join(controlDir, 'lazyfs.toml'),
      [
        '[faults]',
        `fifo_path="${path.join(controlDir, 'faults.fifo')}"`,
        `fifo_path_completed="${path.join(controlDir, 'faults-done.fifo')}"`,
        '[cache]',
        'apply_eviction=false',
        '[cache.simple]',
        // Holds every byte written between two fsyncs (a few MB here); a bigger cache only slows the mount.
        'custom_size="64mb"',
        'blocks_per_page=1',
        '[filesystem]',
        'log_all_operations=false',
        'logfile=""',
        '',
      ].join('\n'),
    );
    await mount.start();
    return mount;
  }

  /**
   * Starts LazyFS and waits for its mount. A failure says what LazyFS printed and which processes are stuck in
   * the kernel (a mount or unmount that hangs), since the test's own error is only the timeout.
   */
  async start(): Promise<void> {
    this.#log = '';
    const child = spawn(
      lazyfsBinary(),
      [
        this.mountPoint,
        '--config-path',
        // Relative to the control directory (its cwd): LazyFS ignores a --config-path that contains "-o" in any
        // case (`strcasestr(argv[i + 1], "-o")` in its main.cpp) and aborts on config/default.toml, and a
        // mkdtemp suffix starting with o or O makes one ("config-agent-powercut-OoaMd7"): ~3 % of the dirs.
        'lazyfs.toml',
        '-o',
        'allow_other',
        '-o',
        'modules=subdir',
        '-o',
        `subdir=${this.backing}`,
        '-f',
        // One FUSE thread: LazyFS's page cache races under concurrent requests and died of SIGSEGV in about
        // 1 run in 4 of a 300-file first sync (16 writes in flight); serialised requests lose no fault.
        '-s',
      ],
      { cwd: this.#controlDir, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    this.#process = child;
    const keep = (chunk: Buffer) => {
      this.#log = (this.#log + chunk.toString()).slice(-4000);
    };
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
    child.once('exit', (code, signal) =>
      keep(Buffer.from(`\n[lazyfs exited: code ${code}, signal ${signal}]\n`)),
    );
    // A cut sent before the FIFO listener is up just waits in the FIFO, so the mount is all there is to await.
    await waitFor(
      async () => {
        if (child.exitCode !== null || child.signalCode !== null) return 'exited';
        return isMounted(this.mountPoint);
      },
      20_000,
      { what: `LazyFS mounted at ${this.mountPoint}`, intervalMs: 20 },
    ).catch(async (error: unknown) => {
      const diagnostics = `${(error as Error).message}; LazyFS said: ${this.#log || '(nothing)'}; stuck: ${stuckProcesses()}`;
      await this.stop();
      throw new Error(diagnostics);
    });
    if (child.exitCode !== null || child.signalCode !== null)
      throw new Error(`lazyfs exited (${this.#exitDescription()}): ${this.#log}`);
    // LazyFS made the FIFO before it mounted; its worker waits for a reader before it takes commands.
    this.#completions = await open(
      path.join(this.#controlDir, 'faults-done.fifo'),
      constants.O_RDWR | constants.O_NONBLOCK,
    );
  }

  /** Drops every byte that was written and not fsynced: what a power cut does to the disk's cache. */
  async clearCache(): Promise<void> {
    const completions = this.#completions;
    if (completions === undefined) throw new Error('LazyFS is not running');
    await this.#readCompletion(completions, 0); // a completion left over from a command that timed out
    await this.#sendCommand('lazyfs::clear-cache\n');
    const line = await this.#readCompletion(completions, 20_000);
    if (!line.includes('clear-cache'))
      throw new Error(`LazyFS answered ${JSON.stringify(line)} to clear-cache`);
  }

  /**
   * Writes one command into `faults.fifo`. Opened non-blocking: with LazyFS gone the FIFO has no reader, and a
   * blocking open would wait for one forever (a CI run once hung 600 s there after LazyFS died).
   */
  async #sendCommand(command: string): Promise<void> {
    this.#throwIfExited();
    let fifo: FileHandle;
    try {
      fifo = await open(
        path.join(this.#controlDir, 'faults.fifo'),
        constants.O_WRONLY | constants.O_NONBLOCK,
      );
    } catch (error) {
      if ((error as { code?: unknown }).code === 'ENXIO')
        throw new Error(
          `LazyFS does not read its command FIFO (exited: ${this.#exitDescription()}): ${this.#log}`,
        );
      throw error;
    }
    try {
      await fifo.write(command);
    } finally {
      await fifo.close();
    }
  }

  #exitDescription(): string {
    const child = this.#process;
    if (child === undefined) return 'not started';
    if (child.exitCode !== null) return `code ${child.exitCode}`;
    if (child.signalCode !== null) return `signal ${child.signalCode}`;
    return 'no';
  }

  #throwIfExited(): void {
    const child = this.#process;
    if (child === undefined || child.exitCode !== null || child.signalCode !== null)
      throw new Error(`LazyFS is not running (${this.#exitDescription()}): ${this.#log}`);
  }

  /** The next line LazyFS wrote to `faults-done.fifo`, polled until `patienceMs` ran out ('' with 0). */
  async #readCompletion(completions: FileHandle, patienceMs: number): Promise<string> {
    const deadline = Date.now() + patienceMs;
    const buffer = Buffer.alloc(256);
    let text = '';
    for (;;) {
      let bytesRead = 0;
      try {
        ({ bytesRead } = await completions.read(buffer, 0, buffer.length, null));
      } catch (error) {
        if ((error as { code?: unknown }).code !== 'EAGAIN') throw error;
      }
      text += buffer.toString('utf8', 0, bytesRead);
      if (text.includes('\n')) return text.split('\n')[0] ?? '';
      if (bytesRead > 0) continue;
      if (patienceMs === 0) return text;
      if (Date.now() > deadline) {
        throw new Error(
          `LazyFS did not confirm clear-cache within ${patienceMs} ms (exited: ${this.#exitDescription()}): ${this.#log}`,
        );
      }
      await sleep(5);
    }
  }

  /**
   * A power cut: drop the unsynced data. With `reboot`, the filesystem is also unmounted and mounted again, so
   * not even the kernel's page cache of the mount survives. (FUSE re-reads a file on every open anyway, so the
   * cheap cut alone already shows what the disk kept; the reboot makes sure.)
   */
  async powerCut(options: { reboot: boolean }): Promise<void> {
    await this.clearCache();
    if (!options.reboot) return;
    await this.stop();
    await this.start();
  }

  async stop(): Promise<void> {
    const child = this.#process;
    this.#process = undefined;
    if (child !== undefined && child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      // A LazyFS stuck in a request must not hold the suite: SIGKILL after 10 s (the lazy unmount follows).
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    }
    if (await isMounted(this.mountPoint)) spawnSync('umount', ['-l', this.mountPoint]);
    await this.#completions?.close();
    this.#completions = undefined;
  }
}
