// adv32: a power cut at every distinct durable state of a pass (PowerCutFs over memfs): nothing told is lost, the next runs converge, hooks hear of all.
import path from 'node:path';
import { Volume } from 'memfs';
import { afterEach, describe, expect, it } from 'vitest';
import type { FsPort } from '../../src/lib/fs-port.js';
import type { ConfigInstanceRecord } from '../../src/mock-server/state.js';
import { memfsPort } from '../helpers/memfs.js';
import { createPassWorld, type PassWorld } from '../helpers/pass-world.js';
import { PowerCutFs } from '../helpers/power-cut-fs.js';

let world: PassWorld | undefined;
afterEach(async () => {
  await world?.close();
  world = undefined;
});

/** What a power cut right after one filesystem call of the watched passes would leave, and what the service held. */
interface Cut {
  call: string;
  /** PowerCutFs.afterPowerCut(): path under the world's dir → 'dir' or `<mode> <bytes>`. */
  disk: Record<string, string>;
  /** How many reports the service had taken. */
  told: number;
  instances: Map<string, ConfigInstanceRecord>;
}

/** `fs` with `after(call)` run once each of its calls has settled. */
function watched(fs: FsPort, after: (call: string) => void): FsPort {
  return new Proxy(fs, {
    get(target, name, receiver) {
      const value = Reflect.get(target, name, receiver) as unknown;
      if (typeof value !== 'function') return value;
      return async (...args: unknown[]) => {
        try {
          return await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
        } finally {
          after(`${String(name)} ${String(args[0])}`);
        }
      };
    },
  });
}

/** A new memfs holding exactly what the cut left. */
function restored(disk: Record<string, string>, top: string): InstanceType<typeof Volume> {
  const vol = new Volume();
  vol.mkdirSync(top, { recursive: true });
  for (const [relative, what] of Object.entries(disk).sort(([a], [b]) => a.length - b.length)) {
    const absolute = path.join(top, relative);
    if (what === 'dir') vol.mkdirSync(absolute, { recursive: true });
    else if (what === '(never fsynced, empty)') vol.writeFileSync(absolute, '');
    else if (what !== 'symlink') {
      const space = what.indexOf(' ');
      vol.writeFileSync(absolute, what.slice(space + 1), { mode: Number.parseInt(what.slice(0, space), 8) });
    }
  }
  return vol;
}

const LATER = '2026-02-01T00:00:00Z';

/** A first sync's cuts are the LazyFS loops' (power-cut.test.ts); these are the shapes of a later pass. */
type Scenario = 'changes' | 'reports refused' | 'paths swapped' | 'rootDir moved';

/** The second pass's changes to the first pass's instances; where each ends up. */
function secondPass(w: PassWorld, scenario: Scenario): Record<string, string> {
  if (scenario === 'paths swapped') {
    w.put({ id: 'cfg_a', relative_filepath: 'e/e.json', content: { a: 1 }, updated_at: LATER });
    w.put({ id: 'cfg_e', relative_filepath: 'a.json', content: { e: 5 }, updated_at: LATER });
    w.put({ id: 'cfg_b', relative_filepath: 'deep/x/y/b.json', target_status: 'removed', updated_at: LATER });
    w.put({ id: 'cfg_c', relative_filepath: 'deep/x/y/b.json', content: { c: 33 }, updated_at: LATER });
    w.put({ id: 'cfg_d', relative_filepath: 'c/c.json', content: { d: 4 } });
    return { cfg_a: 'e/e.json', cfg_e: 'a.json', cfg_c: 'deep/x/y/b.json', cfg_d: 'c/c.json' };
  }
  w.put({ id: 'cfg_a', relative_filepath: 'a.json', content: { a: 11 }, updated_at: LATER });
  w.put({ id: 'cfg_b', relative_filepath: 'moved/b.json', content: { b: 2 }, updated_at: LATER });
  w.put({
    id: 'cfg_c',
    relative_filepath: 'c/c.json',
    content: { c: 3 },
    target_status: 'removed',
    updated_at: LATER,
  });
  w.put({ id: 'cfg_d', relative_filepath: 'd1/d2/d.json', content: { d: 4 } });
  w.put({
    id: 'cfg_e',
    relative_filepath: 'e/e.json',
    content: { e: 5 },
    target_status: 'removed',
    updated_at: LATER,
  });
  return {
    cfg_a: 'a.json',
    cfg_b: 'moved/b.json',
    cfg_c: 'c/c.json',
    cfg_d: 'd1/d2/d.json',
    cfg_e: 'e/e.json',
  };
}

