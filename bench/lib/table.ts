// The bench's one table: each measured value or ratio, its target, and whether the target is met.

export interface Row {
  id: string;
  label: string;
  value: number;
  unit: string;
  /** A ratio or count with a target: at most `target` (kind max, the default) or at least (kind min). */
  target?: number;
  kind?: 'max' | 'min';
}

export function isMet(row: Row): boolean | undefined {
  if (row.target === undefined || !Number.isFinite(row.value))
    return row.target === undefined ? undefined : false;
  return row.kind === 'min' ? row.value >= row.target : row.value <= row.target;
}

export function formatValue(value: number): string {
  if (!Number.isFinite(value)) return String(value);
  if (Number.isInteger(value)) return String(value);
  return Math.abs(value) >= 100 ? value.toFixed(0) : value.toFixed(2);
}

export function renderTable(rows: readonly Row[]): string {
  const cells = rows.map((row) => {
    const met = isMet(row);
    const target =
      row.target === undefined ? '' : `${row.kind === 'min' ? '≥' : '≤'} ${formatValue(row.target)}`;
    return [row.label, formatValue(row.value), target, met === undefined ? '' : met ? 'met' : 'NOT MET'];
  });
  const header = ['measure', 'value', 'target', ''];
  const widths = header.map((title, i) => Math.max(title.length, ...cells.map((cell) => cell[i]!.length)));
  const line = (cell: string[]) =>
    cell
      .map((text, i) => (i === 1 ? text.padStart(widths[i]!) : text.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...cells.map(line)].join('\n');
}
