// The vitest config Stryker runs (stryker.config.mjs): the unit tier only, rooted at the repository.
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';
import { INTEGRATION, LOCK_HOLDERS, SCALE, unitTier } from '../vitest.config.js';

/**
 * `MUTATION_TESTS=src/api/http-transport.test.ts,src/api/client.test.ts` narrows the tests Stryker runs to those
 * files (comma-separated paths or globs), so one file's run takes minutes instead of running every test that
 * imports it through the client (test/README.md, "Mutation testing").
 */
const narrowed = process.env.MUTATION_TESTS?.split(',').filter((path) => path !== '');

export default defineConfig({
  root: fileURLToPath(new URL('..', import.meta.url)),
  plugins: [
    {
      // Stryker asks for worker threads; some unit tests set process.umask(), which only a process may do.
      name: 'config-agent:forks',
      configureVitest({ project }) {
        (project.config as { pool: string }).pool = 'forks';
      },
    },
  ],
  // One worker per Stryker process: Stryker runs its own processes side by side (stryker.config.mjs).
  test: {
    projects: [
      {
        ...unitTier,
        test: {
          ...unitTier.test,
          ...(narrowed === undefined || narrowed.length === 0 ? {} : { include: narrowed }),
          // The scale tests and the lock's tests against real holders run with the integration tier in CI, but
          // in-process: mutants of what they cover are judged by them too.
          exclude: INTEGRATION.filter((pattern) => pattern !== SCALE && !LOCK_HOLDERS.includes(pattern)),
          maxWorkers: 1,
        },
      },
    ],
  },
});
