import type { JobQueueDatabase } from '../db/job-queue-database';
import type { ClaimConnection } from './claim-connection';
import type { ClaimedRow } from './claimed-job';

/** The general claim's other parameters, which a limited claim passes on (sql claimJobs $2, $4, $6) with its own $3 and $5. */
export interface ClaimArgs {
  forbidden: string[];
  /** Jobs this worker may take (free slots plus prefetch room). */
  room: number;
  workerId: string;
  /** Free slots: the first ones claimed are marked started. */
  free: number;
  pausedQueues: string[];
}

export interface LimitedClaimResult {
  rows: ClaimedRow[];
  /** Filled what the worker asked for and found as many candidates: more may be waiting within the limit. */
  more: boolean;
  /** The limit was reached (held by the cluster, this claim included) with jobs possibly waiting: claim again when a slot frees. */
  capped: boolean;
}

/**
 * The claim of one task with a `globalConcurrency` limit (sql/limits.ts): in one transaction on
 * the claim connection, the task's advisory lock, then how many of its jobs are held, then the
 * ordinary claim (sql claimJobs) of that task alone for at most limit − held jobs, prefetch
 * included. Claims of the same task in other processes wait for the lock and count after this
 * one committed, so the limit is never exceeded; other tasks' claims never take it.
 */
export async function claimLimited(db: JobQueueDatabase, claims: ClaimConnection, task: string, limit: number, args: ClaimArgs): Promise<LimitedClaimResult> {
  let slots = 0;
  let asked = 0;
  const rows = await claims.transaction(async (client) => {
    await db.runOn(client, 'lockTaskLimit', [task]);
    const [{ held }] = await db.runOn<{ held: number }>(client, 'countHeldJobs', [task]);
    slots = limit - held;
    asked = Math.min(args.room, slots);
    if (asked <= 0) return [];
    return db.runOn<ClaimedRow>(client, 'claimJobs', [[task], args.forbidden, asked, args.workerId, Math.min(args.free, asked), args.pausedQueues]);
  });
  const full = rows.length > 0 && rows[0].candidate_count >= asked;
  return { rows, more: full && asked < slots, capped: slots <= 0 || (full && asked === slots) };
}
