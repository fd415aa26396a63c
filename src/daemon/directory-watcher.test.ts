// The directory watcher's bound: a local process making directories under rootDir without end cannot grow the agent with them.
import { watch } from 'node:fs';
import * as nodeFs from 'node:fs/promises';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { PATIENCE_MS, waitFor } from '../../test/helpers/wait-for.js';
import { BURST_EVENTS, DirectoryWatcher } from './directory-watcher.js';

let dir: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-dirwatch-'));
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

it('a rootDir that is not a directory fails start with a DiskError (ENOTDIR, retryable), watching nothing', async () => {
  const file = path.join(dir, 'root-is-a-file');
  await writeFile(file, 'x');
  const watcher = new DirectoryWatcher({
    fs: nodeFs,
    rootDir: file,
    onChange: () => undefined,
    onError: () => undefined,
  });
  try {
    await expect(watcher.start()).rejects.toMatchObject({
      code: 'disk_error',
      retryable: true,
      errno: 'ENOTDIR',
      rootItself: true,
    });
    expect(watcher.size).toBe(0);
  } finally {
    watcher.close();
  }
});

it('watches at most maxDirectories directories, tells it once, and raises no error for the rest', async () => {
  for (let n = 0; n < 30; n += 1) await mkdir(path.join(dir, `junk${n}`, 'deeper'), { recursive: true });
  const limits: number[] = [];
  const errors: unknown[] = [];
  const watcher = new DirectoryWatcher({
    fs: nodeFs,
    rootDir: dir,
    onChange: () => undefined,
    onError: (error) => errors.push(error),
    maxDirectories: 10,
    onLimit: (watched) => limits.push(watched),
  });
  try {
    await watcher.start();
    // rootDir (always watched, outside the cap) and 10 of the 60 below it.
    expect(watcher.size).toBe(11);
    expect(limits).toEqual([11]);
    expect(errors).toEqual([]);
  } finally {
    watcher.close();
  }
});

it('watches every directory of a tree under the limit', async () => {
  for (let n = 0; n < 5; n += 1) await mkdir(path.join(dir, `app${n}`, 'conf.d'), { recursive: true });
  const limits: number[] = [];
  const watcher = new DirectoryWatcher({
    fs: nodeFs,
    rootDir: dir,
    onChange: () => undefined,
    onError: () => undefined,
    onLimit: (watched) => limits.push(watched),
  });
  try {
    await watcher.start();
    expect(watcher.size).toBe(11);
    expect(limits).toEqual([]);
  } finally {
    watcher.close();
  }
});

it("at the kernel's inotify limit (watch throws ENOSPC): tells it once, raises no error, keeps the watches it has", async () => {
  for (let n = 0; n < 8; n += 1) await mkdir(path.join(dir, `app${n}`), { recursive: true });
  const limits: number[] = [];
  const errors: unknown[] = [];
  let room = 4;
  const watcher = new DirectoryWatcher({
    fs: nodeFs,
    rootDir: dir,
    onChange: () => undefined,
    onError: (error) => errors.push(error),
    onLimit: (watched) => limits.push(watched),
    // The root and three directories below it fit; every further watch finds max_user_watches used up.
    watch: ((...args: Parameters<typeof watch>) => {
      if (room === 0)
        throw Object.assign(new Error('ENOSPC: System limit for number of file watchers reached'), {
          code: 'ENOSPC',
        });
      room -= 1;
      return watch(...args);
    }) as typeof watch,
  });
  try {
    await watcher.start();
    expect(watcher.size).toBe(4);
    expect(limits).toEqual([4]);
    expect(errors).toEqual([]);
  } finally {
    watcher.close();
  }
});

it('watches the directories left out at the cap at the next refresh once watched ones went away, up to the cap again', async () => {
  // 30 directories listed in name order with a cap of 10: d00–d09 watched, d10–d29 left out.
  for (let n = 0; n < 30; n += 1) await mkdir(path.join(dir, `d${String(n).padStart(2, '0')}`));
  const sortedFs = {
    ...nodeFs,
    readdir: async (dirPath: string, options: { withFileTypes: true }) =>
      (await nodeFs.readdir(dirPath, options)).sort((a, b) => a.name.localeCompare(b.name)),
  } as unknown as ConstructorParameters<typeof DirectoryWatcher>[0]['fs'];
  const changes = new Set<string>();
  const watcher = new DirectoryWatcher({
    fs: sortedFs,
    rootDir: dir,
    onChange: (file) => changes.add(file),
    onError: () => undefined,
    maxDirectories: 10,
  });
  /** A file made in `name`, reported by the watcher (or not, within a bound that only ends a failing wait). */
  const seen = async (name: string): Promise<boolean> => {
    const file = path.join(dir, name, 'probe');
    await writeFile(file, 'x');
    for (let turn = 0; turn < 200 && !changes.has(file); turn += 1)
      await new Promise((r) => setTimeout(r, 10));
    return changes.has(file);
  };
  try {
    await watcher.start();
    expect(watcher.size).toBe(11);
    for (let n = 0; n < 10; n += 1) await rm(path.join(dir, `d0${n}`), { recursive: true });
    await waitFor(() => watcher.size === 1 || undefined, PATIENCE_MS, { what: 'd00–d09 unwatched' });
    // A later refresh (the drift watcher's after each pass) watches d10–d19; d20–d29 wait for more room.
    await watcher.setPriority(new Set());
    expect(watcher.size).toBe(11);
    expect(await seen('d15')).toBe(true);
    await rm(path.join(dir, 'd10'), { recursive: true });
    for (let turn = 0; turn < 400 && watcher.size > 10; turn += 1)
      await new Promise((r) => setTimeout(r, 10));
    await watcher.setPriority(new Set());
    expect(watcher.size).toBe(11);
    expect(await seen('d20')).toBe(true);
  } finally {
    watcher.close();
  }
});

