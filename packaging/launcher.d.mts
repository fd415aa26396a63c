// Types of packaging/launcher.mjs for the tests.
export const KEPT_NODE_VARIABLES: string[];
export const OPENSSL_VARIABLES: string[];
export const DAEMON_NODE_FLAGS: string[];
export const ONCE_NODE_FLAGS: string[];
export const BUNDLED_RUNTIME_NODE_FLAGS: string[];
export const BUNDLED_RUNTIME_DAEMON_NODE_FLAGS: string[];
export const REAL_TIME_SIGNALS: number[];
export const NOTIFY_FD_VARIABLE: string;
export function launcherScript(options: {
  interpreter: string;
  mainJs: string;
  runtime: string;
  runtimeFlags?: string[];
  daemonRuntimeFlags?: string[];
  notifyWrapper?: string;
}): string;
export const DAEMON_MALLOC_ARENA_MAX: string;
export const DAEMON_MALLOC_MMAP_THRESHOLD: string;
export const ONCE_MALLOC_ENV: { MALLOC_ARENA_MAX: string; MALLOC_MMAP_THRESHOLD_: string };
