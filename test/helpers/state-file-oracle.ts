// Generated state.json and fingerprints.json values that the hand checks (quickStateFile, quickEntry) are held to
// against zod: state-quick.test.ts runs the state property on 600 files, state-quick.scale.test.ts on 2,000.
import fc from 'fast-check';
import { expect } from 'vitest';
import { fingerprintSchemas, quickEntry } from '../../src/store/fingerprints.js';
import { quickStateFile, stateSchemas } from '../../src/store/state.js';

export const SHA = 'a'.repeat(64);

/** Maps as [key, value] lists with each value's own keys, so that field order is compared too. */
function comparable(value: unknown): unknown {
  if (value instanceof Map) return [...value].map(([key, item]) => [key, comparable(item)]);
  if (Array.isArray(value)) return value.map(comparable);
  if (typeof value === 'object' && value !== null) {
    return Object.entries(value).map(([key, item]) => [key, comparable(item)]);
  }
  return value;
}

export function stateAgreesWithZod(value: unknown): 'quick' | 'zod' {
  const quick = quickStateFile(value);
  const strict = stateSchemas().LocalStateFile.safeParse(value);
  if (quick === undefined) return 'zod';
  expect(strict.success).toBe(true);
  expect(comparable(quick)).toStrictEqual(comparable(strict.data));
  return 'quick';
}

export function entryAgreesWithZod(value: unknown): 'quick' | 'zod' {
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
    createdDepths: mostly(fc.array(fc.integer({ min: 0, max: 3 }), { maxLength: 3 })),
  },
  ['keptMode', 'size', 'createdDepths'],
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

export const stateFile = record(
  {
    version: mostly(fc.constant(1)),
    deviceId: mostly(fc.string({ maxLength: 8 })),
    rootDir: mostly(fc.constant('/srv/root')),
    files: mostly(keyed(managedFile)),
    instances: mostly(keyed(instanceRecord)),
    pendingHookPaths: mostly(fc.array(fc.string({ maxLength: 6 }), { maxLength: 3 })),
    // Seldom wrong (a wrong field anywhere leaves the whole file to zod): the hand check still takes enough.
    formerRoot: mostly(
      fc.record({
        rootDir: fc.constantFrom('/srv/old', '/srv/old', '/srv/old', '/srv/old', ''),
        files: keyed(
          fc.record({
            instanceId: fc.constantFrom('cfg_1', 'cfg_2'),
            sha256: fc.constantFrom(SHA, SHA, SHA, SHA, SHA, 'A'.repeat(64)),
          }),
        ),
      }),
    ),
  },
  ['pendingHookPaths', 'formerRoot'],
);

const digits = fc.bigInt({ min: 0n, max: 2n ** 64n }).map(String);
export const fingerprintEntry = record(
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

/**
 * quickStateFile says nothing or exactly what zod says on `runs` generated state files, read through JSON as the
 * files are. Returns how many the hand check took and how many it left to zod.
 */
export function stateFilesAgreeWithZod(runs: number): { quick: number; zod: number } {
  const seen = { quick: 0, zod: 0 };
  fc.assert(
    // Through JSON, as the files are read: no undefined, a __proto__ key an own property.
    fc.property(stateFile, (value) => {
      seen[stateAgreesWithZod(JSON.parse(JSON.stringify(value)))] += 1;
    }),
    { numRuns: runs },
  );
  return seen;
}
