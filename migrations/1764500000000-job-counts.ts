import type { QueryRunner } from 'typeorm';
import { applyOnce, createIndex, dropIndex, forget, type JobQueueMigration, type MigrationContext } from './ledger';
import { quoteIdentifier } from './names';

/** The tables whose rows are counted, each under its own name in `place`. */
const COUNTED = ['jobs', 'blocked_jobs'] as const;

/**
 * Counts of unfinished jobs that do not grow with the backlog (countJobs(), the dashboard's
 * overview, the CLI's status).
 *
 * - `job_count_deltas`: every statement that inserts into or deletes from `jobs` or
 *   `blocked_jobs` (an add, a release, a flow job unblocked, a user's own SQL) appends one row
 *   per task and queue it touched, with +n or -n, from a statement trigger. Appending takes no
 *   lock another writer waits for: an add inside a caller's long transaction holds nothing
 *   back (a counter row updated in place would make every other add of the task wait for it).
 *   A row trigger does the same for the rare update that moves a job to another task or queue
 *   (add_job() replacing a keyed job).
 * - `job_counts`: the deltas folded, one row per place, task and queue (`''` for none). The
 *   maintenance leader folds the deltas into it every round (maintenance/count-folder.ts); a
 *   read adds the deltas not folded yet, so that a count is exact in its snapshot.
 * - Only totals are counted: which of a table's jobs are running, retrying, scheduled or left
 *   over is read from indexes that hold only those (`jobs_locked_by_idx`, `jobs_leftover_idx`
 *   and the two below), and the rest are waiting. A job's move from scheduled to waiting
 *   happens by the clock, with no statement to count it.
 * - `jobs_retrying_idx`: unheld jobs that have had an attempt. `jobs_scheduled_idx`: unheld
 *   jobs that have had none and were added (or rescheduled) for later than their creation, by
 *   run_at, so that those still in the future are a range of it. A job added due by the
 *   database's clock has no entry in either, nor has a claimed one: plain adds and the drain of
 *   due jobs write neither (a keyed job replaced, a retry_jobs() or a client's runAt a little
 *   ahead of the server's clock may leave an entry in the past range, which a count never reads).
 * - `finished_jobs_key_created_idx`: a key's finished jobs by creation, for dedupeFor's look.
 * - `recount_jobs()`: the counts taken again from the rows (the first count here; the repair if
 *   they ever drift). The counting, like TRUNCATE's trigger, refuses a transaction stricter than
 *   READ COMMITTED, whose snapshot would predate the lock it waited for.
 *
 * Outside a transaction the triggers are made and the counts taken in one transaction that
 * holds `jobs` and `blocked_jobs` against writes (share row exclusive, as the trigger's
 * creation needs), so that each job is counted once, by the initial count or by a trigger;
 * adds and claims wait for that count (a scan of the backlog). The indexes are built
 * concurrently afterwards. Inside a transaction (TypeORM's runner, a pooler) that transaction
 * must be READ COMMITTED, and the lock waits without a timeout. Workers of earlier versions need
 * nothing: the triggers count their statements as well. A role that only adds jobs needs INSERT
 * on `job_count_deltas` too (the trigger functions run as their caller, as finished_counts'
 * do). Every step can run again: the count starts from zero.
 */
