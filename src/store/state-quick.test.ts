// The hand checks of state.json and fingerprints.json against zod: either they say nothing, or exactly what zod says.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { fingerprintSchemas, quickEntry } from './fingerprints.js';
import { quickStateFile, stateSchemas } from './state.js';

const SHA = 'a'.repeat(64);

/** Maps as [key, value] lists with each value's own keys, so that field order is compared too. */
function comparable(value: unknown): unknown {
  if (value instanceof Map) return [...value].map(([key, item]) => [key, comparable(item)]);
  if (Array.isArray(value)) return value.map(comparable);
  if (typeof value === 'object' && value !== null) {
    return Object.entries(value).map(([key, item]) => [key, comparable(item)]);
  }
  return value;
}

function stateAgreesWithZod(value: unknown): 'quick' | 'zod' {
  const quick = quickStateFile(value);
  const strict = stateSchemas().LocalStateFile.safeParse(value);
  if (quick === undefined) return 'zod';
  expect(strict.success).toBe(true);
  expect(comparable(quick)).toStrictEqual(comparable(strict.data));
  return 'quick';
}

function entryAgreesWithZod(value: unknown): 'quick' | 'zod' {
  const quick = quickEntry(value);
  const strict = fingerprintSchemas().FingerprintEntry.safeParse(value);
  if (quick === undefined) return 'zod';
  expect(strict.success).toBe(true);
  expect(comparable(quick)).toStrictEqual(comparable(strict.data));
  return 'quick';
}

const odd = fc.oneof(
  fc.constant(undefined),
  fc.constant(null),
  fc.constant(''),
  fc.string({ maxLength: 8 }),
  fc.constantFrom(-1, 0, 1.5, 0o7777, 0o10000, 2 ** 53, -0, 420),
  fc.boolean(),
  fc.constant([]),
  fc.constant(['x', 1]),
  fc.constant({}),
);

/** A field that is usually right and sometimes anything else. */
function mostly<T>(good: fc.Arbitrary<T>): fc.Arbitrary<unknown> {
  return fc.oneof({ weight: 6, arbitrary: good }, { weight: 1, arbitrary: odd });
}

/** A record with its optional fields sometimes absent, in shuffled order, with sometimes an unknown field. */
function record(fields: Record<string, fc.Arbitrary<unknown>>, optional: string[]): fc.Arbitrary<unknown> {
  return fc
    .tuple(
      fc.record(fields, { requiredKeys: Object.keys(fields).filter((key) => !optional.includes(key)) }),
      fc.boolean(),
      fc.boolean(),
    )
    .map(([value, reversed, extra]) => {
      const entries = Object.entries(value);
      if (reversed) entries.reverse();
      return Object.fromEntries(extra ? [...entries, ['unknown', 1]] : entries);
    });
}

const managedFile = record(
  {
    instanceId: mostly(fc.string({ minLength: 1, maxLength: 10 })),
    sha256: mostly(fc.constantFrom(SHA, '0123456789abcdef'.repeat(4), 'A'.repeat(64), 'a'.repeat(63))),
    mode: mostly(fc.integer({ min: 0, max: 0o7777 })),
    createdDirs: mostly(fc.array(fc.string({ maxLength: 6 }), { maxLength: 3 })),
    writtenAt: mostly(fc.constant('2026-11-23T05:05:55.514Z')),
    keptMode: mostly(fc.integer({ min: 0, max: 0o7777 })),
    size: mostly(fc.integer({ min: 0, max: 2 ** 40 })),
  },
  ['keptMode', 'size'],
);

const instanceRecord = record(
  {
    relativePath: mostly(fc.string({ maxLength: 10 })),
    activity: mostly(fc.constantFrom('queued', 'deployed', 'removed', 'deploying', 'archived', 'bogus')),
    error: mostly(fc.constantFrom('none', 'failed', 'retrying', 'bogus')),
    message: mostly(fc.string({ maxLength: 10 })),
    attempts: mostly(fc.nat({ max: 20 })),
    nextAttemptAt: mostly(fc.constant('2026-11-23T05:05:55.514Z')),
    reportEcho: mostly(
      record(
        {
          updatedAt: mostly(fc.constant('2026-11-23T05:05:55Z')),
          operatorUpdatedAt: mostly(fc.constant('2026-11-22T05:05:55Z')),
          awaiting: mostly(fc.constant('deployed/none')),
          version: mostly(fc.constant(`${'v'.repeat(43)}=`)),
        },
        ['awaiting', 'version'],
      ),
    ),
  },
  ['message', 'nextAttemptAt', 'reportEcho'],
);

const keyed = (item: fc.Arbitrary<unknown>) =>
  fc
    .array(fc.tuple(fc.constantFrom('a.json', 'b/c.yaml', '__proto__', 'constructor', 'd e'), item), {
      maxLength: 4,
    })
    .map((pairs) => {
      const object: Record<string, unknown> = {};
      for (const [key, value] of pairs)
        Object.defineProperty(object, key, { value, enumerable: true, writable: true, configurable: true });
      return object;
    });

const stateFile = record(
  {
    version: mostly(fc.constant(1)),
    deviceId: mostly(fc.string({ maxLength: 8 })),
    rootDir: mostly(fc.constant('/srv/root')),
    files: mostly(keyed(managedFile)),
    instances: mostly(keyed(instanceRecord)),
    pendingHookPaths: mostly(fc.array(fc.string({ maxLength: 6 }), { maxLength: 3 })),
  },
  ['pendingHookPaths'],
);

