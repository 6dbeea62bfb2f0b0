import type { QueryRunner } from 'typeorm';
import { applyOnce, createIndex, dropIndex, forget, type JobQueueMigration, type MigrationContext } from './ledger';
import { cancelChannel, finishedChannel, jobsChannel, quoteIdentifier } from './names';

/** The columns that differ by case when a job is kept in finished_jobs; the rest are copied. */
interface KeptColumns {
  state: string;
  lastError: string;
  workerId: string;
  result?: string;
}

/**
 * The insert that keeps the rows of CTE `source` ('name alias') in finished_jobs, and the
 * waiters' notification of their ids: the library's statements as they were written with this
 * migration (sql/lifecycle.ts's keepFinished and tellFinished), kept here unchanged.
 */
function keepFinished(s: string, source: string, columns: KeptColumns): string {
  const f = source.split(' ').pop()!;
  return `
    insert into ${s}.finished_jobs (id, task_identifier, queue_name, payload, priority, run_at, attempts, max_attempts, key, flags,
      state, result, progress, errors, last_error, worker_id, created_at, started_at)
    select ${f}.id, ${f}.task_identifier, ${f}.queue_name, ${f}.payload, ${f}.priority, ${f}.run_at, ${f}.attempts,
      ${f}.max_attempts, ${f}.key, ${f}.flags, ${columns.state}, ${columns.result ?? 'null'}, ${f}.progress,
      ${f}.errors, ${columns.lastError}, ${columns.workerId}, ${f}.created_at, ${f}.started_at
    from ${source}
    `;
}

const tellFinished = (finishedChannel: string, source: string) => `
  select pg_notify('${finishedChannel}', case when length(ids) <= 7900 then ids else '*' end)
  from (select string_agg(id::text, ',') as ids from ${source}) listed where ids is not null`;

/**
 * The job lifecycle: finished jobs are kept, with their results, for a retention period.
 *
 * - `finished_jobs`: a job leaves `jobs` when it completes, fails for good or is cancelled,
 *   and is written here in the same statement (by the release batch). `jobs` keeps only
 *   unfinished jobs, so its job-key index makes a key unique among unfinished jobs, the claim
 *   never walks history, and the maintenance leader deletes expired history from a table no
 *   worker claims from. Two indexes besides the key, each paid on every completion:
 *   `(state, finished_at, id)` for retention and the lists, `(task_identifier, state,
 *   finished_at, id)` for the lists of one task.
 * - `finished_counts`: counts of finished jobs per task, queue and state, kept by statement
 *   triggers on `finished_jobs` (any insert or delete, ours or a user's), so that
 *   countJobs() never counts a million rows. Rows are spread over 8 slots by backend, so
 *   that workers finishing jobs of one task do not queue for one row.
 * - `jobs.progress`, `jobs.errors` (one entry per failed attempt), `jobs.cancel_requested_at`
 *   and `jobs.cancel_reason` (a cancel of a running job is recorded in its row, so that it
 *   holds if the notification is lost).
 * - `jobs_leftover_idx`: unfinished rows that no worker holds and that are done all the same:
 *   out of attempts (failed by a rescue, an admin call, or a worker of the previous version),
 *   or cancelled while a worker held them. The leader moves them to `finished_jobs`.
 * - `cancel_job()` and `retry_jobs()` for SQL callers; `complete_jobs()` and
 *   `permanently_fail_jobs()` now move the jobs to `finished_jobs`.
 *
 * By the rules in docs/maintainers.md: columns are added without defaults, indexes on `jobs`
 * are built concurrently outside a transaction, and every step can run again.
 */
