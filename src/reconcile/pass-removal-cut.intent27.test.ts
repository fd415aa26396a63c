// intent27: a removal made durable while state.json was not (EIO on its fsync), then a power cut: the hooks still hear of it, once.
import * as nodeFs from 'node:fs/promises';
import path from 'node:path';
import { Volume } from 'memfs';
import { afterEach, describe, expect, it } from 'vitest';
import { memfsPort } from '../../test/helpers/memfs.js';
import { createPassWorld, type PassWorld } from '../../test/helpers/pass-world.js';
import { PowerCutFs } from '../../test/helpers/power-cut-fs.js';
import type { FileHandle, FsPort } from '../lib/fs-port.js';
import type { ConfigInstanceRecord } from '../mock-server/state.js';
import { DirectorySyncLedger } from '../store/directory-syncs.js';

let world: PassWorld | undefined;
afterEach(async () => {
  await world?.close();
  world = undefined;
});

/** A new memfs holding exactly what a cut left (PowerCutFs.afterPowerCut's shape). */
function restored(disk: Record<string, string>, top: string): InstanceType<typeof Volume> {
  const vol = new Volume();
  vol.mkdirSync(top, { recursive: true });
  for (const [relative, what] of Object.entries(disk).sort(([a], [b]) => a.length - b.length)) {
    const absolute = path.join(top, relative);
    if (what === 'dir') vol.mkdirSync(absolute, { recursive: true });
    else if (what === '(never fsynced, empty)') vol.writeFileSync(absolute, '');
    else {
      const space = what.indexOf(' ');
      vol.writeFileSync(absolute, what.slice(space + 1), { mode: Number.parseInt(what.slice(0, space), 8) });
    }
  }
  return vol;
}

/** state.json's pending hook paths in a memfs (none when it has no state.json). */
function pendingIn(vol: InstanceType<typeof Volume>, stateDir: string): string[] {
  const file = path.join(stateDir, 'state.json');
  if (!vol.existsSync(file)) return [];
  return (JSON.parse(String(vol.readFileSync(file))) as { pendingHookPaths: string[] }).pendingHookPaths;
}

/**
 * The model's fs with a ledger and `failStateJson.left` fsyncs of the state directory failing (EIO, dropping its
 * changes, as Linux may) when the last rename into it was state.json's: state.json's publish fails, nothing else's.
 * `after(call)` runs once each call has settled (where a cut is looked at).
 */
function failingStateJson(
  model: PowerCutFs,
  stateDir: string,
  failStateJson: { left: number },
  after: (call: string) => void,
): FsPort {
  const base = model.fs;
  let lastRenamed = '';
  const watched = <T>(call: string, run: () => Promise<T>): Promise<T> =>
    run().finally(() => {
      after(call);
    });
  const fs: FsPort = {
    ...base,
    directorySyncs: new DirectorySyncLedger(),
    rename: (from, to) =>
      watched(`rename ${String(to)}`, async () => {
        await base.rename(from, to);
        lastRenamed = path.resolve(String(to));
      }),
    unlink: (file) => watched(`unlink ${String(file)}`, () => base.unlink(file)),
    rmdir: ((...args: Parameters<FsPort['rmdir']>) =>
      watched(`rmdir ${String(args[0])}`, () => base.rmdir(...args))) as FsPort['rmdir'],
    open: (async (...args: Parameters<FsPort['open']>) => {
      const handle: FileHandle = await base.open(...args);
      const target = path.resolve(String(args[0]));
      return new Proxy(handle, {
        get(inner, property) {
          const value = Reflect.get(inner, property) as unknown;
          if (property !== 'sync' || typeof value !== 'function') return value;
          return () =>
            watched(`fsync ${target}`, async () => {
              if (
                target === stateDir &&
                failStateJson.left > 0 &&
                lastRenamed === path.join(stateDir, 'state.json')
              ) {
                failStateJson.left -= 1;
                await model.dropUnsynced(target);
                throw Object.assign(new Error('EIO: i/o error, fsync'), {
                  code: 'EIO',
                  errno: -5,
                  syscall: 'fsync',
                });
              }
              await (value as () => Promise<void>).call(inner);
            });
        },
      });
    }) as FsPort['open'],
  };
  return fs;
}

