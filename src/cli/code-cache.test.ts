// The code cache's files: whose may be read, which bytes are refused, the atomic bounded write, the config peek.
import { spawnSync } from 'node:child_process';
import {
  chmodSync,
  linkSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  CODE_CACHE_DIR,
  type CodeCacheKey,
  codeCacheDirectory,
  codeCacheFileName,
  codeCacheKey,
  configPathOf,
  MAX_CODE_CACHE_FILES,
  peekConfig,
  readCodeCache,
  runtimeBinary,
  writeCodeCache,
} from './code-cache.js';

const KEY: CodeCacheKey = { bundle: 'agent-0123456789AB.cjs', runtime: 'v20.20.2 x64 v8-11.3 --expose-gc' };
const PAYLOAD = Buffer.from('V8 code cache bytes '.repeat(100));
const euid = process.geteuid?.() ?? 0;

let stateDir: string;
let dir: string;
beforeEach(() => {
  stateDir = mkdtempSync(path.join(os.tmpdir(), 'config-agent-code-cache-'));
  chmodSync(stateDir, 0o700);
  dir = path.join(stateDir, CODE_CACHE_DIR);
});
afterEach(() => {
  rmSync(stateDir, { recursive: true, force: true });
});

function cacheFile(key = KEY): string {
  return path.join(dir, codeCacheFileName(key));
}

describe('codeCacheDirectory', () => {
  it('creates stateDir/code-cache 0700 in a stateDir of this user, and finds it again', () => {
    expect(codeCacheDirectory(stateDir, euid, false)).toEqual({ unusable: 'ENOENT' });
    expect(codeCacheDirectory(stateDir, euid, true)).toEqual({ dir });
    expect(lstatSync(dir).mode & 0o777).toBe(0o700);
    expect(codeCacheDirectory(stateDir, euid, false)).toEqual({ dir });
  });

  it("never uses another user's stateDir or code-cache, nor one others may write, nor a symlink", () => {
    expect(codeCacheDirectory(stateDir, euid + 1, true)).toEqual({
      unusable: `stateDir owned by uid ${euid}, not ${euid + 1}`,
    });
    expect(readdirSync(stateDir)).toEqual([]);
    chmodSync(stateDir, 0o777);
    expect(codeCacheDirectory(stateDir, euid, true)).toEqual({
      unusable: 'stateDir writable by group or others (mode 777)',
    });
    chmodSync(stateDir, 0o700);
    mkdirSync(dir, { mode: 0o700 });
    chmodSync(dir, 0o770);
    expect(codeCacheDirectory(stateDir, euid, true)).toEqual({
      unusable: 'writable by group or others (mode 770)',
    });
    rmSync(dir, { recursive: true });
    const elsewhere = mkdtempSync(path.join(os.tmpdir(), 'config-agent-code-cache-elsewhere-'));
    try {
      symlinkSync(elsewhere, dir);
      expect(codeCacheDirectory(stateDir, euid, true)).toEqual({ unusable: 'not a directory' });
    } finally {
      rmSync(elsewhere, { recursive: true, force: true });
    }
  });
});

describe("the install's cache: root's files or this user's (owners 'own-or-root')", () => {
  it("a directory and a 0644 file of root's or this user's are read; one of a third user's, or that others may write, never", () => {
    const other = euid === 0 ? 12345 : euid + 1;
    // Made 0755 (the agent's own user reads root's): created by the postinst's writer.
    expect(codeCacheDirectory(stateDir, euid, true, 'own-or-root')).toEqual({ dir });
    expect(lstatSync(dir).mode & 0o777).toBe(0o755);
    writeCodeCache(dir, KEY, PAYLOAD, Date.now(), undefined, 0o644);
    expect(lstatSync(cacheFile()).mode & 0o777).toBe(0o644);
    expect(readCodeCache(dir, KEY, euid, 'own-or-root')).toEqual({ found: PAYLOAD });
    // Another user reading them: root's are trusted, anyone else's are not.
    if (euid === 0) {
      expect(codeCacheDirectory(stateDir, other, false, 'own-or-root')).toEqual({ dir });
      expect(readCodeCache(dir, KEY, other, 'own-or-root')).toEqual({ found: PAYLOAD });
      // stateDir's own cache stays this user's alone: root's file is not another user's own.
      expect(readCodeCache(dir, KEY, other)).toEqual({ ignored: `owned by uid 0, not ${other}` });
    } else {
      expect(codeCacheDirectory(stateDir, other, false, 'own-or-root')).toEqual({
        unusable: `stateDir owned by uid ${euid}, not ${other} or 0`,
      });
      expect(readCodeCache(dir, KEY, other, 'own-or-root')).toEqual({
        ignored: `owned by uid ${euid}, not ${other} or 0`,
      });
    }
    chmodSync(cacheFile(), 0o664);
    expect(readCodeCache(dir, KEY, euid, 'own-or-root')).toEqual({
      ignored: 'writable by group or others (mode 664)',
    });
    chmodSync(cacheFile(), 0o644);
    chmodSync(dir, 0o775);
    expect(codeCacheDirectory(stateDir, euid, false, 'own-or-root')).toEqual({
      unusable: 'writable by group or others (mode 775)',
    });
  });

  it('a 0755 directory and a 0644 file whatever the umask', () => {
    const umask = process.umask(0o077);
    try {
      expect(codeCacheDirectory(stateDir, euid, true, 'own-or-root')).toEqual({ dir });
      writeCodeCache(dir, KEY, PAYLOAD, Date.now(), undefined, 0o644);
    } finally {
      process.umask(umask);
    }
    expect(lstatSync(dir).mode & 0o777).toBe(0o755);
    expect(lstatSync(cacheFile()).mode & 0o777).toBe(0o644);
  });
});

