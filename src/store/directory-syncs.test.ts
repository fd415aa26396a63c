// Files after a failed fsync of their directory (the state directory's, an adopted one's): rewritten, never taken as in place.
import path from 'node:path';
import { Volume } from 'memfs';
import { describe, expect, it } from 'vitest';
import { memfsPort } from '../../test/helpers/memfs.js';
import { PowerCutFs } from '../../test/helpers/power-cut-fs.js';
import type { FileHandle, FsPort } from '../lib/fs-port.js';
import { sha256Hex } from '../lib/hash.js';
import { silentLogger } from '../lib/logger.js';
import { DirectoryAsides } from './directory-asides.js';
import { DirectorySyncLedger } from './directory-syncs.js';
import { publishFile, syncRegularFileIf, writeDurableJson } from './durable-writer.js';

const STATE_DIR = '/var/lib/config-agent';

/** The model's fs with a ledger, whose next `failures` fsyncs of the state directory fail (EIO), dropping its changes. */
function failingStateDir(model: PowerCutFs, failures: { left: number }): FsPort {
  const base = model.fs;
  return {
    ...base,
    directorySyncs: new DirectorySyncLedger(),
    open: (async (...args: Parameters<FsPort['open']>) => {
      const handle: FileHandle = await base.open(...args);
      const target = path.resolve(String(args[0]));
      return new Proxy(handle, {
        get(inner, property) {
          const value = Reflect.get(inner, property) as unknown;
          if (property === 'sync' && target === STATE_DIR) {
            return async () => {
              if (failures.left > 0) {
                failures.left -= 1;
                await model.dropUnsynced(target);
                throw Object.assign(new Error('EIO'), { code: 'EIO' });
              }
              return inner.sync();
            };
          }
          return typeof value === 'function' ? (value as () => unknown).bind(inner) : value;
        },
      });
    }) as FsPort['open'],
  };
}

describe('a state file whose directory fsync failed (EIO) once and then succeeds', () => {
  it('is published again by the next write of the same value, and only then durable', async () => {
    const vol = new Volume();
    vol.mkdirSync(STATE_DIR, { recursive: true, mode: 0o700 });
    const model = await PowerCutFs.over(memfsPort(vol), STATE_DIR);
    const fs = failingStateDir(model, { left: 1 });
    const value = { version: 1, reports: ['cfg_a deployed'] };
    await expect(writeDurableJson(fs, STATE_DIR, 'outbox.json', value)).rejects.toMatchObject({
      code: 'disk_error',
    });
    // The bytes are in place; a later good fsync alone would not bring back the entry the failed one dropped.
    const again = await writeDurableJson(fs, STATE_DIR, 'outbox.json', value, 0o600, { ensureDurable: true });
    expect(again.outcome).toBe('written');
    expect(model.afterPowerCut()['outbox.json']).toBe(`600 ${JSON.stringify(value, null, 2)}\n`);
    // Settled: the next write of the same value is compared and left as it is.
    const settled = await writeDurableJson(fs, STATE_DIR, 'outbox.json', value, 0o600, {
      ensureDurable: true,
    });
    expect(settled.outcome).toBe('unchanged');
  });
});

describe('a file adopted from its declaration after a failed fsync of its directory', () => {
  it('is not taken as durable on the strength of the later fsyncs: left to a write', async () => {
    const vol = new Volume();
    vol.mkdirSync(STATE_DIR, { recursive: true, mode: 0o700 });
    const model = await PowerCutFs.over(memfsPort(vol), STATE_DIR);
    const fs = failingStateDir(model, { left: 1 });
    const data = Buffer.from('cfg_a\n');
    const publish = { rootDir: STATE_DIR, relativePath: 'a.json', data, mode: 0o640, dirMode: 0o750 };
    await expect(publishFile(fs, publish)).rejects.toMatchObject({ code: 'disk_error' });
    // What intent-journal.ts's adoption asks: the bytes are there, the fsyncs now succeed, the entry was dropped.
    await expect(syncRegularFileIf(fs, STATE_DIR, 'a.json', sha256Hex(data))).rejects.toMatchObject({
      code: 'disk_error',
    });
    expect(model.afterPowerCut()['a.json']).toBeUndefined();
    // The write publishes it again; then it is durable, and adoption would take it.
    expect((await publishFile(fs, { ...publish, ensureDurable: true })).outcome).toBe('written');
    expect(model.afterPowerCut()['a.json']).toBe('640 cfg_a\n');
    expect(await syncRegularFileIf(fs, STATE_DIR, 'a.json', sha256Hex(data))).toEqual({ mode: 0o640 });
  });
});

