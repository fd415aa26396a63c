#!/usr/bin/env node
// Long runs of the reliability tier: the same tests as `npm test`, with the counts raised by flags.
//   npm run test:killloop -- --kills 10000      npm run test:powercut -- --cuts 2000
//   npm run test:properties -- --cases 100000   (any of them: --seed <n> replays a run)
// --until <date> (kill loop, power cuts): a time budget; no kill starts after it and the figures say so.
// The kill loop's lane of daemon stops gets a tenth of the kills (--stops n sets it), the power cuts in the middle
// of a directory renewal (power-cut-renewal.test.ts) a twentieth of the cuts (--renewal-cuts n), at least 5 each.
import { spawnSync } from 'node:child_process';
import { parseArgs } from 'node:util';

const RUNS = {
  killloop: {
    file: 'test/reliability/kill-loop.test.ts',
    flag: 'kills',
    env: 'RELIABILITY_KILLS',
    share: { flag: 'stops', env: 'RELIABILITY_STOPS', divisor: 10 },
  },
  powercut: {
    file: 'test/reliability/power-cut.test.ts test/reliability/power-cut-renewal.test.ts',
    flag: 'cuts',
    env: 'RELIABILITY_CUTS',
    share: { flag: 'renewal-cuts', env: 'RELIABILITY_RENEWAL_CUTS', divisor: 20 },
  },
  properties: {
    file: 'test/reliability/properties.test.ts test/reliability/list-properties.test.ts',
    flag: 'cases',
    env: 'RELIABILITY_PATH_CASES',
  },
};

const [kind, ...rest] = process.argv.slice(2);
const run = RUNS[kind ?? ''];
if (run === undefined) {
  process.stderr.write(
    `usage: reliability-long-run.mjs ${Object.keys(RUNS).join('|')} [--<count> n] [--seed n]\n`,
  );
  process.exit(2);
}
const { values } = parseArgs({
  args: rest,
  options: {
    [run.flag]: { type: 'string' },
    ...(run.share === undefined ? {} : { [run.share.flag]: { type: 'string' } }),
    seed: { type: 'string' },
    until: { type: 'string' },
  },
  strict: true,
});
const env = { ...process.env };
const isCount = (flag) => {
  const value = values[flag];
  if (value !== undefined && !/^\d+$/.test(value)) {
    process.stderr.write(`--${flag} must be a count, got ${value}\n`);
    process.exit(2);
  }
  return value;
};
const count = isCount(run.flag);
if (run.share !== undefined) {
  const shared = isCount(run.share.flag);
  if (shared !== undefined) env[run.share.env] = shared;
  else if (count !== undefined)
    env[run.share.env] = String(Math.max(5, Math.ceil(Number(count) / run.share.divisor)));
}
if (count !== undefined) {
  env[run.env] = count;
  // Listings cost a few loopback requests each: a twentieth of the path cases.
  if (kind === 'properties')
    env.RELIABILITY_LIST_CASES = String(Math.max(150, Math.floor(Number(count) / 20)));
}
if (values.seed !== undefined) env.RELIABILITY_SEED = values.seed;
if (values.until !== undefined) {
  if (!Number.isFinite(Date.parse(values.until))) {
    process.stderr.write(`--until must be a date (e.g. 2026-11-23T02:35:00Z), got ${values.until}\n`);
    process.exit(2);
  }
  env.RELIABILITY_UNTIL = values.until;
}
// The files side by side: the integration tier runs one file at a time on two cores, and the first file of a run
// with a time budget would use all of it (power-cut.test.ts made 0 cuts after the renewal cuts' 15 minutes).
const files = run.file.split(' ');
const result = spawnSync('npx', ['vitest', 'run', `--maxWorkers=${files.length}`, ...files], {
  stdio: 'inherit',
  env,
});
process.exit(result.status ?? 1);
