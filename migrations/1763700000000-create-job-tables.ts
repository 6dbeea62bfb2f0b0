import type { MigrationInterface, QueryRunner } from 'typeorm';
import { applyOnce, forget } from './ledger';
import { jobsChannel, quoteIdentifier } from './names';

/**
 * The job tables and the SQL functions that triggers and plain SQL can call.
 * The schema is a parameter (the module option `schema`), hence a class made per schema.
 */
export function createJobTablesMigration(schema: string): new () => MigrationInterface {
  const s = quoteIdentifier(schema);
  const channel = jobsChannel(schema).replace(/'/g, "''");

  return class CreateJobTables1763700000000 implements MigrationInterface {
    readonly name = 'CreateJobTables1763700000000';

    async up(q: QueryRunner): Promise<void> {
      await applyOnce(q, schema, this.name, () => this.apply(q));
    }

    private async apply(q: QueryRunner): Promise<void> {

      // Named queues: a job in a queue runs only while its queue row is unlocked and it is
      // the queue's first available job, so one queue runs one job at a time, in order.
      await q.query(`
        create table ${s}.job_queues (
          queue_name text primary key check (char_length(queue_name) between 1 and 128),
          locked_at timestamptz,
          locked_by text
        )`);

      await q.query(`
        create table ${s}.jobs (
          id bigint generated always as identity primary key,
          task_identifier text not null check (char_length(task_identifier) between 1 and 128),
          queue_name text check (char_length(queue_name) between 1 and 128),
          payload jsonb not null default '{}'::jsonb,
          priority smallint not null default 0,
          run_at timestamptz not null default now(),
          attempts smallint not null default 0 check (attempts >= 0),
          max_attempts smallint not null default 25 check (max_attempts >= 1),
          last_error text,
          key text check (char_length(key) between 1 and 512),
          revision integer not null default 0,
          flags text[] not null default '{}',
          locked_at timestamptz,
          locked_by text,
          created_at timestamptz not null default now(),
          updated_at timestamptz not null default now(),
          -- what the fetch looks at: not held by a worker and attempts left
          is_available boolean generated always as (locked_at is null and attempts < max_attempts) stored
        )`);
      // The claim walks this index in order: priority, then run_at, then id (FIFO).
      await q.query(`
        create index jobs_fetch_idx on ${s}.jobs (priority, run_at, id)
          include (task_identifier, queue_name) where is_available`);
      // A named queue's head job: the claim checks that no earlier job of the queue is waiting.
      await q.query(`
        create index jobs_queue_head_idx on ${s}.jobs (queue_name, priority, run_at, id)
          where is_available and queue_name is not null`);
      // Job keys: unique where set. Partial, so that keyless jobs (most) cost no entry here.
      await q.query(`create unique index jobs_key_idx on ${s}.jobs (key) where key is not null`);

      await q.query(`
        create table ${s}.known_crontabs (
          identifier text primary key,
          known_since timestamptz not null,
          last_execution timestamptz
        )`);

      await q.query(`
        create table ${s}.workers (
          id text primary key,
          started_at timestamptz not null default now(),
          heartbeat_at timestamptz not null default now()
        )`);

      await q.query(`
        create function ${s}.add_job(
          identifier text,
          payload jsonb default null,
          queue_name text default null,
          run_at timestamptz default null,
          max_attempts integer default null,
          job_key text default null,
          priority integer default null,
          flags text[] default null,
          job_key_mode text default 'replace'
        ) returns ${s}.jobs
        language plpgsql volatile as $fn$
        #variable_conflict use_column
        declare
          v_job ${s}.jobs;
          v_mode text := coalesce(add_job.job_key_mode, 'replace');
          v_payload jsonb := coalesce(add_job.payload, '{}'::jsonb);
          v_run_at timestamptz := coalesce(add_job.run_at, now());
          v_max_attempts integer := coalesce(add_job.max_attempts, 25);
          v_priority integer := coalesce(add_job.priority, 0);
          v_flags text[] := coalesce(add_job.flags, '{}');
        begin
          if v_mode not in ('replace', 'preserve_run_at', 'unsafe_dedupe') then
            raise exception 'JQ_INVALID_JOB_KEY_MODE: job_key_mode must be replace, preserve_run_at or unsafe_dedupe, got %', v_mode
              using errcode = '22023';
          end if;
          if add_job.queue_name is not null then
            insert into ${s}.job_queues (queue_name) values (add_job.queue_name) on conflict do nothing;
          end if;

          loop
            if add_job.job_key is null then
              insert into ${s}.jobs (task_identifier, payload, queue_name, run_at, max_attempts, priority, flags)
                values (add_job.identifier, v_payload, add_job.queue_name, v_run_at, v_max_attempts, v_priority, v_flags)
                returning * into v_job;
              exit;
            elsif v_mode = 'unsafe_dedupe' then
              -- Keep whatever job has this key, running or failed, untouched.
              insert into ${s}.jobs (task_identifier, payload, queue_name, run_at, max_attempts, key, priority, flags)
                values (add_job.identifier, v_payload, add_job.queue_name, v_run_at, v_max_attempts, add_job.job_key, v_priority, v_flags)
                on conflict (key) where key is not null do nothing
                returning * into v_job;
              if found then exit; end if;
              select * into v_job from ${s}.jobs j where j.key = add_job.job_key;
              if found then return v_job; end if;
              -- it was deleted in between: try again
            else
              -- replace / preserve_run_at: update the keyed job unless a worker holds it;
              -- a failed job comes back to life with its attempts reset.
              insert into ${s}.jobs (task_identifier, payload, queue_name, run_at, max_attempts, key, priority, flags)
                values (add_job.identifier, v_payload, add_job.queue_name, v_run_at, v_max_attempts, add_job.job_key, v_priority, v_flags)
                on conflict (key) where key is not null do update set
                  task_identifier = excluded.task_identifier,
                  payload = excluded.payload,
                  queue_name = excluded.queue_name,
                  run_at = case when v_mode = 'preserve_run_at' and jobs.attempts = 0 then jobs.run_at else excluded.run_at end,
                  max_attempts = excluded.max_attempts,
                  priority = excluded.priority,
                  flags = excluded.flags,
                  revision = jobs.revision + 1,
                  attempts = 0,
                  last_error = null,
                  updated_at = now()
                where jobs.locked_at is null
                returning * into v_job;
              if found then exit; end if;
              -- A worker holds the keyed job: it started with outdated data. Detach the key
              -- from it and stop it from being retried (it keeps running; its lock is not
              -- touched), then add a fresh job under the key.
              update ${s}.jobs j set key = null, attempts = greatest(j.attempts, j.max_attempts), updated_at = now()
                where j.key = add_job.job_key and j.locked_at is not null;
              insert into ${s}.jobs (task_identifier, payload, queue_name, run_at, max_attempts, key, priority, flags)
                values (add_job.identifier, v_payload, add_job.queue_name, v_run_at, v_max_attempts, add_job.job_key, v_priority, v_flags)
                on conflict (key) where key is not null do nothing
                returning * into v_job;
              if found then exit; end if;
            end if;
          end loop;

          -- Identical notifications in one transaction fold into one, delivered at commit.
          if v_job.run_at <= now() then
            perform pg_notify('${channel}', '');
          end if;
          return v_job;
        end;
        $fn$`);

      // Admin functions: none of them touches a job a worker holds (locked_at is set).
      await q.query(`
        create function ${s}.remove_job(job_key text) returns ${s}.jobs
        language sql volatile as $fn$
          delete from ${s}.jobs where key = remove_job.job_key and locked_at is null returning *
        $fn$`);
      await q.query(`
        create function ${s}.complete_jobs(job_ids bigint[]) returns setof ${s}.jobs
        language sql volatile as $fn$
          delete from ${s}.jobs where id = any(complete_jobs.job_ids) and locked_at is null returning *
        $fn$`);
      await q.query(`
        create function ${s}.permanently_fail_jobs(job_ids bigint[], error_message text default null)
        returns setof ${s}.jobs
        language sql volatile as $fn$
          update ${s}.jobs set
            last_error = coalesce(permanently_fail_jobs.error_message, 'Manually marked as failed'),
            attempts = max_attempts,
            updated_at = now()
          where id = any(permanently_fail_jobs.job_ids) and locked_at is null
          returning *
        $fn$`);
      await q.query(`
        create function ${s}.reschedule_jobs(
          job_ids bigint[],
          run_at timestamptz default null,
          priority integer default null,
          attempts integer default null,
          max_attempts integer default null
        ) returns setof ${s}.jobs
        language sql volatile as $fn$
          with updated as (
            update ${s}.jobs j set
              run_at = coalesce(reschedule_jobs.run_at, j.run_at),
              priority = coalesce(reschedule_jobs.priority, j.priority),
              attempts = coalesce(reschedule_jobs.attempts, j.attempts),
              max_attempts = coalesce(reschedule_jobs.max_attempts, j.max_attempts),
              updated_at = now()
            where j.id = any(reschedule_jobs.job_ids) and j.locked_at is null
            returning j.*
          ), notified as (
            select pg_notify('${channel}', '') from updated where updated.run_at <= now() limit 1
          )
          select updated.* from updated left join notified on true
        $fn$`);
    }

    async down(q: QueryRunner): Promise<void> {
      for (const fn of ['add_job', 'remove_job', 'complete_jobs', 'permanently_fail_jobs', 'reschedule_jobs']) {
        await q.query(`drop function if exists ${s}.${fn}`);
      }
      for (const table of ['jobs', 'job_queues', 'known_crontabs', 'workers']) {
        await q.query(`drop table if exists ${s}.${table}`);
      }
      await forget(q, schema, this.name);
    }
  };
}
