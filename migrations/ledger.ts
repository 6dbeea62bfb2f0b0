import type { MigrationInterface, QueryRunner } from 'typeorm';
import { quoteIdentifier } from './names';

/**
 * A job-queue migration. One that builds indexes on the jobs table says so with
 * `outsideTransaction`: our runner then calls it outside a transaction, so that it can build
 * them `concurrently`, without blocking adds and claims. A TypeORM runner that calls it
 * inside one (its default mode) gets plain index builds instead, which block writes to the
 * table while they run (see the README). Such a migration must be safe to run again after a
 * crash halfway: every step idempotent.
 */
export interface JobQueueMigration extends MigrationInterface {
  readonly outsideTransaction?: boolean;
}

/** What a migration's steps get: whether they may build indexes concurrently. */
export interface MigrationContext {
  concurrently: boolean;
}

/**
 * The one record of which job-queue migrations a schema has: `<schema>.migrations`.
 *
 * A team may run the migration classes through its own DataSource (TypeORM's runner, the
 * CLI, `migrationsRun` in TypeORM's options), and the module may run them at startup, in
 * either order or at once. TypeORM's ledger knows only what TypeORM ran, so each class
 * checks and writes this ledger itself: whoever runs it first applies it, and every later
 * run, by either runner, finds it applied and does nothing.
 */
export async function applyOnce(
  q: QueryRunner,
  schema: string,
  name: string,
  apply: (context: MigrationContext) => Promise<void>,
  { outsideTransaction = false } = {},
): Promise<boolean> {
  if (outsideTransaction && !q.isTransactionActive) return applyOutsideTransaction(q, schema, name, apply);
  // A runner that calls up() outside a transaction (TypeORM's migrationsTransactionMode
  // 'none') gets one here: the lock, the check, the change and its record hold together.
  const own = !q.isTransactionActive;
  if (own) await q.startTransaction();
  try {
    // Held to the end of the transaction: two runners serialise here.
    await waitForLock(q, 'pg_try_advisory_xact_lock', schema);
    const applied = await applyIfNew(q, schema, name, () => apply({ concurrently: false }));
    if (own) await q.commitTransaction();
    return applied;
  } catch (error) {
    if (own) await q.rollbackTransaction();
    throw error;
  }
}

/**
 * How long a step of a migration outside a transaction may wait for a table lock (PostgreSQL's
 * lock_timeout) before the migration steps aside and tries again: a step that queues for the
 * jobs table's lock behind a long transaction would block every add and claim queued behind
 * it. Index builds (`concurrently`) block neither, and must wait for every older transaction
 * to end, so they run without a timeout; see IndexBuildWatchdog for the one wait that never ends.
 */
const STEP_LOCK_TIMEOUT_MS = 2_000;
const MAX_TRIES = 100;
/**
 * Codes on which the migration steps aside (unlocks, waits, retries): 55P03 lock_timeout;
 * 40P01 PostgreSQL broke a deadlock by failing this step (a runner of 0.1.0 waits for the
 * lock in a statement, which the build then waits for); 57014 the watchdog cancelled a build.
 */
const STEP_ASIDE = ['55P03', '40P01', '57014'];

/** Each step commits on its own; the session lock keeps other runners out meanwhile. */
async function applyOutsideTransaction(
  q: QueryRunner,
  schema: string,
  name: string,
  apply: (context: MigrationContext) => Promise<void>,
): Promise<boolean> {
  for (let tries = 1; ; tries++) {
    await waitForLock(q, 'pg_try_advisory_lock', schema);
    const watchdog = await IndexBuildWatchdog.start(q);
    try {
      await q.query(`set lock_timeout = ${STEP_LOCK_TIMEOUT_MS}`);
      return await applyIfNew(q, schema, name, () => apply({ concurrently: true }));
    } catch (error) {
      if (!STEP_ASIDE.includes((error as { code?: string }).code ?? '') || tries >= MAX_TRIES) throw error;
    } finally {
      watchdog.stop();
      await q.query('reset lock_timeout');
      await q.query('select pg_advisory_unlock(hashtext($1))', [migrationLockKey(schema)]);
    }
    // Longer than a waiting runner's poll (waitForLock), so that it gets the lock first.
    await new Promise((resolve) => setTimeout(resolve, Math.min(400 + 100 * tries, 2_000)));
  }
}

