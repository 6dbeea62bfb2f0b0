import { JobQueueError } from './errors';

/** The longest reason a cancel keeps. */
export const MAX_REASON_LENGTH = 1_000;

/** A cancel's reason, checked: null for none (JQ_INVALID_SPEC for anything but a string of at most MAX_REASON_LENGTH). */
export function validateReason(reason: unknown): string | null {
  if (reason !== undefined && (typeof reason !== 'string' || reason.length > MAX_REASON_LENGTH)) {
    throw new JobQueueError('JQ_INVALID_SPEC', `reason must be a string of at most ${MAX_REASON_LENGTH} characters`);
  }
  return (reason as string | undefined) ?? null;
}

/** What cancel_job() answered for job `id`, as the error of a cancel it refused (JQ_JOB_NOT_FOUND, JQ_JOB_FINISHED); undefined when it cancelled or asked the job's worker to. */
export function cancelRefusal(id: string, outcome: string, state: string | null): JobQueueError | undefined {
  if (outcome === 'not_found') return new JobQueueError('JQ_JOB_NOT_FOUND', `job ${id} does not exist`);
  if (outcome === 'finished') return new JobQueueError('JQ_JOB_FINISHED', `job ${id} is already ${state}: only an unfinished job can be cancelled`);
  return undefined;
}