describe('a directory whose entry a failed fsync of its parent dropped, met by a publish alone', () => {
  it("removed by the failed publish's rollback: made anew by the next publish, which is durable", async () => {
    const vol = new Volume();
    vol.mkdirSync(STATE_DIR, { recursive: true, mode: 0o755 });
    // The aside names' record lives in the agent's state directory (directory-asides.ts), here beside the root.
    const asidesDir = '/var/lib/config-agent-state';
    vol.mkdirSync(asidesDir, { recursive: true, mode: 0o700 });
    const model = await PowerCutFs.over(memfsPort(vol), STATE_DIR);
    const failures = { left: 0 };
    const fs = failingStateDir(model, failures);
    const ledger = fs.directorySyncs as DirectorySyncLedger;
    ledger.keepAsidesIn(
      await DirectoryAsides.open(fs, asidesDir, STATE_DIR, ledger, silentLogger(), {
        euid: process.geteuid?.() ?? -1,
        clock: { now: () => 0 },
      }),
    );
    const publish = (name: string) =>
      publishFile(fs, {
        rootDir: STATE_DIR,
        relativePath: `app/${name}`,
        data: Buffer.from(`${name}\n`),
        mode: 0o640,
        dirMode: 0o750,
      });
    // app/ made, and the fsync of the directory holding it fails: its entry may be gone for good.
    failures.left = 1;
    await expect(publish('a.json')).rejects.toMatchObject({ code: 'disk_error' });
    // The failed publish rolled back the directory it made: nothing there, nothing durable.
    expect(vol.existsSync(`${STATE_DIR}/app`)).toBe(false);
    expect(model.afterPowerCut()).toEqual({});
    // The next publish alone makes it anew (before, it tried to renew the directory the rollback removed and
    // failed with ENOENT, every time, for the life of the process).
    expect((await publish('b.json')).outcome).toBe('written');
    expect(model.afterPowerCut()).toEqual({ app: 'dir', 'app/b.json': '640 b.json\n' });
    expect(ledger.anyDropped).toBe(false);
  });
});

describe('a directory still in place whose entry a failed fsync of its parent dropped, met by a publish alone', () => {
  it('is renewed and its parent fsynced before the file counts as written: both survive a power cut', async () => {
    const vol = new Volume();
    vol.mkdirSync(STATE_DIR, { recursive: true, mode: 0o755 });
    const asidesDir = '/var/lib/config-agent-state';
    vol.mkdirSync(asidesDir, { recursive: true, mode: 0o700 });
    const model = await PowerCutFs.over(memfsPort(vol), STATE_DIR);
    const ledger = new DirectorySyncLedger();
    const fs: FsPort = { ...model.fs, directorySyncs: ledger };
    ledger.keepAsidesIn(
      await DirectoryAsides.open(fs, asidesDir, STATE_DIR, ledger, silentLogger(), {
        euid: process.geteuid?.() ?? -1,
        clock: { now: () => 0 },
      }),
    );
    // app/ made by the agent, then the fsync of the directory holding it failed: made, not durable, dropped.
    await fs.mkdir(`${STATE_DIR}/app`, { mode: 0o750 });
    ledger.changed(STATE_DIR, 'app');
    await model.dropUnsynced(STATE_DIR);
    ledger.failed(STATE_DIR);
    const data = Buffer.from('b.json\n');
    const publish = { rootDir: STATE_DIR, relativePath: 'app/b.json', data, mode: 0o640, dirMode: 0o750 };
    expect((await publishFile(fs, publish)).outcome).toBe('written');
    expect(model.afterPowerCut()).toEqual({ app: 'dir', 'app/b.json': '640 b.json\n' });
    expect(ledger.anyDropped).toBe(false);
  });
});

