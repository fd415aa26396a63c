// Builds dist/ once before the suite, so tests can spawn the real compiled binaries (CLI, mock, crash workers).
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';

export default function setup(): void {
  const require = createRequire(import.meta.url);
  const tsc = path.join(path.dirname(require.resolve('typescript/package.json')), 'bin', 'tsc');
  const result = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.build.json'], { encoding: 'utf8' });
  // tsc still emits on type errors; `npm test` typechecks separately, so only report here.
  if (result.status !== 0)
    process.stderr.write(`global-setup: build reported errors\n${result.stdout}${result.stderr}`);
}
