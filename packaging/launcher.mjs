// /usr/bin/config-agent: the shell launcher the packages install (build-debs.mjs), kept apart so a test runs it.

/**
 * Variables Node itself acts on before the agent runs a line, which would let whoever set the caller's
 * environment run code in the agent, read its memory or write files as it (as root under `sudo -E`, or
 * after a plain `su` that keeps a user's environment): NODE_OPTIONS (`--require`, `--import`, `--inspect`),
 * NODE_PATH, NODE_REDIRECT_WARNINGS, NODE_V8_COVERAGE, NODE_COMPILE_CACHE, NODE_ICU_DATA, NODE_UNIQUE_ID,
 * NODE_CHANNEL_FD, ... — every `NODE_*` but the two the agent checks itself (NODE_EXTRA_CA_CERTS must lie outside
 * rootDir, NODE_TLS_REJECT_UNAUTHORIZED=0 is refused) — and OpenSSL's (a config file loads engines and providers:
 * shared objects).
 */
export const KEPT_NODE_VARIABLES = ['NODE_EXTRA_CA_CERTS', 'NODE_TLS_REJECT_UNAUTHORIZED'];
export const OPENSSL_VARIABLES = [
  'OPENSSL_CONF',
  'OPENSSL_ENGINES',
  'OPENSSL_MODULES',
  'SSL_CERT_FILE',
  'SSL_CERT_DIR',
];

/**
 * V8 flags of the daemon alone (`config-agent` or `config-agent --config <file>`, as the systemd unit runs it): a
 * young generation of 1 MiB semi-spaces instead of up to 16. The idle daemon at 1,000 managed on Node 20: 86–96 →
 * 72–73 MiB of RSS at 1 s polls, with no CPU cost measured on its polls, on a first sync of 1,000 × 1 KiB or
 * of 40 × 3 MiB (docs/performance-history.md, "fifth round"). Bytecode flushed after one full collection it was not run
 * in instead of five or six (`--bytecode-old-age=1`: what only the start or a first sync ran goes sooner), and
 * `gc` on the global object (`--expose-gc`): src/lib/release-memory.ts otherwise makes a V8 context of its own
 * to reach it, which stays alive with the function. With MALLOC_MMAP_THRESHOLD_: idle RSS at 1,000 managed,
 * 1 s polls, Node 24 63.4 → ~61.8 MiB, Node 20 62.2 → ~61.1 (docs/performance-history.md, "Idle daemon, eleventh round").
 * Every Node the packages run takes all three. `--once`: ONCE_NODE_FLAGS.
 */
export const DAEMON_NODE_FLAGS = ['--max-semi-space-size=1', '--bytecode-old-age=1', '--expose-gc'];

/**
 * glibc's malloc arenas of the daemon alone, when the caller did not choose: one, shared by every thread, instead
 * of one per thread that allocates (up to 8 per core: libuv's workers, V8's compiler and GC threads), each
 * keeping its own free pages. Idle daemon at 1,000 managed, 1 s polls: Node 20 67.6 → 65.9 MiB (67.5 → 66.6 over
 * 30 polls), Node 24 92.0 → 89.0 MiB; the peak of a first sync of 1,000 73.3 → 70.6 MiB, its CPU and a poll's
 * unchanged within the noise (docs/performance-history.md, "sixth round (engineer start9)"). glibc reads it before the first line of JavaScript, so
 * only the environment sets it; the daemon's hooks inherit it.
 */
export const DAEMON_MALLOC_ARENA_MAX = '1';

/**
 * glibc's mmap threshold for the daemon alone, when the caller did not choose: a block of 32 KiB or more is its
 * own mapping, returned to the system when freed, instead of a piece of the `brk` heap that stays resident while
 * anything above it lives (V8's compiler zones and parser buffers are freed after each poll's compiles). Setting
 * it also stops glibc from raising the threshold by itself (up to 32 MiB on 64-bit) after the first large free.
 * Idle daemon at 1,000 managed, 1 s polls: Node 24 −0.4 to −0.9 MiB, Node 20 −0.3 to −1.5; the daemon's own first
 * sync of 10,000 (docs/performance-history.md, "Idle daemon, eleventh round").
 */
export const DAEMON_MALLOC_MMAP_THRESHOLD = '32768';

/**
 * glibc's malloc settings of a `--once` run when the caller did not choose: the daemon's two (one arena, a 32 KiB
 * mmap threshold). A `--once` first sync of 10,000 held ~30 MiB of anonymous memory beyond V8's heap and the
 * buffers: the arenas of libuv's workers and V8's helper threads, and freed blocks kept below live ones in the
 * `brk` heap. With both, its peak RSS went 137 → 123 MiB on Node 20 (anonymous 95 → 80 MiB) for no more CPU
 * (docs/performance-history.md, "Memory, seventh round (engineer mem17)").
 */
