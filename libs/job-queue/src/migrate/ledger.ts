import type { QueryRunner } from 'typeorm';
import { quoteIdentifier } from '../sql/identifier';

/**
 * The one record of which job-queue migrations a schema has: `<schema>.migrations`.
 *
 * A team may run the migration classes through its own DataSource (TypeORM's runner, the
 * CLI, `migrationsRun` in TypeORM's options), and the module may run them at startup, in
 * either order or at once. TypeORM's ledger knows only what TypeORM ran, so each class
 * checks and writes this ledger itself: whoever runs it first applies it, and every later
 * run, by either runner, finds it applied and does nothing.
 */
export async function applyOnce(q: QueryRunner, schema: string, name: string, apply: () => Promise<void>): Promise<boolean> {
  // A runner that calls up() outside a transaction (TypeORM's migrationsTransactionMode
  // 'none') gets one here: the lock, the check, the change and its record hold together.
  const own = !q.isTransactionActive;
  if (own) await q.startTransaction();
  try {
    const s = quoteIdentifier(schema);
    // Held to the end of the transaction: two runners serialise here.
    await q.query('select pg_advisory_xact_lock(hashtext($1))', [migrationLockKey(schema)]);
    await createLedger(q, schema);
    const found = await q.query(`select 1 from ${s}.migrations where name = $1`, [name]);
    const applied = found.length === 0;
    if (applied) {
      await apply();
      await q.query(`insert into ${s}.migrations (timestamp, name) values ($1, $2)`, [Number(name.slice(-13)), name]);
    }
    if (own) await q.commitTransaction();
    return applied;
  } catch (error) {
    if (own) await q.rollbackTransaction();
    throw error;
  }
}

/** For a migration's down(): forgets it was applied. */
export async function forget(q: QueryRunner, schema: string, name: string): Promise<void> {
  await q.query(`delete from ${quoteIdentifier(schema)}.migrations where name = $1`, [name]);
}

export async function createLedger(q: Pick<QueryRunner, 'query'>, schema: string): Promise<void> {
  const s = quoteIdentifier(schema);
  await q.query(`create schema if not exists ${s}`);
  await q.query(`
    create table if not exists ${s}.migrations (
      id serial primary key,
      timestamp bigint not null,
      name text not null unique,
      applied_at timestamptz not null default now()
    )`);
}

export function migrationLockKey(schema: string): string {
  return `nestjs-job-queue:migrate:${schema}`;
}
