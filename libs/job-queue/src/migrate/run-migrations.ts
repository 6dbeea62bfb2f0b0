import type { DataSource, MigrationInterface } from 'typeorm';
import { quoteIdentifier } from '../sql/identifier';

/**
 * Applies the pending job-queue migrations, each in its own transaction, under a
 * PostgreSQL advisory lock: replicas that start together wait for the first one and
 * then find nothing left to do. The record of applied migrations lives in
 * `<schema>.migrations`, apart from the app's own migrations table.
 */
export async function runJobQueueMigrations(
  dataSource: DataSource,
  schema: string,
  migrations: Array<new () => MigrationInterface>,
): Promise<string[]> {
  const s = quoteIdentifier(schema);
  const lockKey = `nestjs-job-queue:migrate:${schema}`;
  const applied: string[] = [];
  const runner = dataSource.createQueryRunner();
  await runner.connect();
  try {
    await runner.query('select pg_advisory_lock(hashtext($1))', [lockKey]);
    try {
      await runner.query(`create schema if not exists ${s}`);
      await runner.query(`
        create table if not exists ${s}.migrations (
          id serial primary key,
          timestamp bigint not null,
          name text not null unique,
          applied_at timestamptz not null default now()
        )`);
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
          await runner.query(`insert into ${s}.migrations (timestamp, name) values ($1, $2)`, [
            Number(name.slice(-13)),
            name,
          ]);
          await runner.commitTransaction();
        } catch (error) {
          await runner.rollbackTransaction();
          throw error;
        }
        applied.push(name);
      }
    } finally {
      await runner.query('select pg_advisory_unlock(hashtext($1))', [lockKey]);
    }
  } finally {
    await runner.release();
  }
  return applied;
}
