import type { QueryRunner } from 'typeorm';
import { applyOnce, forget, type JobQueueMigration } from './ledger';
import { finishedChannel, jobsChannel, quoteIdentifier } from './names';

/**
 * Durable steps and batch jobs.
 *
 * - `job_steps`: one row per step a job's handler finished (`ctx.step(name, fn)`), with what
 *   it returned (jsonb; SQL null for `undefined`). A later attempt of the job gets the row
 *   back instead of running the step again. Keyed by (job_id, name): a step is recorded once
 *   per job, whichever attempt gets there first. No foreign key: a job moves from `jobs` to
 *   `finished_jobs` when it finishes, and its steps stay until its history is deleted (the
 *   library's cleaner and deleteJob delete them with it).
 * - `add_job()`: adding a job under the key of a job that waits (no worker holds it) in mode
 *   `replace` or `preserve_run_at`, when both payloads are JSON arrays, appends the new
 *   elements to the waiting job's payload instead of replacing it (graphile-worker's batch
 *   jobs); `unsafe_dedupe` still leaves the waiting job alone. A job replaced (or merged into)
 *   that way forgets its recorded steps: what they recorded was for the payload it had.
 * - `remove_job()` deletes the removed job's steps too.
 *
 * Workers of the previous version never read `job_steps`, and call `add_job()` by the same
 * signature; the only change they see is the merge of array payloads. One transaction: a new
 * table and two functions replaced, no lock on `jobs` held for longer than that. It can run again.
 */