describe('a directory whose entry a failed fsync of its parent dropped, gone since by other hands, met by a publish alone', () => {
  const ASIDES_DIR = '/var/lib/config-agent-state';
  it.each([
    ['removed by hand (rmdir)', 'before'],
    ['renamed away', 'before'],
    ["removed by hand at the renewal's first rename", 'at the rename'],
  ] as const)(
    '%s: the publish makes it anew and is durable, and no renewal record is left',
    async (how, when) => {
      const vol = new Volume();
      vol.mkdirSync(STATE_DIR, { recursive: true, mode: 0o755 });
      vol.mkdirSync(ASIDES_DIR, { recursive: true, mode: 0o700 });
      const model = await PowerCutFs.over(memfsPort(vol), STATE_DIR);
      const ledger = new DirectorySyncLedger();
      const app = `${STATE_DIR}/app`;
      const takeAway = () =>
        how === 'renamed away' ? vol.renameSync(app, `${STATE_DIR}/app.old`) : vol.rmdirSync(app);
      const fs: FsPort = {
        ...model.fs,
        directorySyncs: ledger,
        rename: async (from, to) => {
          // The renewal's rename of app aside, with app gone just before it (after the renewal's look).
          if (when === 'at the rename' && from === app && vol.existsSync(app)) takeAway();
          return model.fs.rename(from, to);
        },
      };
      // The start: puts back what a renewal left aside, and drops records naming nothing.
      const start = () =>
        DirectoryAsides.open(fs, ASIDES_DIR, STATE_DIR, ledger, silentLogger(), {
          euid: process.geteuid?.() ?? -1,
          clock: { now: () => 0 },
        });
      ledger.keepAsidesIn(await start());
      // app/ made by the agent, then the fsync of the directory holding it failed: made, not durable, dropped.
      await fs.mkdir(app, { mode: 0o750 });
      ledger.changed(STATE_DIR, 'app');
      await model.dropUnsynced(STATE_DIR);
      ledger.failed(STATE_DIR);
      if (when === 'before') takeAway();
      const publish = (name: string) =>
        publishFile(fs, {
          rootDir: STATE_DIR,
          relativePath: `app/${name}`,
          data: Buffer.from(`${name}\n`),
          mode: 0o640,
          dirMode: 0o750,
        });
      expect((await publish('b.json')).outcome).toBe('written');
      expect(model.afterPowerCut()).toMatchObject({ app: 'dir', 'app/b.json': '640 b.json\n' });
      expect(ledger.anyDropped).toBe(false);
      expect((await publish('c.json')).outcome).toBe('written');
      expect(model.afterPowerCut()).toMatchObject({
        'app/b.json': '640 b.json\n',
        'app/c.json': '640 c.json\n',
      });
      // Gone before the renewal looked: nothing recorded (before, a record naming an aside never made was written
      // durably and left on disk). Gone at its rename: the record names nothing, and the next start drops it.
      if (when === 'before') expect(vol.existsSync(`${ASIDES_DIR}/renewal-asides.json`)).toBe(false);
      ledger.keepAsidesIn(await start());
      expect(vol.existsSync(`${ASIDES_DIR}/renewal-asides.json`)).toBe(false);
      expect(vol.readdirSync(STATE_DIR).map(String).sort()).toEqual(
        how === 'renamed away' ? ['app', 'app.old'] : ['app'],
      );
      expect(vol.readdirSync(app).map(String).sort()).toEqual(['b.json', 'c.json']);
    },
  );
});

