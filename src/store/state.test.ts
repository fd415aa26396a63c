// Local state on memfs: durable round trip, and why a missing/corrupt/foreign state can never cause a deletion.
import { execFileSync } from 'node:child_process';
import * as nodeFs from 'node:fs/promises';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { createFsFromVolume, Volume } from 'memfs';
import { describe, expect, it } from 'vitest';
import { ConfigInstance } from '../api/schemas.js';
import type { FsPort } from '../lib/fs-port.js';
import { sha256Hex } from '../lib/hash.js';
import { createLogger, silentLogger } from '../lib/logger.js';
import { createSecretRegistry } from '../lib/secrets.js';
import { applySteps } from '../reconcile/apply.js';
import { planSteps } from '../reconcile/plan.js';
import { recordStep } from '../reconcile/record.js';
import { ContentCache } from './content-cache.js';
import { StatusOutbox } from './outbox.js';
import { validateRelativePath } from './path-guard.js';
import {
  emptyState,
  type LocalState,
  loadLocalState,
  STATE_FILE,
  STATE_VERSION,
  saveLocalState,
  serializeLocalState,
} from './state.js';

const STATE_DIR = '/var/lib/config-agent';
const STATE_PATH = `${STATE_DIR}/${STATE_FILE}`;
const ROOT = '/srv/config';
const SHA_A = sha256Hex(Buffer.from('a'));
const SHA_B = sha256Hex(Buffer.from('b'));

function memfs(files: Record<string, string> = {}): { fs: FsPort; vol: InstanceType<typeof Volume> } {
  const vol = Volume.fromJSON(files);
  vol.mkdirSync(ROOT, { recursive: true });
  return { fs: createFsFromVolume(vol).promises as unknown as FsPort, vol };
}

function sampleState(): LocalState {
  const state = emptyState('dvc_1');
  state.files.set('z/last.json', {
    instanceId: 'cfg_z',
    sha256: SHA_B,
    mode: 0o600,
    createdDirs: ['z'],
    writtenAt: '2026-03-01T12:00:00.000Z',
  });
  state.files.set('a.json', {
    instanceId: 'cfg_a',
    sha256: SHA_A,
    mode: 0o640,
    createdDirs: [],
    writtenAt: '2026-03-01T12:00:01.000Z',
  });
  state.instances.set('cfg_a', { relativePath: 'a.json', activity: 'deployed', error: 'none', attempts: 0 });
  state.instances.set('cfg_z', {
    relativePath: 'z/last.json',
    activity: 'queued',
    error: 'retrying',
    message: 'write failed: disk error: ENOSPC',
    attempts: 2,
    nextAttemptAt: '2026-03-01T12:05:00.000Z',
  });
  state.cooldowns.set('cfg_z', 123_456);
  return state;
}