describe('readCodeCache and writeCodeCache', () => {
  beforeEach(() => {
    mkdirSync(dir, { mode: 0o700 });
  });

  it('reads back what was written: a 0600 file named by bundle and runtime, no temp file left', () => {
    expect(readCodeCache(dir, KEY, euid)).toEqual({ absent: true });
    writeCodeCache(dir, KEY, PAYLOAD);
    expect(readCodeCache(dir, KEY, euid)).toEqual({ found: PAYLOAD });
    expect(readdirSync(dir)).toEqual([codeCacheFileName(KEY)]);
    expect(lstatSync(cacheFile()).mode & 0o777).toBe(0o600);
  });

  it('a write that takes no bytes (a FUSE filesystem answering 0) fails the cache (EIO) instead of looping for good', () => {
    let calls = 0;
    const writesNothing = () => {
      // Past 1,000 calls the loop is taken for one that never ends.
      if (++calls > 1_000) throw Object.assign(new Error('spun'), { code: 'ESPUN' });
      return 0;
    };
    expect(() => writeCodeCache(dir, KEY, PAYLOAD, Date.now(), writesNothing)).toThrow(
      expect.objectContaining({ code: 'EIO' }),
    );
    expect(calls).toBe(1);
    expect(readdirSync(dir)).toEqual([]);
  });

  it('ignores a cache made for another bundle or runtime, even under the right name', () => {
    const other = { ...KEY, runtime: 'v24.21.0 x64 v8-13.6 --expose-gc' };
    writeCodeCache(dir, other, PAYLOAD);
    writeFileSync(cacheFile(), readFileSync(cacheFile(other)));
    expect(readCodeCache(dir, KEY, euid)).toEqual({ ignored: 'made for another bundle or runtime' });
  });

  it('a cache made under another node binary of the same version (a patched rebuild) is not found', () => {
    const node = path.join(stateDir, 'node');
    writeFileSync(node, 'node 20.20.2, first build');
    const before = codeCacheKey(KEY.bundle, ['--expose-gc'], runtimeBinary(node));
    writeCodeCache(dir, before, PAYLOAD);
    expect(readCodeCache(dir, codeCacheKey(KEY.bundle, ['--expose-gc'], runtimeBinary(node)), euid)).toEqual({
      found: PAYLOAD,
    });
    // The package manager's upgrade: a new file at the same path (rename over it), same version string.
    writeFileSync(`${node}.new`, 'node 20.20.2, patched build');
    renameSync(`${node}.new`, node);
    const after = codeCacheKey(KEY.bundle, ['--expose-gc'], runtimeBinary(node));
    expect(after.runtime.startsWith(process.version)).toBe(true);
    expect(readCodeCache(dir, after, euid)).toEqual({ absent: true });
    // The running node's own key names its binary.
    expect(codeCacheKey(KEY.bundle, []).runtime).toContain(runtimeBinary(process.execPath));
  });

  it('ignores a truncated, corrupt or foreign file: V8 would run a flipped byte', () => {
    writeCodeCache(dir, KEY, PAYLOAD);
    const good = readFileSync(cacheFile());
    const flipped = Buffer.from(good);
    flipped[flipped.length - 100] = (flipped[flipped.length - 100] as number) ^ 0x01;
    writeFileSync(cacheFile(), flipped);
    expect(readCodeCache(dir, KEY, euid)).toEqual({ ignored: 'checksum mismatch (truncated or corrupt)' });
    writeFileSync(cacheFile(), good.subarray(0, good.length - 1));
    expect(readCodeCache(dir, KEY, euid)).toEqual({ ignored: 'checksum mismatch (truncated or corrupt)' });
    writeFileSync(cacheFile(), good.subarray(0, 40));
    expect(readCodeCache(dir, KEY, euid)).toEqual({ ignored: 'truncated' });
    writeFileSync(cacheFile(), PAYLOAD);
    expect(readCodeCache(dir, KEY, euid)).toEqual({ ignored: 'not a code cache file' });
    writeFileSync(cacheFile(), '');
    expect(readCodeCache(dir, KEY, euid)).toEqual({ ignored: 'not a code cache file' });
  });

  it("ignores another user's file, one others may write, a symlink, a directory and a FIFO", () => {
    writeCodeCache(dir, KEY, PAYLOAD);
    expect(readCodeCache(dir, KEY, euid + 1)).toEqual({ ignored: `owned by uid ${euid}, not ${euid + 1}` });
    chmodSync(cacheFile(), 0o622);
    expect(readCodeCache(dir, KEY, euid)).toEqual({ ignored: 'writable by group or others (mode 622)' });
    chmodSync(cacheFile(), 0o600);
    const target = path.join(stateDir, 'elsewhere.v8cache');
    writeFileSync(target, readFileSync(cacheFile()), { mode: 0o600 });
    rmSync(cacheFile());
    symlinkSync(target, cacheFile());
    expect(readCodeCache(dir, KEY, euid)).toEqual({ ignored: 'cannot open: ELOOP' });
    rmSync(cacheFile());
    mkdirSync(cacheFile());
    expect(readCodeCache(dir, KEY, euid)).toEqual({ ignored: 'not a regular file' });
    rmSync(cacheFile(), { recursive: true });
    // A FIFO: opened without O_NONBLOCK, the read would wait for a writer for good (here: the test's timeout).
    expect(spawnSync('mkfifo', ['-m', '0600', cacheFile()]).status).toBe(0);
    expect(readCodeCache(dir, KEY, euid)).toEqual({ ignored: 'not a regular file' });
  });

  it('a write replaces a corrupt cache, removes other bundles and stale temp files, and keeps at most four', () => {
    writeFileSync(cacheFile(), 'garbage', { mode: 0o600 });
    const oldBundle = { ...KEY, bundle: 'agent-FFFFFFFFFFFF.cjs' };
    writeFileSync(path.join(dir, codeCacheFileName(oldBundle)), 'old', { mode: 0o600 });
    const staleTemp = path.join(dir, `.${codeCacheFileName(KEY)}.tmp-99999`);
    const freshTemp = path.join(dir, `.${codeCacheFileName(KEY)}.tmp-99998`);
    writeFileSync(staleTemp, 'x');
    writeFileSync(freshTemp, 'x');
    const now = Date.now();
    utimesSync(staleTemp, new Date(now - 3_600_000), new Date(now - 3_600_000));
    writeFileSync(path.join(dir, 'unrelated'), 'kept');
    writeCodeCache(dir, KEY, PAYLOAD, now);
    expect(readCodeCache(dir, KEY, euid)).toEqual({ found: PAYLOAD });
    expect(readdirSync(dir).sort()).toEqual(
      [codeCacheFileName(KEY), path.basename(freshTemp), 'unrelated'].sort(),
    );
  });

  it('keeps the newest four caches of the running bundle (one per runtime and flag set)', () => {
    const now = Date.now();
    const runtimes = Array.from({ length: MAX_CODE_CACHE_FILES + 2 }, (_, i) => ({
      ...KEY,
      runtime: `r${i}`,
    }));
    runtimes.forEach((key, i) => {
      writeCodeCache(dir, key, PAYLOAD, now);
      const at = new Date(now - (runtimes.length - i) * 1000);
      utimesSync(cacheFile(key), at, at);
    });
    const kept = readdirSync(dir).filter((name) => name.endsWith('.v8cache'));
    expect(kept).toHaveLength(MAX_CODE_CACHE_FILES);
    expect(kept.sort()).toEqual(
      runtimes
        .slice(-MAX_CODE_CACHE_FILES)
        .map((key) => codeCacheFileName(key))
        .sort(),
    );
  });

  it('after a clock step back the cache just written is kept and read, and prunes go by order of writes (cit24)', () => {
    // Four caches written before the clock stepped back an hour: their times are ahead of every later write's.
    const ahead = Date.now() + 3_600_000;
    const before = Array.from({ length: MAX_CODE_CACHE_FILES }, (_, i) => ({
      ...KEY,
      runtime: `before${i}`,
    }));
    before.forEach((key, i) => {
      writeCodeCache(dir, key, PAYLOAD);
      utimesSync(cacheFile(key), new Date(ahead + i * 1000), new Date(ahead + i * 1000));
    });
    const daemon = { ...KEY, runtime: 'daemon' };
    const once = { ...KEY, runtime: 'once' };
    writeCodeCache(dir, daemon, PAYLOAD);
    expect(readCodeCache(dir, daemon, euid)).toEqual({ found: PAYLOAD });
    writeCodeCache(dir, once, PAYLOAD);
    // Both written since the step are kept; the two written first of the four before it are gone.
    expect(readCodeCache(dir, once, euid)).toEqual({ found: PAYLOAD });
    expect(readCodeCache(dir, daemon, euid)).toEqual({ found: PAYLOAD });
    const kept = readdirSync(dir).filter((name) => name.endsWith('.v8cache'));
    expect(kept.sort()).toEqual(
      [daemon, once, ...before.slice(2)].map((key) => codeCacheFileName(key)).sort(),
    );
  });

  it("a crashed write's temp file of the same pid does not stop the next write (a container's --once is pid 1)", () => {
    const crashed = path.join(dir, `.${codeCacheFileName(KEY)}.tmp-${process.pid}`);
    writeFileSync(crashed, 'half a cache', { mode: 0o600 });
    writeCodeCache(dir, KEY, PAYLOAD);
    expect(readCodeCache(dir, KEY, euid)).toEqual({ found: PAYLOAD });
    const now = Date.now();
    utimesSync(crashed, new Date(now - 3_600_000), new Date(now - 3_600_000));
    writeCodeCache(dir, KEY, PAYLOAD, now);
    expect(readdirSync(dir)).toEqual([codeCacheFileName(KEY)]);
  });

  it('ignores a cache file with another name elsewhere (a hard link): whoever holds that name could change it', () => {
    writeCodeCache(dir, KEY, PAYLOAD);
    const elsewhere = path.join(stateDir, 'elsewhere');
    linkSync(cacheFile(), elsewhere);
    expect(readCodeCache(dir, KEY, euid)).toEqual({ ignored: 'has 2 links' });
    rmSync(elsewhere);
    expect(readCodeCache(dir, KEY, euid)).toEqual({ found: PAYLOAD });
  });

  it('a write that fails throws and leaves no temp file', () => {
    const missing = path.join(stateDir, 'no-such-dir');
    expect(() => writeCodeCache(missing, KEY, PAYLOAD)).toThrow(/ENOENT/);
    mkdirSync(cacheFile());
    writeFileSync(path.join(cacheFile(), 'inside'), 'x');
    expect(() => writeCodeCache(dir, KEY, PAYLOAD)).toThrow(/EISDIR|ENOTEMPTY|EEXIST/);
    expect(readdirSync(dir)).toEqual([codeCacheFileName(KEY)]);
  });
});