export const ONCE_MALLOC_ENV = {
  MALLOC_ARENA_MAX: DAEMON_MALLOC_ARENA_MAX,
  MALLOC_MMAP_THRESHOLD_: DAEMON_MALLOC_MMAP_THRESHOLD,
};

/**
 * V8 flags of a `--once` run, which may be a first sync: semi-spaces of 4 MiB. A `--once` first sync of 10,000
 * peaked at ~152 MiB RSS with Node's default and ~131 MiB with 4, for no more time in garbage collection (335
 * scavenges of ~1.1 s against 97 of ~1.0–1.3 s; 1 MiB took 1,447 of 2.8–3.8 s there). docs/performance-history.md,
 * "Memory, fifth round". Only a command-line flag sets it: V8 sizes the heap before the first line runs. The
 * other commands (`--help`, `--version`, the local clients, `init`, `doctor`) get no flag: they allocate little,
 * and the flag cost `--help` ~7 ms of start-up (1.50 → 1.78× `node -e 0` in the bench).
 */
export const ONCE_NODE_FLAGS = ['--max-semi-space-size=4'];

/**
 * Node flags of every command when the package ships its own runtime (config-agent-node, Node 24): Node's answer
 * to SIGUSR1 is to open its inspector on 127.0.0.1:9229 without authentication, a debugger onto the API key for
 * whatever may signal the agent (its own user, so its hooks, and root). main.ts installs a listener that keeps
 * it closed, but only once its first line runs, ~0.1 s into the start; `--disable-sigusr1` closes it from the
 * first instruction. Node 20 (the system runtime of config-agent_all) refuses the flag, so only the bundled
 * runtime gets it.
 */
export const BUNDLED_RUNTIME_NODE_FLAGS = ['--disable-sigusr1'];

/**
 * V8 flags of the daemon alone on the bundled runtime (config-agent-node, Node 24): neither of V8's optimising
 * compilers, Maglev nor TurboFan. Their code was ~8 MiB of the node binary's pages that the daemon touched in its
 * first pass and kept resident: idle RSS at 1,000 managed, 1 s polls, as this launcher runs it, 73.5 → 64.2 MiB
 * (file-backed 49.8 → 42.1). The price is paid once, by the daemon's own first sync of many files (10,000: −4 to
 * +40 % of CPU over six pairs, median +24 %); its starts and full resyncs with nothing to do cost the same. Sparkplug, the baseline compiler,
 * stays (without it that first sync cost +50 %). docs/performance-history.md, "Idle daemon, ninth round (engineer rss12)".
 * Both flags exist on every Node the packages run (V8 11.3 too), but only this runtime, pinned by
 * node-runtime.json, was measured; a flag the runtime refused would stop the daemon before its first line.
 */
export const BUNDLED_RUNTIME_DAEMON_NODE_FLAGS = ['--no-maglev', '--no-opt'];

/**
 * Linux's real-time signals as glibc numbers them (SIGRTMIN 34 to SIGRTMAX 64; 32 and 33 are glibc's own), ignored
 * by the daemon: ignoring a signal needs `sigaction`, which Node does not expose, and `process.on` knows no names
 * for them, so each ended the daemon (systemd restarted it 30 s later). A disposition of SIG_IGN is kept across
 * `execve`, and Node's start-up sets back to the default signals 1-31 but not these (SigIgn in /proc/PID/status,
 * Node 20.20 and 24.21: `trap '' 12 34 64` before the exec leaves 34 and 64 ignored, 12 not). What the daemon
 * starts (hooks) inherits them ignored: libuv's spawn sets back 1-31 only too (measured the same way).
 */
export const REAL_TIME_SIGNALS = Array.from({ length: 31 }, (_, index) => 34 + index);

/**
 * The variable systemd/config-agent-notify sets to the descriptor of its socket to systemd (src/daemon/watchdog.ts
 * NOTIFY_FD_VARIABLE). Set, even empty, it means the wrapper already ran: the launcher does not run it again.
 */
export const NOTIFY_FD_VARIABLE = 'CONFIG_AGENT_NOTIFY_FD';

