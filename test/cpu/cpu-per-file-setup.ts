// A setup file of test/cpu/vitest.cpu.config.ts: each test file's CPU (its worker's user + sys) to CPU_PER_FILE_OUT.
import { appendFileSync } from 'node:fs';
import { afterAll, beforeAll, expect } from 'vitest';

let atStart: NodeJS.CpuUsage | undefined;
let startedAt = 0;

beforeAll(() => {
  atStart = process.cpuUsage();
  startedAt = performance.now();
});

afterAll(() => {
  const out = process.env.CPU_PER_FILE_OUT;
  if (out === undefined || atStart === undefined) return;
  const spent = process.cpuUsage(atStart);
  const total = process.cpuUsage();
  const file = (expect.getState().testPath ?? '?').replace(`${process.cwd()}/`, '');
  // ms: the file's user, sys and wall; the worker's pid and its user + sys since it started (imports included).
  const fields = [spent.user / 1000, spent.system / 1000, performance.now() - startedAt];
  const worker = (total.user + total.system) / 1000;
  appendFileSync(
    out,
    `${fields.map((ms) => ms.toFixed(0)).join('\t')}\t${process.pid}\t${worker.toFixed(0)}\t${file}\n`,
  );
});
