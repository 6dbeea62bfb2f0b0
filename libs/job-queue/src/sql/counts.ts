/**
 * Counting jobs without walking the backlog (migration JobCounts1764500000000): countJobs, and
 * the maintenance leader's fold of the counters' deltas. `s` is the quoted schema.
 */

import { activeState } from './read';

/**
 * The jobs of `jobs` that are not waiting in the usual way, each kind from the index that holds
 * only it, so that the work is that of the jobs held, failing, left over and scheduled, never of
 * the jobs due: held (running, or prefetched and waiting) through jobs_locked_by_idx, leftovers
 * (done, not moved yet) through jobs_leftover_idx, retrying through jobs_retrying_idx, and
 * scheduled through the future range of jobs_scheduled_idx. Disjoint, so that each is counted once.
 */
const apartJobs = (s: string) => `
  select * from ${s}.jobs j where j.locked_by is not null
  union all
  select * from ${s}.jobs j where j.locked_by is null and j.locked_at is null and (j.attempts >= j.max_attempts or j.cancel_requested_at is not null)
  union all
  select * from ${s}.jobs j where j.locked_by is null and j.locked_at is null
    and j.attempts > 0 and j.attempts < j.max_attempts and j.cancel_requested_at is null
  union all
  select * from ${s}.jobs j where j.locked_by is null and j.locked_at is null
    and j.attempts = 0 and j.attempts < j.max_attempts and j.cancel_requested_at is null and j.run_at > j.created_at and j.run_at > now()`;

export function createCountQueries(s: string) {
  return {
    /**
     * Counts by state, task and queue: the unfinished jobs' totals from job_counts and the
     * deltas not folded yet, of which those not waiting are counted apart (apartJobs) and the
     * rest are waiting; blocked jobs' totals likewise; finished jobs' from finished_counts.
     * Exact in the statement's snapshot, and as cheap with a million jobs waiting as with none.
     */
    countJobs: `
      with totals as (
        select c.place, c.task_identifier, c.queue_name, sum(c.count)::bigint as count
        from (select place, task_identifier, queue_name, count from ${s}.job_counts
              union all select place, task_identifier, queue_name, delta from ${s}.job_count_deltas) c
        group by 1, 2, 3
      ),
      apart as (
        select ${activeState('j')} as state, j.task_identifier, coalesce(j.queue_name, '') as queue_name, count(*)::bigint as count
        from (${apartJobs(s)}) j
        group by 1, 2, 3
      ),
      apart_totals as (select task_identifier, queue_name, sum(count)::bigint as count from apart group by 1, 2)
      select state, task_identifier, nullif(queue_name, '') as queue_name, count::text from apart
      union all
      select 'waiting', t.task_identifier, nullif(t.queue_name, ''), (t.count - coalesce(a.count, 0))::text
      from totals t left join apart_totals a on a.task_identifier = t.task_identifier and a.queue_name = t.queue_name
      where t.place = 'jobs' and t.count - coalesce(a.count, 0) <> 0
      union all
      select 'blocked', t.task_identifier, nullif(t.queue_name, ''), t.count::text from totals t where t.place = 'blocked_jobs' and t.count <> 0
      union all
      select state, task_identifier, nullif(queue_name, ''), sum(count)::bigint::text
      from ${s}.finished_counts
      group by 1, 2, 3
      having sum(count) <> 0`,

    /**
     * Folds up to $1 deltas into job_counts (the maintenance leader, each round): they leave
     * job_count_deltas and join their counts in one statement, so that a read sees each once.
     * Skips deltas another fold holds. Returns the number folded.
     */
    foldJobCounts: `
      with moved as (
        -- ctid = any(array): a TID scan of the rows picked; joined to them instead, each batch read the whole table
        delete from ${s}.job_count_deltas d
        where d.ctid = any(array(select ctid from ${s}.job_count_deltas limit $1 for update skip locked))
        returning d.place, d.task_identifier, d.queue_name, d.delta
      ),
      summed as (
        select place, task_identifier, queue_name, sum(delta)::bigint as delta from moved group by 1, 2, 3 having sum(delta) <> 0
      ),
      folded as (
        insert into ${s}.job_counts as c (place, task_identifier, queue_name, count)
        select place, task_identifier, queue_name, delta from summed
        order by 1, 2, 3 -- one order of row locks for every fold
        on conflict (place, task_identifier, queue_name) do update set count = c.count + excluded.count
      )
      select count(*)::int as folded from moved`,

    /** Drops the counts that reached zero (tasks and queues with no unfinished job left). */
    deleteEmptyJobCounts: `delete from ${s}.job_counts where count = 0`,
  };
}
