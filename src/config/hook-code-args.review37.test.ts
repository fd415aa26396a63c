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

describe('shells besides the sh family judged as shells (review37)', () => {
  it.each([
    [['tcsh', '<root>/x.csh'], 'hooks[0].run[1]', 'is inside rootDir'],
    [['/bin/csh', '-f', 'etc/x.csh'], 'hooks[0].run[2]', 'is inside rootDir'],
    [['csh', '-c', 'source <root>/x'], 'hooks[0].run[2]', 'code given to an interpreter names <root>'],
    [['fish', '<root>/x.fish'], 'hooks[0].run[1]', 'is inside rootDir'],
    [['fish', '--no-config', '-c', 'source <root>/x'], 'hooks[0].run[3]', 'code given to an interpreter'],
    [['fish', '-C', 'source <root>/x', '/opt/y.fish'], 'hooks[0].run[2]', 'code given to an interpreter'],
    [['fish', '--init-command=source <root>/x'], 'hooks[0].run[1]', 'code given to an interpreter'],
    [['fish', '-d', '3', 'x.fish'], 'hooks[0].run[3]', 'is inside rootDir'],
    [['rbash', '<root>/x.sh'], 'hooks[0].run[1]', 'is inside rootDir'],
    [['ksh93', '<root>/x.sh'], 'hooks[0].run[1]', 'is inside rootDir'],
    [['/usr/bin/zsh-5.9', '<root>/x.zsh'], 'hooks[0].run[1]', 'is inside rootDir'],
    [['timeout', '5', 'tcsh', '<root>/x.csh'], 'hooks[0].run[3]', 'is inside rootDir'],
  ])('refuses %j, naming %s', async (run, key, why) => {
    const message = await judge(run);
    expect(message).toContain(`${key}: `);
    expect(message).toContain(why);
  });

  it.each([
    [['fish', '-c', 'echo hi', '/etc/hostname']],
    [['tcsh', '/opt/x.csh']],
    [['fish', '-d', '3', '/opt/y.fish']],
    [['shellcheck', '<root>/x.sh']],
  ])('accepts %j (code outside rootDir, or no shell)', async (run) => {
    expect(await judge(run)).toBe('accepted');
  });
});
