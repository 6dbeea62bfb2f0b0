import type { Job } from './job';

/**
 * Which claim of a job a release is for: its `locked_at` as the claim (or the insert that
 * started it at its add) returned it, in epoch milliseconds (`job.lockedAt`). A flush written
 * again after a failure names each job's claim, and lands only on that claim: the first write
 * may have committed (its reply lost), and by then the job may be this worker's again, claimed
 * anew (a failure retried at once); the old outcome must not land on the new claim, whose
 * handler is running (found by the chaos soak: the retried failure of attempt 1 failed attempt
 * 2, which had succeeded, and the job ran a third time). Milliseconds tell two claims of one
 * job apart: the second comes after the first's release committed, and a release waits at
 * least a millisecond for its flush (release-batcher.ts FLUSH_DELAY_MS). Attempts cannot: add_job
 * raises a held keyed job's, and a snooze gives one back.
 */
export type ClaimToken = string;

export function claimOf(job: Job): ClaimToken {
  if (job.lockedAt === null) throw new Error(`job ${job.id} is not claimed: it has no claim token`);
  return String(job.lockedAt.getTime());
}
