// Hostile-path corpus for validateRelativePath and the symlink/type rules of resolveInsideRoot, on memfs.
import { createFsFromVolume, Volume } from 'memfs';
import { describe, expect, it } from 'vitest';
import { resolveInsideRoot } from '../../test/helpers/resolve-inside-root.js';
import type { FsPort } from '../lib/fs-port.js';
import { DiskError, PathRejectedError, type PathRule } from './errors.js';
import { TEMP_PREFIX, validateRelativePath } from './path-guard.js';

function rejection(path: string): PathRejectedError {
  try {
    validateRelativePath(path);
  } catch (error) {
    if (error instanceof PathRejectedError) return error;
    throw error;
  }
  throw new Error(`accepted ${JSON.stringify(path)}`);
}

const hostile: Array<[string, PathRule]> = [
  ['', 'empty'],
  ['/etc/passwd', 'absolute'],
  ['/', 'absolute'],
  ['//etc/passwd', 'absolute'],
  ['/a/b', 'absolute'],
  ['../x', 'dot_segment'],
  ['..', 'dot_segment'],
  ['.', 'dot_segment'],
  ['a/../../b', 'dot_segment'],
  ['a/..', 'dot_segment'],
  ['a/./b', 'dot_segment'],
  ['./a', 'dot_segment'],
  ['a/.', 'dot_segment'],
  ['../../../../etc/shadow', 'dot_segment'],
  ['a//b', 'empty_segment'],
  ['a/', 'empty_segment'],
  ['a/b/', 'empty_segment'],
  ['a\\b', 'backslash'],
  ['..\\..\\windows', 'backslash'],
  ['C:\\x', 'backslash'],
  ['a\0b', 'control_character'],
  ['\0', 'control_character'],
  ['a/b\0.conf', 'control_character'],
  ['a\nb', 'control_character'],
  ['a\rb', 'control_character'],
  ['a\tb', 'control_character'],
  ['a\x1bb', 'control_character'],
  ['a\x7fb', 'control_character'],
  ['a\x01', 'control_character'],
  ['a\u0085b', 'control_character'],
  ['a\u009bb', 'control_character'],
  ['a\uD800b', 'lone_surrogate'],
  ['a\uDFFF', 'lone_surrogate'],
  ['cafe\u0301.conf', 'not_nfc'],
  ['\u212B', 'not_nfc'],
  [`${'x'.repeat(256)}`, 'segment_too_long'],
  [`a/${'y'.repeat(256)}/b`, 'segment_too_long'],
  [`${'é'.repeat(128)}`, 'segment_too_long'],
  [`${'a/'.repeat(2047)}bb`, 'path_too_long'],
  [`${`${'z'.repeat(255)}/`.repeat(16)}`, 'path_too_long'],
  [`${TEMP_PREFIX}x`, 'reserved_prefix'],
  [`a/${TEMP_PREFIX}y/b`, 'reserved_prefix'],
  [`a/${TEMP_PREFIX}`, 'reserved_prefix'],
  [`a/b/${TEMP_PREFIX}0123456789abcdef01234567`, 'reserved_prefix'],
];

const good = [
  'a',
  'app.conf',
  'etc/app/config.json',
  '~',
  '~/x',
  '...',
  'a/.../b',
  '.hidden',
  'a/.b/c',
  '..foo',
  'foo..',
  'a b/c d.yaml',
  '-rf',
  '*',
  'ünïcödé/日本語.json',
  'emoji/😀.txt',
  'café.conf',
  '.config-agent.tmp',
  'x.config-agent.tmp-y',
  'x'.repeat(255),
  'é'.repeat(127),
  `${'a/'.repeat(2046)}bbb`,
];

