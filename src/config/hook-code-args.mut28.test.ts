// hookCodeArguments' answers where mut28's mutants of 9e7d8fb..aa75b5a survived: fish's name, a cluster of flags alone, a wrapper's bare shell.
import { describe, expect, it } from 'vitest';
import { hookCodeArguments } from './hook-code-args.js';

const root = '/srv/config-agent';

describe('hookCodeArguments (mut28)', () => {
  it.each([['jellyfish'], ['fishy'], ['/usr/local/bin/fish-shop']])(
    '%s is no fish: its arguments are data',
    (program) => {
      const out = hookCodeArguments([program, 'x.fish'], root);
      expect(out.files).toEqual([]);
      expect(out.code).toEqual([]);
    },
  );

  it('fish itself runs its operand', () => {
    expect(hookCodeArguments(['fish', 'x.fish'], root).files).toEqual([{ index: 1, file: `${root}/x.fish` }]);
  });

  it('a cluster of flags that take no value (python3 -BS) leaves the next argument the script', () => {
    const out = hookCodeArguments(['python3', '-BS', 'x.py'], root);
    expect(out.files).toEqual([{ index: 2, file: `${root}/x.py` }]);
    expect(out.code).toEqual([]);
  });

  it("runuser's -s with a bare shell name: a program looked up in PATH", () => {
    const out = hookCodeArguments(['runuser', '-s', 'bash', 'app'], root);
    expect(out.barePrograms).toBe(true);
    expect(out.programs).toEqual([]);
  });
});