export function createJobLifecycleMigration(schema: string): new () => JobQueueMigration {
  const s = quoteIdentifier(schema);
  const cancel = cancelChannel(schema).replace(/'/g, "''");
  const jobs = jobsChannel(schema).replace(/'/g, "''");
  // The insert into finished_jobs and the waiters' notification, as the library's own statements write them.
  const keep = (source: string, columns: KeptColumns) => keepFinished(s, source, columns);
  const told = (source: string) => tellFinished(finishedChannel(schema), source);

  return class JobLifecycle1763900000000 implements JobQueueMigration {
    readonly name = 'JobLifecycle1763900000000';
    readonly outsideTransaction = true;

    async up(q: QueryRunner): Promise<void> {
      await applyOnce(q, schema, this.name, (context) => this.apply(q, context), { outsideTransaction: true });
    }

    private async apply(q: QueryRunner, context: MigrationContext): Promise<void> {
      await q.query(`
        alter table ${s}.jobs
          add column if not exists progress jsonb,
          add column if not exists errors jsonb,
          add column if not exists cancel_requested_at timestamptz,
          add column if not exists cancel_reason text`);

      await q.query(`
        create table if not exists ${s}.finished_jobs (
          id bigint primary key,
          task_identifier text not null,
          queue_name text,
          payload jsonb not null,
          priority smallint not null,
          run_at timestamptz not null,
          attempts smallint not null,
          max_attempts smallint not null,
          key text,
          flags text[] not null,
          state text not null check (state in ('completed', 'failed', 'cancelled')),
          result jsonb,
          progress jsonb,
          errors jsonb,
          last_error text,
          worker_id text,
          created_at timestamptz not null,
          started_at timestamptz,
          finished_at timestamptz not null default now()
        )`);
      // A new, empty table: a plain build takes no time and blocks nobody.
      await q.query(`create index if not exists finished_jobs_state_idx on ${s}.finished_jobs (state, finished_at, id)`);
      await q.query(`create index if not exists finished_jobs_task_idx on ${s}.finished_jobs (task_identifier, state, finished_at, id)`);

      await q.query(`
        create table if not exists ${s}.finished_counts (
          task_identifier text not null,
          queue_name text not null, -- '' for none (a queue name is never empty)
          state text not null,
          slot smallint not null,
          count bigint not null,
          primary key (task_identifier, queue_name, state, slot)
        )`);
      // Transition tables exist only for their own event: one function per event, each adding
      // +1 per new row and -1 per old row to its group's count.
      const counted = {
        inserted: `select n.task_identifier, n.queue_name, n.state, 1 as delta from new_rows n`,
        deleted: `select o.task_identifier, o.queue_name, o.state, -1 as delta from old_rows o`,
        updated: `select n.task_identifier, n.queue_name, n.state, 1 as delta from new_rows n
                  union all select o.task_identifier, o.queue_name, o.state, -1 from old_rows o`,
      };
      for (const [event, rows] of Object.entries(counted)) {
        await q.query(`
          create or replace function ${s}.count_finished_jobs_${event}() returns trigger
          language plpgsql as $fn$
          begin
            insert into ${s}.finished_counts as c (task_identifier, queue_name, state, slot, count)
            select d.task_identifier, coalesce(d.queue_name, ''), d.state, pg_backend_pid() % 8, sum(d.delta)
            from (${rows}) d
            group by 1, 2, 3
            having sum(d.delta) <> 0
            order by 1, 2, 3 -- every statement locks count rows in one order: no deadlock between them
            on conflict (task_identifier, queue_name, state, slot) do update set count = c.count + excluded.count;
            return null;
          end;
          $fn$`);
      }
      await q.query(`
        create or replace function ${s}.count_finished_jobs_truncated() returns trigger
        language plpgsql as $fn$
        begin
          delete from ${s}.finished_counts;
          return null;
        end;
        $fn$`);
      await q.query(`
        create or replace trigger finished_jobs_counted_insert after insert on ${s}.finished_jobs
        referencing new table as new_rows for each statement execute function ${s}.count_finished_jobs_inserted()`);
      await q.query(`
        create or replace trigger finished_jobs_counted_delete after delete on ${s}.finished_jobs
        referencing old table as old_rows for each statement execute function ${s}.count_finished_jobs_deleted()`);
      await q.query(`
        create or replace trigger finished_jobs_counted_update after update on ${s}.finished_jobs
        referencing old table as old_rows new table as new_rows for each statement execute function ${s}.count_finished_jobs_updated()`);
      await q.query(`
        create or replace trigger finished_jobs_counted_truncate after truncate on ${s}.finished_jobs
        for each statement execute function ${s}.count_finished_jobs_truncated()`);

      // Usually empty: one index entry per leftover, nothing for the rest.
      await createIndex(
        q,
        context,
        schema,
        'jobs_leftover_idx',
        `jobs (id) where locked_at is null and (attempts >= max_attempts or cancel_requested_at is not null)`,
      );

      await q.query(`
        create or replace function ${s}.complete_jobs(job_ids bigint[]) returns setof ${s}.jobs
        language sql volatile as $fn$
          with done as (
            delete from ${s}.jobs where id = any(complete_jobs.job_ids) and locked_at is null returning *
          ),
          kept as (${keep('done d', { state: `'completed'`, lastError: 'null', workerId: 'd.locked_by' })}),
          told as (${told('done')})
          select done.* from done left join told on true
        $fn$`);
      await q.query(`
        create or replace function ${s}.permanently_fail_jobs(job_ids bigint[], error_message text default null)
        returns setof ${s}.jobs
        language sql volatile as $fn$
          with done as (
            delete from ${s}.jobs where id = any(permanently_fail_jobs.job_ids) and locked_at is null returning *
          ),
          kept as (${keep('done d', {
            state: `'failed'`,
            lastError: `coalesce(permanently_fail_jobs.error_message, 'Manually marked as failed')`,
            workerId: 'd.locked_by',
          })}),
          told as (${told('done')})
          select done.* from done left join told on true
        $fn$`);

      // Removing a job by its key also tells waiters (waitForJob), which then find it gone.
      await q.query(`
        create or replace function ${s}.remove_job(job_key text) returns ${s}.jobs
        language sql volatile as $fn$
          with removed as (
            delete from ${s}.jobs where key = remove_job.job_key and locked_at is null returning *
          ),
          told as (${told('removed')})
          select removed.* from removed left join told on true
        $fn$`);

      // Cancels one job. A job no worker holds is cancelled at once; one a worker holds (running
      // or claimed) gets the cancel recorded in its row, and its worker is told: it aborts the
      // handler and writes the job cancelled, whatever the handler does. Returns what happened:
      // 'cancelled', 'requested', 'finished' (with the state it finished in) or 'not_found'.
      await q.query(`
        create or replace function ${s}.cancel_job(job_id bigint, reason text default null)
        returns table (outcome text, state text)
        language plpgsql volatile as $fn$
        declare
          v_job ${s}.jobs;
          v_state text;
          v_told integer;
        begin
          select * into v_job from ${s}.jobs j where j.id = cancel_job.job_id for update;
          if not found then
            select f.state into v_state from ${s}.finished_jobs f where f.id = cancel_job.job_id;
            if found then
              return query select 'finished'::text, v_state;
            else
              return query select 'not_found'::text, null::text;
            end if;
            return;
          end if;
          if v_job.locked_at is null and v_job.cancel_requested_at is not null then
            return query select 'finished'::text, 'cancelled'::text;
            return;
          end if;
          if v_job.locked_at is null and v_job.attempts >= v_job.max_attempts then
            return query select 'finished'::text, 'failed'::text;
            return;
          end if;
          if v_job.locked_at is null then
            with cancelled as (
              delete from ${s}.jobs j where j.id = v_job.id returning j.*, cancel_job.reason as cancel_reason_given
            ),
            kept as (${keep('cancelled c', { state: `'cancelled'`, lastError: `'JQ_JOB_CANCELLED: ' || coalesce(c.cancel_reason_given, 'cancelled')`, workerId: 'null' })}),
            notified as (${told('cancelled')})
            select count(*) into v_told from notified;
            return query select 'cancelled'::text, 'cancelled'::text;
            return;
          end if;
          update ${s}.jobs j set
            cancel_requested_at = coalesce(j.cancel_requested_at, now()),
            cancel_reason = coalesce(j.cancel_reason, cancel_job.reason),
            updated_at = now()
          where j.id = v_job.id;
          perform pg_notify('${cancel}', v_job.id::text);
          return query select 'requested'::text, case when v_job.started_at is null then 'waiting' else 'running' end;
        end;
        $fn$`);

      // Moves failed or cancelled jobs back to the queue, attempts reset, due now. A job whose
      // key a newer unfinished job has taken meanwhile stays where it is (not returned).
      await q.query(`
        create or replace function ${s}.retry_jobs(job_ids bigint[]) returns setof ${s}.jobs
        language plpgsql volatile as $fn$
        declare
          v_ids bigint[];
        begin
          -- Failed or cancelled rows still in jobs (not moved to finished_jobs yet): reset in place.
          return query
            update ${s}.jobs j set attempts = 0, run_at = now(), cancel_requested_at = null, cancel_reason = null, updated_at = now()
            where j.id = any(retry_jobs.job_ids) and j.locked_at is null
              and (j.attempts >= j.max_attempts or j.cancel_requested_at is not null)
            returning j.*;
          with back as (
            insert into ${s}.jobs (id, task_identifier, queue_name, payload, priority, run_at, max_attempts, key, flags, errors, last_error, created_at)
            overriding system value
            select f.id, f.task_identifier, f.queue_name, f.payload, f.priority, now(), f.max_attempts, f.key, f.flags, f.errors, f.last_error, f.created_at
            from ${s}.finished_jobs f
            where f.id = any(retry_jobs.job_ids) and f.state in ('failed', 'cancelled')
            for update of f
            on conflict (key) where key is not null do nothing
            returning id
          )
          select array_agg(id) into v_ids from back;
          if v_ids is not null then
            delete from ${s}.finished_jobs f where f.id = any(v_ids);
            insert into ${s}.job_queues (queue_name)
              select distinct j.queue_name from ${s}.jobs j where j.id = any(v_ids) and j.queue_name is not null
              on conflict do nothing;
            return query select * from ${s}.jobs j where j.id = any(v_ids);
          end if;
          perform pg_notify('${jobs}', '');
        end;
        $fn$`);
    }

    async down(q: QueryRunner): Promise<void> {
      const context = { concurrently: !q.isTransactionActive };
      for (const fn of ['cancel_job(bigint, text)', 'retry_jobs(bigint[])']) await q.query(`drop function if exists ${s}.${fn}`);
      await dropIndex(q, context, schema, 'jobs_leftover_idx');
      await q.query(`drop table if exists ${s}.finished_counts`);
      await q.query(`drop table if exists ${s}.finished_jobs`);
      for (const fn of ['inserted', 'deleted', 'updated', 'truncated']) await q.query(`drop function if exists ${s}.count_finished_jobs_${fn}()`);
      await q.query(`
        alter table ${s}.jobs drop column if exists progress, drop column if exists errors,
          drop column if exists cancel_requested_at, drop column if exists cancel_reason`);
      // The bodies remove_job, complete_jobs and permanently_fail_jobs had before (CreateJobTables1763700000000).
      await q.query(`
        create or replace function ${s}.remove_job(job_key text) returns ${s}.jobs
        language sql volatile as $fn$
          delete from ${s}.jobs where key = remove_job.job_key and locked_at is null returning *
        $fn$`);
      await q.query(`
        create or replace function ${s}.complete_jobs(job_ids bigint[]) returns setof ${s}.jobs
        language sql volatile as $fn$
          delete from ${s}.jobs where id = any(complete_jobs.job_ids) and locked_at is null returning *
        $fn$`);
      await q.query(`
        create or replace function ${s}.permanently_fail_jobs(job_ids bigint[], error_message text default null)
        returns setof ${s}.jobs
        language sql volatile as $fn$
          update ${s}.jobs set
            last_error = coalesce(permanently_fail_jobs.error_message, 'Manually marked as failed'),
            attempts = max_attempts,
            updated_at = now()
          where id = any(permanently_fail_jobs.job_ids) and locked_at is null
          returning *
        $fn$`);
      await forget(q, schema, this.name);
    }
  };
}
