import type { JobQueueError } from '../core/errors';

/**
 * What a page says after an action (the 303 it redirects with carries `?done=` or `?error=`):
 * a code from these lists, never text, so that a crafted link makes a page say nothing but
 * what the dashboard itself says. `n`, a job id or a count, is digits only. An action of a new
 * page adds its codes here.
 */
const DONE = {
  retried: () => 'Job retried: it is waiting to run again.',
  cancelled: () => 'Cancel requested: a waiting job ends at once, a running one as soon as its worker hears of it.',
  deleted: (id) => id && `Job #${id} deleted.`,
  'retried-failed': (n) => n && `${n} failed job(s) retried.`,
  'schedule-paused': () => 'Schedule paused: no replica adds its ticks until it is resumed.',
  'schedule-resumed': () => 'Schedule resumed: it ticks again from its next tick.',
  'task-paused': () => 'Task paused: no replica starts its jobs until it is resumed; running ones finish.',
  'task-resumed': () => 'Task resumed: its jobs start again.',
  'queue-paused': () => 'Queue paused: no replica starts its jobs until it is resumed; they keep their order.',
  'queue-resumed': () => 'Queue resumed: its jobs start again, in order.',
  'limits-set': () => "Limits set: every replica follows them until they are reset to the task's own.",
  'limits-reset': () => 'Limits reset: every replica follows the limits the task declares in code.',
} satisfies Record<string, (n: string | undefined) => string | undefined>;

const FAILED = {
  'not-retryable': 'Only a failed or cancelled job can be retried (or a newer job holds its key).',
  JQ_JOB_NOT_FOUND: 'No such job: it was deleted, or retention removed it.',
  JQ_JOB_FINISHED: 'The job has already finished: only an unfinished job can be cancelled.',
  JQ_JOB_RUNNING: 'A worker holds the job: cancel it first.',
  JQ_INVALID_TASK_IDENTIFIER: 'No task has that name.',
  JQ_SCHEDULE_NOT_FOUND: 'No such schedule: it was removed.',
  JQ_INVALID_LIMIT: 'Not a limit: a concurrency is a whole number from 1, a rate a whole number of starts per duration (such as 1s, 1m or 500).',
  JQ_UNKNOWN_TASK: 'This app does not know that task (externalTasks lists the tasks of other apps).',
  JQ_INVALID_QUEUE_NAME: 'Not a queue name: a non-empty name of at most 128 characters.',
  failed: 'The action failed.',
} satisfies Record<string, string>;

export type DoneCode = keyof typeof DONE;
export type ErrorCode = keyof typeof FAILED;

/** The `?error=` code for an action's JobQueueError: its own code when the dashboard words it, else `failed`. */
export function errorCode(error: JobQueueError): ErrorCode {
  return Object.hasOwn(FAILED, error.code) ? (error.code as ErrorCode) : 'failed';
}

/** The message of a page's `?done=` (with `n`) or `?error=`; none for a code the dashboard does not issue. */
export function flashOf(params: Record<string, unknown>): { text: string; error: boolean } | undefined {
  const { done, error, n } = params;
  const number = typeof n === 'string' && /^[0-9]{1,19}$/.test(n) ? n : undefined;
  const text = typeof done === 'string' && Object.hasOwn(DONE, done) ? DONE[done as DoneCode](number) : undefined;
  if (text) return { text, error: false };
  if (typeof error === 'string' && Object.hasOwn(FAILED, error)) return { text: FAILED[error as ErrorCode], error: true };
  return undefined;
}
