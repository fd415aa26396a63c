// A hook whose interpreter (sh, python3, node, `env sh`, `sh -c`) would run a file or text from rootDir is refused.
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { doctorEnvironment, doctorOutput, writeDoctorConfig } from '../../test/helpers/doctor-config.js';
import { useHookJudgeWorld } from '../../test/helpers/hook-judge.js';

const world = useHookJudgeWorld('fix37');
const judge = world.judge;

describe('hook arguments an interpreter runs as code (fix37)', () => {
  it.each([
    [['/bin/sh', '<root>/x.sh'], 'hooks[0].run[1]'],
    [['bash', '<root>/etc/hook.sh', 'arg'], 'hooks[0].run[1]'],
    [['dash', '-e', '<root>/x.sh'], 'hooks[0].run[2]'],
    [['python3', '<root>/x.py'], 'hooks[0].run[1]'],
    [['/usr/bin/perl', '-w', '<root>/x.pl'], 'hooks[0].run[2]'],
    [['node', '--require', '<root>/x.js', '/opt/app.js'], 'hooks[0].run[2]'],
    [['ruby', '<root>/x.rb'], 'hooks[0].run[1]'],
    [['sh', 'x.sh'], 'hooks[0].run[1]'],
    [['bash', '-o', 'pipefail', 'etc/x.sh'], 'hooks[0].run[3]'],
    [['/usr/bin/env', 'sh', '<root>/x.sh'], 'hooks[0].run[2]'],
    [['env', '-i', 'A=1', 'python3', '-u', '<root>/x.py'], 'hooks[0].run[5]'],
    [['env', '<root>/x'], 'hooks[0].run[1]'],
    [['sh', '-c', 'sh "$(cat <root>/x)"'], 'hooks[0].run[2]'],
    [['/bin/bash', '-ec', '. <root>/etc/env; reload'], 'hooks[0].run[2]'],
    [['python3', '-c', 'exec(open("<root>/x.py").read())'], 'hooks[0].run[2]'],
    [['sh', '/opt/check.sh', '<root>/app.json'], 'hooks[0].run[2]'],
    [['env', '-S', 'sh <root>/x.sh'], 'hooks[0].run[2]'],
  ])('refuses %j, naming %s', async (run, key) => {
    const message = await judge(run);
    expect(message).toContain(`${key}:`);
    expect(message).toContain('rootDir <root>');
  });

  it.each([
    [['/usr/local/bin/apply', '<root>/app.json']],
    [['jq', '.', '<root>/etc/app.json']],
    [['nginx', '-t', '-c', '<root>/nginx.conf']],
    [['systemctl', 'reload', 'nginx']],
    [['/bin/sh', '/opt/hooks/reload.sh']],
    [['sh', '-c', 'systemctl reload nginx']],
    [['sh', '-c', 'echo "$1"', '_', 'hello']],
    [['bash', '-o', 'pipefail', '-c', 'true']],
    [['env', 'A=1', '/usr/local/bin/apply', '<root>/app.json']],
    [['python3', '/opt/x.py', 'relative.json']],
    [['sh', '-c', 'echo <root>other']],
  ])('accepts %j (data, or code outside rootDir)', async (run) => {
    expect(await judge(run)).toBe('accepted');
  });
});

describe('doctor on hook arguments inside rootDir (fix37)', () => {
  async function doctorLines(run: string[]): Promise<string[]> {
    const configPath = writeDoctorConfig(
      world.dir,
      { deviceId: 'dvc_args', key: 'sk-doctor-args-test-key\n' },
      {
        rootDir: world.root,
        stateDir: path.join(world.dir, 'outside', 'state'),
        hooks: [{ match: '**', run: run.map((arg) => arg.replaceAll('<root>', world.root)) }],
      },
    );
    const { out } = await doctorOutput(configPath, doctorEnvironment(world.dir));
    return out.split('\n').map((line) => line.replaceAll(world.root, '<root>'));
  }

  it('warns (not a failure) on data inside rootDir given to a program that is no interpreter', async () => {
    const lines = await doctorLines(['/bin/true', '--check', '<root>/app.json']);
    expect(lines[0]).toMatch(/^ok {4}config/);
    expect(lines.filter((line) => line.startsWith('warn'))).toEqual([
      'warn  hooks     hooks[0].run[2] <root>/app.json is inside rootDir, whose files the service writes: ' +
        '/bin/true must read it as data only, never run it as code',
    ]);
    const failed = lines.find((line) => / check\(s\) failed$/.test(line));
    const without = await doctorLines(['/bin/true', '--check', '/opt/app.json']);
    expect(without.filter((line) => line.startsWith('warn'))).toEqual([]);
    // The warning is not counted among the failed checks.
    expect(without.find((line) => / check\(s\) failed$/.test(line))).toBe(failed);
  });

  it('fails the config check on a script inside rootDir given to an interpreter, naming the argument', async () => {
    const lines = await doctorLines(['/bin/sh', '<root>/x.sh']);
    expect(lines[0]).toMatch(
      /^FAIL {2}config .*hooks\[0\]\.run\[1\]: <root>\/x\.sh is inside rootDir <root>/,
    );
  });
});