export function createJobCountsMigration(schema: string): new () => JobQueueMigration {
  const s = quoteIdentifier(schema);

  return class JobCounts1764500000000 implements JobQueueMigration {
    readonly name = 'JobCounts1764500000000';
    readonly outsideTransaction = true;

    async up(q: QueryRunner): Promise<void> {
      await applyOnce(q, schema, this.name, (context) => this.apply(q, context), { outsideTransaction: true });
    }

    private async apply(q: QueryRunner, context: MigrationContext): Promise<void> {
      await q.query(`
        create table if not exists ${s}.job_counts (
          place text not null,
          task_identifier text not null,
          queue_name text not null, -- '' for none (a queue name is never empty)
          count bigint not null,
          primary key (place, task_identifier, queue_name)
        )`);
      // No index: rows are only appended, and deleted all together by the fold.
      await q.query(`
        create table if not exists ${s}.job_count_deltas (
          place text not null,
          task_identifier text not null,
          queue_name text not null,
          delta bigint not null
        )`);
      for (const statement of countingFunctions(s)) await q.query(statement);
      const own = context.concurrently; // outside a transaction: the count takes one of its own
      if (own) await q.startTransaction('READ COMMITTED');
      try {
        await q.query(`lock table ${COUNTED.map((table) => `${s}.${table}`).join(', ')} in share row exclusive mode`);
        for (const table of COUNTED) {
          await q.query(`
            create or replace trigger ${table}_counted_insert after insert on ${s}.${table}
            referencing new table as new_rows for each statement execute function ${s}.count_jobs_inserted()`);
          await q.query(`
            create or replace trigger ${table}_counted_delete after delete on ${s}.${table}
            referencing old table as old_rows for each statement execute function ${s}.count_jobs_deleted()`);
          await q.query(`
            create or replace trigger ${table}_counted_move after update of task_identifier, queue_name on ${s}.${table}
            for each row when (old.task_identifier is distinct from new.task_identifier or old.queue_name is distinct from new.queue_name)
            execute function ${s}.count_jobs_moved()`);
          await q.query(`
            create or replace trigger ${table}_counted_truncate after truncate on ${s}.${table}
            for each statement execute function ${s}.count_jobs_truncated()`);
        }
        await q.query(`select ${s}.recount_jobs()`);
        if (own) await q.commitTransaction();
      } catch (error) {
        if (own) await q.rollbackTransaction();
        throw error;
      }
      await createIndex(
        q,
        context,
        schema,
        'jobs_retrying_idx',
        `jobs (id) where locked_at is null and attempts > 0 and attempts < max_attempts and cancel_requested_at is null`,
      );
      await createIndex(
        q,
        context,
        schema,
        'jobs_scheduled_idx',
        `jobs (run_at) where locked_at is null and attempts = 0 and cancel_requested_at is null and run_at > created_at`,
      );
      // dedupeFor's look for a key's newest finished job (sql recentJobByKey): a key reused for years has a long history.
      await createIndex(q, context, schema, 'finished_jobs_key_created_idx', `finished_jobs (key, created_at) where key is not null`);
    }

    async down(q: QueryRunner): Promise<void> {
      const context = { concurrently: !q.isTransactionActive };
      await dropIndex(q, context, schema, 'finished_jobs_key_created_idx');
      await dropIndex(q, context, schema, 'jobs_scheduled_idx');
      await dropIndex(q, context, schema, 'jobs_retrying_idx');
      for (const table of COUNTED) {
        for (const event of ['insert', 'delete', 'move', 'truncate']) await q.query(`drop trigger if exists ${table}_counted_${event} on ${s}.${table}`);
      }
      for (const fn of ['inserted', 'deleted', 'moved', 'truncated']) await q.query(`drop function if exists ${s}.count_jobs_${fn}()`);
      await q.query(`drop function if exists ${s}.recount_jobs()`);
      await q.query(`drop table if exists ${s}.job_count_deltas`);
      await q.query(`drop table if exists ${s}.job_counts`);
      await forget(q, schema, this.name);
    }
  };
}

/**
 * What needs READ COMMITTED, and why: a statement of a transaction at a stricter level sees the
 * snapshot its first statement took, before any lock it then waited for, and so would miss
 * rows that writers it waited for committed.
 */
const readCommittedOnly = (what: string) => `
      if current_setting('transaction_isolation') <> 'read committed' then
        raise exception '% needs a READ COMMITTED transaction, not %', ${what}, current_setting('transaction_isolation')
          using hint = 'its statements must see what the writers it waits for committed';
      end if;`;

/** The trigger functions, each table's triggers passing its name as the place (TG_TABLE_NAME), and recount_jobs(). */
function countingFunctions(s: string): string[] {
  const appended = (rows: string, sign: string) => `
    insert into ${s}.job_count_deltas (place, task_identifier, queue_name, delta)
    select TG_TABLE_NAME, r.task_identifier, coalesce(r.queue_name, ''), ${sign}count(*) from ${rows} r group by 2, 3;
    return null;`;
  const fn = (name: string, body: string) => `
    create or replace function ${s}.count_jobs_${name}() returns trigger
    language plpgsql as $fn$
    begin
      ${body}
    end;
    $fn$`;
  return [
    fn('inserted', appended('new_rows', '')),
    fn('deleted', appended('old_rows', '-')),
    fn(
      'moved',
      `insert into ${s}.job_count_deltas (place, task_identifier, queue_name, delta)
       values (TG_TABLE_NAME, old.task_identifier, coalesce(old.queue_name, ''), -1),
              (TG_TABLE_NAME, new.task_identifier, coalesce(new.queue_name, ''), 1);
       return null;`,
    ),
    // TRUNCATE holds the table alone: no delta of it can be on its way, but one committed while it waited is seen under READ COMMITTED only.
    fn(
      'truncated',
      `${readCommittedOnly(`'truncate ' || TG_TABLE_NAME`)}
       delete from ${s}.job_count_deltas where place = TG_TABLE_NAME;
       delete from ${s}.job_counts where place = TG_TABLE_NAME;
       return null;`,
    ),
    // The counts taken again from the rows: the migration's first count, and the repair when
    // they drifted (triggers disabled, session_replication_role = replica, a data-only restore).
    `create or replace function ${s}.recount_jobs() returns void
     language plpgsql volatile as $fn$
     begin
       ${readCommittedOnly(`'recount_jobs()'`)}
       lock table ${COUNTED.map((table) => `${s}.${table}`).join(', ')} in share row exclusive mode;
       delete from ${s}.job_count_deltas;
       delete from ${s}.job_counts;
       ${COUNTED.map(
         (table) => `insert into ${s}.job_counts (place, task_identifier, queue_name, count)
       select '${table}', task_identifier, coalesce(queue_name, ''), count(*) from ${s}.${table} group by 2, 3;`,
       ).join('\n       ')}
     end;
     $fn$`,
  ];
}
