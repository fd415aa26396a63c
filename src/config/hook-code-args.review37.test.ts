// Hook arguments review37 found misjudged: rootDir named after a look-alike in code text, shells not taken for shells, code in option clusters.
import { describe, expect, it } from 'vitest';
import { useHookJudgeWorld } from '../../test/helpers/hook-judge.js';

const world = useHookJudgeWorld('review37');
const judge = world.judge;

describe('code text naming rootDir after a path that only begins like it (review37)', () => {
  it.each([
    [['sh', '-c', 'cp /opt/x <root>.bak; sh <root>/x.sh'], 'hooks[0].run[2]'],
    [['bash', '-c', 'ls <root>-old && . <root>/env'], 'hooks[0].run[2]'],
    [['python3', '-c', 'open("<root>2/x"); exec(open("<root>/x.py").read())'], 'hooks[0].run[2]'],
    [['flock', '/run/x.lock', '-c', 'echo <root>_a; sh <root>/x.sh'], 'hooks[0].run[3]'],
  ])('refuses %j, naming %s', async (run, key) => {
    const message = await judge(run);
    expect(message).toContain(`${key}: code given to an interpreter names <root> (rootDir <root>)`);
  });

  it.each([[['sh', '-c', 'cp /opt/x <root>.bak; ls <root>-old <root>_a']]])(
    'accepts %j (only paths that begin like rootDir)',
    async (run) => {
      expect(await judge(run)).toBe('accepted');
    },
  );
});