describe('DirectorySyncLedger: what it answers after each sequence of changes and fsyncs', () => {
  const DIR = '/root/app';

  it('starts with nothing unsettled or dropped, and a failed fsync of a directory with no change drops nothing', () => {
    const ledger = new DirectorySyncLedger();
    expect(ledger.anyDropped).toBe(false);
    expect(ledger.unsettled(DIR, 'a.json')).toBe(false);
    ledger.failed(DIR);
    expect(ledger.anyDropped).toBe(false);
    expect(ledger.dropped(DIR, 'a.json')).toBe(false);
  });

  it('keeps every changed entry of a directory unsettled until a good fsync begun after it', () => {
    const ledger = new DirectorySyncLedger();
    ledger.changed(DIR, 'a.json');
    ledger.changed(DIR, 'b.json');
    expect(ledger.unsettled(DIR, 'a.json')).toBe(true);
    expect(ledger.unsettled(DIR, 'b.json')).toBe(true);
    expect(ledger.unsettled('/root/other', 'a.json')).toBe(false);
    expect(ledger.dropped(DIR, 'a.json')).toBe(false);
    ledger.synced(DIR, ledger.syncing());
    expect(ledger.unsettled(DIR, 'a.json')).toBe(false);
    expect(ledger.unsettled(DIR, 'b.json')).toBe(false);
  });

  it('leaves a change made while an fsync ran to a later one, and drops it when that one fails', () => {
    const ledger = new DirectorySyncLedger();
    ledger.changed(DIR, 'a.json');
    const since = ledger.syncing();
    ledger.changed(DIR, 'b.json');
    ledger.synced(DIR, since);
    expect(ledger.unsettled(DIR, 'a.json')).toBe(false);
    expect(ledger.unsettled(DIR, 'b.json')).toBe(true);
    // The same entry changed again while the fsync ran: its new change is not covered either.
    ledger.changed(DIR, 'c.json');
    const again = ledger.syncing();
    ledger.changed(DIR, 'c.json');
    ledger.synced(DIR, again);
    expect(ledger.unsettled(DIR, 'b.json')).toBe(false);
    expect(ledger.unsettled(DIR, 'c.json')).toBe(true);
    ledger.failed(DIR);
    expect(ledger.dropped(DIR, 'a.json')).toBe(false);
    expect(ledger.dropped(DIR, 'b.json')).toBe(false);
    expect(ledger.dropped(DIR, 'c.json')).toBe(true);
    expect(ledger.anyDropped).toBe(true);
  });

  it('after a good fsync covered everything, a failed one drops nothing', () => {
    const ledger = new DirectorySyncLedger();
    ledger.changed(DIR, 'a.json');
    ledger.synced(DIR, ledger.syncing());
    ledger.failed(DIR);
    expect(ledger.anyDropped).toBe(false);
    expect(ledger.dropped(DIR, 'a.json')).toBe(false);
    expect(ledger.unsettled(DIR, 'a.json')).toBe(false);
  });

  it('adds the drops of a second failed fsync to those of the first', () => {
    const ledger = new DirectorySyncLedger();
    ledger.changed(DIR, 'a.json');
    ledger.failed(DIR);
    ledger.changed(DIR, 'b.json');
    ledger.failed(DIR);
    expect(ledger.dropped(DIR, 'a.json')).toBe(true);
    expect(ledger.dropped(DIR, 'b.json')).toBe(true);
  });

  it('counts a dropped entry changed anew as unsettled until covered, keeping the others dropped', () => {
    const ledger = new DirectorySyncLedger();
    ledger.changed(DIR, 'a.json');
    ledger.changed(DIR, 'b.json');
    ledger.failed(DIR);
    ledger.changed(DIR, 'a.json');
    expect(ledger.dropped(DIR, 'a.json')).toBe(false);
    expect(ledger.unsettled(DIR, 'a.json')).toBe(true);
    expect(ledger.dropped(DIR, 'b.json')).toBe(true);
    expect(ledger.anyDropped).toBe(true);
    ledger.synced(DIR, ledger.syncing());
    expect(ledger.unsettled(DIR, 'a.json')).toBe(false);
    expect(ledger.unsettled(DIR, 'b.json')).toBe(true);
    // The last dropped entry published again: nothing is dropped any more.
    ledger.changed(DIR, 'b.json');
    expect(ledger.anyDropped).toBe(false);
    ledger.synced(DIR, ledger.syncing());
    expect(ledger.unsettled(DIR, 'b.json')).toBe(false);
  });
});
