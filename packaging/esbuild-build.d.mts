// Types of packaging/esbuild-build.mjs for the tests.
export const TRANSPORT_LEFT_OUT: string;
export const pinoWithoutTransports: { name: string; setup(build: unknown): void };
export function replaceEachOnce(
  text: string,
  replacements: readonly (readonly [string, string])[],
  name: string,
): string;
