// Plots first-sync time against N (100, 1,000, 10,000) for the agent, both floor loops and curl + jq, as SVG.
// `node dist-bench/bench/plot.js [--reps=3] [--data=<json>] [--out=<svg>]` measures, saves the medians to
// --data and draws --out; `--from=<json>` only redraws from saved medians.
import { readFile, writeFile } from 'node:fs/promises';
import { type Contender, firstSync, medianMs } from './lib/first-sync.js';

export interface SweepPoint {
  contender: Contender;
  instances: number;
  medianMs: number;
  reps: number;
}

const LABELS: Record<Contender, string> = {
  agent: 'config-agent --once',
  floor1: 'floor: sequential',
  floor16: 'floor: 16 in flight',
  'curl-jq': 'curl + jq script',
};
const COLOURS: Record<Contender, string> = {
  agent: '#d62728',
  floor1: '#1f77b4',
  floor16: '#2ca02c',
  'curl-jq': '#7f7f7f',
};

/** A log-log line chart; pure, so it is the same drawing for the same points. */
export function renderSvg(points: readonly SweepPoint[], title: string): string {
  const width = 640;
  const height = 420;
  const margin = { left: 70, right: 180, top: 40, bottom: 50 };
  const xs = [...new Set(points.map((p) => p.instances))].sort((a, b) => a - b);
  const seconds = points.map((p) => p.medianMs / 1000).filter((s) => s > 0 && Number.isFinite(s));
  const yMin = 10 ** Math.floor(Math.log10(Math.min(...seconds)));
  const yMax = 10 ** Math.ceil(Math.log10(Math.max(...seconds)));
  const xMin = Math.min(...xs);
  const xMax = Math.max(...xs);
  const plotW = width - margin.left - margin.right;
  const plotH = height - margin.top - margin.bottom;
  const x = (n: number) =>
    margin.left +
    (xMax === xMin
      ? 0
      : ((Math.log10(n) - Math.log10(xMin)) / (Math.log10(xMax) - Math.log10(xMin))) * plotW);
  const y = (s: number) =>
    margin.top + plotH - ((Math.log10(s) - Math.log10(yMin)) / (Math.log10(yMax) - Math.log10(yMin))) * plotH;
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
    `<title>${escapeXml(title)}</title>`,
    `<rect width="${width}" height="${height}" fill="white"/>`,
    `<text x="${margin.left}" y="22" font-size="14" font-weight="bold">${escapeXml(title)}</text>`,
  ];
  for (let decade = yMin; decade <= yMax; decade *= 10) {
    const py = y(decade).toFixed(1);
    parts.push(
      `<line x1="${margin.left}" x2="${margin.left + plotW}" y1="${py}" y2="${py}" stroke="#ddd"/>`,
      `<text x="${margin.left - 8}" y="${py}" text-anchor="end" dominant-baseline="middle">${formatSeconds(decade)}</text>`,
    );
  }
  for (const n of xs) {
    const px = x(n).toFixed(1);
    parts.push(
      `<line x1="${px}" x2="${px}" y1="${margin.top}" y2="${margin.top + plotH}" stroke="#eee"/>`,
      `<text x="${px}" y="${margin.top + plotH + 18}" text-anchor="middle">${n.toLocaleString('en-US')}</text>`,
    );
  }
  parts.push(
    `<text x="${margin.left + plotW / 2}" y="${height - 10}" text-anchor="middle">instances (~1 KiB each), log scale</text>`,
    `<text transform="translate(16 ${margin.top + plotH / 2}) rotate(-90)" text-anchor="middle">first sync, seconds (log scale)</text>`,
    `<rect x="${margin.left}" y="${margin.top}" width="${plotW}" height="${plotH}" fill="none" stroke="#333"/>`,
  );
  const contenders = (Object.keys(LABELS) as Contender[]).filter((c) =>
    points.some((p) => p.contender === c),
  );
  contenders.forEach((contender, index) => {
    const series = points
      .filter((p) => p.contender === contender && p.medianMs > 0 && Number.isFinite(p.medianMs))
      .sort((a, b) => a.instances - b.instances);
    const colour = COLOURS[contender];
    const path = series
      .map((p) => `${x(p.instances).toFixed(1)},${y(p.medianMs / 1000).toFixed(1)}`)
      .join(' ');
    parts.push(`<polyline points="${path}" fill="none" stroke="${colour}" stroke-width="2"/>`);
    for (const p of series) {
      parts.push(
        `<circle cx="${x(p.instances).toFixed(1)}" cy="${y(p.medianMs / 1000).toFixed(1)}" r="3.5" fill="${colour}"><title>${escapeXml(LABELS[contender])}: ${p.instances} → ${(p.medianMs / 1000).toFixed(2)} s (median of ${p.reps})</title></circle>`,
      );
    }
    const ly = margin.top + 10 + index * 20;
    const lx = margin.left + plotW + 14;
    parts.push(
      `<line x1="${lx}" x2="${lx + 20}" y1="${ly}" y2="${ly}" stroke="${colour}" stroke-width="2"/>`,
      `<text x="${lx + 26}" y="${ly}" dominant-baseline="middle">${escapeXml(LABELS[contender])}</text>`,
    );
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}

function formatSeconds(value: number): string {
  return value >= 1 ? `${value} s` : `${value * 1000} ms`;
}

function escapeXml(text: string): string {
  return text.replaceAll('&', '&amp;').replaceAll('<', '&lt;').replaceAll('>', '&gt;');
}

async function main(): Promise<void> {
  const option = (name: string) =>
    process.argv.find((arg) => arg.startsWith(`--${name}=`))?.slice(name.length + 3);
  const out = option('out') ?? 'docs/performance-first-sync.svg';
  const from = option('from');
  let points: SweepPoint[];
  if (from !== undefined) {
    points = JSON.parse(await readFile(from, 'utf8')) as SweepPoint[];
  } else {
    const reps = Number(option('reps') ?? 3);
    const sizes = (option('sizes') ?? '100,1000,10000').split(',').map(Number);
    points = [];
    for (const instances of sizes) {
      process.stderr.write(`plot: first sync of ${instances} (×${reps})\n`);
      const { samples } = await firstSync({
        instances,
        reps,
        contenders: ['agent', 'floor1', 'floor16', 'curl-jq'],
        log: (line) => process.stderr.write(`${line}\n`),
      });
      for (const [contender, sample] of samples) {
        points.push({ contender, instances, medianMs: medianMs(sample), reps });
      }
    }
    await writeFile(
      option('data') ?? 'bench/results/first-sync.json',
      `${JSON.stringify(points, null, 2)}\n`,
    );
  }
  await writeFile(out, renderSvg(points, 'First sync: config-agent vs the disk floor and curl + jq'));
  process.stderr.write(`plot: wrote ${out}\n`);
}

if (process.argv[1]?.endsWith('plot.js')) await main();