const digits = fc.bigInt({ min: 0n, max: 2n ** 64n }).map(String);
const fingerprintEntry = record(
  {
    dev: mostly(digits),
    ino: mostly(fc.oneof(digits, fc.constantFrom('-1', '1e3', ' 1', '01'))),
    size: mostly(digits),
    mtimeNs: mostly(fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n }).map(String)),
    ctimeNs: mostly(fc.oneof(fc.bigInt().map(String), fc.constantFrom('--1', '-', '1.0'))),
    sha256: mostly(fc.constantFrom(SHA, 'g'.repeat(64))),
    verifiedAt: mostly(fc.oneof(fc.double(), fc.integer())),
  },
  [],
);

describe('quickStateFile', () => {
  it('takes a textbook state (a __proto__ path included) and gives what zod gives, field order included', () => {
    const file = JSON.parse(
      JSON.stringify({
        version: 1,
        deviceId: 'dvc_1',
        rootDir: '/srv/root',
        files: {
          'app/a.json': {
            instanceId: 'cfg_1',
            sha256: SHA,
            mode: 0o644,
            createdDirs: ['app'],
            writtenAt: 'x',
          },
        },
        instances: {
          cfg_1: {
            relativePath: 'app/a.json',
            activity: 'deployed',
            error: 'failed',
            message: 'disk full',
            attempts: 3,
            nextAttemptAt: 'y',
            reportEcho: { updatedAt: 'u', operatorUpdatedAt: 'o' },
          },
          cfg_2: { relativePath: 'b.json', activity: 'queued', error: 'none', attempts: 0 },
        },
      }),
    );
    file.files = JSON.parse(
      '{"__proto__":{"instanceId":"cfg_3","sha256":"' +
        SHA +
        '","mode":420,"createdDirs":[],"writtenAt":"z"}}',
    );
    expect(stateAgreesWithZod(file)).toBe('quick');
    expect([...(quickStateFile(file)?.files.keys() ?? [])]).toEqual(['__proto__']);
  });

  it('keys in the order JSON.parse made them (integer-like first), and nothing an enumerable prototype key adds', () => {
    const record = (id: string) => ({
      instanceId: id,
      sha256: SHA,
      mode: 0o644,
      createdDirs: [],
      writtenAt: 'x',
    });
    const files = JSON.parse(
      `{"b.json":${JSON.stringify(record('cfg_b'))},"10":${JSON.stringify(record('cfg_10'))},` +
        `"__proto__":${JSON.stringify(record('cfg_p'))},"2":${JSON.stringify(record('cfg_2'))},` +
        `"a.json":${JSON.stringify(record('cfg_a'))}}`,
    );
    const file = { version: 1, deviceId: 'dvc_1', rootDir: '/srv/root', files, instances: {} };
    const expected = Object.entries(files).map(([key, value]) => [
      key,
      (value as { instanceId: string }).instanceId,
    ]);
    expect(expected.map(([key]) => key)).toEqual(['2', '10', 'b.json', '__proto__', 'a.json']);
    const taken = () =>
      [...(quickStateFile(file)?.files ?? [])].map(([key, value]) => [key, value.instanceId]);
    expect(taken()).toEqual(expected);
    expect(stateAgreesWithZod(file)).toBe('quick');
    // A library that adds an enumerable key to Object.prototype adds no record.
    Object.defineProperty(Object.prototype, 'polluted.json', {
      value: record('cfg_polluted'),
      enumerable: true,
      configurable: true,
      writable: true,
    });
    try {
      expect(taken()).toEqual(expected);
    } finally {
      delete (Object.prototype as Record<string, unknown>)['polluted.json'];
    }
  });

  it('leaves to zod whatever zod must judge or name, and agrees with it on 2,000 generated files', () => {
    for (const bad of [
      null,
      [],
      { version: 2, deviceId: 'd', rootDir: '/', files: {}, instances: {} },
      { version: 1, deviceId: 'd', rootDir: '/', files: [], instances: {} },
      { version: 1, deviceId: 'd', rootDir: '/', files: {}, instances: { i: { attempts: -1 } } },
    ]) {
      expect(stateAgreesWithZod(bad)).toBe('zod');
    }
    const seen = { quick: 0, zod: 0 };
    fc.assert(
      // Through JSON, as the files are read: no undefined, a __proto__ key an own property.
      fc.property(stateFile, (value) => {
        seen[stateAgreesWithZod(JSON.parse(JSON.stringify(value)))] += 1;
      }),
      { numRuns: 2_000 },
    );
    // Both paths were exercised. About one generated file in 29 is wholly valid: 69.8 of 2,000 on average over
    // 100 seeds (41 the fewest of 60), so a bound of 50 failed about one run in a hundred; 20 is six standard
    // deviations below the mean.
    expect(seen.quick).toBeGreaterThan(20);
    expect(seen.zod).toBeGreaterThan(50);
  });
});

describe('quickEntry (fingerprints.json)', () => {
  it('agrees with zod on 3,000 generated entries', () => {
    const seen = { quick: 0, zod: 0 };
    fc.assert(
      fc.property(fingerprintEntry, (value) => {
        seen[entryAgreesWithZod(JSON.parse(JSON.stringify(value)))] += 1;
      }),
      { numRuns: 3_000 },
    );
    expect(seen.quick).toBeGreaterThan(100);
    expect(seen.zod).toBeGreaterThan(100);
  });
});