describe('validateRelativePath', () => {
  it('has a corpus of at least 40 hostile paths', () => {
    expect(hostile.length).toBeGreaterThanOrEqual(40);
  });

  it.each(hostile)('rejects %j (%s)', (path, rule) => {
    const error = rejection(path);
    expect(error.rule).toBe(rule);
    expect(error.code).toBe('path_rejected');
    expect(error.retryable).toBe(false);
    expect(error.path).toBe(path);
  });

  it.each(good.map((path) => [path]))('accepts %j', (path) => {
    expect(() => validateRelativePath(path)).not.toThrow();
  });

  it('quotes the path with JSON escaping so control characters cannot forge log lines', () => {
    const error = rejection('a\nlevel=info msg=forged');
    expect(error.message).toContain('"a\\nlevel=info msg=forged"');
    expect(error.message).not.toContain('\n');
    expect(error.message).toMatch(/control character/);
  });

  it('keeps the message short for a very long path', () => {
    expect(rejection('q'.repeat(5000)).message.length).toBeLessThan(400);
  });

  it('accepts a path of exactly 4095 bytes and rejects 4096', () => {
    const at = `${'a/'.repeat(2046)}bbb`;
    expect(Buffer.byteLength(at)).toBe(4095);
    expect(() => validateRelativePath(at)).not.toThrow();
    expect(rejection(`${at}b`).rule).toBe('path_too_long');
  });
});

function memfs(files: Record<string, string>): { fs: FsPort; vol: Volume } {
  const vol = Volume.fromJSON(files);
  return { fs: createFsFromVolume(vol).promises as unknown as FsPort, vol };
}

async function resolveRule(fs: FsPort, root: string, rel: string): Promise<PathRule> {
  const error = await resolveInsideRoot(fs, root, rel).catch((e: unknown) => e);
  if (!(error instanceof PathRejectedError)) throw new Error(`expected rejection, got ${String(error)}`);
  return error.rule;
}

describe('resolveInsideRoot', () => {
  it('returns the joined absolute path for existing and missing files', async () => {
    const { fs } = memfs({ '/srv/root/etc/app.conf': 'x' });
    expect(await resolveInsideRoot(fs, '/srv/root', 'etc/app.conf')).toBe('/srv/root/etc/app.conf');
    expect(await resolveInsideRoot(fs, '/srv/root', 'etc/new.conf')).toBe('/srv/root/etc/new.conf');
    expect(await resolveInsideRoot(fs, '/srv/root', 'a/b/c/d.conf')).toBe('/srv/root/a/b/c/d.conf');
  });

  it('validates before touching the disk', async () => {
    const { fs } = memfs({ '/srv/root/x': 'x' });
    expect(await resolveRule(fs, '/srv/root', '../root/x')).toBe('dot_segment');
  });

  it('rejects a symlinked parent directory, even one pointing inside the root', async () => {
    const { fs, vol } = memfs({ '/srv/root/real/f': 'x', '/outside/f': 'y' });
    vol.symlinkSync('/outside', '/srv/root/out');
    vol.symlinkSync('/srv/root/real', '/srv/root/in');
    expect(await resolveRule(fs, '/srv/root', 'out/f')).toBe('crosses_symlink');
    expect(await resolveRule(fs, '/srv/root', 'out/new/deeper.conf')).toBe('crosses_symlink');
    expect(await resolveRule(fs, '/srv/root', 'in/f')).toBe('crosses_symlink');
  });

  it('rejects a symlink deep in the chain', async () => {
    const { fs, vol } = memfs({ '/srv/root/a/b/keep': 'x', '/outside/c/f': 'y' });
    vol.symlinkSync('/outside/c', '/srv/root/a/b/c');
    expect(await resolveRule(fs, '/srv/root', 'a/b/c/f')).toBe('crosses_symlink');
  });

  it('rejects a symlink (even dangling) as the final component', async () => {
    const { fs, vol } = memfs({ '/srv/root/keep': 'x', '/outside/f': 'y' });
    vol.symlinkSync('/outside/f', '/srv/root/link.conf');
    vol.symlinkSync('/nowhere', '/srv/root/dangling.conf');
    expect(await resolveRule(fs, '/srv/root', 'link.conf')).toBe('crosses_symlink');
    expect(await resolveRule(fs, '/srv/root', 'dangling.conf')).toBe('crosses_symlink');
  });

  it('rejects a parent that is a file, and a target that is a directory', async () => {
    const { fs } = memfs({ '/srv/root/file': 'x', '/srv/root/dir/inner': 'y' });
    expect(await resolveRule(fs, '/srv/root', 'file/x.conf')).toBe('not_a_directory');
    expect(await resolveRule(fs, '/srv/root', 'dir')).toBe('target_is_directory');
  });

  it('trusts the root itself even when it is reached through a symlink', async () => {
    const { fs, vol } = memfs({ '/data/real-root/app.conf': 'x' });
    vol.symlinkSync('/data/real-root', '/srv-root');
    expect(await resolveInsideRoot(fs, '/srv-root', 'app.conf')).toBe('/srv-root/app.conf');
  });

  it('fails with a retryable DiskError when the root is missing', async () => {
    const { fs } = memfs({ '/other/x': 'x' });
    const error = await resolveInsideRoot(fs, '/srv/root', 'a.conf').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DiskError);
    expect((error as DiskError).errno).toBe('ENOENT');
    expect((error as DiskError).retryable).toBe(true);
  });
});

