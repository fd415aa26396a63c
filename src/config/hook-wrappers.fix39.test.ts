// A hook whose interpreter behind a wrapper (timeout, nice, sudo, flock, busybox, ...) would run rootDir's code is refused.
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { useHookJudgeWorld } from '../../test/helpers/hook-judge.js';
import { MAX_WRAPPERS } from './hook-code-args.js';

const world = useHookJudgeWorld('fix39');
const judge = world.judge;

describe('wrappers looked through to the interpreter they start (fix39)', () => {
  it.each([
    [['timeout', '5', 'sh', '<root>/x.sh'], 'hooks[0].run[3]'],
    [['timeout', '-s', 'KILL', '-k', '2', '30s', '/bin/bash', 'x.sh'], 'hooks[0].run[7]'],
    [['timeout', '--signal=TERM', '5', 'python3', '<root>/x.py'], 'hooks[0].run[4]'],
    [['nice', '-n', '5', 'sh', '<root>/x.sh'], 'hooks[0].run[4]'],
    [['nice', '-n5', 'sh', 'etc/x.sh'], 'hooks[0].run[3]'],
    [['ionice', '-c3', 'perl', '<root>/x.pl'], 'hooks[0].run[3]'],
    [['ionice', '-c', '2', '-n', '7', 'sh', '<root>/x.sh'], 'hooks[0].run[6]'],
    [['nohup', 'sh', '<root>/x.sh'], 'hooks[0].run[2]'],
    [['setsid', '-f', 'node', '<root>/x.js'], 'hooks[0].run[3]'],
    [['stdbuf', '-oL', '-e', '0', 'sh', '<root>/x.sh'], 'hooks[0].run[5]'],
    [['chrt', '-f', '10', 'sh', '<root>/x.sh'], 'hooks[0].run[4]'],
    [['taskset', '-c', '0,1', 'sh', '<root>/x.sh'], 'hooks[0].run[4]'],
    [['flock', '-w', '10', '/run/lock/x', 'sh', '<root>/x.sh'], 'hooks[0].run[5]'],
    [['flock', '/run/lock/x', '-c', 'sh <root>/x.sh'], 'hooks[0].run[3]'],
    [['flock', '-c', '. <root>/env', '/run/lock/x'], 'hooks[0].run[2]'],
    [['sudo', '-u', 'www', '-E', 'A=1', 'sh', '<root>/x.sh'], 'hooks[0].run[6]'],
    [['sudo', '-nu', 'www', 'bash', 'x.sh'], 'hooks[0].run[4]'],
    [['runuser', '-u', 'www', '--', 'sh', '<root>/x.sh'], 'hooks[0].run[5]'],
    [['runuser', '-l', 'www', '-c', 'sh <root>/x.sh'], 'hooks[0].run[4]'],
    [['runuser', 'www', '<root>/x.sh'], 'hooks[0].run[2]'],
    [['runuser', '-', 'www', '-c', '. <root>/env'], 'hooks[0].run[4]'],
    [['doas', '-u', 'www', 'sh', '<root>/x.sh'], 'hooks[0].run[4]'],
    [['xargs', '-0', '-n', '1', 'sh', '<root>/x.sh'], 'hooks[0].run[5]'],
    [['busybox', 'sh', '<root>/x.sh'], 'hooks[0].run[2]'],
    [['/bin/busybox', 'timeout', '5', 'ash', 'x.sh'], 'hooks[0].run[4]'],
    [['systemd-run', '--wait', '-p', 'User=www', '--unit=x', 'sh', '<root>/x.sh'], 'hooks[0].run[6]'],
    [['unshare', '-m', '--propagation', 'private', 'sh', '<root>/x.sh'], 'hooks[0].run[5]'],
    [['chroot', '<root>', '/bin/sh'], 'hooks[0].run[1]'],
    [['chroot', '--userspec=www', '/srv/jail', 'sh', '<root>/x.sh'], 'hooks[0].run[4]'],
    [['setpriv', '--reuid', 'www', '--init-groups', 'sh', '<root>/x.sh'], 'hooks[0].run[5]'],
    [['prlimit', '--nofile=1024', 'sh', '<root>/x.sh'], 'hooks[0].run[3]'],
    [['exec', '-a', 'hook', 'sh', '<root>/x.sh'], 'hooks[0].run[4]'],
    [['sudo', 'timeout', '5', 'nice', 'env', 'A=1', 'sh', '<root>/x.sh'], 'hooks[0].run[7]'],
    [['timeout', '5', '<root>/bin/apply'], 'hooks[0].run[2]'],
    [['nice', './apply'], 'hooks[0].run[1]'],
    [['timeout', '5', 'sh', '-c', '. <root>/env'], 'hooks[0].run[4]'],
    [['env', '-S', 'sh <root>/x.sh'], 'hooks[0].run[2]'],
    [['env', '-Ssh <root>/x.sh'], 'hooks[0].run[1]'],
  ])('refuses %j, naming %s', async (run, key) => {
    const message = await judge(run);
    expect(message).toContain(`${key}:`);
    expect(message).toContain('rootDir <root>');
  });

  it.each([
    [['timeout', '5', '/usr/local/bin/apply', '<root>/app.json']],
    [['nice', '-n', '5', 'jq', '.', '<root>/etc/app.json']],
    [['sudo', '-u', 'www', 'systemctl', 'reload', 'nginx']],
    [['flock', '/run/lock/x', '-c', 'systemctl reload nginx']],
    [['timeout', '5', 'sh', '/opt/hooks/reload.sh']],
    [['busybox', 'sh', '/opt/hooks/reload.sh']],
    [['busybox', 'cp', '<root>/a', '/etc/a']],
    [['ionice', '-c3', 'nginx', '-t', '-c', '<root>/nginx.conf']],
    [['runuser', '-u', 'www', '--', '/usr/bin/apply', '<root>/app.json']],
    [['xargs', '-a', '/etc/list', 'touch']],
    [['runuser', '-l', 'www', '-c', 'systemctl reload nginx']],
    [['chroot', '/srv/jail', '/bin/true']],
    [['timeout', '5', 'sh', '-c', 'echo "$1"', '_', '<root>other']],
  ])('accepts %j (the wrapped program reads rootDir as data, or its code is outside)', async (run) => {
    expect(await judge(run)).toBe('accepted');
  });

  it(`refuses wrappers nested more than ${MAX_WRAPPERS} deep, which are not looked through`, async () => {
    const deep = [...Array.from({ length: MAX_WRAPPERS + 1 }, () => 'nohup'), 'sh', '/opt/x.sh'];
    expect(await judge(deep)).toContain(`hooks[0].run[${MAX_WRAPPERS}]: more than ${MAX_WRAPPERS} wrappers`);
    expect(await judge(deep.slice(1))).toBe('accepted');
  });
});