describe('saveLocalState / loadLocalState', () => {
  it('round-trips files and instances; attempts, next attempt time and cooldowns reset on load', async () => {
    const { fs } = memfs();
    const saved = sampleState();
    expect(await saveLocalState(fs, STATE_DIR, saved)).toBe(true);

    const { state, outcome } = await loadLocalState(fs, STATE_DIR, 'dvc_1', silentLogger());

    expect(outcome).toBe('loaded');
    expect(state.deviceId).toBe('dvc_1');
    expect(state.files).toEqual(saved.files);
    expect(state.instances.get('cfg_a')).toEqual(saved.instances.get('cfg_a'));
    // Attempts reset on restart: an operator who fixed the cause expects an immediate retry.
    expect(state.instances.get('cfg_z')).toEqual({
      relativePath: 'z/last.json',
      activity: 'queued',
      error: 'retrying',
      message: 'write failed: disk error: ENOSPC',
      attempts: 0,
    });
    expect(state.cooldowns.size).toBe(0);
  });

  it('writes a versioned, sorted, owner-only JSON file, and does not rewrite identical state', async () => {
    const { fs, vol } = memfs();
    await saveLocalState(fs, STATE_DIR, sampleState());
    const text = vol.readFileSync(STATE_PATH, 'utf8') as string;
    const parsed = JSON.parse(text);
    expect(parsed.version).toBe(STATE_VERSION);
    expect(parsed.deviceId).toBe('dvc_1');
    expect(Object.keys(parsed.files)).toEqual(['a.json', 'z/last.json']);
    expect(parsed).toEqual(serializeLocalState(sampleState()));
    expect(text.endsWith('\n')).toBe(true);
    expect(vol.statSync(STATE_PATH).mode & 0o777).toBe(0o600);
    expect(vol.statSync(STATE_DIR).mode & 0o777).toBe(0o700);
    expect(text).not.toContain('cooldowns');

    const inode = vol.statSync(STATE_PATH).ino;
    expect(await saveLocalState(fs, STATE_DIR, sampleState())).toBe(false);
    expect(vol.statSync(STATE_PATH).ino).toBe(inode);
  });

  it('state.json holds the state without indentation: the bytes of JSON.stringify, then a newline', async () => {
    const { fs, vol } = memfs();
    const state = sampleState();
    state.pendingHookPaths.add('z/last.json');
    await saveLocalState(fs, STATE_DIR, state);
    const text = vol.readFileSync(STATE_PATH, 'utf8') as string;
    expect(text).toBe(`${JSON.stringify(serializeLocalState(state))}\n`);
    expect(text.split('\n')).toHaveLength(2);
    // The indented form of the versions before: ~30 % more bytes.
    expect(Buffer.byteLength(text)).toBeLessThan(
      0.8 * Buffer.byteLength(`${JSON.stringify(serializeLocalState(state), null, 2)}\n`),
    );
  });

  it('keys in code-unit order, numeric-looking and __proto__ ones too', async () => {
    const { fs, vol } = memfs();
    const state = emptyState('dvc_1');
    for (const [name, id] of [
      ['b', '10'],
      ['__proto__', '9'],
      ['10', '__proto__'],
      ['9', 'a'],
    ] as const) {
      state.files.set(name, { instanceId: id, sha256: SHA_A, mode: 0o600, createdDirs: [], writtenAt: 'x' });
      state.instances.set(id, { relativePath: name, activity: 'deployed', error: 'none', attempts: 0 });
    }
    await saveLocalState(fs, STATE_DIR, state);
    const text = vol.readFileSync(STATE_PATH, 'utf8') as string;
    const keys = (section: string) =>
      [...text.slice(text.indexOf(section)).matchAll(/"([^"]+)":\{"(?:instanceId|relativePath)"/g)]
        .map((m) => m[1])
        .slice(0, 4);
    expect(keys('"files"')).toEqual(['10', '9', '__proto__', 'b']);
    expect(keys('"instances"')).toEqual(['10', '9', '__proto__', 'a']);
    const { state: loaded } = await loadLocalState(fs, STATE_DIR, 'dvc_1', silentLogger());
    expect(loaded.files).toEqual(state.files);
    expect(loaded.instances).toEqual(state.instances);
  });

  it('an indented state.json of an earlier version is read, and rewritten without indentation at the next save', async () => {
    const state = sampleState();
    const indented = `${JSON.stringify(serializeLocalState(state), null, 2)}\n`;
    const { fs, vol } = memfs({ [STATE_PATH]: indented });
    const { state: loaded, outcome } = await loadLocalState(fs, STATE_DIR, 'dvc_1', silentLogger());
    expect(outcome).toBe('loaded');
    expect(loaded.files).toEqual(state.files);
    expect(await saveLocalState(fs, STATE_DIR, loaded)).toBe(true);
    expect(vol.readFileSync(STATE_PATH, 'utf8')).toBe(`${JSON.stringify(serializeLocalState(loaded))}\n`);
    expect(await saveLocalState(fs, STATE_DIR, loaded)).toBe(false);
  });

  it('creates the state directory when it does not exist yet', async () => {
    const { fs, vol } = memfs();
    expect(await saveLocalState(fs, `${STATE_DIR}/nested`, sampleState())).toBe(true);
    expect(vol.existsSync(`${STATE_DIR}/nested/${STATE_FILE}`)).toBe(true);
  });

  it('a missing state file loads as an empty state', async () => {
    const { fs } = memfs();
    const { state, outcome } = await loadLocalState(fs, STATE_DIR, 'dvc_1', silentLogger());
    expect(outcome).toBe('missing');
    expect(state).toEqual(emptyState('dvc_1'));
  });

  const valid = serializeLocalState(sampleState());
  it.each([
    ['not JSON', 'garbage{'],
    ['truncated JSON', JSON.stringify(valid).slice(0, 60)],
    ['an empty file', ''],
    ['JSON null', 'null'],
    ['an empty object', '{}'],
    ['another version', JSON.stringify({ ...valid, version: STATE_VERSION + 1 })],
    [
      'a bad sha256',
      JSON.stringify({ ...valid, files: { 'a.json': { ...valid.files['a.json'], sha256: 'zz' } } }),
    ],
    [
      'a negative attempt count',
      JSON.stringify({ ...valid, instances: { x: { ...valid.instances.cfg_a, attempts: -1 } } }),
    ],
    [
      'an unknown activity',
      JSON.stringify({ ...valid, instances: { x: { ...valid.instances.cfg_a, activity: 'gone' } } }),
    ],
    ['files as an array', JSON.stringify({ ...valid, files: [valid.files['a.json']] })],
    ['files as null', JSON.stringify({ ...valid, files: null })],
    ['instances as a string', JSON.stringify({ ...valid, instances: 'cfg_a' })],
    [
      'a sha256 with a prefix',
      JSON.stringify({
        ...valid,
        files: { 'a.json': { ...valid.files['a.json'], sha256: `x${'a'.repeat(64)}` } },
      }),
    ],
    [
      'a sha256 with a suffix',
      JSON.stringify({
        ...valid,
        files: { 'a.json': { ...valid.files['a.json'], sha256: `${'a'.repeat(64)}x` } },
      }),
    ],
  ])('%s loads as corrupt and empty', async (_name, content) => {
    const { fs } = memfs({ [STATE_PATH]: content });
    const { state, outcome } = await loadLocalState(fs, STATE_DIR, 'dvc_1', silentLogger());
    expect(outcome).toBe('corrupt');
    expect(state).toEqual(emptyState('dvc_1'));
  });

  it("another device's state loads as empty", async () => {
    const { fs } = memfs();
    await saveLocalState(fs, STATE_DIR, sampleState());
    const { state, outcome } = await loadLocalState(fs, STATE_DIR, 'dvc_2', silentLogger());
    expect(outcome).toBe('other_device');
    expect(state).toEqual(emptyState('dvc_2'));
  });

  it('a state recorded for another root directory loads as empty: its records prove nothing here', async () => {
    const { fs } = memfs();
    await saveLocalState(fs, STATE_DIR, { ...sampleState(), rootDir: '/srv/old-root' });
    const { state, outcome } = await loadLocalState(fs, STATE_DIR, 'dvc_1', silentLogger(), '/srv/new-root');
    expect(outcome).toBe('other_root');
    // Nothing owned; the old root's files kept only as a former root's (path, sha256): never removed (state24).
    const { formerRoot, ...rest } = state;
    expect(rest).toEqual(emptyState('dvc_1', '/srv/new-root'));
    expect(formerRoot?.rootDir).toBe('/srv/old-root');
    expect([...(formerRoot?.files.keys() ?? [])].sort()).toEqual(['a.json', 'z/last.json']);
    const same = await loadLocalState(fs, STATE_DIR, 'dvc_1', silentLogger(), '/srv/old-root');
    expect(same.outcome).toBe('loaded');
  });

  it('an unreadable state file is an error, not an empty state (ownership must not be forgotten silently)', async () => {
    const { fs } = memfs({ [STATE_PATH]: JSON.stringify(valid) });
    const denied: FsPort = {
      ...fs,
      open: (async () => {
        throw Object.assign(new Error('EACCES: permission denied'), { code: 'EACCES' });
      }) as FsPort['open'],
    };
    await expect(loadLocalState(denied, STATE_DIR, 'dvc_1', silentLogger())).rejects.toMatchObject({
      code: 'state_dir_unusable',
      errno: 'EACCES',
      retryable: false,
      message: expect.stringMatching(
        /^stateDir \/var\/lib\/config-agent is not usable: cannot read state\.json/,
      ),
    });
  });
});