describe('resolveInsideRoot with the port’s synchronous lstat (absent paths known without an Error)', () => {
  function withSyncLstat(files: Record<string, string>): { fs: FsPort; vol: Volume } {
    const { fs, vol } = memfs(files);
    const lstatSync: NonNullable<FsPort['lstatSync']> = (file, options) =>
      vol.lstatSync(file, options) as ReturnType<NonNullable<FsPort['lstatSync']>>;
    return { fs: { ...fs, lstatSync }, vol };
  }

  it('gives the same answers as without it', async () => {
    const { fs, vol } = withSyncLstat({
      '/srv/root/etc/app.conf': 'x',
      '/srv/root/file': 'x',
      '/outside/f': 'y',
    });
    vol.symlinkSync('/outside', '/srv/root/out');
    expect(await resolveInsideRoot(fs, '/srv/root', 'etc/app.conf')).toBe('/srv/root/etc/app.conf');
    expect(await resolveInsideRoot(fs, '/srv/root', 'etc/new.conf')).toBe('/srv/root/etc/new.conf');
    expect(await resolveInsideRoot(fs, '/srv/root', 'a/b/c/d.conf')).toBe('/srv/root/a/b/c/d.conf');
    expect(await resolveRule(fs, '/srv/root', 'out/new/deeper.conf')).toBe('crosses_symlink');
    expect(await resolveRule(fs, '/srv/root', 'file/x.conf')).toBe('not_a_directory');
    expect(await resolveRule(fs, '/srv/root', 'etc')).toBe('target_is_directory');
  });

  it('a failure other than absence is reported as the promise lstat reports it, code and path kept', async () => {
    const { fs } = memfs({ '/srv/root/etc/app.conf': 'x' });
    const denied = () => Object.assign(new Error('EACCES: permission denied'), { code: 'EACCES' });
    const port: FsPort = {
      ...fs,
      lstatSync: () => {
        throw denied();
      },
      lstat: (async (file: string) => {
        if (String(file).endsWith('app.conf')) throw denied();
        return fs.lstat(file);
      }) as FsPort['lstat'],
    };
    const error = await resolveInsideRoot(port, '/srv/root', 'etc/app.conf').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DiskError);
    expect((error as DiskError).errno).toBe('EACCES');
    expect((error as DiskError).message).toContain('etc/app.conf');
  });
});