it('a burst of events with no onBurst given: every event still reported, none thrown', async () => {
  let listener: ((event: string, name: string | null) => void) | undefined;
  const fakeWatch = ((
    target: string,
    options: object,
    onEvent: (event: string, name: string | null) => void,
  ) => {
    if (target === dir) listener = onEvent;
    return watch(target, options, () => undefined);
  }) as unknown as typeof watch;
  const changed = new Set<string>();
  const watcher = new DirectoryWatcher({
    fs: nodeFs,
    rootDir: dir,
    onChange: (file) => changed.add(file),
    onError: () => undefined,
    // Ignored names count towards a burst all the same, and cost no lstat here.
    ignored: (file) => path.basename(file).startsWith('junk-'),
    watch: fakeWatch,
  });
  try {
    await watcher.start();
    for (let n = 0; n < BURST_EVENTS + 1; n += 1) listener?.('rename', `junk-${n}`);
    listener?.('rename', 'after-the-burst');
    expect([...changed]).toEqual([path.join(dir, 'after-the-burst')]);
  } finally {
    watcher.close();
  }
});

it('rootDir gone when checked after a pass is left alone with no error; each time back as another directory, reported once', async () => {
  const root = path.join(dir, 'root');
  await mkdir(root);
  // rootDir as lstat shows it: gone (ENOENT), or with another device than the one first watched.
  const seen = { gone: false, dev: 0, lstats: 0 };
  const fs = {
    ...nodeFs,
    lstat: async (target: string) => {
      if (target === root) seen.lstats += 1;
      if (target === root && seen.gone)
        throw Object.assign(new Error(`ENOENT: ${target}`), { code: 'ENOENT' });
      const stats = await nodeFs.lstat(target);
      return target === root && seen.dev !== 0 ? Object.assign(stats, { dev: seen.dev }) : stats;
    },
  } as unknown as typeof nodeFs;
  const changed: string[] = [];
  const errors: unknown[] = [];
  const watcher = new DirectoryWatcher({
    fs,
    rootDir: root,
    onChange: (file) => changed.push(file),
    onError: (error) => errors.push(error),
  });
  // Passes end until two more checks of rootDir began: checks run one at a time, so the first of them has ended.
  const twoChecks = async () => {
    const before = seen.lstats;
    await waitFor(async () => {
      await watcher.setPriority(new Set());
      return seen.lstats >= before + 2;
    }, PATIENCE_MS);
  };
  try {
    await watcher.start();
    seen.gone = true;
    await twoChecks();
    expect(errors).toEqual([]);
    expect(changed).toEqual([]);
    seen.gone = false;
    // Back, as another filesystem's root; then another again: each watched anew and reported once.
    seen.dev = 4242;
    await twoChecks();
    expect(changed).toEqual([root]);
    seen.dev = 4343;
    await twoChecks();
    expect(changed).toEqual([root, root]);
    expect(errors).toEqual([]);
  } finally {
    watcher.close();
  }
});

it.each(['ENOSPC', 'EMFILE'])(
  'rootDir mounted anew while its watch is refused (%s): a later check watches it once the limit is lifted, and reports it',
  async (code) => {
    const root = path.join(dir, 'root');
    await mkdir(path.join(root, 'app'), { recursive: true });
    // rootDir as lstat shows it: another device than the one first watched once `dev` is set (mounted anew).
    const seen = { dev: 0, lstats: 0, refuse: false };
    const fs = {
      ...nodeFs,
      lstat: async (target: string) => {
        if (target === root) seen.lstats += 1;
        const stats = await nodeFs.lstat(target);
        return target === root && seen.dev !== 0 ? Object.assign(stats, { dev: seen.dev }) : stats;
      },
    } as unknown as typeof nodeFs;
    // The kernel's inotify limit (ENOSPC: max_user_watches; EMFILE: max_user_instances) while `refuse` holds.
    const limitedWatch = ((
      target: string,
      options: object,
      onEvent: (event: string, name: string | null) => void,
    ) => {
      if (seen.refuse) throw Object.assign(new Error(`${code}: inotify_add_watch ${target}`), { code });
      return watch(target, options, onEvent);
    }) as unknown as typeof watch;
    const changed: string[] = [];
    const watcher = new DirectoryWatcher({
      fs,
      rootDir: root,
      onChange: (file) => changed.push(file),
      onError: () => undefined,
      watch: limitedWatch,
    });
    const twoChecks = async () => {
      const before = seen.lstats;
      await waitFor(async () => {
        await watcher.setPriority(new Set([path.join(root, 'app')]));
        return seen.lstats >= before + 2;
      }, PATIENCE_MS);
    };
    try {
      await watcher.start();
      await watcher.setPriority(new Set([path.join(root, 'app')]));
      seen.dev = 4242;
      seen.refuse = true;
      await twoChecks();
      seen.refuse = false;
      await twoChecks();
      // Watched anew and reported: a file made in rootDir itself is seen (app, a priority directory, is
      // watched again by the pass's setPriority either way).
      expect(changed).toContain(root);
      await writeFile(path.join(root, 'a.json'), '{}');
      await waitFor(() => changed.includes(path.join(root, 'a.json')), PATIENCE_MS, {
        what: 'rootDir watched',
      });
    } finally {
      watcher.close();
    }
  },
);
