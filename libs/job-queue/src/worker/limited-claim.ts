import { isGrouped, isRated, mergeLimits, type EffectiveLimits, type StoredLimits } from '../core/limits';
import type { PoolClient } from 'pg';
import type { JobQueueDatabase } from '../db/job-queue-database';
import { CLAIM_COUNTED_TYPES } from '../sql/counted-claim';
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

/** A counted claim's arguments: the general claim's, and the worker's finished jobs whose release is not written yet (not counted as held: sql countTaskSlots). */
export interface CountedClaimArgs extends ClaimArgs {
  unwritten: string[];
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
  /** Its prefetch is full and jobs may be waiting: claim again once the prefetched jobs run low (slot-leases.ts). */
  refill?: boolean;
}

/** What a task's lock says (sql lockTaskLimitOf): the limits set for it at run time. */
export interface TaskLock {
  override: StoredLimits | null;
}

/** The count of a task's slots (sql countTaskSlots). */
interface Slots {
  held: number;
  started: number;
  frees_in_ms: number | null;
  /** The transaction began too long ago for a rate's count. */
  stale: boolean;
}

/** A row of sql claimCountedJobs: a claimed job (id null when it claimed none) and the count beside it. */
type CountedRow = ClaimedRow & Omit<Slots, 'started'> & { asked: number; limits_changed: boolean; override: StoredLimits | null };

/** How soon a claim that found its transaction stale tries again. */
const STALE_RETRY_MS = 10;

/** What a limited claim found, for the result it gives (claimLimited). */
interface Outcome {
  limits: EffectiveLimits;
  rows: ClaimedRow[];
  /** The concurrency limit less what the cluster held before this claim. */
  room: number;
  /** How many jobs it tried to claim. */
  asked: number;
  rateFreesInMs?: number;
  groupAtLimit?: boolean;
}

/** How many times in a row a claim meets limits it had not heard of before it gives up until its next round. */
const MAX_LIMIT_CHANGES = 3;

/**
 * The claim of one limited task: under the task's advisory lock, how many of its jobs are held
 * and how many started within its rate's window, the ordinary claim of that task alone for what
 * the limits leave, and the record of the starts: one statement (sql claimCountedJobs) in one
 * message with the begin, the lock and the commit, or with group limits a transaction of several
 * (claimByGroups). Claims of the same task in other processes wait for the lock and count after
 * this one committed, so no limit is ever exceeded; other tasks' claims never take it. `believed`
 * is what the worker has heard setTaskLimits store (over `declared`, the decorator's); the claim
 * follows what is stored when it counts. A rate-limited task (its own rate or its groups') is
 * claimed only into free slots: a prefetched job would start later than the start its claim
 * counted. The caller skips a rate-limited task it knows of when no slot is free.
 */
export async function claimLimited(
  db: JobQueueDatabase,
  claims: ClaimConnection,
  task: string,
  declared: EffectiveLimits,
  believed: StoredLimits | undefined,
  args: CountedClaimArgs,
): Promise<LimitedClaimResult> {
  const { limits, rows, room, asked, rateFreesInMs, groupAtLimit = false } = await claimCounted(db, claims, task, declared, believed ?? null, args);
  const full = rows.length > 0 && (rows.length >= asked || rows[0].candidate_count >= asked);
  // A group at its limit frees a slot when one of its jobs ends: that should wake a claim.
  const capped = room <= 0 || (full && asked === room) || groupAtLimit;
  if (!isRated(limits)) return { rows, more: full && asked < room, capped, wantsSlot: false };
  // A rate-limited claim takes the free slots only: with more waiting, the next claim comes when a slot frees, not in this fetch round.
  const mayHaveMore = args.free <= 0 || full;
  return { rows, more: false, capped, rateFreesInMs, wantsSlot: mayHaveMore && !capped && rateFreesInMs === undefined };
}

/** The claim of a task without group limits (sql claimCountedJobs), with the limits stored when it counts. */
async function claimCounted(db: JobQueueDatabase, claims: ClaimConnection, task: string, declared: EffectiveLimits, believed: StoredLimits | null, args: CountedClaimArgs): Promise<Outcome> {
  let override = believed;
  for (let changes = 0; changes < MAX_LIMIT_CHANGES; changes++) {
    const limits = mergeLimits(declared, override ?? undefined);
    if (isGrouped(limits)) return claimByGroups(db, claims, task, declared, args);
    const rated = isRated(limits);
    if (rated && args.free <= 0) return { limits, rows: [], room: Infinity, asked: 0 };
    const window = limits.rate ? [limits.rate.perMs, limits.rate.max] : [null, null];
    const wanted = rated ? Math.min(args.free, args.room) : args.room;
    const values = [[task], args.forbidden, wanted, args.workerId, args.free, args.pausedQueues, limits.concurrency ?? null, ...window, args.unwritten, override && JSON.stringify(override)];
    const counted = await claims.oneMessage<CountedRow>((client) => {
      const { preparation, statement } = db.inMessage(client, 'claimCountedJobs', CLAIM_COUNTED_TYPES, values);
      return { preparation, statements: [db.sql.lockTaskLimitOf(task), statement] };
    });
    const [first] = counted;
    if (first.limits_changed) {
      override = first.override;
      continue;
    }
    if (first.stale) return { limits, rows: [], room: Infinity, asked: 0, rateFreesInMs: STALE_RETRY_MS };
    return { limits, rows: first.id === null ? [] : counted, room: (limits.concurrency ?? Infinity) - first.held, asked: first.asked, rateFreesInMs: first.frees_in_ms ?? undefined };
  }
  // setTaskLimits changed this task's limits under each of these claims: the next round tries again.
  return { limits: mergeLimits(declared, override ?? undefined), rows: [], room: Infinity, asked: 0, rateFreesInMs: STALE_RETRY_MS };
}

