// The V8 flags of the commands that sync, shared by main.ts and the agent bundle's loader (which sets them before compiling).

/**
 * V8's interrupt budget (bytecode run before a function is considered for TurboFan), 4 × its default of 66 KiB.
 * A first sync or a pass runs each of its functions a few thousand times and ends: at the default, V8's helper
 * threads spent ~0.3 s of CPU optimising code the run then barely used (a first sync of 1,000: CPU 1,700 ->
 * 1,430 ms; docs/performance-history.md "First sync, fifth round"). Code that stays hot (a pass over 10,000 instances,
 * a long-running daemon) is still optimised, a little later.
 */
const TIER_UP_INTERRUPT_BUDGET = 4 * 67_584;
/** The V8 majors whose flags below were measured on (Node 20.19+ ships V8 11.3). */
const SYNC_V8_FLAGS_MAJORS = new Set([11]);

/**
 * The V8 flags the commands that sync set on V8 `v8Major`, less those node's command line (`execArgv`) already
 * gives. Both only on V8 11: V8 13 (Node 24, the config-agent-node package) renamed the tier-up counters, and
 * setFlagsFromString of an unknown flag prints 'Error: unrecognized flag' to stderr, a line that is not JSON
 * among the logs; setting `--liftoff-only` after start there cost ~40 ms more than it saved. Newer runtimes keep
 * V8's defaults.
 * - the interrupt budget above;
 * - `--liftoff-only`: llhttp, undici's HTTP parser, is WebAssembly, and V8 11 optimised its parser with TurboFan
 *   in every process: ~85 ms of a helper thread's CPU in an idle `--once` at 1,000 that parses 11 responses.
 *   Liftoff's code parses the few kilobytes of headers a request has at much the same cost
 *   (docs/performance-history.md "The transport, sixth round"). Nothing else in the agent is WebAssembly.
 */
export function syncV8Flags(v8Major: number, execArgv: readonly string[]): string[] {
  if (!SYNC_V8_FLAGS_MAJORS.has(v8Major)) return [];
  const flags: string[] = [];
  if (!execArgv.some((arg) => /^--interrupt[-_]budget=/.test(arg))) {
    flags.push(`--interrupt-budget=${TIER_UP_INTERRUPT_BUDGET}`);
  }
  if (!execArgv.some((arg) => /^--(no-)?liftoff[-_]only$/.test(arg))) flags.push('--liftoff-only');
  return flags;
}
