// The reporter of test/cpu/vitest.cpu.config.ts: where the unit tier's CPU went, files by CPU, workers and main process.
import { readFileSync, rmSync } from 'node:fs';
import type { Reporter } from 'vitest/node';

/** One line of the setup file's output (test/cpu/cpu-per-file-setup.ts), in ms. */
interface FileCpu {
  user: number;
  sys: number;
  wall: number;
  pid: string;
  worker: number;
  file: string;
}

const seconds = (ms: number) => (ms / 1000).toFixed(2);

export default class CpuPerFileReporter implements Reporter {
  onTestRunEnd(): void {
    const out = process.env.CPU_PER_FILE_OUT;
    if (out === undefined) return;
    const files: FileCpu[] = [];
    for (const line of readFileSync(out, 'utf8').split('\n')) {
      const [user, sys, wall, pid, worker, file] = line.split('\t');
      if (file === undefined || pid === undefined) continue;
      files.push({
        user: Number(user),
        sys: Number(sys),
        wall: Number(wall),
        pid,
        worker: Number(worker),
        file,
      });
    }
    rmSync(out, { force: true });
    const workers = new Map<string, number>();
    for (const each of files) workers.set(each.pid, Math.max(workers.get(each.pid) ?? 0, each.worker));
    const inFiles = files.reduce((sum, each) => sum + each.user + each.sys, 0);
    const inWorkers = [...workers.values()].reduce((sum, each) => sum + each, 0);
    const main = process.cpuUsage();
    const top = Number(process.env.CPU_PER_FILE_TOP ?? 30);
    const lines = [
      '',
      `CPU of the test files: ${seconds(inFiles)} s in ${files.length} files; the ${workers.size} workers in all ` +
        `(their imports too): ${seconds(inWorkers)} s; this main process: ${seconds((main.user + main.system) / 1000)} s ` +
        '(child processes of tests are not counted: `time` the run for the whole)',
      'cpu s   user s  sys s   wall s  file',
      ...files
        .sort((a, b) => b.user + b.sys - (a.user + a.sys))
        .slice(0, top)
        .map((each) =>
          [each.user + each.sys, each.user, each.sys, each.wall]
            .map((ms) => seconds(ms).padEnd(7))
            .concat(each.file)
            .join(' '),
        ),
      '',
    ];
    process.stdout.write(lines.join('\n'));
  }
}
