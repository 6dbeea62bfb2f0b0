/**
 * Shared fragment: a job row's columns as statements return them, for every statement that
 * hands back whole jobs (the add_job calls of sql/add.ts, the admin actions of sql/admin.ts).
 */

/**
 * The columns of a job row that statements return, listed rather than `*`: a prepared
 * statement whose result gains a column (a later migration adding one, while this version
 * still runs) fails with "cached plan must not change result type" on every connection
 * that prepared it.
 */
export const JOB_COLUMNS = [
  'id', 'task_identifier', 'queue_name', 'payload', 'priority', 'run_at', 'attempts', 'max_attempts',
  'last_error', 'key', 'revision', 'flags', 'locked_at', 'locked_by', 'created_at', 'updated_at', 'started_at', 'first_run_at',
  'progress', 'errors', 'cancel_requested_at', 'trace_id', 'span_id', 'trace_flags', 'group_key',
] as const;

/** JOB_COLUMNS of row `alias`, as a select list. */
export const jobColumns = (alias: string) => JOB_COLUMNS.map((column) => `${alias}.${column}`).join(', ');
