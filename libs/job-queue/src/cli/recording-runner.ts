import type { MigrationInterface, QueryRunner } from 'typeorm';
import type { JobQueueMigration } from '#migrations';
import { isRead, type RecordedStatement } from './recorded-sql';

/**
 * A QueryRunner that runs nothing: it records what a migration's up() sends, and answers its
 * reads as an empty schema would (the ledger has no row, no index is left invalid, the
 * advisory lock is free). The migrations use only query(), the transaction calls,
 * isTransactionActive and dataSource.query (the index-build watchdog) of their runner, so
 * this is all of it they see. For `export-sql` and `migrate --dry-run --show-sql`.
 */
export class RecordingQueryRunner {
  readonly statements: RecordedStatement[] = [];
  /** What the watchdog of a concurrent index build polls: nothing to cancel here. */
  readonly dataSource = { query: async () => [] };

  constructor(public isTransactionActive: boolean) {}

  async query(sql: string, parameters: unknown[] = []): Promise<unknown[]> {
    this.statements.push({ sql, parameters });
    if (!isRead(sql)) return [];
    if (/pg_try_advisory/i.test(sql)) return [{ locked: true }];
    if (/pg_backend_pid\(\)/i.test(sql)) return [{ pid: 0 }];
    return [];
  }

  async startTransaction(): Promise<void> {
    this.isTransactionActive = true;
  }

  async commitTransaction(): Promise<void> {
    this.isTransactionActive = false;
  }

  async rollbackTransaction(): Promise<void> {
    this.isTransactionActive = false;
  }
}

/**
 * The statements `Migration` sends on an empty schema, reads included. `inTransaction`: as
 * the migration runs inside a transaction (TypeORM's default runner, or a plain SQL script),
 * indexes built plainly; otherwise as the module's runner calls a migration marked
 * `outsideTransaction`, indexes built concurrently, each step on its own.
 */
export async function recordMigration(Migration: new () => MigrationInterface, { inTransaction }: { inTransaction: boolean }): Promise<RecordedStatement[]> {
  const runner = new RecordingQueryRunner(inTransaction);
  await new Migration().up(runner as unknown as QueryRunner);
  return runner.statements;
}

/** Whether the module's runner (db/run-migrations.ts) calls this migration outside a transaction. */
export function runsOutsideTransaction(Migration: new () => MigrationInterface): boolean {
  return (new Migration() as JobQueueMigration).outsideTransaction === true;
}

/** Makes a live QueryRunner tell `onStatement` of each statement before it runs: `migrate --show-sql`, and what each migration did. */
export function recordingQueries(runner: QueryRunner, onStatement: (statement: RecordedStatement) => void): QueryRunner {
  const query = runner.query.bind(runner) as (sql: string, parameters?: unknown[], structured?: boolean) => Promise<unknown>;
  runner.query = ((sql: string, parameters?: unknown[], structured?: boolean) => {
    onStatement({ sql, parameters: parameters ?? [] });
    return query(sql, parameters, structured);
  }) as QueryRunner['query'];
  return runner;
}