describe('the configuration peek', () => {
  it('resolves the file as config/load.ts does: --config, -c, CONFIG_AGENT_CONFIG, the default', () => {
    expect(configPathOf(['--once', '--config', '/a.json'], {})).toBe('/a.json');
    expect(configPathOf(['--config=/b.json'], { CONFIG_AGENT_CONFIG: '/e.json' })).toBe('/b.json');
    expect(configPathOf(['-c', '/c.json', '--once'], {})).toBe('/c.json');
    expect(configPathOf(['-c/d.json'], {})).toBe('/d.json');
    expect(configPathOf(['--once'], { CONFIG_AGENT_CONFIG: '/e.json' })).toBe('/e.json');
    expect(configPathOf(['--once', '--config', ''], { CONFIG_AGENT_CONFIG: '' })).toBe(
      '/etc/config-agent/config.json',
    );
  });

  it('takes an absolute stateDir and the log level, and nothing from what is not a small JSON file', () => {
    const file = path.join(stateDir, 'config.json');
    writeFileSync(file, JSON.stringify({ stateDir: '/var/lib/x', log: { level: 'debug' } }));
    expect(peekConfig(file)).toEqual({ stateDir: '/var/lib/x', logLevel: 'debug' });
    writeFileSync(file, JSON.stringify({ stateDir: 'relative', log: 'debug' }));
    expect(peekConfig(file)).toEqual({});
    writeFileSync(file, '{ not json');
    expect(peekConfig(file)).toEqual({});
    writeFileSync(file, 'null');
    expect(peekConfig(file)).toEqual({});
    expect(peekConfig(path.join(stateDir, 'missing.json'))).toEqual({});
    expect(peekConfig(stateDir)).toEqual({});
  });
});
