/** A paused task ('*': every task) or named queue, as listPaused() returns it. */
export interface PausedEntry {
  kind: 'task' | 'queue';
  name: string;
  /** When it was paused. */
  since: Date;
  /** For a task held by `ctx.rateLimited()`: when the hold ends. Absent for a pause until resumed. */
  until?: Date;
}

/** A row of sql listPaused. */
export interface PausedRow {
  kind: 'task' | 'queue';
  name: string;
  paused_at: Date;
  until: Date | null;
  /** How far away `until` is, by the server's clock. */
  until_ms: number | null;
}

export const toPausedEntry = (row: PausedRow): PausedEntry =>
  row.until === null ? { kind: row.kind, name: row.name, since: row.paused_at } : { kind: row.kind, name: row.name, since: row.paused_at, until: row.until };
