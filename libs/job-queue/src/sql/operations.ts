import { tellFinished } from './finished';
import { notPaused } from './pauses';
import { queueHead } from './queue-head';

/**
 * The statements operators' tools read and act with: the dashboard, the health indicator,
 * telemetry (all optional integrations, behind subpath exports) and the admin CLI (the bin);
 * the SQL lives here so that each runs like every other statement. `s` is the quoted schema,
 * `finished` the finished channel (waiters are told of a deleted job).
 */
export function createOperationsQueries(s: string, finished: string) {
  return {
    /**
     * Completed and failed jobs in each of the last 60 minutes of the database's clock, the
     * current one last, empty ones included: (minute as epoch ms, completed, failed), from
     * finished_jobs_state_idx. The minutes and the finish times come from one clock, so a
     * process whose clock differs draws the same chart. Only what retention still keeps is counted.
     */
    finishedPerMinute: `
      with minutes as (
        select m from generate_series(date_trunc('minute', now()) - interval '59 minutes', date_trunc('minute', now()), interval '1 minute') m
      ),
      counted as (
        select date_trunc('minute', f.finished_at) as m,
               count(*) filter (where f.state = 'completed')::int as completed, count(*) filter (where f.state = 'failed')::int as failed
        from ${s}.finished_jobs f
        where f.state in ('completed', 'failed') and f.finished_at >= date_trunc('minute', now()) - interval '59 minutes'
        group by 1
      )
      select (extract(epoch from minutes.m) * 1000)::bigint::text as minute, coalesce(c.completed, 0) as completed, coalesce(c.failed, 0) as failed
      from minutes left join counted c on c.m = minutes.m
      order by minutes.m`,

    /**
     * Named queues held up behind a failing head: the queue's first job in queue order (as
     * the claim sees it: due, or waiting for its retry) has failed at least once. With how
     * many jobs wait behind it. At most 50, those with the most waiting first.
     *
     * Only a queue with an available job that has had an attempt can be held up, so the heads
     * are looked up for those queues alone (one pass over jobs finds them), never for every
     * queue: with 100,000 queues a probe of each took 0.2 to 1 s. This also finds a queue whose
     * job_queues row is missing (see startableJobs).
     */
    blockedQueues: `
      with tried as (
        select distinct t.queue_name from ${s}.jobs t
        where t.queue_name is not null and t.is_available and t.attempts > 0 and t.cancel_requested_at is null
      )
      select q.queue_name, h.id::text as head_id, h.task_identifier, h.attempts, h.max_attempts, h.run_at,
             (select count(*) from ${s}.jobs w where w.queue_name = q.queue_name and w.is_available)::int - 1 as behind
      from tried q
      cross join lateral (${queueHead('q.queue_name', s, 'e.id, e.task_identifier, e.attempts, e.max_attempts, e.run_at')}) h
      where h.attempts > 0
      order by behind desc, q.queue_name
      limit 50`,

    /** Every worker row, oldest first, with the jobs it runs (ids, up to 20) and how many it holds prefetched. */
    listWorkers: `
      select w.id, w.hostname, w.pid, w.concurrency, w.started_at, w.heartbeat_at, w.timeout_ms,
             array(select j.id::text from ${s}.jobs j where j.locked_by = w.id and j.started_at is not null order by j.id limit 20) as running,
             (select count(*) from ${s}.jobs j where j.locked_by = w.id and j.started_at is not null)::int as running_count,
             (select count(*) from ${s}.jobs j where j.locked_by = w.id and j.started_at is null)::int as prefetched_count,
             now() as now
      from ${s}.workers w
      order by w.started_at, w.id`,

    /** The tasks that have finished jobs (from finished_counts: a few rows per task), for the dashboard's task filter. */
    finishedTasks: `select distinct task_identifier from ${s}.finished_counts order by 1`,

    /** Due jobs no worker holds, paused ones left out (sql/pauses.ts): how many, and the age in seconds of the oldest (null when none). */
    dueJobs: `
      select count(*)::int as count, extract(epoch from now() - min(j.run_at))::float8 as oldest_age
      from ${s}.jobs j
      where j.is_available and j.run_at <= now() and j.cancel_requested_at is null and ${notPaused('j', s)}`,

    /** The due job no worker holds that has waited longest (as dueJobs counts them), or no row. */
    oldestDueJob: `
      select j.id::text as id, j.task_identifier, j.queue_name, j.run_at, extract(epoch from now() - j.run_at)::float8 as age
      from ${s}.jobs j
      where j.is_available and j.run_at <= now() and j.cancel_requested_at is null and ${notPaused('j', s)}
      order by j.run_at, j.id
      limit 1`,

    /**
     * Jobs a worker could start now and none has taken: how many, and the age in seconds of
     * the oldest (null when none). As the claim sees them (claimJobs): a named queue's job
     * counts only as the head of an unlocked queue, so a queue that waits by design (behind a
     * running job, or a head waiting for its retry) is no backlog. Paused jobs are left out as
     * the claim leaves them (sql/pauses.ts): a paused queue, and a queue whose head's task is
     * paused, wait by design too. For the health indicator and the telemetry gauges.
     */
    startableJobs: `
      with startable as (
        select j.run_at from ${s}.jobs j
        where j.queue_name is null and j.is_available and j.run_at <= now() and j.cancel_requested_at is null and ${notPaused('j', s)}
        union all
        select h.run_at from ${s}.job_queues q
        cross join lateral (${queueHead('q.queue_name', s, 'e.run_at, e.task_identifier, e.queue_name')}) h
        where q.locked_at is null and h.run_at <= now() and ${notPaused('h', s)}
      )
      select count(*)::int as count, extract(epoch from now() - min(run_at))::float8 as oldest_age from startable`,

    /**
     * $1 id: deletes the job unless a worker holds it (cancel it first), from whichever
     * table has it, with its durable steps, and tells its waiters. Returns `deleted` and `held`.
     */
    deleteJob: `
      with gone as (
        delete from ${s}.jobs where id = $1::bigint and locked_at is null returning id
      ),
      gone_finished as (
        delete from ${s}.finished_jobs where id = $1::bigint returning id
      ),
      -- a flow's blocked job: its dependents are settled as if it had been cancelled (the flow sweep)
      gone_blocked as (
        delete from ${s}.blocked_jobs where id = $1::bigint returning id
      ),
      deleted as (select id from gone union all select id from gone_finished union all select id from gone_blocked),
      steps as (delete from ${s}.job_steps st where st.job_id in (select id from deleted)),
      told as (${tellFinished(finished, 'deleted')})
      select (select count(*) from deleted)::int as deleted, (select count(*) from told)::int as told,
             exists (select 1 from ${s}.jobs where id = $1::bigint and locked_at is not null) as held`,

    /**
     * Retries a page of the failed jobs of task $1, newest first after the cursor
     * ($2 finished_at as text, $3 id; nulls for the first page), 1,000 at a time. Returns
     * how many were retried and the page's last key, null after the last page.
     */
    retryFailedOfTask: `
      with page as materialized (
        select f.id, f.finished_at from ${s}.finished_jobs f
        where f.task_identifier = $1 and f.state = 'failed'
          and (f.finished_at, f.id) < (coalesce($2::timestamptz, 'infinity'), coalesce($3::bigint, 9223372036854775807))
        order by f.finished_at desc, f.id desc
        limit 1000
      ),
      retried as (select r.id from ${s}.retry_jobs(array(select id from page)) r)
      select (select count(*) from retried)::int as retried,
             (select case when count(*) = 1000 then min(finished_at)::text end from page) as next_at,
             (select id::text from page order by finished_at, id limit 1) as next_id`,
  };
}
