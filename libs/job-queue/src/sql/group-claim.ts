/**
 * Limits per group (`@Task(id, { groupConcurrency, groupRateLimit })`, the job spec `group`): a
 * task with either is a limited task (sql/limits.ts), and its limited claim, under the task's
 * lock, claims its grouped jobs with claimGroupedJobs, then its jobs without a group with
 * claimUngroupedJobs (sql/claim.ts), then records the starts of each group (recordGroupStarts).
 * The lock serialises the task's claims across the cluster, so each one counts what every claim
 * before it committed: no group ever exceeds its limits. A group's rate counts rows of
 * `task_starts` with its `group_key`, kept and deleted as the task's own rate's rows are.
 * `s` is the quoted schema.
 */

import { claimUpdate } from './claim';
import { freesInMs, notFinishedBy } from './limits';

/** Jobs of task $1 with a group, waiting in no named queue: the rows of jobs_group_fetch_idx (alias `j`). */
const groupedJob = `j.task_identifier = $1::text and j.group_key is not null and j.is_available and j.queue_name is null`;

/** Per group of task $1, how many of its jobs workers hold, but worker `worker`'s finished jobs `unwritten` (sql/limits.ts notFinishedBy). */
const heldByGroup = (s: string, worker: string, unwritten: string) => `
  select j.group_key, count(*)::int as n from ${s}.jobs j
  where j.locked_by is not null and j.task_identifier = $1::text and j.group_key is not null and ${notFinishedBy(worker, unwritten)}
  group by j.group_key`;

/** The starts of task $1 within the window of $2 ms (alias `t`) that `also` selects. */
const groupWindow = (s: string, also: string) =>
  `${s}.task_starts t where t.task_identifier = $1::text and ${also} and t.started_at >= now() - $2::bigint * interval '1 millisecond'`;

/** The first `limit` jobs of group `group` the claim may take now (none of the flags $2), in claim order, with the row version the statement saw. */
const groupJobs = (s: string, group: string, limit: string) => `
  select j.id, j.xmin as version, j.priority, j.run_at from ${s}.jobs j
  where ${groupedJob} and j.group_key = ${group}
    and j.run_at <= now() and j.cancel_requested_at is null and not (j.flags && $2::text[])
  order by j.priority, j.run_at, j.id
  limit ${limit}`;

export function createGroupClaimQueries(s: string) {
  return {
    /**
     * Up to $3 jobs of task $1 with a group, carrying none of the flags $2, for worker $4 (which
     * must still have its row), the first $5 of them marked started, taking at most what each
     * group's limits leave: $6 its concurrency (held jobs: locked by a worker, running or
     * prefetched; not worker $4's finished jobs $9 whose release it has not written yet, as
     * sql/limits.ts countTaskSlots) and $8 starts within $7 ms (null, null: no rate). By priority,
     * run_at and id across groups.
     *
     * - `groups`: every group with a waiting job, by a skip scan of jobs_group_fetch_idx (a few
     *   µs a group), so a group at its limit, however long its backlog, holds up no other;
     * - `rooms`: each group's room, from its held jobs and its window's starts;
     * - `heads`, `first_groups`: the $3 groups with room whose next job comes first (a job of
     *   any other group has $3 jobs ahead of it: those heads);
     * - `picks`: those groups' first jobs, as many as each one's room, read without locks, so a
     *   claim reads about $3 jobs a group of them, not of every group;
     * - `locked`: the first $3 of them, locked one by one (SKIP LOCKED) at the version the
     *   statement's snapshot saw, so that a job changed since (cancelled, rescheduled, replaced
     *   under its key) is left, not claimed for what it became. Claims of the task are
     *   serialised by its lock: a row is skipped only for such a change.
     *
     * Each row also carries how many picks there were: fewer than $3 means nothing else within
     * the limits is waiting now.
     */
    claimGroupedJobs: `
      with recursive groups as (
        (select j.group_key from ${s}.jobs j where ${groupedJob} order by j.group_key limit 1)
        union all
        select (select j.group_key from ${s}.jobs j where ${groupedJob} and j.group_key > g.group_key order by j.group_key limit 1)
        from groups g where g.group_key is not null
      ),
      held as (${heldByGroup(s, '$4::text', '$9::bigint[]')}),
      started as (
        select t.group_key, sum(t.started)::int as n from ${s}.task_starts t
        where $7::bigint is not null and t.task_identifier = $1::text and t.group_key is not null
          and t.started_at >= now() - $7::bigint * interval '1 millisecond'
        group by t.group_key
      ),
      rooms as (
        select g.group_key,
          least(coalesce($6::int - h.n, $6::int, $3::int), coalesce($8::int - st.n, $8::int, $3::int), $3::int) as room
        from groups g
        left join held h on h.group_key = g.group_key
        left join started st on st.group_key = g.group_key
        where g.group_key is not null
      ),
      heads as materialized (
        select r.group_key, r.room, h.priority, h.run_at, h.id
        from rooms r
        cross join lateral (${groupJobs(s, 'r.group_key', '1')}) h
        where r.room > 0
      ),
      first_groups as (select h.group_key, h.room from heads h order by h.priority, h.run_at, h.id limit $3),
      picks as materialized (
        select c.id, c.version, c.priority, c.run_at
        from first_groups r
        cross join lateral (${groupJobs(s, 'r.group_key', 'r.room')}) c
      ),
      locked as materialized (
        select l.id, l.priority, l.run_at
        from (select p.* from picks p order by p.priority, p.run_at, p.id limit $3 offset 0) f
        cross join lateral (
          select j.id, j.priority, j.run_at from ${s}.jobs j
          where j.id = f.id and j.xmin = f.version
          for update of j skip locked
        ) l
        where exists (select 1 from ${s}.workers w where w.id = $4)
      ),
      picked as (select array_agg(id order by priority, run_at, id) as ids from locked)
      ${claimUpdate(s, '(select ids from picked)::bigint[]', '(select ids[1:$5] from picked)::bigint[]')}, (select count(*) from picks)::int as candidate_count,
        (select count(*) from rooms where room <= 0)::int as full_groups`,

    /**
     * When claimGroupedJobs claimed nothing: whether a group of task $1 holds $2 jobs or more
     * (its groupConcurrency; not counting worker $3's finished jobs $4 whose release it has not
     * written yet), so that a job's end may free a slot the claim could use.
     */
    groupAtLimit: `select exists (select 1 from (${heldByGroup(s, '$3::text', '$4::bigint[]')}) h where h.n >= $2::int) as at_limit`,

    /** $1 task, $2 the group rate's window in ms, $3 the groups of the jobs this claim started (one entry per job): recorded at the claim's time. */
    recordGroupStarts: `
      insert into ${s}.task_starts (task_identifier, group_key, started_at, started, per_ms)
      select $1::text, g.group_key, now(), count(*)::int, $2::bigint from unnest($3::text[]) g(group_key)
      where g.group_key is not null
      group by g.group_key`,

    /**
     * $1 task, $2 the group rate's window in ms, $3 its max: in how many ms the first of its groups
     * whose window is full has room again (null: none is full), as the task's own rate computes
     * it (sql/limits.ts freesInMs), for the worker's wake-up.
     */
    groupRateFreesInMs: `
      select min(${freesInMs(`(select t.started_at, t.started from ${groupWindow(s, 't.group_key = g.group_key')}) gw`)})::float8 as frees_in_ms
      from (select distinct t.group_key from ${groupWindow(s, 't.group_key is not null')}) g`,
  };
}
