// Glob matching in bounded time (at most pattern length × path length steps), picomatch's `{ dot: true }` semantics.
//
// picomatch compiles a glob into a backtracking RegExp, whose time grows with the power of the stars in a segment
// (`**/*_*_*_*.json` against 250 `_` took 3.4 s): the path comes from the service, so a hostile one could wedge the
// agent. This matcher takes the subset of the syntax listed in docs/configuration.md, refuses the rest at config
// load (globSyntaxProblem), and matches segment by segment with a table over (pattern segment, path segment).

/** Longest glob accepted, and longest total of its brace expansions. */
const MAX_GLOB_LENGTH = 1024;
/** Most alternatives a glob's braces may expand to. */
const MAX_BRACE_EXPANSIONS = 64;

type Token =
  | { kind: 'char'; code: number }
  | { kind: 'any' } // ?
  | { kind: 'star' } // *: any run of characters but `/`
  | { kind: 'class'; ranges: Array<[number, number]> };

type Segment = { kind: 'globstar' } | { kind: 'tokens'; tokens: Token[]; endsWithStar: boolean };

/** A compiled glob: isMatch(path), and `steps`, the work of the last call (a bound the tests assert on). */
export interface GlobMatcher {
  (path: string): boolean;
  readonly lastSteps: number;
}