/**
 * The claim of a task with group limits, in one transaction on the claim connection: the task's
 * lock and the limits stored for it (sent with the begin), how many of its jobs are held and
 * started within its rate's window (sql countTaskSlots), its grouped jobs by group and then its
 * others (claimGroups), and the record of the task's starts.
 */
async function claimByGroups(db: JobQueueDatabase, claims: ClaimConnection, task: string, declared: EffectiveLimits, args: CountedClaimArgs): Promise<Outcome> {
  const outcome: Outcome = { limits: declared, rows: [], room: Infinity, asked: 0 };
  outcome.rows = await claims.transaction<ClaimedRow, TaskLock>(db.sql.lockTaskLimitOf(task), async (client, [{ override }]) => {
    const limits = (outcome.limits = mergeLimits(declared, override ?? undefined));
    const { concurrency = Infinity, rate } = limits;
    const rated = isRated(limits);
    if (rated && args.free <= 0) return [];
    const window = rate ? [rate.perMs, rate.max] : [null, null];
    const [slots] = await db.runOn<Slots>(client, 'countTaskSlots', [task, ...window, args.workerId, args.unwritten]);
    if (rated && slots.stale) {
      outcome.rateFreesInMs = STALE_RETRY_MS;
      return [];
    }
    outcome.room = concurrency - slots.held;
    const rateRoom = rate ? rate.max - slots.started : Infinity;
    if (rateRoom <= 0) outcome.rateFreesInMs = slots.frees_in_ms ?? 0;
    const asked = (outcome.asked = Math.min(rated ? Math.min(args.free, args.room) : args.room, outcome.room, rateRoom));
    if (asked <= 0) return [];
    // A task whose limits lost their groups since the worker looked is claimed here all the same: its jobs without a group are all it finds.
    const grouped = isGrouped(limits) ? await claimGroups(db, client, task, limits, args, asked, Math.min(args.free, asked)) : undefined;
    const claimed = grouped?.rows ?? (await db.runOn<ClaimedRow>(client, 'claimJobs', [[task], args.forbidden, asked, args.workerId, Math.min(args.free, asked), args.pausedQueues]));
    outcome.groupAtLimit = grouped?.atLimit ?? false;
    outcome.rateFreesInMs = earliest(outcome.rateFreesInMs, grouped?.rateFreesInMs);
    if (rate && claimed.length > 0) {
      const [recorded] = await db.runOn<{ frees_in_ms: number | null }>(client, 'recordStarts', [task, ...window, claimed.length]);
      outcome.rateFreesInMs = earliest(outcome.rateFreesInMs, recorded.frees_in_ms ?? undefined);
    }
    return claimed;
  });
  return outcome;
}

/** The sooner of two wake-ups (undefined: none). */
function earliest(a: number | undefined, b: number | undefined): number | undefined {
  return a === undefined ? b : b === undefined ? a : Math.min(a, b);
}

/**
 * A group-limited task's part of its claim, inside its transaction: up to `asked` jobs, its
 * grouped jobs first (sql claimGroupedJobs, at most what each group's limits leave), then its
 * jobs without a group (sql claimUngroupedJobs) for the rest, `free` of them started; the
 * groups' starts recorded when they have a rate, and when a full group's window has room again.
 */
async function claimGroups(
  db: JobQueueDatabase,
  client: PoolClient,
  task: string,
  limits: EffectiveLimits,
  args: CountedClaimArgs,
  asked: number,
  free: number,
): Promise<{ rows: ClaimedRow[]; rateFreesInMs?: number; atLimit: boolean }> {
  const { groupConcurrency = null, groupRate } = limits;
  const window = groupRate ? [groupRate.perMs, groupRate.max] : [null, null];
  const grouped = await db.runOn<ClaimedRow & { full_groups: number }>(client, 'claimGroupedJobs', [task, args.forbidden, asked, args.workerId, free, groupConcurrency, ...window, args.unwritten]);
  // Whether a group is full (a job's end may then free a slot): said by the claim's rows, or asked apart when it claimed none.
  let atLimit = grouped.length > 0 ? grouped[0].full_groups > 0 : false;
  if (grouped.length === 0 && groupConcurrency !== null) {
    [{ at_limit: atLimit }] = await db.runOn<{ at_limit: boolean }>(client, 'groupAtLimit', [task, groupConcurrency, args.workerId, args.unwritten]);
  }
  let rateFreesInMs: number | undefined;
  if (groupRate) {
    if (grouped.length > 0) await db.runOn(client, 'recordGroupStarts', [task, groupRate.perMs, grouped.map((row) => row.group_key)]);
    if (grouped.length < asked) {
      const [next] = await db.runOn<{ frees_in_ms: number | null }>(client, 'groupRateFreesInMs', [task, ...window]);
      rateFreesInMs = next.frees_in_ms ?? undefined;
    }
  }
  if (grouped.length >= asked) return { rows: grouped, rateFreesInMs, atLimit };
  const started = grouped.filter((row) => row.started).length;
  const rest = await db.runOn<ClaimedRow>(client, 'claimUngroupedJobs', [[task], args.forbidden, asked - grouped.length, args.workerId, Math.max(0, free - started), args.pausedQueues]);
  return { rows: [...grouped, ...rest], rateFreesInMs, atLimit };
}
