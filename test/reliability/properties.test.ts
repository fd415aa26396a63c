// Property-based tests (fast-check) of the path guard: hostile strings never resolve outside the root, every
// accepted path round-trips, and on a real tree full of symlinks no write escapes the root or crosses a symlink.
// `npm run test:properties -- --cases 100000` is the long run.
import { createHash } from 'node:crypto';
import { promises as nodeFs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/lib/logger.js';
import { createSecretRegistry } from '../../src/lib/secrets.js';
import { publishFile, readRegularFile, removeManagedFile } from '../../src/store/durable-writer.js';
import { DiskError, PathRejectedError } from '../../src/store/errors.js';
import {
  MAX_PATH_BYTES,
  MAX_SEGMENT_BYTES,
  TEMP_PREFIX,
  validateRelativePath,
} from '../../src/store/path-guard.js';
import { emptyState, loadLocalState, saveLocalState } from '../../src/store/state.js';
import { countFromEnv, runSeed } from './support/random.js';

const CASES = countFromEnv('RELIABILITY_PATH_CASES', 10_000);
/** Real-disk cases cost a publish each: a hundredth of the pure ones, at least 300. */
const DISK_CASES = Math.max(300, Math.floor(CASES / 100));
const SEED = runSeed();

/** Segments an attacker would try, and ordinary ones, so accepted paths are common too. */
const hostileSegment = fc.constantFrom(
  '..',
  '.',
  '',
  '...',
  '..\\..',
  '\\',
  '\0',
  '\n',
  '\u0085',
  '\u202e',
  'e\u0301',
  '\uD800',
  '~',
  '$HOME',
  '%2e%2e',
  '/',
  '//',
  TEMP_PREFIX,
  `${TEMP_PREFIX}x`,
  'x'.repeat(MAX_SEGMENT_BYTES),
  'x'.repeat(MAX_SEGMENT_BYTES + 1),
  'é'.repeat(128),
  '__proto__',
  'constructor',
  ' ',
  '-',
);
const plainSegment = fc.stringMatching(/^[A-Za-z0-9._-]{1,12}$/);
const unicodeSegment = fc.string({ unit: 'grapheme', minLength: 1, maxLength: 8 });
const segment = fc.oneof(
  { weight: 5, arbitrary: plainSegment },
  { weight: 2, arbitrary: hostileSegment },
  { weight: 2, arbitrary: unicodeSegment },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 6 }) },
);
const candidatePath = fc.oneof(
  { weight: 8, arbitrary: fc.array(segment, { minLength: 1, maxLength: 8 }).map((s) => s.join('/')) },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 40 }) },
  {
    weight: 1,
    arbitrary: fc
      .array(segment, { minLength: 1, maxLength: 4 })
      .map((s) => `${'/'.repeat(s.length % 3)}${s.join('/')}`),
  },
);

function accepted(relativePath: string): boolean {
  try {
    validateRelativePath(relativePath);
    return true;
  } catch (error) {
    if (!(error instanceof PathRejectedError)) throw error;
    return false;
  }
}

describe('path guard properties', () => {
  it(`${CASES} hostile and ordinary strings: an accepted path stays under the root and round-trips`, () => {
    const root = '/srv/config-root';
    let acceptedCount = 0;
    fc.assert(
      fc.property(candidatePath, (relativePath) => {
        if (!accepted(relativePath)) return;
        acceptedCount += 1;
        const absolute = path.resolve(root, relativePath);
        expect(
          absolute.startsWith(`${root}/`),
          `${JSON.stringify(relativePath)} resolves to ${absolute}`,
        ).toBe(true);
        // Round trip: canonical (normalising changes nothing), and the root-relative form is the path itself.
        expect(path.posix.normalize(relativePath)).toBe(relativePath);
        expect(path.relative(root, absolute)).toBe(relativePath);
        expect(relativePath.normalize('NFC')).toBe(relativePath);
        expect(Buffer.byteLength(relativePath)).toBeLessThanOrEqual(MAX_PATH_BYTES);
        for (const part of relativePath.split('/')) {
          expect(['', '.', '..']).not.toContain(part);
          expect(part.startsWith(TEMP_PREFIX)).toBe(false);
          expect(Buffer.byteLength(part)).toBeLessThanOrEqual(MAX_SEGMENT_BYTES);
        }
      }),
      { numRuns: CASES, seed: SEED },
    );
    process.stderr.write(`properties: seed ${SEED}, ${CASES} paths tried, ${acceptedCount} accepted\n`);
    // The generator must exercise both sides, or the property says nothing.
    expect(acceptedCount).toBeGreaterThan(CASES / 10);
    expect(acceptedCount).toBeLessThan(CASES);
  });
});