const CLASS_CHAR = /[A-Za-z0-9_.-]/;
// ASCII characters picomatch takes literally (checked by the differential test); `^`, `$`, `+` and others it may not.
const LITERAL_CHAR = /^[A-Za-z0-9_.\-@,#=%~: ]$/;

/** Why the glob is outside the syntax this matcher takes, or undefined when it is inside. */
export function globSyntaxProblem(glob: string): string | undefined {
  try {
    compileAlternatives(glob);
    return undefined;
  } catch (error) {
    if (error instanceof GlobSyntaxError) return error.message;
    throw error;
  }
}

class GlobSyntaxError extends Error {}

/** Compiles a glob accepted by globSyntaxProblem; throws on one it refuses. */
export function compileGlob(glob: string): GlobMatcher {
  const alternatives = compileAlternatives(glob);
  let steps = 0;
  const matcher = ((path: string): boolean => {
    steps = 0;
    const pathSegments = path.split('/');
    for (const segments of alternatives) {
      const counter = { steps: 0 };
      const matched = matchSegments(segments, pathSegments, counter);
      steps += counter.steps;
      if (matched) return true;
    }
    return false;
  }) as GlobMatcher;
  Object.defineProperty(matcher, 'lastSteps', { get: () => steps });
  return matcher;
}

function compileAlternatives(glob: string): Segment[][] {
  if (glob.length === 0) throw new GlobSyntaxError('must not be empty');
  if (glob.length > MAX_GLOB_LENGTH)
    throw new GlobSyntaxError(`must be at most ${MAX_GLOB_LENGTH} characters`);
  if (glob.startsWith('!')) throw new GlobSyntaxError('negation (a leading !) is not supported');
  // picomatch reads `!` as negation (also after ./), `+` after a class as a regex quantifier and `$$` as an
  // anchor; the rest are escapes and extglobs.
  for (const refused of ['\\', '(', ')', '|', '!', '+', '$']) {
    if (glob.includes(refused)) {
      throw new GlobSyntaxError(
        `"${refused}" is not supported (no negation, escapes, extglobs or alternation with |; use {a,b})`,
      );
    }
  }
  const expanded = expandBraces(glob);
  return expanded.map(compileOne);
}

/** `{a,b}` groups of plain literals, not nested, expanded into every combination. */
function expandBraces(glob: string): string[] {
  let results = [''];
  let total = 0;
  for (let index = 0; index < glob.length; ) {
    const char = glob[index] as string;
    if (char === '}') throw new GlobSyntaxError('"}" without a matching "{"');
    if (char !== '{') {
      results = results.map((prefix) => prefix + char);
      index++;
      continue;
    }
    const close = glob.indexOf('}', index + 1);
    if (close === -1) throw new GlobSyntaxError('"{" without a matching "}"');
    const body = glob.slice(index + 1, close);
    if (body.includes('{')) throw new GlobSyntaxError('nested braces are not supported');
    const options = body.split(',');
    if (options.length < 2) throw new GlobSyntaxError('braces need at least two alternatives, like {a,b}');
    for (const option of options) {
      if (!/^[^/*?[\]{}]+$/.test(option) || option === '.' || option.includes('..')) {
        throw new GlobSyntaxError(
          'brace alternatives must be non-empty plain names (no /, *, ?, [, ], . alone or ..), like {json,yaml}',
        );
      }
    }
    const next: string[] = [];
    for (const prefix of results) for (const option of options) next.push(prefix + option);
    if (next.length > MAX_BRACE_EXPANSIONS) {
      throw new GlobSyntaxError(`braces expand to more than ${MAX_BRACE_EXPANSIONS} alternatives`);
    }
    results = next;
    index = close + 1;
  }
  for (const result of results) total += result.length;
  if (total > MAX_GLOB_LENGTH) {
    throw new GlobSyntaxError(`braces expand to more than ${MAX_GLOB_LENGTH} characters in all`);
  }
  return results;
}

function compileOne(glob: string): Segment[] {
  let text = glob;
  while (text.startsWith('./')) text = text.slice(2); // as picomatch does
  const parts = text.split('/');
  const segments: Segment[] = [];
  for (const part of parts) {
    if (part === '') throw new GlobSyntaxError('must not contain an empty segment (// or a trailing /)');
    if (part === '.' || part === '..') throw new GlobSyntaxError(`must not contain a "${part}" segment`);
    if (part === '**') {
      if (segments.at(-1)?.kind === 'globstar') throw new GlobSyntaxError('must not repeat **/**');
      segments.push({ kind: 'globstar' });
      continue;
    }
    // picomatch makes `**{a,b}` cross `/`: inside a segment `*` is the only star.
    if (part.includes('**'))
      throw new GlobSyntaxError('** must be a whole path segment (a/**/b); use * within one');
    const tokens = compileTokens(part);
    segments.push({ kind: 'tokens', tokens, endsWithStar: tokens.at(-1)?.kind === 'star' });
  }
  return segments;
}

function compileTokens(part: string): Token[] {
  const tokens: Token[] = [];
  for (let index = 0; index < part.length; ) {
    const char = part[index] as string;
    if (char === '*') {
      tokens.push({ kind: 'star' });
      index++;
    } else if (char === '?') {
      tokens.push({ kind: 'any' });
      index++;
    } else if (char === '[') {
      const close = part.indexOf(']', index + 1);
      if (close === -1) throw new GlobSyntaxError('"[" without a matching "]"');
      tokens.push({ kind: 'class', ranges: compileClass(part.slice(index + 1, close)) });
      index = close + 1;
    } else if (char === ']') {
      throw new GlobSyntaxError('"]" without a matching "["');
    } else {
      const code = part.charCodeAt(index);
      if (code < 0x80 && !LITERAL_CHAR.test(char)) {
        throw new GlobSyntaxError(
          `"${char}" is not supported: literal characters are letters, digits, non-ASCII and _ . - @ , # = % ~ : space`,
        );
      }
      tokens.push({ kind: 'char', code });
      index++;
    }
  }
  return tokens;
}

/** `[abc]`, `[a-z0-9_]`: letters, digits, `_`, `.` and `-` ranges; no negation, no POSIX classes. */
function compileClass(body: string): Array<[number, number]> {
  if (body.startsWith('!') || body.startsWith('^')) {
    throw new GlobSyntaxError('negated classes ([!...] or [^...]) are not supported');
  }
  if (body === '') throw new GlobSyntaxError('a class [] must not be empty');
  const ranges: Array<[number, number]> = [];
  for (let index = 0; index < body.length; ) {
    const first = body[index] as string;
    if (!CLASS_CHAR.test(first) || first === '-') {
      throw new GlobSyntaxError('a class may hold only letters, digits, _, . and ranges like a-z');
    }
    if (body[index + 1] === '-' && index + 2 < body.length) {
      const last = body[index + 2] as string;
      if (!CLASS_CHAR.test(last) || last === '-' || last.charCodeAt(0) < first.charCodeAt(0)) {
        throw new GlobSyntaxError(`the class range ${first}-${last} is not a range of letters or digits`);
      }
      ranges.push([first.charCodeAt(0), last.charCodeAt(0)]);
      index += 3;
    } else {
      if (body[index + 1] === '-') throw new GlobSyntaxError('a class must not end with -');
      ranges.push([first.charCodeAt(0), first.charCodeAt(0)]);
      index++;
    }
  }
  return ranges;
}

/**
 * Table over (pattern segment i, path segment j), filled from the end: each cell matches one segment pair at
 * most once, so the work is at most Σ|pattern segment| × Σ|path segment|.
 */
function matchSegments(segments: Segment[], path: string[], counter: { steps: number }): boolean {
  const n = segments.length;
  const m = path.length;
  // next[j]: segments i+1.. match path j..; current[j]: segments i.. match path j..
  let next = new Uint8Array(m + 1);
  next[m] = 1;
  for (let i = n - 1; i >= 0; i--) {
    const segment = segments[i] as Segment;
    const current = new Uint8Array(m + 1);
    if (segment.kind === 'globstar') {
      const previous = segments[i - 1];
      // picomatch's quirk: a trailing /** after a segment ending in * needs one more segment (`*/**` ≠ `_`).
      const needsOne = i === n - 1 && previous?.kind === 'tokens' && previous.endsWithStar;
      for (let j = m; j >= 0; j--) {
        counter.steps++;
        if (i === n - 1) current[j] = needsOne ? (j < m ? 1 : 0) : 1;
        else current[j] = next[j] === 1 || (j < m && current[j + 1] === 1) ? 1 : 0;
      }
    } else {
      for (let j = m - 1; j >= 0; j--) {
        counter.steps++;
        if (next[j + 1] === 1 && matchSegment(segment.tokens, path[j] as string, counter)) current[j] = 1;
      }
    }
    next = current;
  }
  return next[0] === 1;
}

/** One segment against one path segment: greedy with a return to the last star, at most |tokens| × |text| steps. */
function matchSegment(tokens: Token[], text: string, counter: { steps: number }): boolean {
  let t = 0;
  let s = 0;
  let starToken = -1;
  let starText = 0;
  while (s < text.length) {
    counter.steps++;
    const token = tokens[t];
    if (token !== undefined && token.kind !== 'star' && matchesChar(token, text.charCodeAt(s))) {
      t++;
      s++;
    } else if (token?.kind === 'star') {
      starToken = t++;
      starText = s;
    } else if (starToken !== -1) {
      t = starToken + 1;
      s = ++starText;
    } else {
      return false;
    }
  }
  while (tokens[t]?.kind === 'star') t++;
  return t === tokens.length;
}

function matchesChar(token: Token, code: number): boolean {
  if (token.kind === 'any') return true;
  if (token.kind === 'char') return token.code === code;
  if (token.kind === 'class') return token.ranges.some(([low, high]) => code >= low && code <= high);
  return false;
}
