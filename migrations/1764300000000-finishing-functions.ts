import { cancelChannel, finishedChannel, jobsChannel, quoteIdentifier } from './names';

/**
 * The SQL functions that finish jobs on request (complete_jobs, permanently_fail_jobs,
 * cancel_job, retry_jobs), as Flows1764300000000 leaves them: they keep a job's flow columns
 * in finished_jobs (so that its flow's trigger sees it), cancel_job cancels blocked jobs too,
 * and retry_jobs brings a flow's job back with its dependents (reopen_flow_jobs). With
 * `flows` false, the same functions as JobLifecycle1763900000000 made them (the migration's down()).
 * With `groups` (JobGroups1764900000000), they keep a job's `group_key` too, and retry_jobs
 * brings it back.
 */
export function createFinishingFunctions(schema: string, flows = true, groups = false): string[] {
  const s = quoteIdentifier(schema);
  const literal = (text: string) => text.replace(/'/g, "''");
  const cancel = literal(cancelChannel(schema));
  const jobs = literal(jobsChannel(schema));
  const finished = literal(finishedChannel(schema));
  const flowColumns = (flows ? ', flow_id, flow_ref' : '') + (groups ? ', group_key' : '');
  /** The insert that keeps the jobs rows of CTE `source` (alias `d`) in finished_jobs. */
  const keep = (source: string, state: string, lastError: string, workerId: string) => `
    insert into ${s}.finished_jobs (id, task_identifier, queue_name, payload, priority, run_at, attempts, max_attempts, key, flags,
      state, result, progress, errors, last_error, worker_id, created_at, started_at${flowColumns})
    select d.id, d.task_identifier, d.queue_name, d.payload, d.priority, d.run_at, d.attempts, d.max_attempts, d.key, d.flags,
      ${state}, null, d.progress, d.errors, ${lastError}, ${workerId}, d.created_at, d.started_at${flows ? ', d.flow_id, d.flow_ref' : ''}${groups ? ', d.group_key' : ''}
    from ${source} d`;
  const told = (source: string) => `
    select pg_notify('${finished}', case when length(ids) <= 7900 then ids else '*' end)
    from (select string_agg(id::text, ',') as ids from ${source}) listed where ids is not null`;
  const cancelBlocked = flows
    ? `
          with gone as (delete from ${s}.blocked_jobs b where b.id = cancel_job.job_id returning b.*),
          kept as (
            insert into ${s}.finished_jobs (id, task_identifier, queue_name, payload, priority, run_at, attempts, max_attempts, key, flags,
              state, last_error, created_at, flow_id, flow_ref)
            select g.id, g.task_identifier, g.queue_name, g.payload, g.priority, coalesce(g.run_at, now()), 0, g.max_attempts, null, g.flags,
              'cancelled', 'JQ_JOB_CANCELLED: ' || coalesce(cancel_job.reason, 'cancelled'), g.created_at, g.flow_id, g.flow_ref
            from gone g
            returning id
          ),
          notified as (${told('kept')})
          select count(*) into v_told from kept left join notified on true;
          if v_told > 0 then
            return query select 'cancelled'::text, 'cancelled'::text;
            return;
          end if;`
    : '';

  return [
    `create or replace function ${s}.complete_jobs(job_ids bigint[]) returns setof ${s}.jobs
     language sql volatile as $fn$
       with done as (
         delete from ${s}.jobs where id = any(complete_jobs.job_ids) and locked_at is null returning *
       ),
       kept as (${keep('done', `'completed'`, 'null', 'd.locked_by')}),
       told as (${told('done')})
       select done.* from done left join told on true
     $fn$`,

    `create or replace function ${s}.permanently_fail_jobs(job_ids bigint[], error_message text default null)
     returns setof ${s}.jobs
     language sql volatile as $fn$
       with done as (
         delete from ${s}.jobs where id = any(permanently_fail_jobs.job_ids) and locked_at is null returning *
       ),
       kept as (${keep('done', `'failed'`, `coalesce(permanently_fail_jobs.error_message, 'Manually marked as failed')`, 'd.locked_by')}),
       told as (${told('done')})
       select done.* from done left join told on true
     $fn$`,

    `create or replace function ${s}.cancel_job(job_id bigint, reason text default null)
     returns table (outcome text, state text)
     language plpgsql volatile as $fn$
     declare
       v_job ${s}.jobs;
       v_state text;
       v_told integer;
     begin
       select * into v_job from ${s}.jobs j where j.id = cancel_job.job_id for update;
       if not found then${cancelBlocked}
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
         kept as (${keep('cancelled', `'cancelled'`, `'JQ_JOB_CANCELLED: ' || coalesce(d.cancel_reason_given, 'cancelled')`, 'null')}),
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
     $fn$`,

    `create or replace function ${s}.retry_jobs(job_ids bigint[]) returns setof ${s}.jobs
     language plpgsql volatile as $fn$
     declare
       v_ids bigint[];
     begin
       return query
         update ${s}.jobs j set attempts = 0, run_at = now(), cancel_requested_at = null, cancel_reason = null, updated_at = now()
         where j.id = any(retry_jobs.job_ids) and j.locked_at is null
           and (j.attempts >= j.max_attempts or j.cancel_requested_at is not null)
         returning j.*;
       with back as (
         insert into ${s}.jobs (id, task_identifier, queue_name, payload, priority, run_at, max_attempts, key, flags, errors, last_error, created_at${flowColumns})
         overriding system value
         select f.id, f.task_identifier, f.queue_name, f.payload, f.priority, now(), f.max_attempts, f.key, f.flags, f.errors, f.last_error, f.created_at${
           flows ? ', f.flow_id, f.flow_ref' : ''
         }${groups ? ', f.group_key' : ''}
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
           on conflict do nothing;${flows ? `\n         perform ${s}.reopen_flow_jobs(v_ids);` : ''}
         return query select * from ${s}.jobs j where j.id = any(v_ids);
       end if;
       perform pg_notify('${jobs}', '');
     end;
     $fn$`,
  ];
}
