import type { PoolConfig } from 'pg';
import { DataSource, type MigrationInterface } from 'typeorm';
import { appliedMigrations, runJobQueueMigrations } from './run-migrations';

/**
 * The migrations at startup with `transactionPooling`, where a session advisory lock is
 * unsafe (it stays with whichever server connection took it, and the unlock may reach
 * another) and `create index concurrently` cannot keep its steps on one session:
 * - with listenUrl (`direct`, its connection options): on a DataSource of their own that
 *   reaches PostgreSQL directly, opened only when a migration is pending, exactly as without
 *   a pooler (session lock, indexes built concurrently);
 * - without: through the pooler, each migration in one transaction under the
 *   transaction-scoped migration lock (runJobQueueMigrations' `locks: 'transaction'`); indexes
 *   are then built plainly, blocking writes to their table while they build.
 * Replicas migrating either way at once serialise on the same lock key: a session lock and a
 * transaction-scoped one on one key exclude each other.
 */
export async function migrateBesidePooler(
  pooled: DataSource,
  schema: string,
  migrations: Array<new () => MigrationInterface>,
  direct: PoolConfig | undefined,
): Promise<string[]> {
  if (!direct) return runJobQueueMigrations(pooled, schema, migrations, { locks: 'transaction' });
  if (!(await anyPending(pooled, schema, migrations))) return [];
  const source = new DataSource({
    type: 'postgres',
    // pg takes these as they are (they may hold a password function), over TypeORM's own
    extra: { ...direct, max: 2, application_name: 'nestjs-job-queue migrations' },
    entities: [],
    synchronize: false,
    migrationsRun: false,
    logging: false,
  });
  await source.initialize();
  try {
    return await runJobQueueMigrations(source, schema, migrations);
  } finally {
    await source.destroy();
  }
}

async function anyPending(source: DataSource, schema: string, migrations: Array<new () => MigrationInterface>): Promise<boolean> {
  const applied = await appliedMigrations(source, schema);
  return migrations.some((Migration) => {
    const migration = new Migration();
    return !applied.has(migration.name ?? Migration.name);
  });
}
