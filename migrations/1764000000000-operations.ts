import type { QueryRunner } from 'typeorm';
import { applyOnce, createIndex, dropIndex, forget, type JobQueueMigration, type MigrationContext } from './ledger';
import { quoteIdentifier } from './names';

/**
 * What operators look at: the dashboard, health and telemetry.
 *
 * - `workers.hostname`, `workers.pid`, `workers.concurrency`: which process a worker row is,
 *   so that any replica can list every worker.
 * - `known_crontabs.task_identifier`, `expression`, `time_zone`, `registered_at`: a schedule as
 *   the last replica that started with it declared it, so that any replica can show every
 *   schedule with its next tick, and a schedule no replica declares any more shows as stale.
 * - `finished_jobs_key_idx`: the dashboard finds the jobs that had a key (partial: keyed jobs only).
 * - `jobs.trace_id`, `jobs.span_id`, `jobs.trace_flags`: the W3C trace context of the span
 *   that added the job (its traceparent's fields), for the consumer span to link to. Null
 *   without telemetry. Fixed-width columns on purpose: a variable-length one (jsonb, text) on
 *   `jobs`, even all null, made the planner pick a bitmap scan and a sort of every due job for
 *   the claim, halving the bench's drain (see docs/maintainers.md).
 * - `add_job_traced()`: add_job, then the trace context on the row it returns (a job replaced
 *   under its key carries its latest add's). A wrapper rather than more parameters of
 *   add_job, whose body stays as it is.
 *
 * By the rules in docs/maintainers.md: columns are added without defaults (no rewrite), the index
 * is built concurrently, each step commits on its own with a lock timeout (outside a
 * transaction), and every step can run again.
 */
export function createOperationsMigration(schema: string): new () => JobQueueMigration {
  const s = quoteIdentifier(schema);

  return class Operations1764000000000 implements JobQueueMigration {
    readonly name = 'Operations1764000000000';
    readonly outsideTransaction = true;

    async up(q: QueryRunner): Promise<void> {
      await applyOnce(q, schema, this.name, (context) => this.apply(q, context), { outsideTransaction: true });
    }

    private async apply(q: QueryRunner, context: MigrationContext): Promise<void> {
      await q.query(`
        alter table ${s}.workers
          add column if not exists hostname text,
          add column if not exists pid integer,
          add column if not exists concurrency integer`);
      await q.query(`
        alter table ${s}.known_crontabs
          add column if not exists task_identifier text,
          add column if not exists expression text,
          add column if not exists time_zone text,
          add column if not exists registered_at timestamptz`);
      await q.query(`
        alter table ${s}.jobs
          add column if not exists trace_id uuid,
          add column if not exists span_id bigint,
          add column if not exists trace_flags smallint`);
      // Built concurrently: every completion inserts into finished_jobs.
      await createIndex(q, context, schema, 'finished_jobs_key_idx', `finished_jobs (key) where key is not null`);
      await q.query(`
        create or replace function ${s}.add_job_traced(
          identifier text,
          payload jsonb,
          queue_name text,
          run_at timestamptz,
          max_attempts integer,
          job_key text,
          priority integer,
          flags text[],
          job_key_mode text,
          trace_id uuid,
          span_id bigint,
          trace_flags smallint
        ) returns ${s}.jobs
        language plpgsql volatile as $fn$
        declare
          v_job ${s}.jobs;
          v_traced ${s}.jobs;
        begin
          v_job := ${s}.add_job(identifier, payload, queue_name, run_at, max_attempts, job_key, priority, flags, job_key_mode);
          -- a job replaced under its key carries the trace of its latest add
          update ${s}.jobs j set trace_id = add_job_traced.trace_id, span_id = add_job_traced.span_id, trace_flags = add_job_traced.trace_flags
            where j.id = v_job.id
            returning * into v_traced;
          if found then return v_traced; end if;
          return v_job;
        end
        $fn$`);
    }

    async down(q: QueryRunner): Promise<void> {
      await dropIndex(q, { concurrently: !q.isTransactionActive }, schema, 'finished_jobs_key_idx');
      await q.query(`
        drop function if exists ${s}.add_job_traced(text, jsonb, text, timestamptz, integer, text, integer, text[], text, uuid, bigint, smallint)`);
      await q.query(`alter table ${s}.jobs drop column if exists trace_id, drop column if exists span_id, drop column if exists trace_flags`);
      await q.query(`
        alter table ${s}.known_crontabs drop column if exists task_identifier, drop column if exists expression,
          drop column if exists time_zone, drop column if exists registered_at`);
      await q.query(`alter table ${s}.workers drop column if exists hostname, drop column if exists pid, drop column if exists concurrency`);
      await forget(q, schema, this.name);
    }
  };
}
