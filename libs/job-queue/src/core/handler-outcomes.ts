import { checkDuration } from './duration';
import { JobQueueError } from './errors';
import { errorMessage } from './job-outcome';
import { MAX_RATE_WINDOW_MS } from './limits';

/** The longest snooze: a year. */
const MAX_SNOOZE_MS = 366 * 24 * 3_600_000;

/**
 * Thrown by a handler: the job fails for good now, with no more attempts, whatever it had
 * left (a payload that can never work, a resource that is gone). Recorded like any failure,
 * with the code JQ_JOB_FAILED_FOR_GOOD; `job:failed` is emitted.
 */
export class PermanentJobError extends JobQueueError {
  constructor(message: string) {
    super('JQ_JOB_FAILED_FOR_GOOD', message);
  }
}

/**
 * Thrown by a handler: run the job again after `delay` (ms, or a duration such as '30s'),
 * without spending an attempt (a rate limit, a resource not ready yet). Recorded in the
 * job's errors with the code JQ_JOB_SNOOZED; `job:snoozed` is emitted. A named queue waits
 * behind its snoozed head, as behind one waiting for a retry.
 */
export class SnoozeJob extends JobQueueError {
  readonly delayMs: number;

  constructor(delay: number | string, reason?: string) {
    const delayMs = checkDuration('delay', delay, 0, 'JQ_INVALID_SPEC', 'SnoozeJob', MAX_SNOOZE_MS);
    super('JQ_JOB_SNOOZED', reason ?? `snoozed for ${delayMs} ms`);
    this.delayMs = delayMs;
  }
}

/**
 * Thrown by `ctx.rateLimited(retryAfter)` (a partner answered 429): the attempt ends without
 * counting, as a snooze of `retryAfter` does, and the worker holds the task's starts on every
 * worker until then (a row of `pauses` with an end: sql holdTask). BullMQ's RateLimitError.
 */
export class TaskRateLimited extends SnoozeJob {
  constructor(
    readonly task: string,
    retryAfter: number | string,
  ) {
    const ms = checkDuration('retryAfter', retryAfter, 1, 'JQ_INVALID_LIMIT', 'ctx.rateLimited', MAX_RATE_WINDOW_MS);
    super(ms, `rate limited: task ${task} holds its starts for ${ms} ms`);
  }
}

/** How many of a batch's failed elements its message describes; the rest are counted. */
const DESCRIBED_FAILURES = 10;

/**
 * The outcome of a batch job's attempt in which some elements failed: its payload is an
 * array, its handler returned an array with one promise per element, and some of them
 * rejected. The attempt counts as failed (code JQ_BATCH_FAILED), and the job is retried with
 * `payload`, only the elements whose promise rejected (in order): those that succeeded never
 * run again. `payload` is undefined when the job's payload is not an array as long as what
 * the handler returned: the whole job is retried then. `errors`: what each rejected with.
 */
export class BatchJobFailure extends JobQueueError {
  constructor(
    readonly payload: unknown[] | undefined,
    readonly errors: unknown[],
    elements: number,
  ) {
    const described = errors.slice(0, DESCRIBED_FAILURES).map((error) => errorMessage(error));
    const more = errors.length > DESCRIBED_FAILURES ? `; and ${errors.length - DESCRIBED_FAILURES} more` : '';
    super('JQ_BATCH_FAILED', `${errors.length} of ${elements} elements of the batch failed: ${described.join('; ')}${more}`);
  }
}

const isThenable = (value: unknown): value is PromiseLike<unknown> =>
  value !== null && (typeof value === 'object' || typeof value === 'function') && typeof (value as { then?: unknown }).then === 'function';

/**
 * A handler's return value that is an array (the caller checks Array.isArray, so that other
 * results cost nothing): with no promise in it, the array as it is. Otherwise every element is
 * awaited (Promise.allSettled): all resolved gives the array of their values, the job's
 * result; any rejected throws a BatchJobFailure carrying the elements of `payload` whose
 * promises rejected.
 */
export async function settleBatch(payload: unknown, result: unknown[]): Promise<unknown[]> {
  if (!result.some(isThenable)) return result;
  const settled = await Promise.allSettled(result);
  const failed: number[] = [];
  for (const [index, outcome] of settled.entries()) if (outcome.status === 'rejected') failed.push(index);
  if (failed.length === 0) return settled.map((outcome) => (outcome as PromiseFulfilledResult<unknown>).value);
  const errors = failed.map((index) => (settled[index] as PromiseRejectedResult).reason);
  const elements = Array.isArray(payload) && payload.length === result.length ? failed.map((index) => payload[index]) : undefined;
  throw new BatchJobFailure(elements, errors, result.length);
}