describe('state round trip', () => {
  it('every set of accepted paths is remembered exactly through state.json (no name is special)', async () => {
    const stateDir = await nodeFs.mkdtemp(path.join(os.tmpdir(), 'config-agent-state-props-'));
    const logger = createLogger({ level: 'silent', secrets: createSecretRegistry() });
    const runs = Math.max(50, Math.floor(CASES / 200));
    try {
      await fc.assert(
        fc.asyncProperty(
          fc.uniqueArray(candidatePath.filter(accepted), { minLength: 1, maxLength: 20 }),
          async (paths) => {
            const state = emptyState('dvc_props', '/srv/root');
            paths.forEach((relativePath, index) => {
              state.files.set(relativePath, {
                instanceId: `cfg_${index}`,
                sha256: 'a'.repeat(64),
                mode: 0o644,
                createdDirs: [],
                writtenAt: '2026-01-01T00:00:00Z',
              });
            });
            await saveLocalState(nodeFs, stateDir, state);
            const { state: loaded, outcome } = await loadLocalState(
              nodeFs,
              stateDir,
              'dvc_props',
              logger,
              '/srv/root',
            );
            expect(outcome).toBe('loaded');
            expect([...loaded.files.keys()].sort()).toEqual([...paths].sort());
            for (const [relativePath, file] of state.files)
              expect(loaded.files.get(relativePath)).toEqual(file);
          },
        ),
        { numRuns: runs, seed: SEED },
      );
    } finally {
      await nodeFs.rm(stateDir, { recursive: true, force: true });
    }
  });
});

describe('publishing on a real tree full of symlinks', () => {
  let base = '';
  let root = '';
  let outside = '';
  let outsideBefore = '';

  /** Every entry under a directory with its bytes: equal digests mean nothing there changed. */
  async function digest(dir: string): Promise<string> {
    const hash = createHash('sha256');
    const entries = (await nodeFs.readdir(dir, { recursive: true })).map(String).sort();
    for (const entry of entries) {
      const stats = await nodeFs.lstat(path.join(dir, entry));
      hash.update(`${entry}:${stats.mode}:${stats.size}\n`);
      if (stats.isFile()) hash.update(await nodeFs.readFile(path.join(dir, entry)));
    }
    return hash.digest('hex');
  }

  beforeAll(async () => {
    base = await nodeFs.mkdtemp(path.join(os.tmpdir(), 'config-agent-props-'));
    root = path.join(base, 'root');
    outside = path.join(base, 'outside');
    await nodeFs.mkdir(path.join(root, 'a', 'b'), { recursive: true });
    await nodeFs.mkdir(path.join(outside, 'deep'), { recursive: true });
    await nodeFs.writeFile(path.join(outside, 'secret'), 'outside the root\n');
    await nodeFs.writeFile(path.join(root, 'plain'), 'a regular file\n');
    // Symlinks out of the root, back into it, to a file, dangling, and a chain.
    await nodeFs.symlink(outside, path.join(root, 'out'));
    await nodeFs.symlink('../../outside/deep', path.join(root, 'a', 'up'));
    await nodeFs.symlink('..', path.join(root, 'a', 'b', 'loop'));
    await nodeFs.symlink(path.join(outside, 'secret'), path.join(root, 'a', 'secret'));
    await nodeFs.symlink(path.join(outside, 'missing'), path.join(root, 'dangling'));
    await nodeFs.symlink('out', path.join(root, 'chain'));
    outsideBefore = await digest(outside);
  });
  afterAll(async () => {
    if (base) await nodeFs.rm(base, { recursive: true, force: true });
  });

  it(`${DISK_CASES} publishes: a write lands under the root without crossing a symlink, or is refused`, async () => {
    const names = fc.constantFrom(
      'a',
      'b',
      'out',
      'up',
      'loop',
      'secret',
      'dangling',
      'chain',
      'plain',
      'new',
      'x.json',
    );
    const treePath = fc.array(names, { minLength: 1, maxLength: 5 }).map((s) => s.join('/'));
    let written = 0;
    let refused = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.oneof({ weight: 4, arbitrary: treePath }, { weight: 1, arbitrary: candidatePath }),
        async (relativePath) => {
          const data = Buffer.from(`content for ${relativePath}\n`);
          let createdDirs: string[];
          try {
            ({ createdDirs } = await publishFile(nodeFs, {
              rootDir: root,
              relativePath,
              data,
              mode: 0o644,
              dirMode: 0o755,
            }));
          } catch (error) {
            // Refused by rule, or by what is on disk (a file where a directory must go): never anything else.
            expect(error instanceof PathRejectedError || error instanceof DiskError, String(error)).toBe(
              true,
            );
            refused += 1;
            return;
          }
          written += 1;
          // No component from the root to the file is a symlink, and the real path is under the real root.
          let current = root;
          for (const part of relativePath.split('/')) {
            current = path.join(current, part);
            expect(
              (await nodeFs.lstat(current)).isSymbolicLink(),
              `${relativePath}: ${current} is a symlink`,
            ).toBe(false);
          }
          const real = await nodeFs.realpath(path.join(root, relativePath));
          expect(real.startsWith(`${await nodeFs.realpath(root)}/`)).toBe(true);
          // Round trip: what was written is read back at the same path, byte for byte.
          expect((await readRegularFile(nodeFs, root, relativePath))?.data.equals(data)).toBe(true);
          // Leave the tree as it was for the next case (files that were there before are kept).
          if (relativePath !== 'plain') {
            await removeManagedFile(nodeFs, { rootDir: root, relativePath, pruneDirs: createdDirs });
          } else {
            await nodeFs.writeFile(path.join(root, 'plain'), 'a regular file\n');
          }
        },
      ),
      { numRuns: DISK_CASES, seed: SEED },
    );
    process.stderr.write(
      `properties: seed ${SEED}, ${DISK_CASES} publishes, ${written} written, ${refused} refused\n`,
    );
    expect(await digest(outside), 'something outside the root changed').toBe(outsideBefore);
    expect(written).toBeGreaterThan(0);
    expect(refused).toBeGreaterThan(0);
  });
});
