// A TypeScript script bundled by esbuild into one ESM file a test runs under node as a process of its own.
import { build } from 'esbuild';

/** Bundles `contents` (TypeScript, imports resolved from `resolveDir`, named `sourcefile` in errors) into `outfile`. */
export async function bundleScript(
  contents: string,
  resolveDir: string,
  sourcefile: string,
  outfile: string,
): Promise<void> {
  await build({
    stdin: { contents, sourcefile, resolveDir, loader: 'ts' },
    bundle: true,
    platform: 'node',
    format: 'esm',
    outfile,
    logLevel: 'silent',
  });
}