/**
 * While a migration builds indexes concurrently, watches (from another connection, every
 * 250 ms) for a runner waiting for the migration lock inside a transaction (TypeORM's runner
 * in its default modes, polling `pg_try_advisory_xact_lock`): the build waits for that
 * transaction, which waits for this lock, and neither would ever end. It then cancels the
 * statement this runner is running (57014), and the migration steps aside.
 */
class IndexBuildWatchdog {
  private timer?: NodeJS.Timeout;

  static async start(q: QueryRunner): Promise<IndexBuildWatchdog> {
    const [{ pid }] = await q.query('select pg_backend_pid() as pid');
    const watchdog = new IndexBuildWatchdog();
    const check = async () => {
      try {
        await q.dataSource.query(
          `select pg_cancel_backend($1) from pg_stat_activity
            where datname = current_database() and pid <> $1 and state = 'idle in transaction'
              and query like '%pg_try_advisory_xact_lock%'
              and exists (select 1 from pg_stat_activity b where b.pid = $1 and b.query ilike 'create index concurrently%' and b.state = 'active')
            limit 1`,
          [pid],
        );
      } catch {
        // a watchdog that cannot look just does not cancel
      }
      if (watchdog.timer) watchdog.timer = setTimeout(check, 250);
    };
    watchdog.timer = setTimeout(check, 250);
    return watchdog;
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}

async function applyIfNew(q: QueryRunner, schema: string, name: string, apply: () => Promise<void>): Promise<boolean> {
  const s = quoteIdentifier(schema);
  await createLedger(q, schema);
  const found = await q.query(`select 1 from ${s}.migrations where name = $1`, [name]);
  if (found.length > 0) return false;
  await apply();
  await q.query(`insert into ${s}.migrations (timestamp, name) values ($1, $2)`, [Number(name.slice(-13)), name]);
  return true;
}

/**
 * Takes the migration lock by trying, not by waiting in a statement: `create index
 * concurrently` waits for every transaction that is running a statement, and a runner
 * blocked in `pg_advisory_lock` behind the one building the index would be one of them
 * (a deadlock PostgreSQL resolves by failing one of the two).
 */
export async function waitForLock(
  q: Pick<QueryRunner, 'query'>,
  fn: 'pg_try_advisory_lock' | 'pg_try_advisory_xact_lock',
  schema: string,
): Promise<void> {
  for (let wait = 10; ; wait = Math.min(wait * 2, 200)) {
    const [row] = await q.query(`select ${fn}(hashtext($1)) as locked`, [migrationLockKey(schema)]);
    if (row.locked) return;
    await new Promise((resolve) => setTimeout(resolve, wait));
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

/**
 * Creates an index, concurrently when it may. A concurrent build that failed halfway leaves
 * an invalid index behind, which `if not exists` would take for done: drop it first.
 */
export async function createIndex(q: QueryRunner, { concurrently }: MigrationContext, schema: string, name: string, definition: string): Promise<void> {
  const s = quoteIdentifier(schema);
  const [invalid] = await q.query(
    `select 1 from pg_index i join pg_class c on c.oid = i.indexrelid join pg_namespace n on n.oid = c.relnamespace
     where n.nspname = $1 and c.relname = $2 and not i.indisvalid`,
    [schema, name],
  );
  await withoutLockTimeout(q, concurrently, async () => {
    if (invalid) await q.query(`drop index ${concurrently ? 'concurrently ' : ''}${s}.${quoteIdentifier(name)}`);
    await q.query(`create index ${concurrently ? 'concurrently ' : ''}if not exists ${quoteIdentifier(name)} on ${s}.${definition}`);
  });
}

export async function dropIndex(q: QueryRunner, { concurrently }: MigrationContext, schema: string, name: string): Promise<void> {
  await withoutLockTimeout(q, concurrently, () =>
    q.query(`drop index ${concurrently ? 'concurrently ' : ''}if exists ${quoteIdentifier(schema)}.${quoteIdentifier(name)}`),
  );
}

/** Concurrent index builds wait for older transactions as long as they last (see STEP_LOCK_TIMEOUT_MS). */
async function withoutLockTimeout(q: QueryRunner, concurrently: boolean, step: () => Promise<unknown>): Promise<void> {
  if (!concurrently) {
    await step();
    return;
  }
  await q.query('set lock_timeout = 0');
  try {
    await step();
  } finally {
    await q.query(`set lock_timeout = ${STEP_LOCK_TIMEOUT_MS}`);
  }
}
