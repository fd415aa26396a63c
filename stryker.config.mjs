// Mutation testing of the reconciler and the store against the unit tier (npm run test:mutation; test/README.md).
// @ts-check

/**
 * `MUTATE=src/store/outbox.ts npm run test:mutation` measures one file with results of its own (incremental
 * file, sandbox, events under reports/), so several files can be measured side by side and a run still going
 * can be read (`node test/mutation-scores.mjs`). Without MUTATE, both folders in one run.
 */
const only = process.env.MUTATE;
const scope =
  only === undefined
    ? 'all'
    : only
        .replace(/^src\//, '')
        .replace(/\.ts$/, '')
        .replaceAll('/', '-');

/** @type {import('@stryker-mutator/api/core').PartialStrykerOptions} */
export default {
  testRunner: 'vitest',
  vitest: { configFile: 'test/vitest.mutation.config.ts', related: true },
  mutate: only === undefined ? ['src/reconcile/**/*.ts', 'src/store/**/*.ts', '!src/**/*.test.ts'] : [only],
  coverageAnalysis: 'perTest',
  // Mutants inside log calls are not counted (test/stryker-ignore-logging.mjs says why).
  plugins: ['@stryker-mutator/*', './test/stryker-ignore-logging.mjs'],
  ignorers: ['logging'],
  // CPU-heavy: the machine has 2 cores shared with other work.
  concurrency: only === undefined ? 2 : 1,
  // Re-tests only mutants whose code or tests changed since the last run (reports/ is not committed).
  incremental: true,
  incrementalFile: `reports/incremental/${scope}.json`,
  // event-recorder: one JSON file per tested mutant as it is tested (reports/events/<scope>/).
  reporters: ['clear-text', 'progress', 'html', 'json', 'event-recorder'],
  htmlReporter: { fileName: `reports/mutation/${scope}.html` },
  jsonReporter: { fileName: `reports/mutation/${scope}.json` },
  eventReporter: { baseDir: `reports/events/${scope}` },
  thresholds: { high: 90, low: 85, break: null },
  // Added to 1.5 × the covering tests' time: long enough for a loaded machine, short enough that the many
  // infinite-loop mutants of the worker loops do not dominate a run.
  timeoutMS: 10_000,
  // The first run of the related unit tests, on a machine busy with other work.
  dryRunTimeoutMinutes: 30,
  tempDirName: `.stryker-tmp-${scope}`,
  // Stryker rewrites the tsconfig's extends/references with TypeScript's JS API, which TypeScript 7 no longer
  // has; our tsconfig has neither, so point it at no file and let the sandbox keep the tsconfig as it is.
  tsconfigFile: 'no-tsconfig-rewrite.json',
  ignorePatterns: [
    'dist',
    'dist-check',
    'dist-bench',
    'demo',
    'coverage',
    'reports',
    '.cache',
    '.stryker-tmp*',
  ],
};
