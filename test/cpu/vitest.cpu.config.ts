// The unit tier with each test file's CPU measured (test/README.md "Where the tier's CPU goes"); not part of npm test.
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';
import { unitTier } from '../../vitest.config.js';

// Where the workers write their lines: one file per run, read and removed by the reporter.
process.env.CPU_PER_FILE_OUT ??= `${process.env.TMPDIR ?? '/tmp'}/vitest-cpu-per-file-${process.pid}.tsv`;

export default defineConfig({
  root: fileURLToPath(new URL('../..', import.meta.url)),
  test: {
    experimental: { fsModuleCache: true },
    reporters: ['default', './test/cpu/cpu-per-file-reporter.ts'],
    projects: [{ ...unitTier, test: { ...unitTier.test, setupFiles: ['test/cpu/cpu-per-file-setup.ts'] } }],
  },
});
