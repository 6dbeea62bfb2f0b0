import { FINISHED_COLUMNS, finishedOfBlocked, finishedOfJob } from './1764300000000-flow-functions';
import { finishedChannel, quoteIdentifier } from './names';

/**
 * The SQL functions of flows (migration Flows1764300000000) that act on request: completion
 * from outside, a flow's cancel, and the workers' flow sweep. Written here once, as they were
 * with this migration: a later change writes a new migration.
 */
export function createFlowAdminFunctions(schema: string): string[] {
  const s = quoteIdentifier(schema);
  const finished = finishedChannel(schema).replace(/'/g, "''");

  return [
    // Completes jobs no worker holds (waiting, scheduled, retrying or blocked) with a result, for
    // completion from outside (approvals, webhooks). A job a worker holds is refused: nothing is
    // written then. Dependents unblock at the commit (the trigger). Returns the completed ids.
    `create or replace function ${s}.complete_jobs(job_ids bigint[], job_result jsonb)
     returns table (id bigint)
     language plpgsql volatile as $fn$
     #variable_conflict use_column
     declare
       v_held bigint;
     begin
       perform 1 from ${s}.jobs j where j.id = any(job_ids) order by j.id for update;
       select j.id into v_held from ${s}.jobs j where j.id = any(job_ids) and j.locked_at is not null order by j.id limit 1;
       if v_held is not null then
         raise exception 'JQ_JOB_RUNNING: job % is held by a worker; cancel it, or wait for it', v_held using errcode = '55006';
       end if;
       return query
       with done as (delete from ${s}.jobs j where j.id = any(job_ids) returning j.*),
       done_blocked as (delete from ${s}.blocked_jobs b where b.id = any(job_ids) returning b.*),
       kept as (
         insert into ${s}.finished_jobs (${FINISHED_COLUMNS})
         select ${finishedOfJob('d', `'completed'`, 'null', 'null', 'job_result')} from done d
         union all
         select ${finishedOfBlocked('b', `'completed'`, 'null', 'job_result')} from done_blocked b
         returning id
       ),
       told as (select pg_notify('${finished}', string_agg(k.id::text, ',')) from kept k having count(*) > 0)
       select k.id from kept k left join told on true;
     end;
     $fn$`,

    // Cancels a flow: its blocked jobs and the jobs no worker holds end cancelled now; running
    // ones are asked to (cancel_job), and end cancelled when their workers let go. Blocked jobs
    // go first, so that one a release unblocks meanwhile is met among the jobs.
    `create or replace function ${s}.cancel_flow(flow_id bigint, reason text default null)
     returns table (cancelled integer, requested integer)
     language plpgsql volatile as $fn$
     declare
       v_blocked integer;
       v_cancelled integer;
       v_requested integer;
     begin
       with gone as (delete from ${s}.blocked_jobs b where b.flow_id = cancel_flow.flow_id returning b.*),
       kept as (
         insert into ${s}.finished_jobs (${FINISHED_COLUMNS})
         select ${finishedOfBlocked('g', `'cancelled'`, `'JQ_JOB_CANCELLED: ' || coalesce(cancel_flow.reason, 'cancelled')`)} from gone g
         returning id
       )
       select count(*) into v_blocked from kept;
       select count(*) filter (where c.outcome = 'cancelled'), count(*) filter (where c.outcome = 'requested')
       into v_cancelled, v_requested
       from (select j.id from ${s}.jobs j where j.flow_id = cancel_flow.flow_id or (j.id = cancel_flow.flow_id and j.flow_id is null) order by j.id) ids
       cross join lateral ${s}.cancel_job(ids.id, cancel_flow.reason) c;
       return query select v_blocked + v_cancelled, v_requested;
     end;
     $fn$`,

    // The maintenance leader's safety net (maintenance/flow-sweeper.ts), for what the trigger did
    // not see: flow jobs that workers of an earlier version finished (their finished rows lack
    // the flow columns), and dependencies gone without a finished row. Up to $1 such jobs are
    // settled, and flows idle for $2 ms are counted again from their rows.
    `create or replace function ${s}.sweep_flows(max_jobs integer, idle_ms integer)
     returns table (settled integer, finished integer)
     language plpgsql volatile as $fn$
     declare
       v_lost bigint[];
       v_idle bigint[];
       v_finished bigint[];
     begin
       with lost as (
         -- only a running flow can have an edge left to settle: its edges by flow, not a walk of every edge
         select distinct on (e.dependency_id) e.dependency_id as id, e.flow_id, e.dependency_ref
         from ${s}.flows f join ${s}.job_dependencies e on e.flow_id = f.id
         where f.state = 'running' and e.state is null
           and not exists (select 1 from ${s}.jobs j where j.id = e.dependency_id)
           and not exists (select 1 from ${s}.blocked_jobs b where b.id = e.dependency_id)
         limit max_jobs
       ),
       marked as (
         update ${s}.finished_jobs f set flow_id = l.flow_id, flow_ref = l.dependency_ref
         from lost l where f.id = l.id and f.flow_id is null
         returning f.id
       )
       select array_agg(l.id order by l.id) into v_lost from lost l left join (select count(*) from marked) m on true;
       if v_lost is not null then
         perform ${s}.settle_flow_jobs(v_lost);
       end if;
       select array_agg(i.id) into v_idle from (
         select f.id from ${s}.flows f
         where f.state = 'running' and f.updated_at < now() - idle_ms * interval '1 millisecond'
         order by f.updated_at
         limit 100
         for update skip locked
       ) i;
       if v_idle is null then
         return query select coalesce(cardinality(v_lost), 0), 0;
         return;
       end if;
       -- a dependent an earlier version's worker finished: its edges name it, its flow and its ref
       update ${s}.finished_jobs f set flow_id = e.flow_id, flow_ref = e.job_ref
       from (select distinct on (d.job_id) d.job_id, d.flow_id, d.job_ref from ${s}.job_dependencies d where d.flow_id = any(v_idle)) e
       where f.id = e.job_id and f.flow_id is null;
       with counted as (
         update ${s}.flows f set updated_at = now(),
           unfinished = (select count(*) from ${s}.jobs j where j.flow_id = f.id)
                      + (select count(*) from ${s}.blocked_jobs b where b.flow_id = f.id)
         where f.id = any(v_idle)
         returning f.id, f.unfinished
       )
       select array_agg(id) filter (where unfinished = 0) into v_finished from counted;
       if v_finished is not null then
         perform ${s}.finish_flows(v_finished);
       end if;
       return query select coalesce(cardinality(v_lost), 0), coalesce(cardinality(v_finished), 0);
     end;
     $fn$`,
  ];
}