describe('a power cut at each durable state of a pass (adv32)', () => {
  it.each<Scenario>(['changes', 'reports refused', 'paths swapped', 'rootDir moved'])(
    '%s: every report told survives the cut; two runs after it end as the uncut run did, hooks told of every change',
    async (scenario) => {
      world = await createPassWorld({ name: 'adv32-cuts', parent: '/dev/shm', open: false });
      const w = world;
      const vol = new Volume();
      vol.mkdirSync(w.rootDir, { recursive: true });
      vol.mkdirSync(w.stateDir, { recursive: true, mode: 0o700 });
      const root2 = path.join(w.dir, 'root2');
      if (scenario === 'rootDir moved') vol.mkdirSync(root2);
      const model = await PowerCutFs.over(memfsPort(vol), w.dir);
      const cuts: Cut[] = [];
      let watching = false;
      const fs = watched(model.fs, (call) => {
        if (!watching) return;
        const { reports, instances } = w.server.state;
        cuts.push({ call, disk: model.afterPowerCut(), told: reports.length, instances: new Map(instances) });
      });
      w.put({ id: 'cfg_a', relative_filepath: 'a.json', content: { a: 1 } });
      w.put({ id: 'cfg_b', relative_filepath: 'deep/x/y/b.json', content: { b: 2 } });
      w.put({ id: 'cfg_c', relative_filepath: 'c/c.json', content: { c: 3 } });
      w.put({ id: 'cfg_e', relative_filepath: 'e/e.json', content: { e: 5 } });
      // A daemon with hooks: the paths each pass changes are kept pending in state.json until a hook run settles them.
      await w.open({ deps: { fs }, settings: { trackHookPaths: true } });
      await w.pass();
      w.reconciler.settleHookPaths(w.reconciler.pendingHookPaths());
      await w.reconciler.flushState();
      const toldBefore = w.server.state.reports.length;
      const where = secondPass(w, scenario);
      const settings = { trackHookPaths: true, ...(scenario === 'rootDir moved' ? { rootDir: root2 } : {}) };
      if (scenario === 'rootDir moved') await w.open({ deps: { fs }, settings });
      if (scenario === 'reports refused')
        w.fault({ match: '^/v1/config_instances/[^/]+$', count: 1e5, status: 503 });
      watching = true;
      await w.pass();
      w.server.state.clearFaults();
      // The reports the outbox kept, delivered by the next pass (cut too).
      if (scenario === 'reports refused') await w.pass();
      watching = false;
      await w.pass();
      const final = model.afterPowerCut();
      const pendingIn = (disk: Record<string, string>): string[] => {
        const text = disk['state/state.json'] ?? ' {"pendingHookPaths":[]}';
        return (JSON.parse(text.slice(text.indexOf(' ') + 1)) as { pendingHookPaths: string[] })
          .pendingHookPaths;
      };
      const finalPending = pendingIn(final);
      const statuses = () =>
        [...w.server.state.instances.values()]
          .map((i) => `${i.id} ${i.activity_status}/${i.error_status}`)
          .sort();
      const finalStatuses = statuses();
      const root = path.relative(w.dir, scenario === 'rootDir moved' ? root2 : w.rootDir);
      const rootFiles = (disk: Record<string, string>) =>
        Object.fromEntries(Object.entries(disk).filter(([relative]) => relative.startsWith('root')));

      const seen = new Set<string>();
      const distinct = cuts.filter((cut) => {
        const key = `${cut.told} ${JSON.stringify(cut.disk)}`;
        if (seen.has(key)) return false;
        seen.add(key);
        return true;
      });
      const lost: string[] = [];
      const diverged: string[] = [];
      for (const cut of distinct) {
        // What the service was told by the cut: a file reported deployed holds its final bytes, one removed is gone.
        for (const report of w.server.state.reports.slice(toldBefore, cut.told)) {
          const relative = where[report.config_instance_id];
          if (relative === undefined) continue;
          const at = path.join(root, relative);
          if (cut.disk[at] !== final[at])
            lost.push(
              `${cut.call}: ${report.config_instance_id} ${report.activity_status}, ${at} ${cut.disk[at]}`,
            );
        }
        // The service as it was at the cut; two runs on what the cut left.
        w.server.state.instances.clear();
        for (const [id, record] of cut.instances) w.server.state.instances.set(id, record);
        const after = restored(cut.disk, w.dir);
        await w.runOnce({ deps: { fs: memfsPort(after) }, settings });
        await w.runOnce({ deps: { fs: memfsPort(after) }, settings });
        const disk = (await PowerCutFs.over(memfsPort(after), w.dir)).afterPowerCut();
        // No hook runs here: every path the uncut run left for the hooks is still pending for them.
        const untold = finalPending.filter((changed) => !pendingIn(disk).includes(changed));
        if (untold.length > 0) diverged.push(`${cut.call}: hooks never told of ${untold.join(', ')}`);
        const files = JSON.stringify(rootFiles(disk));
        if (files !== JSON.stringify(rootFiles(final))) diverged.push(`${cut.call}: files ${files}`);
        if (JSON.stringify(statuses()) !== JSON.stringify(finalStatuses))
          diverged.push(`${cut.call}: statuses ${statuses().join(', ')}`);
      }
      expect(lost).toEqual([]);
      expect(diverged).toEqual([]);
      // Each file's write, each removal and each state file made durable is a state of its own.
      expect(distinct.length).toBeGreaterThanOrEqual(8);
    },
  );
});