describe('resolveInsideRoot with the port’s pool lstat (lstatOrAbsent: absence without a synchronous call)', () => {
  /** memfs's lstat as `lstatOrAbsent`; the port's other two throw, so every answer comes through the pool one. */
  function withPoolLstat(files: Record<string, string>): { fs: FsPort; vol: Volume } {
    const { fs, vol } = memfs(files);
    const lstatOrAbsent: NonNullable<FsPort['lstatOrAbsent']> = async (file) => {
      try {
        return await fs.lstat(file);
      } catch (error) {
        if ((error as { code?: string }).code === 'ENOENT') return undefined;
        throw error;
      }
    };
    const unused = () => {
      throw new Error('neither other lstat is to be used when the pool one is offered');
    };
    return {
      fs: { ...fs, lstatOrAbsent, lstatSync: unused, lstat: unused as unknown as FsPort['lstat'] },
      vol,
    };
  }

  it('gives the same answers as without it', async () => {
    const { fs, vol } = withPoolLstat({
      '/srv/root/etc/app.conf': 'x',
      '/srv/root/file': 'x',
      '/outside/f': 'y',
    });
    vol.symlinkSync('/outside', '/srv/root/out');
    vol.symlinkSync('/outside/f', '/srv/root/etc/link.conf');
    expect(await resolveInsideRoot(fs, '/srv/root', 'etc/app.conf')).toBe('/srv/root/etc/app.conf');
    expect(await resolveInsideRoot(fs, '/srv/root', 'etc/new.conf')).toBe('/srv/root/etc/new.conf');
    expect(await resolveInsideRoot(fs, '/srv/root', 'a/b/c/d.conf')).toBe('/srv/root/a/b/c/d.conf');
    expect(await resolveRule(fs, '/srv/root', 'out/new/deeper.conf')).toBe('crosses_symlink');
    expect(await resolveRule(fs, '/srv/root', 'etc/link.conf')).toBe('crosses_symlink');
    expect(await resolveRule(fs, '/srv/root', 'file/x.conf')).toBe('not_a_directory');
    expect(await resolveRule(fs, '/srv/root', 'etc')).toBe('target_is_directory');
  });

  it('a failure other than absence is a DiskError with its errno and the relative path', async () => {
    const { fs } = withPoolLstat({ '/srv/root/etc/app.conf': 'x' });
    const port: FsPort = {
      ...fs,
      lstatOrAbsent: async (file) => {
        if (file.endsWith('app.conf')) throw Object.assign(new Error('EIO: i/o error'), { code: 'EIO' });
        return fs.lstatOrAbsent!(file);
      },
    };
    const error = await resolveInsideRoot(port, '/srv/root', 'etc/app.conf').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DiskError);
    expect((error as DiskError).errno).toBe('EIO');
    expect((error as DiskError).message).toContain('etc/app.conf');
  });
});

describe('validateRelativePath: the printable-ASCII shortcut', () => {
  /** The rules as written before the shortcut: every check on every path. */
  function referenceRule(relativePath: string): PathRule | undefined {
    if (relativePath.length === 0) return 'empty';
    if (relativePath.startsWith('/')) return 'absolute';
    if (relativePath.includes('\\')) return 'backslash';
    if (/\p{Cc}/u.test(relativePath)) return 'control_character';
    if (/[\uD800-\uDFFF]/u.test(relativePath)) return 'lone_surrogate';
    if (relativePath.normalize('NFC') !== relativePath) return 'not_nfc';
    if (Buffer.byteLength(relativePath, 'utf8') > 4095) return 'path_too_long';
    for (const segment of relativePath.split('/')) {
      if (segment.length === 0) return 'empty_segment';
      if (segment === '.' || segment === '..') return 'dot_segment';
      if (Buffer.byteLength(segment, 'utf8') > 255) return 'segment_too_long';
      if (segment.startsWith(TEMP_PREFIX)) return 'reserved_prefix';
    }
    return undefined;
  }

  function ruleOf(relativePath: string): PathRule | undefined {
    try {
      validateRelativePath(relativePath);
      return undefined;
    } catch (error) {
      if (error instanceof PathRejectedError) return error.rule;
      throw error;
    }
  }

  it('judges every path as the full rules do, at the edges of printable ASCII and beyond', () => {
    // Each character alone and inside a path: the range's edges (U+001F, U+0020, U+007E, U+007F), C1, NBSP,
    // a decomposed accent, lone and paired surrogates, and lengths around both byte limits in one- and
    // multi-byte characters.
    const characters = [
      ...Array.from({ length: 0xa2 }, (_, code) => String.fromCharCode(code)),
      'e\u0301',
      '\u00e9',
      '\ud800',
      '\udfff',
      '\ud83d\ude00',
      '\u2028',
      '\ufeff',
    ];
    const paths: string[] = [];
    for (const c of characters) paths.push(c, `a/${c}`, `${c}/b`, `dir/x${c}y.json`);
    for (const n of [254, 255, 256]) {
      paths.push('a'.repeat(n), `d/${'a'.repeat(n)}`, `${'\u00e9'.repeat(Math.ceil(n / 2))}`);
    }
    for (const n of [4094, 4095, 4096]) {
      const ascii = Array.from({ length: Math.ceil(n / 10) }, () => 'abcdefghi')
        .join('/')
        .slice(0, n);
      paths.push(ascii, `${ascii.slice(0, n - 2)}\u00e9`);
    }
    paths.push(`${TEMP_PREFIX}x`, `a/${TEMP_PREFIX}`, 'a//b', 'a/./b', '../a', '/a', 'a\\b');
    let rejected = 0;
    for (const candidate of paths) {
      expect([candidate, ruleOf(candidate)]).toEqual([candidate, referenceRule(candidate)]);
      if (referenceRule(candidate) !== undefined) rejected += 1;
    }
    expect(rejected).toBeGreaterThan(100);
  });
});

