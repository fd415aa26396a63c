// A stand-in for another agent holding a rootDir's lock name (lock.ts's abstract socket), in a child process.
import { type ChildProcess, spawn } from 'node:child_process';
import { stat } from 'node:fs/promises';
import { nodeOthersCanRun } from './reachable-install.js';

export interface RootHolder {
  readonly pid: number;
  /** Ends its stdin (the process then exits) and waits for it to exit. */
  end(): Promise<void>;
}

export interface RootHolderOptions {
  /** The rootDir its answer names (default the one it holds; another path when that was removed and its inode reused). */
  holderRootDir?: string | null;
  /** What it answers verbatim in place of an agent's `{pid, stateDir: '/srv/other/state', rootDir}` (a squatter). */
  answer?: string;
  /** The node binary it runs on (default this process's): another Node than the agent's (lock24). */
  node?: string;
  /**
   * Binds the name as agents before lock24 did, unpadded (Node 24 binds it at its own length, Node 20 pads it
   * itself), not padded with NULs to the whole sun_path as agents bind it now.
   */
  legacy?: boolean;
  /** Accepts each connection and says nothing (a stopped agent, or a squatter that does not answer). */
  silent?: boolean;
  /** The stateDir its answer names (default `/srv/other/state`). */
  stateDir?: string;
  /** Runs as this user (and group), on a node that user can run (nodeOthersCanRun); this process's by default. */
  asUser?: number;
}

/** rootDir's lock name for `dev:ino` as an agent binds it: padded with NULs to sun_path's 108 bytes unless `legacy`. */
export function rootNameOf(key: string, legacy = false): string {
  const name = `\0config-agent-root-${key}`;
  return legacy ? name : name.padEnd(108, '\0');
}

const running = new Set<ChildProcess>();

/** Listens on `rootDir`'s lock name, as its dev:ino are now, answering as an agent does; resolves once it listens. */
export async function holdRootName(rootDir: string, options: RootHolderOptions = {}): Promise<RootHolder> {
  const { dev, ino } = await stat(rootDir);
  const named = JSON.stringify({
    stateDir: options.stateDir ?? '/srv/other/state',
    // null: an answer without rootDir, as agents gave before they named it.
    rootDir: options.holderRootDir === null ? undefined : (options.holderRootDir ?? rootDir),
  });
  const answer =
    options.answer === undefined
      ? `JSON.stringify({ pid: process.pid, ...${named} })`
      : JSON.stringify(options.answer);
  const script = `
    const net = require('node:net');
    const answer = ${answer};
    net.createServer((s) => { s.on('error', () => {}); if (!${options.silent === true}) s.end(answer); }).listen({ path: ${JSON.stringify(rootNameOf(`${dev}:${ino}`, options.legacy))} }, () => process.stdout.write('held\\n'));
    process.stdin.on('end', () => process.exit(0)); process.stdin.resume();`;
  const asUser = options.asUser === undefined ? {} : { uid: options.asUser, gid: options.asUser, cwd: '/' };
  const node = options.node ?? (options.asUser === undefined ? process.execPath : await nodeOthersCanRun());
  const child = spawn(node, ['-e', script], { stdio: ['pipe', 'pipe', 'inherit'], ...asUser });
  running.add(child);
  const exited = new Promise<void>((resolve) =>
    child.once('exit', () => {
      running.delete(child);
      resolve();
    }),
  );
  await new Promise<void>((resolve, reject) => {
    child.stdout?.once('data', () => resolve());
    child.once('exit', () => reject(new Error('the stand-in agent did not start')));
    child.once('error', (error) => reject(new Error(`the stand-in agent did not start: ${error.message}`)));
  });
  return {
    pid: child.pid ?? 0,
    end: async () => {
      child.stdin?.end();
      await exited;
    },
  };
}

/** Kills every stand-in still running (a test's afterEach). */
export function killRootHolders(): void {
  for (const child of running) child.kill('SIGKILL');
  running.clear();
}
