/**
 * Task limits (`@Task(id, { globalConcurrency, rateLimit })`, overridden at run time by
 * setTaskLimits; control/task-limits.ts): a limited task is left out of the general claim's
 * tasks ($1 of claimJobs) and claimed by a claim of its own, in one transaction on the claim
 * connection (worker/limited-claim.ts):
 *
 *   begin + lockTaskLimitOf (and the limits set at run time) → claimCountedJobs (sql/counted-claim.ts: count, claim, record) → commit;
 *   with group limits: … → countTaskSlots → claimGroupedJobs, claimUngroupedJobs → recordStarts → commit
 *
 * The lock serialises the limited claims of one task across the cluster; each statement after
 * it takes a snapshot that sees every claim committed before the lock was granted, so what it
 * counts is exact and the claim never takes more than the limits leave.
 *
 * - Concurrency: held jobs are read from the rows (`locked_by is not null`: running or
 *   prefetched), so every way an attempt ends (a release, a rescue of a dead worker's jobs, a
 *   give-back, a cancel) frees its slot with no counter to keep.
 * - Rate: the starts of the window are rows of `task_starts`, one per claim, at the claim's
 *   transaction time, which is also the `started_at` the claim gives its jobs. A claim at time
 *   t counts the starts at t − per or later; whatever order the claims' times come in, the last
 *   claim to record a start inside any window of length `per` counted every start recorded in
 *   it before, so no such window holds more than `max`. That needs every row a claim may count
 *   to be there: claims never delete rows; the maintenance leader deletes those older than
 *   their window, kept at least RATE_START_RETENTION (deleteOldStarts), and a claim whose
 *   transaction time is older than RATE_CLAIM_MAX_AGE claims nothing (its window could reach
 *   rows deleted since it began).
 *
 * `s` is the quoted schema, `tell` the notification that the controls changed.
 */

import { advisoryLockClass, quoteLiteral } from './identifier';
import { unleasedHeld } from './slot-leases';

/** How long a start is kept at least, whatever its window: a window widened at run time up to this counts every start. */
export const RATE_START_RETENTION = "interval '1 hour'";

/** A rate-limited claim whose transaction began longer ago than this claims nothing (well under the retention's margin). */
const RATE_CLAIM_MAX_AGE = "interval '30 seconds'";

/**
 * In ms from this statement's moment, when the window `w` (rows started_at, started; $2 the
 * window's length in ms, $3 the rate's max) next has room for a start: when its newest row at
 * which `max` starts are reached leaves the window (counted from that row, 1 ms after: a start
 * exactly `per` old still counts). Null while it has room. From clock_timestamp(), not the
 * transaction's now(): a claim's transaction began before its lock wait, and the worker that
 * waits would wake that much late.
 */
export const freesInMs = (w: string, perMs = '$2', max = '$3') => `(
  select (extract(epoch from (x.started_at - clock_timestamp())) * 1000 + ${perMs}::bigint + 1)::float8
  from (select started_at, sum(started) over (order by started_at desc) as newer from ${w}) x
  where x.newer >= ${max}::int
  order by x.started_at desc limit 1)`;

/** The starts of task `task`'s own rate (not its groups': sql/group-claim.ts) within `perMs` ms of the transaction's time. */
export const rateWindow = (s: string, task: string, perMs: string) =>
  `select started_at, started from ${s}.task_starts where task_identifier = ${task} and group_key is null and started_at >= now() - ${perMs}::bigint * interval '1 millisecond'`;

/**
 * How many of task `task`'s jobs workers hold (claimed, running or prefetched), but worker
 * `worker`'s finished jobs whose release is unwritten (`unwritten`): each lease of the task
 * (sql/slot-leases.ts) counts as its slots, and every other worker as the rows it holds.
 */
export const heldOfTask = (s: string, task: string, worker: string, unwritten: string) =>
  `((select coalesce(sum(l.slots), 0) from ${s}.task_slots l where l.task_identifier = ${task})
    + (${unleasedHeld(s, task, notFinishedBy(worker, unwritten))}))::int`;

/** The limits setTaskLimits stored for task `task` (task_limits.limits: what they override), null for none. */
export const storedLimitsOf = (s: string, task: string) => `(select l.limits from ${s}.task_limits l where l.task_identifier = ${task})`;

