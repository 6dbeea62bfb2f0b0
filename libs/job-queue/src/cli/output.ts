/**
 * How the bin writes: results to stdout (text for people, or one JSON document with --json),
 * notes and errors to stderr, one line each.
 */

export function printLine(text = ''): void {
  process.stdout.write(`${text}\n`);
}

/** One JSON document: Dates as ISO strings, bigints as strings. */
export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, (_key, v: unknown) => (typeof v === 'bigint' ? v.toString() : v), 2)}\n`);
}

/** A line on stderr: a note beside the result, or the error (`CODE: message`). */
export function printNote(text: string): void {
  process.stderr.write(`${text}\n`);
}

/** Rows under a header, columns padded to their widest cell; numbers (right-aligned) where `right` says. */
export function formatTable(header: string[], rows: string[][], right: boolean[] = []): string[] {
  const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => (row[column] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((cell, column) => (right[column] ? cell.padStart(widths[column]) : cell.padEnd(widths[column])))
      .join('  ')
      .trimEnd();
  return [line(header), ...rows.map(line)];
}

/** A duration in seconds for people: 42s, 4m 3s, 2h 5m, 3d 4h. Negative ones read "in …" where they are used. */
export function formatSeconds(seconds: number): string {
  const s = Math.round(Math.abs(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86_400)}d ${Math.floor((s % 86_400) / 3600)}h`;
}

/** A text cut to `max` characters on one line, for a table cell. */
export function truncate(text: string | null, max: number): string {
  if (text === null) return '';
  const flat = text.replace(/\s+/g, ' ');
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}
