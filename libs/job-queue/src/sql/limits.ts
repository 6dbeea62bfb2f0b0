/**
 * Concurrency limits (`@Task(id, { globalConcurrency })`, control/task-limits.ts): a limited
 * task is left out of the general claim's tasks ($1 of claimJobs) and claimed by a claim of its
 * own, in one transaction on the claim connection (worker/limited-claim.ts):
 *
 *   lockTaskLimit → countHeldJobs → claimJobs with $1 = [task], $3 = at most limit − held → commit
 *
 * The lock serialises the limited claims of one task across the cluster; each statement after
 * it takes a snapshot that sees every claim committed before the lock was granted, so `held` is
 * exact and the claim never takes more than the free slots. Held jobs are read from the rows
 * (`locked_by is not null`: running or prefetched), so every way an attempt ends (a release, a
 * rescue of a dead worker's jobs, a give-back, a cancel) frees its slot with no counter to keep.
 * `s` is the quoted schema.
 */

import { advisoryLockClass } from './identifier';

export function createLimitQueries(s: string) {
  const lockClass = advisoryLockClass(s, 'task_limit');
  return {
    /** $1 task: the task's limit lock (two-int key: class, hash of the task) until the transaction ends. */
    lockTaskLimit: `select pg_advisory_xact_lock(${lockClass}, hashtext($1::text))::text as locked`,

    /** $1 task: how many of its jobs workers hold (claimed, running or prefetched), read from jobs_locked_by_idx. */
    countHeldJobs: `select count(*)::int as held from ${s}.jobs j where j.locked_by is not null and j.task_identifier = $1::text`,
  };
}
