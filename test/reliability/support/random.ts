// Seeded randomness for the reliability tier: a failing run is replayed by its printed seed.

export type Random = () => number;

/** mulberry32: small, fast, and the same sequence on every machine for one seed. */
export function seededRandom(seed: number): Random {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function randomInt(random: Random, below: number): number {
  return Math.floor(random() * below);
}

export function pick<T>(random: Random, items: readonly T[]): T {
  const item = items[randomInt(random, items.length)];
  if (item === undefined) throw new RangeError('pick: no items');
  return item;
}

/** The seed of a run: RELIABILITY_SEED when set (to replay a failure), else a fresh one that gets printed. */
export function runSeed(): number {
  const fromEnv = process.env.RELIABILITY_SEED;
  if (fromEnv !== undefined && fromEnv !== '') return Number.parseInt(fromEnv, 10) >>> 0;
  return Math.floor(Math.random() * 2 ** 32) >>> 0;
}

/** A count from the environment (the long runs raise it), else the default of `npm test`. */
export function countFromEnv(name: string, fallback: number): number {
  const value = process.env[name];
  if (value === undefined || value === '') return fallback;
  const parsed = Number.parseInt(value, 10);
  if (!Number.isSafeInteger(parsed) || parsed < 0)
    throw new RangeError(`${name} must be a count, got ${value}`);
  return parsed;
}
