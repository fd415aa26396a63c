// The vitest config Stryker runs (stryker.config.mjs): the unit tier only, rooted at the repository.
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';
import { unitTier } from '../vitest.config.js';

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
  test: { projects: [{ ...unitTier, test: { ...unitTier.test, maxWorkers: 1 } }] },
});
