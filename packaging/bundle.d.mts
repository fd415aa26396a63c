// Types of packaging/bundle.mjs for the tests and the bench.
export const REPO: string;
export function bundleCli(options: { outdir: string; metafile?: string; installCacheDir?: string }): string[];
export function frontDoor(helpText: string, agentBundle?: string, installCacheDir?: string): string;
export function bundleInto(dir: string): string;
export function installedPackageJson(version: string): string;
export function asciiComments(file: string): void;