describe('a state the agent cannot trust never leads to a deletion', () => {
  const contents = `${JSON.stringify({ port: 8080 }, null, 2)}\n`;
  const files = { [`${ROOT}/app.json`]: contents, [`${ROOT}/etc/other.yaml`]: 'a: 1\n' };
  const setups: Array<[string, Record<string, string>, string]> = [
    ['missing', {}, 'dvc_1'],
    ['corrupt', { [STATE_PATH]: '{"version": 1, "deviceId": "dvc_1", "files": ' }, 'dvc_1'],
    ['other device', {}, 'dvc_other'],
  ];

  it.each(setups)(
    '%s state: removals are reported, the files stay byte-identical',
    async (_name, stateFiles, loadAs) => {
      const { fs, vol } = memfs({ ...files, ...stateFiles });
      if (loadAs === 'dvc_other') {
        // A state written by this agent for a different device id, which did own both paths.
        const foreign = emptyState('dvc_1');
        for (const [relative, id] of [
          ['app.json', 'cfg_app'],
          ['etc/other.yaml', 'cfg_other'],
        ] as const) {
          foreign.files.set(relative, {
            instanceId: id,
            sha256: sha256Hex(vol.readFileSync(`${ROOT}/${relative}`) as Buffer),
            mode: 0o644,
            createdDirs: [],
            writtenAt: '2026-03-01T12:00:00.000Z',
          });
        }
        await saveLocalState(fs, STATE_DIR, foreign);
      }
      const logger = silentLogger();
      const { state } = await loadLocalState(fs, STATE_DIR, loadAs, logger);
      expect(state.files.size).toBe(0);

      const instances = [
        ['cfg_app', 'app.json'],
        ['cfg_other', 'etc/other.yaml'],
      ].map(([id, relative]) =>
        ConfigInstance.parse({
          object: 'config_instance',
          id,
          target_status: 'removed',
          activity_status: 'deployed',
          error_status: 'none',
          status: 'deployed',
          relative_filepath: relative,
          created_at: '2026-01-01T00:00:00Z',
          updated_at: '2026-01-01T00:00:00Z',
          device_id: loadAs,
          config_schema_id: `sch_${id}`,
          config_type_id: 'typ',
          device: null,
          config_schema: null,
          config_type: null,
          content: {},
        }),
      );
      const steps = planSteps({
        instances,
        local: state,
        disk: new Map(),
        now: 0,
        fileMode: 0o644,
        complete: true,
      });
      const outbox = StatusOutbox.ephemeral(fs, STATE_DIR, logger);
      const ctx = {
        fs,
        clock: { now: () => 0, monotonic: () => 0, sleep: async () => undefined },
        random: () => 0.5,
        logger,
        rootDir: ROOT,
        fileMode: 0o644,
        dirMode: 0o755,
        retry: { maxAttempts: 3, baseDelaySeconds: 1, maxDelaySeconds: 10 },
        state,
        files: state.files,
        cache: new ContentCache(fs, STATE_DIR),
        outbox,
        trackHookPaths: false,
      };
      await applySteps(steps, ctx, (applied) => recordStep(applied, ctx));

      expect(vol.readFileSync(`${ROOT}/app.json`, 'utf8')).toBe(contents);
      expect(vol.readFileSync(`${ROOT}/etc/other.yaml`, 'utf8')).toBe('a: 1\n');
      expect(outbox.pending().map((entry) => [entry.instanceId, entry.report.activity_status])).toEqual([
        ['cfg_app', 'removed'],
        ['cfg_other', 'removed'],
      ]);
    },
  );
});

