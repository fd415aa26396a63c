// Errors are classes with a stable `code` and `retryable` (lib/errors.ts AgentError): every plain `new Error(`
// (TypeError, RangeError, SyntaxError) and every class extending Error directly in src/ is on this list, with why.
import { describe, expect, it } from 'vitest';
import {
  type AllowedLine,
  judgeAllowList,
  sourceFiles,
  sourceLinesMatching,
} from '../../test/helpers/source-scan.js';

const ERRNO_SHAPED =
  "imitates a Node system error (its errno-style `code`): errnoCode() and the one classifier (DiskError, NetworkError, the transport's stale rule) judge it as they judge the real one";
const INVARIANT =
  'an invariant or a caller bug: reaching it is a bug, which a pass reports as `internal` (lib/errors.ts: not an AgentError)';
const CAUGHT_IN_MODULE = 'control flow caught inside its own module: never leaves it';
const BEFORE_THE_AGENT =
  "the packaged bundle's loader and code cache run before the agent's modules load (docs/architecture.md): logged, never matched";

const ALLOWED: AllowedLine[] = [
  { file: 'api/client.ts', text: "new Error('Premature close')", why: ERRNO_SHAPED },
  { file: 'api/client.ts', text: 'class TooLarge extends Error', why: CAUGHT_IN_MODULE },
  { file: 'api/http-transport.ts', text: 'new Error(`no connection within', why: ERRNO_SHAPED },
  {
    file: 'api/http-transport.ts',
    text: "new Error('the service answered with an upgrade')",
    why: ERRNO_SHAPED,
  },
  { file: 'api/http-transport.ts', text: "new Error('socket hang up')", why: ERRNO_SHAPED },
  { file: 'api/json-file.ts', text: 'class NotJson extends Error', why: CAUGHT_IN_MODULE },
  { file: 'api/json-file.ts', text: 'class ProblemFound extends Error', why: CAUGHT_IN_MODULE },
  { file: 'api/json-file.ts', text: "new Error('content written to another length", why: INVARIANT },
  {
    file: 'api/json-file.ts',
    text: 'new SyntaxError(',
    count: 14,
    why: "LosslessSyntax reproduces lossless-json's parse errors (its SyntaxError and message) to name a content problem",
  },
  {
    file: 'api/json.ts',
    text: "new TypeError('value has no JSON representation')",
    why: "JSON.stringify's own TypeError for a value it cannot write: a caller bug",
  },
  {
    file: 'api/retry.ts',
    text: 'new TypeError(`non-error thrown',
    why: 'wraps a thrown non-Error so the retry layer can judge it (not retryable)',
  },
  { file: 'api/socket-lane.ts', text: 'new Error(message)', why: ERRNO_SHAPED },
  {
    file: 'api/socket-lane.ts',
    text: "new Error('The operation was aborted'",
    why: "node:http's AbortError (ABORT_ERR), the shape every abort is recognised by",
  },
  { file: 'api/stale-connection.ts', text: 'new Error(message)', why: ERRNO_SHAPED },
  { file: 'api/transport.ts', text: "new Error('this transport cannot make a fresh one')", why: INVARIANT },
  { file: 'cli/agent-loader.ts', text: 'new Error(`${bundleFile}: no runProcess()`)', why: BEFORE_THE_AGENT },
  { file: 'cli/code-cache.ts', text: 'new Error(`too large', why: BEFORE_THE_AGENT },
  { file: 'cli/code-cache.ts', text: "new Error('write took no bytes')", why: ERRNO_SHAPED },
  { file: 'cli/io.ts', text: "new Error('write took no bytes')", why: ERRNO_SHAPED },
  { file: 'cli/mount-gate.ts', text: 'class MountNotAnswering extends Error', why: ERRNO_SHAPED },
  { file: 'config/glob-match.ts', text: 'class GlobSyntaxError extends Error', why: CAUGHT_IN_MODULE },
  {
    file: 'demo/demo.ts',
    text: 'new Error(`creating the demo instance failed',
    why: 'the demo script, not the agent',
  },
  {
    file: 'mock-server/app.ts',
    text: "new TypeError('createMockService: apiKeys",
    why: "a test's misuse of the mock's factory",
  },
  {
    file: 'reconcile/reconcile.ts',
    text: "new Error('a read-only reconciler can only dry-run')",
    why: INVARIANT,
  },
  { file: 'reconcile/record.ts', text: 'new Error(`unexpected ${result.kind}`)', count: 2, why: INVARIANT },
  { file: 'reconcile/yaml-stream.ts', text: "new Error('content text ends elsewhere", why: INVARIANT },
  {
    file: 'reconcile/yaml-stream.ts',
    text: 'new Error(`unchecked content text at byte',
    count: 2,
    why: INVARIANT,
  },
  { file: 'store/durable-writer.ts', text: 'new RangeError(', count: 3, why: INVARIANT },
  { file: 'store/durable-writer.ts', text: "new Error('write took no bytes')", why: ERRNO_SHAPED },
  { file: 'store/durable-writer.ts', text: 'new TypeError(`writeDurableJson: value for', why: INVARIANT },
  {
    file: 'store/fingerprints.ts',
    text: 'new TypeError(`not a version ${FINGERPRINTS_VERSION} header`)',
    why: 'caught by the load around it: the cache is read as empty',
  },
  { file: 'store/lock.ts', text: "new Error('write took no bytes')", why: ERRNO_SHAPED },
  { file: 'store/path-guard.ts', text: 'new Error(`VerifiedDirectories holds', why: INVARIANT },
  { file: 'store/state.ts', text: "new Error('not a regular file')", why: ERRNO_SHAPED },
];

const PLAIN_ERROR =
  /\bnew (?:Error|TypeError|RangeError|SyntaxError)\(|\bclass \w+ extends (?:Error|TypeError|RangeError)\b/;

describe('plain errors in src/ (errors are AgentError classes with a code and retryable)', () => {
  it('every plain Error made or extended in src/ is on the allow-list, and every entry is still used as counted', async () => {
    const { unlisted, miscounted } = judgeAllowList(await sourceLinesMatching(PLAIN_ERROR), ALLOWED);
    expect(
      unlisted,
      'throw an AgentError subclass with a code and retryable, or list it here with why',
    ).toEqual([]);
    expect(miscounted, 'an entry no longer matches what it lists: update or remove it').toEqual([]);
  });

  it('the scan finds what it looks for', async () => {
    expect(PLAIN_ERROR.test("throw new Error('x')")).toBe(true);
    expect(PLAIN_ERROR.test('return Promise.reject(new RangeError(`x`));')).toBe(true);
    expect(PLAIN_ERROR.test('class Oops extends Error {}')).toBe(true);
    expect(PLAIN_ERROR.test("throw new DiskError({ operation: 'x', path: 'y' })")).toBe(false);
    expect(PLAIN_ERROR.test('class StateDirError extends AgentError {')).toBe(false);
    expect((await sourceFiles()).length).toBeGreaterThan(100);
  });
});