export function createJobStepsMigration(schema: string): new () => JobQueueMigration {
  const s = quoteIdentifier(schema);
  const channel = jobsChannel(schema).replace(/'/g, "''");
  const finished = finishedChannel(schema).replace(/'/g, "''");

  return class JobStepsAndBatches1764400000000 implements JobQueueMigration {
    readonly name = 'JobStepsAndBatches1764400000000';

    async up(q: QueryRunner): Promise<void> {
      await applyOnce(q, schema, this.name, async () => {
        await q.query(`
          create table if not exists ${s}.job_steps (
            job_id bigint not null,
            name text not null check (char_length(name) between 1 and 200),
            result jsonb,
            created_at timestamptz not null default now(),
            primary key (job_id, name)
          )`);
        await q.query(addJobFunction(s, channel, { batches: true }));
        await q.query(removeJobFunction(s, finished, { steps: true }));
      });
    }

    async down(q: QueryRunner): Promise<void> {
      await q.query(removeJobFunction(s, finished, { steps: false }));
      await q.query(addJobFunction(s, channel, { batches: false }));
      await q.query(`drop table if exists ${s}.job_steps`);
      await forget(q, schema, this.name);
    }
  };
}

/**
 * `add_job()`. With `batches: false` it is the function as CreateJobTables1763700000000 made
 * it (for down()); with `batches: true`, array payloads merge and a replaced job's steps go.
 * With `grouped` (JobGroups1764900000000, batches too) it is `add_grouped_job()`: add_job with
 * a job's `group_key` and trace context as four more parameters, written by the insert and by
 * the replace of a waiting job (a job kept by `unsafe_dedupe` keeps its own; a replace without
 * a trace keeps the job's). With `groupless` (add_job from JobGroups1764900000000 on), a replace
 * takes the job out of its group, as the library's replace without a group does.
 */
export function addJobFunction(s: string, channel: string, { batches, grouped = false, groupless = false }: { batches: boolean; grouped?: boolean; groupless?: boolean }): string {
  const fn = grouped ? 'add_grouped_job' : 'add_job';
  const extraColumns = grouped ? ', group_key, trace_id, span_id, trace_flags' : '';
  const extraValues = grouped ? `, ${fn}.group_key, ${fn}.trace_id, ${fn}.span_id, ${fn}.trace_flags` : '';
  const extraUpdates = grouped
    ? `
              group_key = excluded.group_key,
              trace_id = coalesce(excluded.trace_id, jobs.trace_id),
              span_id = coalesce(excluded.span_id, jobs.span_id),
              trace_flags = coalesce(excluded.trace_flags, jobs.trace_flags),`
    : groupless
      ? `
              group_key = null,`
      : '';
  const payload = batches
    ? `case when jsonb_typeof(jobs.payload) = 'array' and jsonb_typeof(excluded.payload) = 'array'
                    then jobs.payload || excluded.payload else excluded.payload end`
    : 'excluded.payload';
  // The insert gives revision 0; only the update of a waiting job (replaced or merged into) raises it.
  const forgetSteps = batches ? `if v_job.revision > 0 then delete from ${s}.job_steps st where st.job_id = v_job.id; end if;` : '';
  return `
    create or replace function ${s}.${fn}(
      identifier text,
      payload jsonb default null,
      queue_name text default null,
      run_at timestamptz default null,
      max_attempts integer default null,
      job_key text default null,
      priority integer default null,
      flags text[] default null,
      job_key_mode text default 'replace'${grouped ? `,
      group_key text default null,
      trace_id uuid default null,
      span_id bigint default null,
      trace_flags smallint default null` : ''}
    ) returns ${s}.jobs
    language plpgsql volatile as $fn$
    #variable_conflict use_column
    declare
      v_job ${s}.jobs;
      v_mode text := coalesce(${fn}.job_key_mode, 'replace');
      v_payload jsonb := coalesce(${fn}.payload, '{}'::jsonb);
      v_run_at timestamptz := coalesce(${fn}.run_at, now());
      v_max_attempts integer := coalesce(${fn}.max_attempts, 25);
      v_priority integer := coalesce(${fn}.priority, 0);
      v_flags text[] := coalesce(${fn}.flags, '{}');
    begin
      if v_mode not in ('replace', 'preserve_run_at', 'unsafe_dedupe') then
        raise exception 'JQ_INVALID_JOB_KEY_MODE: job_key_mode must be replace, preserve_run_at or unsafe_dedupe, got %', v_mode
          using errcode = '22023';
      end if;
      if ${fn}.queue_name is not null then
        insert into ${s}.job_queues (queue_name) values (${fn}.queue_name) on conflict do nothing;
      end if;

      loop
        if ${fn}.job_key is null then
          insert into ${s}.jobs (task_identifier, payload, queue_name, run_at, max_attempts, priority, flags${extraColumns})
            values (${fn}.identifier, v_payload, ${fn}.queue_name, v_run_at, v_max_attempts, v_priority, v_flags${extraValues})
            returning * into v_job;
          exit;
        elsif v_mode = 'unsafe_dedupe' then
          -- Keep whatever job has this key, running or failed, untouched.
          insert into ${s}.jobs (task_identifier, payload, queue_name, run_at, max_attempts, key, priority, flags${extraColumns})
            values (${fn}.identifier, v_payload, ${fn}.queue_name, v_run_at, v_max_attempts, ${fn}.job_key, v_priority, v_flags${extraValues})
            on conflict (key) where key is not null do nothing
            returning * into v_job;
          if found then exit; end if;
          select * into v_job from ${s}.jobs j where j.key = ${fn}.job_key;
          if found then return v_job; end if;
          -- it was deleted in between: try again
        else
          -- replace / preserve_run_at: update the keyed job unless a worker holds it;
          -- a failed job comes back to life with its attempts reset.${batches ? `
          -- Two array payloads merge: the new elements are appended (a batch job).` : ''}
          insert into ${s}.jobs (task_identifier, payload, queue_name, run_at, max_attempts, key, priority, flags${extraColumns})
            values (${fn}.identifier, v_payload, ${fn}.queue_name, v_run_at, v_max_attempts, ${fn}.job_key, v_priority, v_flags${extraValues})
            on conflict (key) where key is not null do update set
              task_identifier = excluded.task_identifier,
              payload = ${payload},
              queue_name = excluded.queue_name,
              run_at = case when v_mode = 'preserve_run_at' and jobs.attempts = 0 then jobs.run_at else excluded.run_at end,
              max_attempts = excluded.max_attempts,
              priority = excluded.priority,
              flags = excluded.flags,${extraUpdates}
              revision = jobs.revision + 1,
              attempts = 0,
              last_error = null,
              updated_at = now()
            where jobs.locked_at is null
            returning * into v_job;
          if found then ${forgetSteps}exit; end if;
          -- A worker holds the keyed job: it started with outdated data. Detach the key
          -- from it and stop it from being retried (it keeps running; its lock is not
          -- touched), then add a fresh job under the key.
          update ${s}.jobs j set key = null, attempts = greatest(j.attempts, j.max_attempts), updated_at = now()
            where j.key = ${fn}.job_key and j.locked_at is not null;
          insert into ${s}.jobs (task_identifier, payload, queue_name, run_at, max_attempts, key, priority, flags${extraColumns})
            values (${fn}.identifier, v_payload, ${fn}.queue_name, v_run_at, v_max_attempts, ${fn}.job_key, v_priority, v_flags${extraValues})
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
    $fn$`;
}

/**
 * `remove_job()` as JobLifecycle1763900000000 made it (it tells waiters), deleting the removed
 * job's steps as well with `steps: true`.
 */
function removeJobFunction(s: string, finished: string, { steps }: { steps: boolean }): string {
  return `
    create or replace function ${s}.remove_job(job_key text) returns ${s}.jobs
    language sql volatile as $fn$
      with removed as (
        delete from ${s}.jobs where key = remove_job.job_key and locked_at is null returning *
      ),${steps ? `
      steps as (
        delete from ${s}.job_steps st where st.job_id in (select id from removed)
      ),` : ''}
      told as (
        select pg_notify('${finished}', case when length(ids) <= 7900 then ids else '*' end)
        from (select string_agg(id::text, ',') as ids from removed) listed where ids is not null
      )
      select removed.* from removed left join told on true
    $fn$`;
}
