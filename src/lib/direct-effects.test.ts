// Clock, timers and randomness reach the code through Deps (lib/deps.ts): every direct read of them in src/ is on
// this list, which is docs/architecture.md's list of deliberate exceptions ("What does not come through Deps").
import { describe, expect, it } from 'vitest';
import { type AllowedLine, judgeAllowList, sourceLinesMatching } from '../../test/helpers/source-scan.js';

const REQUEST_TIMER =
  'a per-request timer of the HTTP client: a real timer also cuts a request in flight (the pull deadline is checked on the injected clock too)';
const CRYPTO_NAME =
  "a name's entropy from crypto, not deps.random (lib/deps.ts: jitter comes from deps.random)";
const STOP_DEADLINE =
  'a stop deadline: a real timer, so the process exits on time whatever a hung pass, file system or held clock keeps waiting';

const ALLOWED: AllowedLine[] = [
  {
    file: 'lib/clock.ts',
    text: 'setTimeout(',
    why: 'systemClock itself: the one real clock, built into Deps',
  },
  { file: 'lib/clock.ts', text: 'Date.now(', why: 'systemClock itself' },
  {
    file: 'lib/clock.ts',
    text: 'setImmediate',
    why: "systemClock's later turn (defer), and laterTurn's for a clock without one",
  },
  { file: 'lib/clock.ts', text: 'performance.now(', why: 'systemClock itself' },
  { file: 'lib/clock.ts', text: 'systemClock', why: 'systemClock itself' },
  { file: 'lib/logger.ts', text: 'new Date()', why: "the log line's own time: the logger is a dep" },
  {
    file: 'cli/compose.ts',
    text: 'systemClock',
    count: 5,
    why: 'the composition root: deps.clock, and the lanes of mounts that may hang (MountLanes: start-up needs them before deps)',
  },
  {
    file: 'api/client.ts',
    text: 'systemClock',
    count: 2,
    why: 'the default of a client built outside compose.ts (tests); compose.ts passes deps.clock',
  },
  {
    file: 'daemon/hooks.ts',
    text: 'systemClock',
    count: 2,
    why: "the hooks' durations and kill deadlines, beside their real timers: real child processes",
  },
  {
    file: 'cli/doctor-bounds.ts',
    text: 'systemClock',
    count: 2,
    why: "doctor and init build no Deps: the lanes of mounts that may hang for their checks of places, as start-up's (hook28)",
  },
  { file: 'cli/compose.ts', text: 'Math.random', why: 'the composition root: deps.random' },
  {
    file: 'cli/compose.ts',
    text: 'setTimeout(',
    count: 3,
    why: `signal handling before and around Deps: ${STOP_DEADLINE}`,
  },
  { file: 'daemon/agent.ts', text: 'setTimeout(', why: `the daemon's stop budget: ${STOP_DEADLINE}` },
  {
    file: 'cli/process-exit.ts',
    text: 'setTimeout(',
    count: 2,
    why: "the process's end (nodeProcessEnd, the real side of the ProcessEnd port that tests fake): its poll of libuv's pool and the SIGKILL after an ignored signal",
  },
  {
    file: 'cli/process-exit.ts',
    text: 'setImmediate(',
    why: "the process's end (nodeProcessEnd): its poll of libuv's pool, a turn at a time",
  },
  { file: 'api/client.ts', text: 'setTimeout(', why: REQUEST_TIMER },
  {
    file: 'daemon/directory-watcher.ts',
    text: 'setImmediate(',
    why: "the kernel's events counted per turn of the event loop (a burst): an ordering of real inotify events, not time",
  },
  { file: 'api/http-transport.ts', text: 'setTimeout(', why: REQUEST_TIMER },
  { file: 'api/socket-lane.ts', text: 'setTimeout(', why: REQUEST_TIMER },
  {
    file: 'daemon/hooks.ts',
    text: 'setTimeout(',
    count: 7,
    why: "the hooks' timeout, kill grace, leftover checks, giving up after SIGKILL and the program check's deadline: real child processes and a stat that may hang",
  },
  {
    file: 'daemon/hooks.ts',
    text: 'randomUUID(',
    why: "the hook run's mark in its environment, found again in /proc",
  },
  { file: 'daemon/local-api.ts', text: 'randomBytes(', why: CRYPTO_NAME },
  { file: 'store/durable-writer.ts', text: 'randomBytes(', count: 2, why: CRYPTO_NAME },
  {
    file: 'store/lock.ts',
    text: 'randomBytes(',
    count: 2,
    why: "the lock's token and this process's instance id",
  },
  {
    file: 'cli/io.ts',
    text: 'setTimeout(',
    why: "stdout's EAGAIN retry: the CLI's output, outside any pass",
  },
  {
    file: 'cli/local-client.ts',
    text: 'systemClock',
    count: 2,
    why: "`sync`'s wait for the agent to take its request, on a clock a test may give (LocalAnswerLimits.clock): no Deps",
  },
  {
    file: 'cli/local-client.ts',
    text: 'setTimeout(',
    why: '`status` and `sync` ask the daemon over its socket and build no Deps: the answer deadline',
  },
  {
    file: 'cli/agent-loader.ts',
    text: 'new Date()',
    why: 'the packaged bundle loader, before the agent loads',
  },
  { file: 'cli/code-cache.ts', text: 'Date.now(', why: 'the code cache, before the agent loads' },
  { file: 'cli/code-cache.ts', text: 'randomBytes(', why: 'the code cache, before the agent loads' },
];

// setImmediate called or handed on (a later turn: Clock.defer, laterTurn; fix32). queueMicrotask is not looked for: a
// microtask runs within the turn, an ordering no clock could hold or move.
const DIRECT_EFFECT =
  /\bDate\.now\(|\bMath\.random\b|\brandom(?:Bytes|UUID|Int)\(|(?:^|[^.\w])set(?:Timeout|Interval)\(|(?:^|[^.\w])setImmediate\b|\bperformance\.now\(|\bprocess\.hrtime\b|\bnew Date\(\)|\bsystemClock\b/;

describe('direct clock, timer and randomness reads in src/', () => {
  it('every one is a deliberate exception on the list (mock service and demo aside), each counted exactly', async () => {
    const found = (await sourceLinesMatching(DIRECT_EFFECT)).filter(
      ({ file }) => !file.startsWith('mock-server/') && !file.startsWith('demo/'),
    );
    const { unlisted, miscounted } = judgeAllowList(found, ALLOWED);
    expect(
      unlisted,
      'take it from deps (clock, random), or list it here and in docs/architecture.md',
    ).toEqual([]);
    expect(miscounted, 'an entry no longer matches what it lists: update or remove it').toEqual([]);
  });

  it('the scan finds what it looks for', () => {
    for (const line of [
      'const at = Date.now();',
      'jitter * Math.random()',
      'randomBytes(6)',
      'const t = setTimeout(f, 1);',
      'process.hrtime.bigint()',
      'new Date().toISOString()',
      'performance.now()',
      'clock: options.clock ?? systemClock,',
      'setImmediate(() => (this.#burst = 0));',
      'new ObservationAhead(deps.fs, settings.rootDir, fingerprints, setImmediate, signal);',
    ]) {
      expect(DIRECT_EFFECT.test(line), line).toBe(true);
    }
    for (const line of [
      'socket.setTimeout(0);',
      'new Date(clock.now())',
      'deps.clock.now()',
      'deps.random()',
      'clearImmediate(turn);',
      'laterTurn(deps.clock)',
    ]) {
      expect(DIRECT_EFFECT.test(line), line).toBe(false);
    }
  });
});
