/**
 * What the migrations' statements look like as plain SQL: which of them are reads (the
 * ledger's checks, the advisory lock), and a statement with its parameters written in and a
 * `;` at its end. Shared by the recording runner (export-sql,
 * migrate --dry-run --show-sql) and the live recording of `migrate --show-sql`.
 */

/** One statement a migration ran (or would run). */
export interface RecordedStatement {
  sql: string;
  parameters: unknown[];
}

/**
 * A read: a `select` (the ledger's `select 1 … where name = $1`, a look at pg_index, the
 * advisory lock and its release, pg_backend_pid()). Not part of what a migration changes, so
 * left out of the SQL shown; everything else (DDL, the ledger's insert, `set lock_timeout`) is kept.
 */
export function isRead(sql: string): boolean {
  return /^\s*select\b/i.test(sql);
}

/** The ledger's record of a migration (migrations/ledger.ts applyIfNew): its name, or undefined for any other statement. */
export function ledgerInsertOf(statement: RecordedStatement): string | undefined {
  if (!/^\s*insert\s+into\s+\S+\.migrations\s*\(timestamp,\s*name\)/i.test(statement.sql)) return undefined;
  const name = statement.parameters[1];
  return typeof name === 'string' ? name : undefined;
}

/** The statement as a line of a script: $n written in as literals, `;` at the end. */
export function toScript({ sql, parameters }: RecordedStatement): string {
  const inlined = parameters.length === 0 ? sql : sql.replace(/\$(\d+)\b/g, (whole, n: string) => (Number(n) <= parameters.length ? literal(parameters[Number(n) - 1]) : whole));
  return `${trimmed(inlined)};`;
}

/** A value as an SQL literal (standard_conforming_strings on, PostgreSQL's default). */
export function literal(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'number' || typeof value === 'bigint') return String(value);
  if (typeof value === 'boolean') return value ? 'true' : 'false';
  const text = value instanceof Date ? value.toISOString() : typeof value === 'string' ? value : JSON.stringify(value);
  return `'${text.replace(/'/g, "''")}'`;
}

/**
 * The statement as it was sent, less the blank line and indentation before its first word and
 * the white space after its last: the lines between are kept as they are, since a function's
 * body is stored as written (its text, prosrc, then matches what the module's runner creates).
 */
function trimmed(sql: string): string {
  return sql.replace(/^\s+/, '').trimEnd();
}
