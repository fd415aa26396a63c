// Mutation scores per file and per folder from Stryker's results (test/README.md, "Mutation testing").
// Reads complete results (incremental files, reports/incremental/*.json) and, for files without one, the
// per-mutant events of a run still going (reports/events/*/). Usage: node test/mutation-scores.mjs [--survivors]
// [paths of incremental files or event directories…]
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';

const args = process.argv.slice(2);
const showSurvivors = args.includes('--survivors');
const given = args.filter((arg) => arg !== '--survivors');
const listed = (dir) => (existsSync(dir) ? readdirSync(dir).map((name) => path.join(dir, name)) : []);
const sources = given.length > 0 ? given : [...listed('reports/incremental'), ...listed('reports/events')];

/**
 * file → mutant key → mutant. Sources are read in order and a later result of the same mutant (same place,
 * mutator and replacement) replaces an earlier one: a run scoped to some lines (`--mutate file:10-20`) after a
 * whole-file run updates just those mutants.
 */
const results = new Map();
const fromEvents = new Set();
const keyOf = (mutant) => `${JSON.stringify(mutant.location)}:${mutant.mutatorName}:${mutant.replacement}`;
const add = (file, mutant) => {
  if (!results.has(file)) results.set(file, new Map());
  results.get(file).set(keyOf(mutant), mutant);
};
for (const source of sources) {
  if (statSync(source).isDirectory()) {
    for (const event of listed(source).filter((name) => name.endsWith('-onMutantTested.json'))) {
      const mutant = JSON.parse(readFileSync(event, 'utf8'));
      // Relative to its repository, wherever the run was (a clone, a sandbox).
      const file = mutant.fileName.slice(mutant.fileName.lastIndexOf('/src/') + 1);
      fromEvents.add(file);
      add(file, mutant);
    }
  } else {
    const report = JSON.parse(readFileSync(source, 'utf8'));
    for (const [file, result] of Object.entries(report.files))
      for (const mutant of result.mutants) add(file, mutant);
  }
}
const complete = new Map([...results].map(([file, byKey]) => [file, [...byKey.values()]]));

const DETECTED = new Set(['Killed', 'Timeout']);
const UNDETECTED = new Set(['Survived', 'NoCoverage']);
const folders = new Map();
/** Folder totals cover the files listed above only: a file never measured is not in them. */
const rows = [];
for (const [file, mutants] of [...complete].sort(([a], [b]) => a.localeCompare(b))) {
  const count = (status) => mutants.filter((mutant) => mutant.status === status).length;
  const detected = mutants.filter((mutant) => DETECTED.has(mutant.status)).length;
  const undetected = mutants.filter((mutant) => UNDETECTED.has(mutant.status)).length;
  const folder = path.dirname(file);
  const sum = folders.get(folder) ?? { detected: 0, undetected: 0 };
  folders.set(folder, { detected: sum.detected + detected, undetected: sum.undetected + undetected });
  const score =
    detected + undetected === 0 ? 'n/a' : `${((100 * detected) / (detected + undetected)).toFixed(1)} %`;
  rows.push(
    `${file.padEnd(34)} ${score.padStart(8)}  killed ${count('Killed')} timeout ${count('Timeout')} survived ${count('Survived')} no-coverage ${count('NoCoverage')} ignored ${count('Ignored')}${fromEvents.has(file) ? ' (events included: maybe a run still going)' : ''}`,
  );
  if (showSurvivors) {
    const lines = existsSync(file) ? readFileSync(file, 'utf8').split('\n') : [];
    for (const mutant of mutants.filter((m) => UNDETECTED.has(m.status))) {
      const { line } = mutant.location.start;
      rows.push(
        `    ${mutant.status} ${line}: ${mutant.mutatorName} → ${JSON.stringify(mutant.replacement)}   | ${(lines[line - 1] ?? '').trim().slice(0, 100)}`,
      );
    }
  }
}
console.log(rows.join('\n'));
for (const [folder, { detected, undetected }] of folders) {
  console.log(
    `${folder}/: ${((100 * detected) / Math.max(1, detected + undetected)).toFixed(1)} % (${detected} detected of ${detected + undetected})`,
  );
}
