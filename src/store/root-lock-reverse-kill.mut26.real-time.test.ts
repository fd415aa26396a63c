// rootDir's lock, the reverse upgrade (mut26): the legacy name's helper ends with its agent however the agent ends.
// Real time: a real agent stand-in SIGKILLed, and the wait (~2.4 s) for its helper to see stdin close and go. Its
// name is its own (this process's pid), not a rootDir's st_dev:st_ino, so ext4's inode reuse on the integration
// tier's temp dirs cannot make it meet another case's holder (vitest.config.ts LOCK_HOLDERS).
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { oldAgentMeets, PERL, parentOf, untilTable } from '../../test/helpers/legacy-lock-name.js';
import { LEGACY_HELPER_SCRIPT } from './lock.js';

/** Names of this process alone: another run of this file on the machine (abstract names are machine-wide) binds its own. */
const OWN = `mut26:${process.pid}`;

describe('the helper itself (legacyNameHelper)', () => {
  it('ends with its agent however the agent ends (SIGKILL): its stdin closed, the name free', async () => {
    const legacy = `\0config-agent-root-${OWN}:2`;
    // An agent stand-in that starts the helper as legacyNameHelper does (stdin a pipe it holds), then is killed.
    const agent = spawn(
      process.execPath,
      [
        '-e',
        `const { spawn } = require('node:child_process');
         const helper = spawn(${JSON.stringify(PERL)}, ['-e', ${JSON.stringify(LEGACY_HELPER_SCRIPT)}, '--', ${JSON.stringify(legacy.slice(1))}], { stdio: ['pipe', 'pipe', 'ignore'], env: {} });
         helper.stdin.write('{"pid":' + helper.pid + '}\\n');
         helper.stdout.once('data', (line) => process.stdout.write(helper.pid + ' ' + line));
         setInterval(() => {}, 1000);`,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    const said = await new Promise<string>((resolve) =>
      agent.stdout.once('data', (chunk: Buffer) => resolve(String(chunk))),
    );
    const [helperPid = '', word] = said.trim().split(' ');
    expect(word).toBe('bound');
    expect((await oldAgentMeets(legacy)).bind).toBe('in use');
    const gone = new Promise<void>((resolve) => agent.once('close', () => resolve()));
    agent.kill('SIGKILL');
    await gone;
    expect(await untilTable(legacy, false)).toBe(true);
    // Not left behind: the helper process ended too.
    for (let look = 0; look < 400 && (await parentOf(Number(helperPid))) !== undefined; look += 1)
      await new Promise((resolve) => setTimeout(resolve, 25));
    expect(await parentOf(Number(helperPid))).toBeUndefined();
    expect(await oldAgentMeets(legacy)).toStrictEqual({ bind: 'bound', answer: '' });
  });
});
