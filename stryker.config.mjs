// Mutation testing of the reconciler and the store against the unit tier (npm run test:mutation; test/README.md).
// @ts-check
/** @type {import('@stryker-mutator/api/core').PartialStrykerOptions} */
export default {
  testRunner: 'vitest',
  vitest: { configFile: 'test/vitest.mutation.config.ts', related: true },
  mutate: ['src/reconcile/**/*.ts', 'src/store/**/*.ts', '!src/**/*.test.ts'],
  coverageAnalysis: 'perTest',
  // Mutants inside log calls are not counted (test/stryker-ignore-logging.mjs says why).
  plugins: ['@stryker-mutator/*', './test/stryker-ignore-logging.mjs'],
  ignorers: ['logging'],
  // CPU-heavy: the machine has 2 cores shared with other work.
  concurrency: 2,
  // Re-tests only mutants whose code or tests changed since the last run (reports/ is not committed).
  incremental: true,
  incrementalFile: 'reports/stryker-incremental.json',
  reporters: ['clear-text', 'progress', 'html', 'json'],
  htmlReporter: { fileName: 'reports/mutation/index.html' },
  jsonReporter: { fileName: 'reports/mutation/mutation.json' },
  thresholds: { high: 90, low: 85, break: null },
  timeoutMS: 20_000,
  // The first run of the related unit tests, on a machine busy with other work.
  dryRunTimeoutMinutes: 30,
  tempDirName: '.stryker-tmp',
  // Stryker rewrites the tsconfig's extends/references with TypeScript's JS API, which TypeScript 7 no longer
  // has; our tsconfig has neither, so point it at no file and let the sandbox keep the tsconfig as it is.
  tsconfigFile: 'no-tsconfig-rewrite.json',
  ignorePatterns: ['dist', 'dist-check', 'dist-bench', 'demo', 'coverage', 'reports', '.cache'],
};
