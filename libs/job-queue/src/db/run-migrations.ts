import type { DataSource, MigrationInterface, QueryRunner } from 'typeorm';
import { quoteIdentifier } from '../sql/identifier';
import { migrationLockKey, waitForLock, type JobQueueMigration } from '#migrations';

/**
 * Applies the pending job-queue migrations at startup, oldest first, each in its own
 * transaction (or in none, for one that builds indexes concurrently). Each migration takes
 * the schema's migration lock and checks `<schema>.migrations` itself (see ledger.ts), so
 * replicas that start together wait for the first one and then find nothing left to do,
 * and this agrees with a TypeORM runner given the same classes. No lock is held across
 * migrations: a runner that waits inside its transaction (TypeORM's) may go between two.
 * Returns the names of the migrations that were pending when it began.
 *
 * `locks: 'transaction'` (through a transaction-mode pooler, where a session lock would stay
 * on whichever backend took it): every migration runs in one transaction, as TypeORM's runner
 * runs them, under the transaction-scoped lock that `applyOnce` takes inside it; a migration
 * that builds indexes then builds them plainly (writes to the table wait meanwhile), since
 * `create index concurrently` cannot run in a transaction.
 */
export async function runJobQueueMigrations(
  dataSource: DataSource,
  schema: string,
  migrations: Array<new () => MigrationInterface>,
  { locks = 'session' }: { locks?: 'session' | 'transaction' } = {},
): Promise<string[]> {
  const pending: string[] = [];
  const runner = dataSource.createQueryRunner();
  await runner.connect();
  try {
    const done = await appliedMigrations(runner, schema);
    for (const Migration of migrations) {
      const migration: JobQueueMigration = new Migration();
      const name = migration.name ?? Migration.name;
      if (done.has(name)) continue;
      pending.push(name);
      if (locks === 'transaction') {
        await inTransaction(runner, () => migration.up(runner));
        continue;
      }
      if (migration.outsideTransaction) {
        await migration.up(runner);
        continue;
      }
      // Wait for the lock before the transaction, not inside it: a transaction waiting
      // holds a snapshot, which another runner's concurrent index build would wait for.
      await waitForLock(runner, 'pg_try_advisory_lock', schema);
      try {
        await inTransaction(runner, () => migration.up(runner));
      } finally {
        await runner.query('select pg_advisory_unlock(hashtext($1))', [migrationLockKey(schema)]);
      }
    }
  } finally {
    await runner.release();
  }
  return pending;
}

async function inTransaction(runner: QueryRunner, step: () => Promise<void>): Promise<void> {
  await runner.startTransaction();
  try {
    await step();
    await runner.commitTransaction();
  } catch (error) {
    await runner.rollbackTransaction();
    throw error;
  }
}

/** The names in `<schema>.migrations` (the ledger; empty when it does not exist yet). Also the CLI's view of what is applied. */
export async function appliedMigrations(runner: { query(sql: string, values?: unknown[]): Promise<Array<{ name: string }>> }, schema: string): Promise<Set<string>> {
  const [{ ledger }] = (await runner.query(`select to_regclass($1) is not null as ledger`, [`${quoteIdentifier(schema)}.migrations`])) as unknown as Array<{ ledger: boolean }>;
  if (!ledger) return new Set();
  return new Set((await runner.query(`select name from ${quoteIdentifier(schema)}.migrations`)).map((row) => row.name));
}