describe('validateRelativePath: segments by their bounds', () => {
  /** The segment rules on `split('/')`'s segments, as written before the bounds walk, with the detail they give. */
  function referenceSegments(relativePath: string): string | undefined {
    for (const segment of relativePath.split('/')) {
      if (segment.length === 0) return 'empty_segment';
      if (segment === '.' || segment === '..') return 'dot_segment';
      const bytes = Buffer.byteLength(segment, 'utf8');
      if (bytes > 255) return `segment_too_long ${bytes} bytes`;
      if (segment.startsWith(TEMP_PREFIX)) return 'reserved_prefix';
    }
    return undefined;
  }

  function verdict(relativePath: string): string | undefined {
    try {
      validateRelativePath(relativePath);
      return undefined;
    } catch (error) {
      if (!(error instanceof PathRejectedError)) throw error;
      return error.rule === 'segment_too_long'
        ? `${error.rule} ${error.message.match(/\((\d+ bytes)\)$/)?.[1]}`
        : error.rule;
    }
  }

  it('rejects what split-based segment rules reject, first offending segment first, on 4,000 generated paths', () => {
    // Pieces that make every segment rule fire and nearly fire: dots alone and beside names, the temp prefix whole,
    // cut short and inside a name, long runs in one- and two-byte characters around 255 bytes, empty segments.
    const pieces = [
      'a',
      '.',
      '..',
      '...',
      '.a',
      'a.',
      '/',
      '/',
      '/',
      '\u00e9',
      TEMP_PREFIX,
      TEMP_PREFIX.slice(0, -1),
      `x${TEMP_PREFIX}`,
      'a'.repeat(254),
      'b'.repeat(255),
      '\u00e9'.repeat(127),
      '\u00e9'.repeat(128),
    ];
    let seed = 17;
    const next = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    let rejected = 0;
    let accepted = 0;
    for (let i = 0; i < 4000; i += 1) {
      let candidate = '';
      const count = 1 + next(6);
      for (let k = 0; k < count; k += 1) candidate += pieces[next(pieces.length)];
      if (candidate.startsWith('/')) candidate = `d${candidate}`;
      const expected = referenceSegments(candidate);
      expect([candidate, verdict(candidate)]).toEqual([candidate, expected]);
      if (expected === undefined) accepted += 1;
      else rejected += 1;
    }
    // Both sides well represented, every rule reached.
    expect(accepted).toBeGreaterThan(300);
    expect(rejected).toBeGreaterThan(1000);
  });
});
