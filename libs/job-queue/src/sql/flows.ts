/**
 * Flows: jobs that wait for other jobs (migration Flows1764300000000 made the tables and the
 * functions). Adding a flow (addFlow), what a handler reads of its dependencies
 * (dependencyResults), a chain's next job (continueJob), reading, cancelling and completing
 * from outside, and the leader's safety net (sweepFlows, deleteFinishedFlows). Dependents
 * unblock in the statement that finishes their last dependency: the trigger on finished_jobs
 * does it, whichever statement finishes a flow's job. `s` is the quoted schema, `channel` the
 * jobs channel.
 */

import { DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY } from '../core/job-defaults';
import { epochMicroseconds } from './epoch-microseconds';

export function createFlowQueries(s: string, channel: string) {
  return {
    /** $1 the steps (json text, in an order where each depends only on steps before it), $2 $3 $4 the adding span's trace columns or nulls. */
    addFlow: `
      select f.ref, f.id::text as id, f.blocked, ${epochMicroseconds('f.run_at')} as run_at_us, ${epochMicroseconds('f.created_at')} as created_at_us
      from ${s}.add_flow_unchecked($1::jsonb, $2::uuid, $3::bigint, $4::smallint) f`,

    /** $1 job id: its direct dependencies as they ended (unsettled ones too, with a null state). */
    dependencyResults: `
      select e.dependency_ref as ref, e.dependency_id::text as job_id, e.policy, e.state, e.result, e.error
      from ${s}.job_dependencies e where e.job_id = $1::bigint order by e.dependency_ref`,

    /**
     * Adds the next job of job $1's chain (held by worker $2) in the transaction that completes
     * it: the same flow (a job added alone starts its own, whose id is the job's), the same
     * ref, and the dependents of $1 wait for the new job instead (the edges move). $3
     * identifier, $4 payload (json text), $5 queue, $6 run_at, $7 max_attempts, $8 priority,
     * $9 flags. Nothing is added if the worker no longer holds the job.
     */
    continueJob: `
      with current as (
        select j.id, coalesce(j.flow_id, j.id) as flow_id, j.flow_ref, j.flow_id is null as alone
        from ${s}.jobs j where j.id = $1::bigint and j.locked_by = $2::text
      ),
      marked as (update ${s}.jobs j set flow_id = j.id from current c where j.id = c.id and c.alone),
      counted as (
        insert into ${s}.flows (id, unfinished) select c.flow_id, 2 from current c
        on conflict (id) do update set unfinished = ${s}.flows.unfinished + 1, state = 'running', finished_at = null, updated_at = now()
      ),
      queue as (insert into ${s}.job_queues (queue_name) select $5::text from current where $5::text is not null on conflict do nothing),
      added as (
        insert into ${s}.jobs (task_identifier, payload, queue_name, run_at, max_attempts, priority, flags, flow_id, flow_ref)
        select $3::text, coalesce($4::jsonb, '{}'::jsonb), $5::text, coalesce($6::timestamptz, now()), coalesce($7::integer, ${DEFAULT_MAX_ATTEMPTS}),
          coalesce($8::integer, ${DEFAULT_PRIORITY}), coalesce($9::text[], '{}'), c.flow_id, c.flow_ref
        from current c
        returning id, run_at, flow_id
      ),
      moved as (update ${s}.job_dependencies e set dependency_id = a.id from added a where e.dependency_id = $1::bigint),
      notified as (select pg_notify('${channel}', '') from added where run_at <= now())
      select a.id::text as id, a.flow_id::text as flow_id from added a left join notified on true`,

    /** $1 flow id: its row (none for a job added alone that never continued). */
    getFlow: `select f.id::text as id, f.state, f.unfinished, f.created_at, f.finished_at from ${s}.flows f where f.id = $1::bigint`,

    /** $1 flow id: its edges (job, dependency by ref and id, policy, and how the dependency ended). */
    getFlowEdges: `
      select e.job_id::text as job_id, e.dependency_ref, e.dependency_id::text as dependency_id, e.policy, e.state
      from ${s}.job_dependencies e where e.flow_id = $1::bigint order by e.job_id, e.dependency_ref`,

    /** $1 flow id: the ids of its jobs, in every table (a job added alone is its own flow). */
    getFlowJobIds: `
      select j.id::text as id from ${s}.jobs j where j.flow_id = $1::bigint or (j.id = $1::bigint and j.flow_id is null)
      union select b.id::text from ${s}.blocked_jobs b where b.flow_id = $1::bigint
      union select f.id::text from ${s}.finished_jobs f where f.flow_id = $1::bigint or (f.id = $1::bigint and f.flow_id is null)`,

    /** $1 flow id, $2 reason: see cancel_flow() in the migration. */
    cancelFlow: `select cancelled, requested from ${s}.cancel_flow($1::bigint, $2::text)`,

    /** $1 ids, $2 result (json text or null): see complete_jobs(bigint[], jsonb) in the migration (JQ_JOB_RUNNING for a held job). */
    completeJobsWithResult: `select id::text as id from ${s}.complete_jobs($1::bigint[], $2::jsonb)`,

    /** The leader's safety net: $1 jobs at most to settle, flows idle for $2 ms counted again (sweep_flows() in the migration). */
    sweepFlows: `select settled, finished from ${s}.sweep_flows($1::integer, $2::integer)`,

    /**
     * Up to $2 flows finished more than $1 ms ago that no finished job of theirs is left of
     * (retention deleted them): deleted with their edges.
     */
    deleteFinishedFlows: `
      with gone as (
        select f.id from ${s}.flows f
        where f.state <> 'running' and f.finished_at < now() - $1::float8 * interval '1 millisecond'
          and not exists (select 1 from ${s}.finished_jobs m where m.flow_id = f.id)
        order by f.finished_at
        limit $2
        for update skip locked
      ),
      edges as (delete from ${s}.job_dependencies e using gone g where e.flow_id = g.id),
      flows as (delete from ${s}.flows f using gone g where f.id = g.id returning 1)
      select count(*)::int as deleted from flows`,
  };
}
