import type { DataSource, MigrationInterface } from 'typeorm';
import { quoteIdentifier } from '../sql/identifier';
import { createLedger, migrationLockKey } from './ledger';

/**
 * Applies the pending job-queue migrations at startup, each in its own transaction, under a
 * PostgreSQL advisory lock: replicas that start together wait for the first one and then
 * find nothing left to do. Each migration checks and records itself in `<schema>.migrations`
 * (see ledger.ts), so this agrees with a TypeORM runner given the same classes.
 * Returns the names of the migrations this call applied.
 */
export async function runJobQueueMigrations(
  dataSource: DataSource,
  schema: string,
  migrations: Array<new () => MigrationInterface>,
): Promise<string[]> {
  const s = quoteIdentifier(schema);
  const applied: string[] = [];
  const runner = dataSource.createQueryRunner();
  await runner.connect();
  try {
    await runner.query('select pg_advisory_lock(hashtext($1))', [migrationLockKey(schema)]);
    try {
      await createLedger(runner, schema);
      const done = new Set<string>(
        (await runner.query(`select name from ${s}.migrations`)).map((row: { name: string }) => row.name),
      );
      for (const Migration of migrations) {
        const migration = new Migration();
        const name = migration.name ?? Migration.name;
        if (done.has(name)) continue;
        await runner.startTransaction();
        try {
          await migration.up(runner);
          await runner.commitTransaction();
        } catch (error) {
          await runner.rollbackTransaction();
          throw error;
        }
        applied.push(name);
      }
    } finally {
      await runner.query('select pg_advisory_unlock(hashtext($1))', [migrationLockKey(schema)]);
    }
  } finally {
    await runner.release();
  }
  return applied;
}