describe('every path the path guard accepts round-trips through state', () => {
  const file = (instanceId: string) => ({
    instanceId,
    sha256: SHA_A,
    mode: 0o644,
    createdDirs: [],
    writtenAt: '2026-03-01T12:00:00.000Z',
  });

  async function roundTrip(paths: readonly string[]): Promise<LocalState> {
    const { fs } = memfs();
    const saved = emptyState('dvc_1');
    for (const [i, relativePath] of paths.entries()) {
      saved.files.set(relativePath, file(`cfg_${i}`));
      // Instance ids come from the service: the same names must survive as keys there too.
      saved.instances.set(relativePath, { relativePath, activity: 'deployed', error: 'none', attempts: 0 });
    }
    await saveLocalState(fs, STATE_DIR, saved);
    return (await loadLocalState(fs, STATE_DIR, 'dvc_1', silentLogger())).state;
  }

  it('__proto__ and the other names of Object.prototype, as a path and as an instance id', async () => {
    const names = ['__proto__', 'constructor', 'hasOwnProperty', 'toString', 'valueOf', '__defineGetter__'];
    const paths = [...names, ...names.map((name) => `a/${name}`), `__proto__/__proto__`];
    for (const relativePath of paths) expect(() => validateRelativePath(relativePath)).not.toThrow();
    const loaded = await roundTrip(paths);
    expect([...loaded.files.keys()].sort()).toEqual([...paths].sort());
    expect([...loaded.instances.keys()].sort()).toEqual([...paths].sort());
    expect(loaded.files.get('__proto__')).toEqual(file('cfg_0'));
  });

  it('random paths the guard accepts (seeded): all come back, none added', async () => {
    const pieces = [
      '__proto__',
      'constructor',
      'a',
      'é',
      'ﬁ',
      '😀',
      'x.json',
      '.hidden',
      '-',
      ' sp ',
      '0',
      'prototype',
    ];
    let x = 12345;
    const random = () => {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      return (x >>> 0) / 2 ** 32;
    };
    const paths = new Set<string>();
    for (let tries = 0; paths.size < 2000 && tries < 100_000; tries += 1) {
      const depth = 1 + Math.floor(random() * 4);
      const segments = Array.from({ length: depth }, () => {
        const parts = 1 + Math.floor(random() * 2);
        return Array.from({ length: parts }, () => pieces[Math.floor(random() * pieces.length)]).join('');
      });
      const candidate = segments.join('/');
      try {
        validateRelativePath(candidate);
      } catch {
        continue;
      }
      paths.add(candidate);
    }
    const loaded = await roundTrip([...paths]);
    expect([...loaded.files.keys()].sort()).toEqual([...paths].sort());
    expect([...loaded.instances.keys()].sort()).toEqual([...paths].sort());
  });
});