/** A rate-limited claim whose transaction began too long ago counts nothing: its window could reach starts deleted since. */
export const staleRateClaim = `clock_timestamp() - now() > ${RATE_CLAIM_MAX_AGE}`;

/**
 * Job `j` is not one of worker `worker`'s finished jobs whose release it has not written yet
 * (`ids`): its attempt is over, though its row stays locked until the release lands. Limited
 * claims leave those out of what the claiming worker holds (if it dies first, every worker
 * counts them, and what it claimed since, until the rescue: more held than runs, never less).
 */
export const notFinishedBy = (worker: string, ids: string) => `not (j.locked_by = ${worker} and j.id = any(${ids}))`;

export function createLimitQueries(s: string, tell: string) {
  const lockClass = advisoryLockClass(s, 'task_limit');
  const windowOf = rateWindow(s, '$1::text', '$2');
  return {
    /**
     * The task's limit lock (two-int key: class, hash of the task) until the transaction ends, and
     * the limits set for it at run time (override, null for none), so that a claim that begins
     * after setTaskLimits returned follows them, whatever the worker has heard. Without
     * parameters (the task a literal), so that it goes with the claim's begin in one round trip
     * (worker/claim-connection.ts).
     */
    lockTaskLimitOf: (task: string) => `select pg_advisory_xact_lock(${lockClass}, hashtext(${quoteLiteral(task)}))::text as locked,
      ${storedLimitsOf(s, quoteLiteral(task))} as override`,

    /**
     * $1 task, $2 its rate's window in ms and $3 its max (null, null without a rate), $4 the
     * claiming worker and $5 its finished jobs whose release it has not written yet: how many of
     * the task's jobs workers hold (claimed, running or prefetched, from jobs_locked_by_idx), how
     * many started within the window, and in how many ms the window has room again when it has
     * none. The claiming worker's finished jobs are not counted: their attempts are over, though
     * their rows stay locked until the release lands (if the worker dies first, every worker
     * counts them, and what it claimed since, until the rescue: more held than runs, never less).
     * A job of the list that another worker holds since (its release landed, a retry claimed it)
     * counts, being no longer this worker's. A worker with a lease of the task (sql/slot-leases.ts)
     * counts as its lease, whatever it holds.
     */
    countTaskSlots: `
      with w as (${windowOf})
      select ${heldOfTask(s, '$1::text', '$4::text', '$5::bigint[]')} as held,
        coalesce((select sum(started) from w), 0)::int as started,
        ${freesInMs('w')} as frees_in_ms,
        ${staleRateClaim} as stale`,

    /**
     * $1 task, $2 window ms, $3 max, $4 jobs this claim started: records them at the claim's
     * time, and says in how many ms the window, these included, has room again (null: it has
     * room now).
     */
    recordStarts: `
      with recorded as (insert into ${s}.task_starts (task_identifier, started_at, started, per_ms) values ($1::text, now(), $4::int, $2::bigint)),
      w as (${windowOf} union all select now(), $4::int)
      select ${freesInMs('w')} as frees_in_ms`,

    /** The starts older than their window and than RATE_START_RETENTION (the maintenance leader's). */
    deleteOldStarts: `
      with gone as (delete from ${s}.task_starts where started_at < now() - greatest(per_ms * interval '1 millisecond', ${RATE_START_RETENTION}) - interval '1 minute' returning 1)
      select count(*)::int as deleted from gone`,

    /** Every task's limits set at run time (setTaskLimits): the JSON object of what each overrides. */
    readTaskLimits: `select task_identifier, limits from ${s}.task_limits`,

    /** $1 task, $2 the limits it overrides (a JSON object): merged into what was set before; tells the workers. Returns what is now set. */
    setTaskLimits: `
      with saved as (
        insert into ${s}.task_limits (task_identifier, limits) values ($1::text, $2::jsonb)
        on conflict (task_identifier) do update set limits = ${s}.task_limits.limits || excluded.limits, updated_at = now()
        returning limits
      ), told as (${tell})
      select (select limits from saved) as limits, (select count(*) from told)::int as told`,

    /** $1 task: back to the decorator's limits; tells the workers. */
    resetTaskLimits: `
      with gone as (delete from ${s}.task_limits where task_identifier = $1::text returning 1), told as (${tell})
      select (select count(*) from gone)::int as reset, (select count(*) from told)::int as told`,
  };
}
