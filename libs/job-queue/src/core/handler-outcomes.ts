import { checkDuration } from './duration';
import { JobQueueError } from './errors';

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
