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

describe('code and files in option clusters and joined to their letter (review37)', () => {
  it.each([
    [
      ['python3', "-cexec(open('<root>/x').read())"],
      'hooks[0].run[1]',
      'code given to an interpreter names <root>',
    ],
    [['python3', '-cimport mod'], 'hooks[0].run[1]', 'python -c code that imports'],
    [['python3', '-Sc', 'import mod'], 'hooks[0].run[2]', 'python -c code that imports'],
    [['perl', '-edo "<root>/x"'], 'hooks[0].run[1]', 'code given to an interpreter names <root>'],
    [['perl', '-wedo "./x"'], 'hooks[0].run[1]', 'code loads a ./ or ../ path'],
    [['perl', '-lne', 'do "<root>/x"', '/etc/hostname'], 'hooks[0].run[2]', 'code given to an interpreter'],
    [['perl', '-wIlib', '/opt/x.pl'], 'hooks[0].run[1]', '<root>/lib is inside rootDir'],
    [['perl', '-pie', 's/a/b/', '/etc/x'], 'hooks[0].run[2]', 'is inside rootDir'],
    [['ruby', '-eload "<root>/x.rb"'], 'hooks[0].run[1]', 'code given to an interpreter names <root>'],
    [['ruby', '-ne', 'load "<root>/x.rb"', '/etc/x'], 'hooks[0].run[2]', 'code given to an interpreter'],
    [['ruby', '-r./x', '-e', 'p 1'], 'hooks[0].run[1]', '<root>/x is inside rootDir'],
    [['lua', '-edofile("<root>/x.lua")'], 'hooks[0].run[1]', 'code given to an interpreter names <root>'],
    [['lua', '-lmod', '/opt/x.lua'], 'hooks[0].run[1]', '<root>/mod is inside rootDir'],
    [['php', '-rinclude "<root>/x.php";'], 'hooks[0].run[1]', 'code given to an interpreter names <root>'],
    [
      ['php', '-B', 'include "<root>/x.php";', '-R', 'echo 1;'],
      'hooks[0].run[2]',
      'code given to an interpreter',
    ],
    [['php', '-F', 'x.php'], 'hooks[0].run[2]', '<root>/x.php is inside rootDir'],
  ])('refuses %j, naming %s', async (run, key, why) => {
    const message = await judge(run);
    expect(message).toContain(`${key}: `);
    expect(message).toContain(why);
  });

  it.each([
    [['perl', '-ne', 'print', '/etc/hostname']],
    [['perl', '-lne', 'print if /x/', '/etc/hostname']],
    [['perl', '-0777', '-pe', 's/a/b/', '/etc/x']],
    [['perl', '-l0pe', '1', '/etc/x']],
    [['perl', '-MJSON::PP', '-e', 'print 1']],
    [['python3', '-Sc', 'print(1)']],
    [['python3', '-Ic', 'import json']],
    [['python3', '-Wignore', '-c', 'print(1)']],
    [['ruby', '-ne', 'puts $_', '/etc/hostname']],
    [['ruby', '-rjson', '-e', 'p JSON']],
    [['php', '-r', 'echo 1;']],
  ])('accepts %j (code outside rootDir, data after it)', async (run) => {
    expect(await judge(run)).toBe('accepted');
  });
});

describe("code loaded from the working directory, rootDir, by perl's -Mlib, php and lua (review37)", () => {
  it.each([
    [['perl', '-Mlib=.', '-MFoo', '-e', 'Foo::x()'], 'hooks[0].run[1]', '<root> is inside rootDir'],
    [['perl', '-Mlib=/opt/lib,lib', '/opt/x.pl'], 'hooks[0].run[1]', '<root>/lib is inside rootDir'],
    [['perl', '-mlib=lib/perl5', '/opt/x.pl'], 'hooks[0].run[1]', '<root>/lib/perl5 is inside rootDir'],
    [['perl', '-Mlib "."', '-e', '1'], 'hooks[0].run[1]', 'code loads a ./ or ../ path'],
    [
      ['php', '-r', 'require "vendor/autoload.php"; App::run();'],
      'hooks[0].run[2]',
      'php code includes a relative',
    ],
    [['php', '-r', "include_once('lib/x.php');"], 'hooks[0].run[2]', 'php code includes a relative'],
    [['lua', '-e', 'require "mod"'], 'hooks[0].run[2]', 'lua code requires mod'],
    [['lua', '-e', 'local cjson = require("cjson")'], 'hooks[0].run[2]', 'lua code requires cjson'],
    [['lua', '-e', 'dofile("x.lua")'], 'hooks[0].run[2]', 'lua code loads a relative path'],
  ])('refuses %j, naming %s', async (run, key, why) => {
    const message = await judge(run);
    expect(message).toContain(`${key}: `);
    expect(message).toContain(why);
  });

  it.each([
    [['perl', '-Mlib=/opt/lib', '-MFoo', '-e', 'Foo::x()']],
    [['perl', '-Mstrict', '-MJSON::PP=decode_json', '-e', 'print 1']],
    [['php', '-r', 'require "/opt/app/vendor/autoload.php"; echo 1;']],
    [['lua', '-e', 'local s = require("string"); print(os.time())']],
    [['lua', '-e', 'dofile("/opt/x.lua")']],
  ])("accepts %j (absolute outside rootDir, or the language's own)", async (run) => {
    expect(await judge(run)).toBe('accepted');
  });
});

