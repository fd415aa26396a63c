// The old agent's side of rootDir's unpadded lock name (mut26): perl binds or asks it, /proc/net/unix shows it.
import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';

export const PERL = '/usr/bin/perl';

/**
 * An agent before lock24 on Node 24 as it meets rootDir's lock: it binds the unpadded name at its own length (here
 * by perl, which this Node cannot do), and when that name is in use asks its holder. 'bound': it does not see the
 * holder (and lets the name go at once).
 */
export async function oldAgentMeets(legacy: string): Promise<{ bind: string; answer: string }> {
  const script = `use Socket; $| = 1; my $addr = pack_sockaddr_un("\\0" . $ARGV[0]);
    socket(my $s, AF_UNIX, SOCK_STREAM, 0) or die;
    if (bind($s, $addr)) { print "bound\\n"; exit 0 }
    $!{EADDRINUSE} or do { print "error $!\\n"; exit 0 };
    socket(my $c, AF_UNIX, SOCK_STREAM, 0) or die;
    connect($c, $addr) or do { print "in use\\nrefused\\n"; exit 0 };
    local $/; my $answer = <$c>; print "in use\\n", $answer;`;
  const child = spawn(PERL, ['-e', script, '--', legacy.slice(1)], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => {
    out += chunk.toString('utf8');
  });
  await new Promise<void>((resolve, reject) => {
    child.once('error', reject);
    child.once('close', () => resolve());
  });
  const [bind = '', ...rest] = out.split('\n');
  return { bind, answer: rest.join('\n') };
}

/** Whether /proc/net/unix shows a socket bound to exactly `legacy` (no padding). */
export async function tableHasExactly(legacy: string): Promise<boolean> {
  const shown = `@${legacy.slice(1)}`;
  const table = await readFile('/proc/net/unix', 'utf8');
  return table.split('\n').some((line) => line.trim().split(/\s+/)[7] === shown);
}

/** Waits (a bounded number of looks) until /proc/net/unix shows `legacy` bound or not, as `held` says. */
export async function untilTable(legacy: string, held: boolean): Promise<boolean> {
  for (let look = 0; look < 400; look += 1) {
    if ((await tableHasExactly(legacy)) === held) return true;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  return false;
}

/** The parent pid of `pid` (/proc/<pid>/status), undefined once it is gone. */
export async function parentOf(pid: number): Promise<number | undefined> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => undefined);
  const match = status?.match(/^PPid:\s+(\d+)$/m);
  return match?.[1] === undefined ? undefined : Number(match[1]);
}
