/**
 * The counted claim of a limited task without group limits (worker/limited-claim.ts), in one
 * statement after the task's lock: it counts what the task holds and started within its rate's
 * window, claims what the limits leave (the general claim, sql/claim.ts, its limit computed
 * from the count), and records the starts. One round trip under the lock where the count, the
 * claim and the record took three: a rate-limited task's claims follow one another on that
 * lock across the cluster, so what a claim holds it for bounds the rate it can use.
 * `s` is the quoted schema.
 */

import { claimStatement } from './claim';
import { freesInMs, heldOfTask, rateWindow, staleRateClaim, storedLimitsOf } from './limits';

const task = '($1::text[])[1]';

/** The SQL types of claimCountedJobs' parameters, $1 to $11, for its PREPARE (db JobQueueDatabase.inMessage). */
export const CLAIM_COUNTED_TYPES = ['text[]', 'text[]', 'int', 'text', 'int', 'text[]', 'int', 'bigint', 'int', 'bigint[]', 'jsonb'] as const;

export function createCountedClaimQueries(s: string) {
  return {
    /**
     * claimJobs' parameters ($1 the task alone, $2 forbidden flags, $3 the jobs the worker asks
     * for, $4 the worker, $5 its free slots, $6 paused queues), then the limits: $7 the
     * concurrency (null: none), $8 the rate's window in ms and $9 its max (null, null: no rate),
     * $10 the worker's finished jobs whose release is unwritten (not held: sql/limits.ts
     * notFinishedBy), $11 the limits the worker believes set at run time (task_limits.limits,
     * null for none), from which it took $7 to $9. Claims min($3, $7 − held, $9 − started)
     * jobs, none when a rate's count is stale or when the limits stored differ from $11 (a
     * setTaskLimits the worker has not heard of yet: it claims again with them), marks min($5,
     * that) started, and records them as one start row when it has a rate.
     *
     * One row per claimed job, with the count beside it, or one row of the count alone (id null)
     * when it claimed none: held, asked (what it tried to claim), stale, limits_changed and
     * override (the limits stored), and frees_in_ms (when the window, this claim's starts
     * included, has room again; null while it has room). Sent in one message with the begin,
     * the task's lock and the commit (worker/claim-connection.ts oneMessage).
     */
    claimCountedJobs: claimStatement(s, {
      before: `
      rate_window as (${rateWindow(s, task, '$8')}),
      counted as (
        select ${heldOfTask(s, task, '$4::text', '$10::bigint[]')} as held,
          coalesce((select sum(started) from rate_window), 0)::int as started,
          $8::bigint is not null and ${staleRateClaim} as stale
      ),
      stored as (select ${storedLimitsOf(s, task)} as limits),
      asked as (
        select c.held, c.stale, (select limits from stored) is distinct from $11::jsonb as limits_changed, case when c.stale or (select limits from stored) is distinct from $11::jsonb then 0
          else greatest(0, least($3::int, coalesce($7::int - c.held, $3::int), coalesce($9::int - c.started, $3::int))) end::int as n
        from counted c
      ),`,
      limit: '(select n from asked)',
      started: 'least($5::int, (select n from asked))',
      after: `,
      recorded as (
        insert into ${s}.task_starts (task_identifier, started_at, started, per_ms)
        select ${task}, now(), n, $8::bigint from (select count(*)::int as n from claimed) c where c.n > 0 and $8::bigint is not null
      ),
      rate_after as (select started_at, started from rate_window union all select now(), (select count(*)::int from claimed))
      select c.*, a.held, a.n as asked, a.stale, a.limits_changed, (select limits from stored) as override, ${freesInMs('rate_after', '$8', '$9')} as frees_in_ms
      from asked a left join claimed c on true`,
    }),
  };
}