/**
 * The launcher: unsets those variables, then `exec`s the interpreter with the daemon's or `--once`'s flags, or
 * none, on main.cjs (exec keeps the process id: under Type=exec the agent itself is the unit's main process);
 * `runtimeFlags` go first on every command's line (BUNDLED_RUNTIME_NODE_FLAGS for the bundled runtime),
 * `daemonRuntimeFlags` last on the daemon's (BUNDLED_RUNTIME_DAEMON_NODE_FLAGS). With `notifyWrapper` (the packages'
 * config-agent-notify), a daemon started under systemd's watchdog (WATCHDOG_USEC and NOTIFY_SOCKET set) without the
 * wrapper in front (NOTIFY_FD_VARIABLE unset: an `ExecStart=` drop-in naming this launcher alone) is run through it,
 * so the drop-in's agent pings instead of being restarted every WatchdogSec=.
 * Shell builtins only (`export -p`, `read`, `case`, `unset`): the caller's PATH chooses no program. A value holding a newline can only make it unset one
 * more variable, never keep one.
 */
export function launcherScript({
  interpreter,
  mainJs,
  runtime,
  runtimeFlags = [],
  daemonRuntimeFlags = [],
  notifyWrapper,
}) {
  const node = [interpreter, ...runtimeFlags].join(' ');
  const daemonFlags = [...DAEMON_NODE_FLAGS, ...daemonRuntimeFlags].join(' ');
  const watchdog =
    notifyWrapper === undefined
      ? []
      : [
          "    # Under systemd's watchdog (WatchdogSec=) without the unit's wrapper in front (an ExecStart= drop-in naming",
          '    # only this launcher): the wrapper, so the agent has its socket to ping on (docs/operations.md, "The watchdog").',
          `    if [ -n "\${WATCHDOG_USEC-}" ] && [ -n "\${NOTIFY_SOCKET-}" ] && [ -z "\${${NOTIFY_FD_VARIABLE}+set}" ] && [ -x ${notifyWrapper} ]; then`,
          `      exec ${notifyWrapper} ${node} ${daemonFlags} ${mainJs} "$@"`,
          '    fi',
        ];
  return [
    '#!/bin/sh',
    `# config-agent: runs the bundled CLI with ${runtime}.`,
    '# Node acts on NODE_* (NODE_OPTIONS=--require ...) and OpenSSL variables before the agent runs a line: they',
    '# are dropped, so whoever set the environment of `sudo -E`/`su` cannot run code as the agent (docs/operations.md).',
    'drop=$(export -p | while IFS= read -r line; do',
    // biome-ignore lint/suspicious/noTemplateCurlyInString: shell parameter expansions, not a template
    '  line=${line#declare -x }; line=${line#export }; name=${line%%=*}',
    '  case $name in',
    `    ${KEPT_NODE_VARIABLES.join('|')}) ;;`,
    '    *[!A-Za-z0-9_]*) ;;',
    '    NODE_*) printf \'%s\\n\' "$name" ;;',
    '  esac',
    'done)',
    `unset $drop ${OPENSSL_VARIABLES.join(' ')}`,
    '# The daemon (no command, at most --config): its own V8 flags, malloc arenas and mmap threshold (docs/performance.md).',
    // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell parameter expansion, not a template
    'case $#:${1-} in',
    '  0:|1:--config=*|2:--config)',
    `    export MALLOC_ARENA_MAX="\${MALLOC_ARENA_MAX-${DAEMON_MALLOC_ARENA_MAX}}"`,
    `    export MALLOC_MMAP_THRESHOLD_="\${MALLOC_MMAP_THRESHOLD_-${DAEMON_MALLOC_MMAP_THRESHOLD}}"`,
    '    # Real-time signals (kill -RTMIN ... -RTMAX) ignored: Node can neither listen to them nor ignore them, and',
    "    # their default action ended the daemon. SIG_IGN survives the exec; Node's start-up resets 1-31 only.",
    `    trap '' ${REAL_TIME_SIGNALS.join(' ')}`,
    ...watchdog,
    `    exec ${node} ${daemonFlags} ${mainJs} "$@" ;;`,
    'esac',
    '# Every other command prints: started with its standard output closed (`>&-`), Node would put /dev/null there',
    '# and the output be lost with exit 0. /dev/null opened read-only instead makes the first write fail: exit 74.',
    'if ! true 2>/dev/null 3>&1; then exec 1</dev/null; fi',
    '# --once (anywhere among the arguments): its own V8 flags and malloc settings; every other command none.',
    'for arg in "$@"; do',
    '  case $arg in',
    '    --once)',
    ...Object.entries(ONCE_MALLOC_ENV).map(([name, value]) => `      export ${name}="\${${name}-${value}}"`),
    `      exec ${node} ${ONCE_NODE_FLAGS.join(' ')} ${mainJs} "$@" ;;`,
    '  esac',
    'done',
    `exec ${node} ${mainJs} "$@"`,
    '',
  ].join('\n');
}
