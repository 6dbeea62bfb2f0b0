/** How the report's tables look: aligned columns, cells of medians over the rounds with their min–max. */

/** jobs/s, ms, %, MiB: how a cell's numbers are written. */
export type Kind = 'throughput' | 'latency' | 'percent' | 'mebibytes';

/** The first column left-aligned, the others right-aligned. */
export function printGrid(header: string[], cells: string[][]): void {
  const widths = header.map((title, i) => Math.max(title.length, ...cells.map((c) => c[i].length)));
  const line = (values: string[]) => values.map((v, i) => (i === 0 ? v.padEnd(widths[i]) : v.padStart(widths[i]))).join(' | ');
  console.log(line(header));
  console.log(widths.map((w) => '-'.repeat(w)).join('-|-'));
  for (const c of cells) console.log(line(c));
}

/** The median, and the min–max when there was more than one round. */
export function cell(samples: number[], kind: Kind): string {
  if (samples.length === 0) return '-';
  const unit = kind === 'percent' ? ' %' : '';
  const median = format(medianOf(samples), kind) + unit;
  if (samples.length === 1) return median;
  return `${median} (${format(Math.min(...samples), kind)}–${format(Math.max(...samples), kind)})`;
}

/** What `pick` finds in each round, rounds without it left out. */
export function values<R>(rounds: R[], pick: (round: R) => number | undefined): number[] {
  return rounds.map(pick).filter((value): value is number => value !== undefined);
}

/** 100 × a / b of each round that has both, in percent. */
export function perRound<R>(rounds: R[], a: (round: R) => number | undefined, b: (round: R) => number | undefined): number[] {
  return values(rounds, (r) => {
    const [x, y] = [a(r), b(r)];
    return x === undefined || y === undefined ? undefined : (100 * x) / y;
  });
}

export function medianOf(samples: number[]): number {
  const sorted = [...samples].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}

function format(value: number, kind: Kind): string {
  if (kind === 'throughput' || kind === 'percent') return Math.round(value).toLocaleString('en-US');
  if (kind === 'mebibytes') return value.toFixed(1);
  return value.toFixed(value < 10 ? 2 : 1);
}