describe('su, and the shell runuser and su are given (review37)', () => {
  it.each([
    [['su', 'app', '-c', 'sh <root>/x.sh'], 'hooks[0].run[3]', 'code given to an interpreter names <root>'],
    [
      ['su', '-', 'app', '-c', '. <root>/env'],
      'hooks[0].run[4]',
      'code given to an interpreter names <root>',
    ],
    [['su', '-c', 'sh <root>/x.sh', 'app'], 'hooks[0].run[2]', 'code given to an interpreter names <root>'],
    [
      ['su', '--command=sh <root>/x.sh', 'app'],
      'hooks[0].run[1]',
      'code given to an interpreter names <root>',
    ],
    [['su', '-l', 'app', '<root>/x.sh'], 'hooks[0].run[3]', 'is inside rootDir'],
    [['timeout', '5', 'su', 'app', 'x.sh'], 'hooks[0].run[4]', 'is inside rootDir'],
    [['su', '-s', '<root>/sh', 'app'], 'hooks[0].run[2]', 'is inside rootDir'],
    [['runuser', '-s', '<root>/sh', 'app'], 'hooks[0].run[2]', 'is inside rootDir'],
    [['runuser', '--shell=<root>/sh', '-u', 'app', '/opt/x'], 'hooks[0].run[1]', 'is inside rootDir'],
    [['runuser', '-s', 'bin/sh', 'app'], 'hooks[0].run[2]', 'is inside rootDir'],
  ])('refuses %j, naming %s', async (run, key, why) => {
    const message = await judge(run);
    expect(message).toContain(`${key}: `);
    expect(message).toContain(why);
  });

  it.each([
    [['su', 'app', '-c', '/opt/x.sh']],
    [['su', '-s', '/bin/bash', 'app', '-c', 'echo hi']],
    [['su', '-', 'app', '/opt/x.sh']],
    [['runuser', '-s', '/bin/sh', '-u', 'app', '/opt/x']],
  ])('accepts %j (code and shells outside rootDir)', async (run) => {
    expect(await judge(run)).toBe('accepted');
  });
});

describe('nsenter and strace looked through as wrappers (review37)', () => {
  it.each([
    [
      ['nsenter', '-t', '1', '-m', '-u', '-i', '-n', '-p', 'sh', '<root>/x.sh'],
      'hooks[0].run[9]',
      'is inside rootDir',
    ],
    [['nsenter', '--target=1', '--mount', '--', 'python3', '-m', 'mod'], 'hooks[0].run[6]', 'python -m mod'],
    [
      ['nsenter', '-a', '-t1', 'bash', '-c', '. <root>/env'],
      'hooks[0].run[5]',
      'code given to an interpreter',
    ],
    [['strace', '-f', '-o', '/tmp/trace', 'sh', '<root>/x.sh'], 'hooks[0].run[5]', 'is inside rootDir'],
    [
      ['strace', '-e', 'trace=file', '--output=/tmp/t', 'node', 'x.js'],
      'hooks[0].run[5]',
      'is inside rootDir',
    ],
    [['strace', '-ff', 'etc/run.sh'], 'hooks[0].run[2]', 'is inside rootDir'],
  ])('refuses %j, naming %s', async (run, key, why) => {
    const message = await judge(run);
    expect(message).toContain(`${key}: `);
    expect(message).toContain(why);
  });

  it.each([
    [['nsenter', '-t', '1', '-m', 'sh', '/opt/x.sh']],
    [['strace', '-f', '-o', '/tmp/trace', '/usr/sbin/nginx', '-t']],
  ])('accepts %j (code outside rootDir)', async (run) => {
    expect(await judge(run)).toBe('accepted');
  });
});

describe("ruby's -r given apart, as -rNAME is (review37)", () => {
  it.each([
    [['ruby', '-r', './x', '-e', 'p 1'], 'hooks[0].run[2]', '<root>/x is inside rootDir'],
    [['ruby', '-r', 'lib/x', '/opt/x.rb'], 'hooks[0].run[2]', '<root>/lib/x is inside rootDir'],
  ])('refuses %j, naming %s', async (run, key, why) => {
    const message = await judge(run);
    expect(message).toContain(`${key}: `);
    expect(message).toContain(why);
  });

  it.each([[['ruby', '-r', 'json', '-e', 'p JSON']], [['ruby', '-r', 'yaml', '/opt/x.rb']]])(
    'accepts %j (a library looked up in the load path)',
    async (run) => {
      expect(await judge(run)).toBe('accepted');
    },
  );
});
