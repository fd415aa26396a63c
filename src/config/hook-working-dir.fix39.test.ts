// A hook whose interpreter loads code from its working directory, rootDir (python3 -m, node -e "require('./x')"), is refused.
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { useHookJudgeWorld } from '../../test/helpers/hook-judge.js';

const world = useHookJudgeWorld('fix39');
const judge = world.judge;

describe('interpreters loading code from their working directory, rootDir (fix39)', () => {
  it.each([
    [['python3', '-m', 'mod'], 'hooks[0].run[2]', 'python -m mod'],
    [['python3', '-u', '-mhttp.server'], 'hooks[0].run[2]', 'python -m http.server'],
    [['timeout', '5', 'python3', '-Bm', 'pkg.tool', '--flag'], 'hooks[0].run[4]', 'python -m pkg.tool'],
    [['python3', '-c', 'import json; print(1)'], 'hooks[0].run[2]', 'python -c code that imports'],
    [['python3', '-c', '__import__("x").run()'], 'hooks[0].run[2]', 'python -c code that imports'],
    [['node', '-e', "require('./x')"], 'hooks[0].run[2]', 'node code loads ./x from'],
    [['node', '--eval', 'import("../y.mjs")'], 'hooks[0].run[2]', 'node code loads ../y.mjs from'],
    [
      ['node', '-p', 'require("left-pad")(1, 2)'],
      'hooks[0].run[2]',
      "left-pad, looked up in its working directory's",
    ],
    [
      ['node', '--input-type=module', '-e', 'import x from "./x.mjs"'],
      'hooks[0].run[3]',
      'node code loads ./x.mjs',
    ],
    [['node', '--require', './x.js', '/opt/app.js'], 'hooks[0].run[2]', 'is inside rootDir'],
    [['perl', '-I.', '/opt/x.pl'], 'hooks[0].run[1]', 'is inside rootDir'],
    [['perl', '-I', 'lib', '-MMod', '-e', 'Mod::run()'], 'hooks[0].run[2]', 'is inside rootDir'],
    [['perl', '-e', 'require "./x.pl"'], 'hooks[0].run[2]', 'code loads a ./ or ../ path'],
    [['perl', '-e', "use lib '.'; use Mod;"], 'hooks[0].run[2]', 'code loads a ./ or ../ path'],
    [['ruby', '-e', "load '../x.rb'"], 'hooks[0].run[2]', 'code loads a ./ or ../ path'],
    [['ruby', '-I.', '-e', 'require "x"'], 'hooks[0].run[1]', 'is inside rootDir'],
  ])('refuses %j, naming %s', async (run, key, why) => {
    const message = await judge(run);
    expect(message).toContain(`${key}: `);
    expect(message).toContain(why);
    expect(message).toContain('rootDir <root>');
  });

  it.each([
    [['python3', '-I', '-m', 'mod']],
    [['python3', '-P', '-m', 'http.server']],
    [['python3', '-IBm', 'mod']],
    [['python3', '-I', '-c', 'import json']],
    [['python3', '-c', 'print(1)']],
    [['python3', '/opt/x.py', '-m', 'mod']],
    [['node', '-e', "require('node:fs').readFileSync('/etc/hostname')"]],
    [['node', '-e', "require('fs'); import('child_process')"]],
    [['node', '-e', "require('/opt/lib/x.js')"]],
    [['perl', '-I/opt/lib', '-MMod', '-e', 'Mod::run()']],
    [['perl', '-e', 'require "/opt/x.pl"; do "/opt/y.pl"']],
    [['perl', '-e', 'print "./x\\n"']],
  ])('accepts %j (isolated, builtin or absolute outside rootDir)', async (run) => {
    expect(await judge(run)).toBe('accepted');
  });
});
