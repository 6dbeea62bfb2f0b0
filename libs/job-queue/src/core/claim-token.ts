import type { Job } from './job';

/**
 * Which claim of a job a release is for: its `locked_at` in whole epoch microseconds, as the
 * claim (or the insert that started it at its add) returned it. A release names it for every
 * job and lands only on that claim: a flush retried after its reply was lost had committed,
 * and by then the job may be this worker's again, claimed anew (a failure retried at once);
 * the old outcome must not land on the new claim, whose handler is running (found by the chaos
 * soak: the retried failure of attempt 1 failed attempt 2, which had succeeded, and the job ran
 * a third time). Attempts cannot tell claims apart: add_job raises a held keyed job's, and a
 * snooze gives one back.
 */
export type ClaimToken = string;

const tokens = new WeakMap<Job, ClaimToken>();

/** Records the claim a job object stands for (`lockedAtUs`: its locked_at, epoch microseconds). */
export function setClaimToken(job: Job, lockedAtUs: string | number): void {
  tokens.set(job, String(lockedAtUs));
}

export function claimOf(job: Job): ClaimToken {
  const token = tokens.get(job);
  if (token === undefined) throw new Error(`job ${job.id} was not claimed by this worker: it has no claim token`);
  return token;
}
