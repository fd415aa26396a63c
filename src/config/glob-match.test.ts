// glob-match: picomatch's `{ dot: true }` answers on the accepted syntax, in bounded steps on hostile paths.
import fc from 'fast-check';
import picomatch from 'picomatch';
import { describe, expect, it } from 'vitest';
import { compileGlob, globSyntaxProblem } from './glob-match.js';

// 500 runs each in the unit tier (~0.15 s); GLOB_DIFF_RUNS=100000 for a longer search.
const RUNS = Number(process.env.GLOB_DIFF_RUNS ?? 500);

const pathSegment = fc
  .array(fc.constantFrom('a', 'b', 'c', '.', '_', '-', 'é'), { minLength: 1, maxLength: 4 })
  .map((chars) => chars.join(''))
  .filter((segment) => segment !== '.' && segment !== '..');
const pathArb = fc.array(pathSegment, { minLength: 1, maxLength: 4 }).map((parts) => parts.join('/'));

const patternToken = fc.constantFrom(
  'a',
  'b',
  'c',
  '.',
  '_',
  '-',
  'é',
  '@',
  ',',
  '#',
  ' ',
  '=',
  '%',
  '~',
  ':',
  'Z',
  '9',
  '*',
  '?',
  '[ab]',
  '[a-c]',
  '[._]',
  '{a,b}',
  '{c,a.b}',
);
const patternSegment = fc.oneof(
  fc.constant('**'),
  fc.array(patternToken, { minLength: 1, maxLength: 4 }).map((tokens) => tokens.join('')),
);
const patternArb = fc
  .tuple(fc.boolean(), fc.array(patternSegment, { minLength: 1, maxLength: 4 }))
  .map(([dotSlash, parts]) => (dotSlash ? './' : '') + parts.join('/'));

describe('compileGlob against picomatch', () => {
  it('answers as picomatch(glob, { dot: true }) on every accepted glob', () => {
    fc.assert(
      fc.property(patternArb, fc.array(pathArb, { minLength: 1, maxLength: 8 }), (glob, paths) => {
        fc.pre(globSyntaxProblem(glob) === undefined);
        const ours = compileGlob(glob);
        const theirs = picomatch(glob, { dot: true });
        for (const path of paths) expect(ours(path), `${glob} ~ ${path}`).toBe(theirs(path));
      }),
      { numRuns: RUNS },
    );
  });

  it('answers as picomatch on paths built from the glob itself (so that matches are common)', () => {
    fc.assert(
      fc.property(patternArb, fc.array(pathSegment, { maxLength: 3 }), (glob, fillers) => {
        fc.pre(globSyntaxProblem(glob) === undefined);
        let filler = 0;
        const path = glob
          .replace(/^(\.\/)+/, '')
          .replace(/\{([^,}]*),[^}]*\}/g, '$1')
          .replace(/\[(.)[^\]]*\]/g, '$1')
          .replace(/\*\*|\*|\?/g, () => fillers[filler++] ?? 'a');
        fc.pre(!path.split('/').some((part) => part === '' || part === '.' || part === '..'));
        expect(compileGlob(glob)(path), `${glob} ~ ${path}`).toBe(picomatch(glob, { dot: true })(path));
      }),
      { numRuns: RUNS },
    );
  });

  it.each([
    ['*/**', '_', false],
    ['*/**', '_/c', true],
    ['a/**', 'a', true],
    ['?/**', '_', true],
    ['./a', 'a', true],
    ['a', './a', false],
    ['**/x', 'x', true],
    ['a/**/b', 'a/b', true],
    ['{a,b}x', 'bx', true],
  ])('%s ~ %s is %s, as picomatch says', (glob, path, expected) => {
    expect(picomatch(glob, { dot: true })(path)).toBe(expected);
    expect(compileGlob(glob)(path)).toBe(expected);
  });
});

describe('compileGlob on hostile paths', () => {
  it('matches many stars against a 250-character segment in at most pattern × path steps', () => {
    const segment = '_'.repeat(250);
    for (const glob of ['**/*_*_*_*.json', '*_*_*_*_*_*.json', '**/*a*b*c*d*e*f*g*']) {
      const match = compileGlob(glob);
      expect(match(`x/${segment}`)).toBe(false);
      expect(match.lastSteps).toBeLessThanOrEqual((glob.length + 1) * (segment.length + 3));
      expect(match(`x/${segment}.json`)).toBe(glob.startsWith('**/') && glob.endsWith('.json'));
    }
  });

  it('matches a 6-star glob against the longest path the guard accepts in bounded steps', () => {
    const path = Array.from({ length: 16 }, () => '_'.repeat(254)).join('/');
    const glob = '**/*_*_*_*_*_*.x/**';
    const match = compileGlob(glob);
    expect(match(path)).toBe(false);
    expect(match.lastSteps).toBeLessThanOrEqual((glob.length + 1) * (path.length + 1));
  });
});

describe('globSyntaxProblem', () => {
  it.each([
    ['+(a|b)', '"("'],
    ['!(a)', 'negation'],
    ['!secrets/**', 'negation'],
    ['a\\*', '"\\"'],
    ['[^a]', 'negated'],
    ['a**b', 'whole path segment'],
    ['$$', '"$"'],
    ['^^a', '"^"'],
    ['a;b', '";"'],
    ['[[:alpha:]]', 'class'],
    ['{a,{b,c}}', 'nested'],
    ['{a}', 'two alternatives'],
    ['{a,1..3}', 'plain names'],
    ['c++/*', '"+"'],
    ['{.,a}/x', 'plain names'],
    ['a//b', 'empty segment'],
    ['a/', 'empty segment'],
    ['**/**', 'repeat'],
    ['{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}', 'more than 64'],
  ])('refuses %s (%s)', (glob, problem) => {
    expect(globSyntaxProblem(glob)).toContain(problem);
  });

  it.each(['secrets/**', '**/*.json', 'nginx/**', '**/*.{json,yaml}', 'etc/[a-z]?.conf', './a/*'])(
    'accepts %s',
    (glob) => {
      expect(globSyntaxProblem(glob)).toBeUndefined();
    },
  );
});
