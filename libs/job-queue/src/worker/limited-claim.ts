import { mergeLimits, type EffectiveLimits, type StoredLimits } from '../core/limits';
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
  /** Filled what the worker asked for and found as many candidates: more may be waiting within the limits. */
  more: boolean;
  /** The concurrency limit was reached (held by the cluster, this claim included) with jobs possibly waiting: claim again when a slot frees. */
  capped: boolean;
  /** The rate limit was reached: in how many ms its window has room again (undefined while it has room). */
  rateFreesInMs?: number;
  /** A rate-limited task that may have more jobs within its limits, claimed only into free slots: claim again when a slot frees. */
  wantsSlot: boolean;
}

interface Slots {
  held: number;
  started: number;
  frees_in_ms: number | null;
  /** The transaction began too long ago for a rate's count (sql countTaskSlots). */
  stale: boolean;
}

/** How soon a claim that found its transaction stale tries again. */
const STALE_RETRY_MS = 10;

/**
 * The claim of one limited task (sql/limits.ts): in one transaction on the claim connection,
 * the task's advisory lock and the limits set for it at run time (over `declared`, the
 * decorator's), then how many of its jobs are held and how many started within its rate's
 * window, then the ordinary claim (sql claimJobs) of that task alone for what the limits leave,
 * then the record of the starts. Claims of the same task in other processes wait for the lock
 * and count after this one committed, so no limit is ever exceeded; other tasks' claims never
 * take it. A rate-limited task is claimed only into free slots: a prefetched job would start
 * later than the start its claim counted. The caller skips a rate-limited task it knows of
 * when no slot is free.
 */
export async function claimLimited(db: JobQueueDatabase, claims: ClaimConnection, task: string, declared: EffectiveLimits, args: ClaimArgs): Promise<LimitedClaimResult> {
  let limits = declared;
  let room = Infinity;
  let asked = 0;
  let rateFreesInMs: number | undefined;
  const rows = await claims.transaction(async (client) => {
    const [{ override }] = await db.runOn<{ override: StoredLimits | null }>(client, 'lockTaskLimit', [task]);
    limits = mergeLimits(declared, override ?? undefined);
    const { concurrency = Infinity, rate } = limits;
    if (rate && args.free <= 0) return [];
    const window = rate ? [rate.perMs, rate.max] : [null, null];
    const [slots] = await db.runOn<Slots>(client, 'countTaskSlots', [task, ...window]);
    if (rate && slots.stale) {
      rateFreesInMs = STALE_RETRY_MS;
      return [];
    }
    room = concurrency - slots.held;
    const rateRoom = rate ? rate.max - slots.started : Infinity;
    if (rateRoom <= 0) rateFreesInMs = slots.frees_in_ms ?? 0;
    asked = Math.min(rate ? Math.min(args.free, args.room) : args.room, room, rateRoom);
    if (asked <= 0) return [];
    const claimed = await db.runOn<ClaimedRow>(client, 'claimJobs', [[task], args.forbidden, asked, args.workerId, Math.min(args.free, asked), args.pausedQueues]);
    if (rate && claimed.length > 0) {
      const [recorded] = await db.runOn<{ frees_in_ms: number | null }>(client, 'recordStarts', [task, ...window, claimed.length]);
      rateFreesInMs = recorded.frees_in_ms ?? undefined;
    }
    return claimed;
  });
  const full = rows.length > 0 && rows[0].candidate_count >= asked;
  const capped = room <= 0 || (full && asked === room);
  if (!limits.rate) return { rows, more: full && asked < room, capped, wantsSlot: false };
  // A rate-limited claim takes the free slots only: with more waiting, the next claim comes when a slot frees, not in this fetch round.
  const mayHaveMore = args.free <= 0 || full;
  return { rows, more: false, capped, rateFreesInMs, wantsSlot: mayHaveMore && !capped && rateFreesInMs === undefined };
}