describe('a state.json that is not a regular file', () => {
  it('a FIFO in its place fails naming stateDir, at once (it is neither read as empty nor waited on)', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'config-agent-state-fifo-'));
    try {
      execFileSync('mkfifo', [path.join(dir, STATE_FILE)]);
      await expect(loadLocalState(nodeFs, dir, 'dvc_1', silentLogger())).rejects.toMatchObject({
        code: 'state_dir_unusable',
        message: expect.stringContaining(`cannot read ${STATE_FILE}`),
      });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('a read failure names stateDir once, with the errno in words', async () => {
    const { fs } = memfs({ [STATE_PATH]: '{}' });
    const failing: FsPort = {
      ...fs,
      open: (async (...args: Parameters<FsPort['open']>) => {
        const handle = await fs.open(...args);
        return Object.assign(Object.create(Object.getPrototypeOf(handle)), handle, {
          stat: handle.stat.bind(handle),
          close: handle.close.bind(handle),
          readFile: async () => {
            throw Object.assign(new Error('EIO: simulated'), { code: 'EIO' });
          },
        });
      }) as FsPort['open'],
    };
    const error = await loadLocalState(failing, STATE_DIR, 'dvc_1', silentLogger()).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'state_dir_unusable' });
    expect(String((error as Error).message).match(/stateDir/g)).toHaveLength(1);
  });
});

describe('loadLocalState: the paths waiting for their hooks', () => {
  it('drops those the path guard refuses, with an error naming each; the next save leaves them out', async () => {
    const saved = sampleState();
    const refused = ['../etc/passwd', '/etc/shadow', 'a//b.json', 'app/../x.json', 'a.json\nb.json', ''];
    const good = ['a.json', 'z/last.json', 'gone/removed.yaml'];
    for (const relative of [...good, ...refused]) saved.pendingHookPaths.add(relative);
    const { fs, vol } = memfs();
    await saveLocalState(fs, STATE_DIR, saved);
    const lines: Array<{ msg: string; path?: string }> = [];
    const destination = new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const line of chunk.toString('utf8').split('\n').filter(Boolean))
          lines.push(JSON.parse(line) as { msg: string; path?: string });
        done();
      },
    });
    const logger = createLogger({ level: 'info', secrets: createSecretRegistry(), destination });

    const { state, outcome } = await loadLocalState(fs, STATE_DIR, 'dvc_1', logger);

    // Before: all nine were loaded and handed to the hooks in CONFIG_AGENT_CHANGED.
    expect(outcome).toBe('loaded');
    expect([...state.pendingHookPaths].sort()).toEqual([...good].sort());
    const dropped = lines.filter((line) => line.msg.includes('waiting for its hooks'));
    expect(dropped.map((line) => line.path).sort()).toEqual([...refused].sort());
    expect(state.files.size).toBe(2);
    await saveLocalState(fs, STATE_DIR, state);
    const after = JSON.parse(String(vol.readFileSync(STATE_PATH, 'utf8'))) as { pendingHookPaths: string[] };
    expect(after.pendingHookPaths).toEqual([...good].sort());
  });
});
