// A copy of what another user runs (node, package.json, dist/, production node_modules) in a dir any user can read.
// A clone may live where that user cannot traverse (under /root, in a 0700 `mktemp -d`): it cannot load dist/ there.
import { chmod, cp, mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { REPO_ROOT } from './harness.js';

interface LockFile {
  packages: Record<string, { dev?: boolean }>;
}

/** The top-level `node_modules/<name>` folders the lock file does not mark as dev-only. */
async function productionPackages(): Promise<string[]> {
  const lock = JSON.parse(await readFile(path.join(REPO_ROOT, 'package-lock.json'), 'utf8')) as LockFile;
  return Object.entries(lock.packages)
    .filter(([key]) => key.startsWith('node_modules/') && !key.slice(13).includes('/node_modules/'))
    .filter(([, entry]) => entry.dev !== true)
    .map(([key]) => key);
}

const exists = (file: string): Promise<boolean> =>
  stat(file).then(
    () => true,
    () => false,
  );

export interface ReachableInstall {
  /** The copy's root: `<dir>/dist/...` and `<dir>/node_modules/...` as in the repository. */
  dir: string;
  /** `<dir>/dist/<relative>`. */
  dist(relative: string): string;
  /** A node binary the other user can run: this process's own, or a copy when it sits out of reach (a 0700 dir). */
  node: string;
  remove(): Promise<void>;
}

/** Copies the built dist/ (test/global-setup.ts builds it) and its runtime dependencies to a fresh 0755 temp dir. */
export async function reachableInstall(): Promise<ReachableInstall> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-reachable-'));
  await chmod(dir, 0o755);
  const entries = ['package.json', 'dist', ...(await productionPackages())];
  for (const entry of entries) {
    const source = path.join(REPO_ROOT, entry);
    if (!(await exists(source))) continue;
    await cp(source, path.join(dir, entry), { recursive: true, verbatimSymlinks: true });
  }
  // The copy is readable and traversable by everyone, whatever the umask it was made under.
  await chmodTree(dir);
  let node = process.execPath;
  if (!(await reachableByOthers(node))) {
    node = path.join(dir, 'node');
    await cp(process.execPath, node);
    await chmod(node, 0o755);
  }
  return {
    dir,
    node,
    dist: (relative) => path.join(dir, 'dist', relative),
    remove: () => rm(dir, { recursive: true, force: true }),
  };
}

let nodeForOthers: Promise<string> | undefined;

/**
 * This process's node binary as another user (nobody) can run it, for a small script of a test's: itself when it is
 * in reach, else a copy in a fresh 0755 temp dir (made once per process). The Node 24 of a CI run lives in the
 * clone's dist-pkg, out of reach when the clone is in a 0700 dir. Not the system's node instead: Node 20 binds an
 * abstract socket name padded with NULs to the whole sun_path and Node 24 does not, so a script on another Node
 * binding a name unpadded holds another name than the agent's lock (which is padded since lock24).
 */
export function nodeOthersCanRun(): Promise<string> {
  nodeForOthers ??= (async () => {
    if (await reachableByOthers(process.execPath).catch(() => false)) return process.execPath;
    const dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-node-'));
    await chmod(dir, 0o755);
    const node = path.join(dir, 'node');
    await cp(process.execPath, node);
    await chmod(node, 0o755);
    return node;
  })();
  return nodeForOthers;
}

/** Whether a user other than the owner can traverse every ancestor of `file` and execute it. */
async function reachableByOthers(file: string): Promise<boolean> {
  if (((await stat(file)).mode & 0o001) === 0) return false;
  for (let dir = path.dirname(file); ; dir = path.dirname(dir)) {
    if (((await stat(dir)).mode & 0o001) === 0) return false;
    if (dir === path.dirname(dir)) return true;
  }
}

/** Adds read (and, for directories, traverse) permission for everyone under `dir`. */
async function chmodTree(dir: string): Promise<void> {
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isSymbolicLink()) continue;
    const { mode } = await stat(full);
    await chmod(full, (mode & 0o7777) | (entry.isDirectory() ? 0o555 : 0o444));
    if (entry.isDirectory()) await chmodTree(full);
  }
}
