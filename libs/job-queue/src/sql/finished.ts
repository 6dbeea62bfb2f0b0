/**
 * Shared fragments of the end of the data path (add → row + NOTIFY → claim → run → release):
 * a job that completes, fails for good or is cancelled leaves `jobs` for `finished_jobs`, and
 * its waiters are told. Used by sql/release.ts, sql/workers.ts, sql/maintenance.ts, sql/operations.ts.
 */
import { MAX_TOLD_IDS_LENGTH } from './notify-after';

/**
 * The insert that keeps jobs deleted from `jobs` (rows of the CTE `source`, 'name alias', with the columns
 * of a jobs row) in finished_jobs: every statement that finishes jobs uses it. Expressions
 * may override the columns that differ by case; the rest are copied.
 */
export function keepFinished(
  s: string,
  source: string,
  columns: {
    state: string;
    lastError: string;
    workerId: string;
    result?: string;
    progress?: string;
    errors?: string;
    attempts?: string;
    startedAt?: string;
    payload?: string;
    where?: string;
  },
): string {
  const f = source.split(' ').pop()!; // 'finished f': the alias
  return `
    insert into ${s}.finished_jobs (id, task_identifier, queue_name, payload, priority, run_at, attempts, max_attempts, key, flags,
      state, result, progress, errors, last_error, worker_id, created_at, started_at, flow_id, flow_ref, group_key)
    select ${f}.id, ${f}.task_identifier, ${f}.queue_name, ${columns.payload ?? `${f}.payload`}, ${f}.priority, ${f}.run_at, ${columns.attempts ?? `${f}.attempts`},
      ${f}.max_attempts, ${f}.key, ${f}.flags, ${columns.state}, ${columns.result ?? 'null'}, ${columns.progress ?? `${f}.progress`},
      ${columns.errors ?? `${f}.errors`}, ${columns.lastError}, ${columns.workerId}, ${f}.created_at, ${columns.startedAt ?? `${f}.started_at`},
      ${f}.flow_id, ${f}.flow_ref, ${f}.group_key
    from ${source}
    ${columns.where ? `where ${columns.where}` : ''}`;
}

/** How many entries a job's `errors` keeps: the latest, one per failed attempt or snooze. */
export const MAX_KEPT_ERRORS = 25;

/**
 * The jsonb array `errors` (null for none) with `entry` appended, keeping only its latest
 * MAX_KEPT_ERRORS entries in order: a job snoozed or retried without end would otherwise grow
 * its row, and every read and release of it, without end. Every statement that records an
 * attempt's error uses it.
 */
export const withError = (errors: string, entry: string) =>
  `jsonb_path_query_array(coalesce(${errors}, '[]'::jsonb) || ${entry}, '$[last - ${MAX_KEPT_ERRORS - 1} to last]')`;

/** The last error of a cancelled job, from the row `r`. */
export const cancelledError = (r: string) => `'JQ_JOB_CANCELLED: ' || coalesce(${r}.cancel_reason, 'cancelled')`;

/** Tells waiters (waitForJob) the ids of the rows of CTE `source`, in one notification ('*' when too many to list). */
export const tellFinished = (finishedChannel: string, source: string) => `
  select pg_notify('${finishedChannel}', case when length(ids) <= ${MAX_TOLD_IDS_LENGTH} then ids else '*' end)
  from (select string_agg(id::text, ',') as ids from ${source}) listed where ids is not null`;