describe('a removal durable while state.json is not, then a power cut (intent27)', () => {
  it('the hooks are told of it after the restart, once: at every cut of the pass that removed it', async () => {
    world = await createPassWorld({ name: 'intent27-removal-cut', parent: '/dev/shm', open: false });
    const w = world;
    const vol = new Volume();
    vol.mkdirSync(w.rootDir, { recursive: true });
    vol.mkdirSync(w.stateDir, { recursive: true, mode: 0o700 });
    const model = await PowerCutFs.over(memfsPort(vol), w.dir);
    const failStateJson = { left: 0 };
    const cuts: {
      call: string;
      disk: Record<string, string>;
      instances: Map<string, ConfigInstanceRecord>;
    }[] = [];
    let watching = false;
    const fs = failingStateJson(model, w.stateDir, failStateJson, (call) => {
      if (watching)
        cuts.push({ call, disk: model.afterPowerCut(), instances: new Map(w.server.state.instances) });
    });
    w.put({ id: 'cfg_b', relative_filepath: 'b.json', content: { b: 2 } });
    await w.open({ deps: { fs }, settings: { trackHookPaths: true } });
    await w.pass();
    w.reconciler.settleHookPaths(w.reconciler.pendingHookPaths());
    await w.reconciler.flushState();

    // a.json written and told to the hooks, its record in state.json not durable (EIO): declared in intent.json only.
    w.put({
      id: 'cfg_a',
      relative_filepath: 'a.json',
      content: { a: 1 },
      updated_at: '2026-02-01T00:00:00Z',
    });
    failStateJson.left = Number.POSITIVE_INFINITY;
    const second = await w.pass();
    expect(second.persistError).toBeDefined();
    w.reconciler.settleHookPaths(w.reconciler.pendingHookPaths());

    // cfg_a retired: the removal is durable, state.json fails again; a cut at each of its calls.
    w.put({
      id: 'cfg_a',
      relative_filepath: 'a.json',
      target_status: 'removed',
      updated_at: '2026-03-01T00:00:00Z',
    });
    watching = true;
    await w.pass();
    watching = false;
    expect(vol.existsSync(path.join(w.rootDir, 'a.json'))).toBe(false);

    const seen = new Set<string>();
    const untold: string[] = [];
    const toldTwice: string[] = [];
    let removedAtCut = 0;
    for (const cut of cuts) {
      const key = JSON.stringify(cut.disk);
      if (seen.has(key)) continue;
      seen.add(key);
      // The service as it was at the cut (told `removed` or not yet); the restart runs on what the cut left.
      w.server.state.instances.clear();
      for (const [id, record] of cut.instances) w.server.state.instances.set(id, record);
      const after = restored(cut.disk, w.dir);
      if (!after.existsSync(path.join(w.rootDir, 'a.json'))) removedAtCut += 1;
      // Before the removal the restart removes a.json itself; after it, the mark in intent.json tells (intent27).
      const settings = { trackHookPaths: true };
      await w.open({ deps: { fs: memfsPort(after) }, settings });
      await w.pass();
      if (!pendingIn(after, w.stateDir).includes('a.json')) {
        untold.push(cut.call);
        continue;
      }
      // The hook run that tells it, then another restart: not told again.
      w.reconciler.settleHookPaths(w.reconciler.pendingHookPaths());
      await w.reconciler.flushState();
      await w.open({ deps: { fs: memfsPort(after) }, settings });
      await w.pass();
      if (pendingIn(after, w.stateDir).includes('a.json')) toldTwice.push(cut.call);
    }
    expect(untold).toEqual([]);
    expect(toldTwice).toEqual([]);
    expect(removedAtCut).toBeGreaterThan(0);
  });
});

describe('a removal whose mark cannot be published (intent27)', () => {
  it('is not made: the file stays, retrying, not an attempt; removed once intent.json can be written', async () => {
    world = await createPassWorld({ name: 'intent27-removal-unmarked', parent: '/dev/shm', open: false });
    const w = world;
    const failing = new Set<string>();
    const fs: FsPort = {
      ...nodeFs,
      rename: async (from, to) => {
        if (failing.has(path.basename(String(to))))
          throw Object.assign(new Error('EIO: i/o error, rename'), {
            code: 'EIO',
            errno: -5,
            syscall: 'rename',
          });
        return nodeFs.rename(from, to);
      },
    };
    let now = Date.parse('2026-06-01T00:00:00.000Z');
    const clock = { now: () => now, monotonic: () => now, sleep: async () => undefined };
    w.put({ id: 'cfg_a', relative_filepath: 'a.json', content: { a: 1 } });
    const retry = { maxAttempts: 1, baseDelaySeconds: 10, maxDelaySeconds: 60 };
    await w.open({ deps: { fs, clock }, settings: { trackHookPaths: true, retry } });
    // Written, declared, and no state.json records it.
    failing.add('state.json');
    expect((await w.pass()).persistError).toBeDefined();
    expect(await w.exists('a.json')).toBe(true);

    w.put({
      id: 'cfg_a',
      relative_filepath: 'a.json',
      target_status: 'removed',
      updated_at: '2026-03-01T00:00:00Z',
    });
    failing.add('intent.json');
    // Two passes, each past every cooldown: with maxAttempts 1 an attempt is `failed` for good.
    for (let pass = 0; pass < 2; pass += 1) {
      await w.pass();
      expect(await w.exists('a.json')).toBe(true);
      now += 3_600_000;
    }
    // Never reported deployed (no state.json was durable): its removal is retrying, never `failed`.
    expect(w.server.state.instances.get('cfg_a')).toMatchObject({ error_status: 'retrying' });
    expect(w.reconciler.pendingHookPaths()).toEqual(['a.json']);

    expect(w.server.state.reports.at(-1)?.message).toContain('intent.json');
    failing.clear();
    await w.pass();
    expect(await w.exists('a.json')).toBe(false);
    expect(w.server.state.instances.get('cfg_a')).toMatchObject({
      activity_status: 'removed',
      error_status: 'none',
    });
    expect(w.reconciler.pendingHookPaths()).toEqual(['a.json']);
  });
});
