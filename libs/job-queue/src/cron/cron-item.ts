import { JobQueueError } from '../core/errors';
import { validateJob } from '../core/validate-job-spec';
import { parseDuration } from '../core/duration';
import { cronTiming, scheduleZone } from '../core/schedule';

/** One recurring job: which task, when, and what its jobs carry. */
export interface CronItem {
  /** The schedule's identity across replicas (known_crontabs.identifier). */
  identifier: string;
  /** The task its jobs run. */
  task: string;
  /** The cron expression and the time zone its ticks are read in (an IANA name or `UTC+hh:mm`), or null for an interval. */
  expression: string | null;
  timeZone: string | null;
  /** The interval in ms (a run-time schedule's `every`), or null for a cron expression. */
  everyMs: number | null;
  payload: Record<string, unknown>;
  queueName?: string;
  priority?: number;
  maxAttempts?: number;
  /** Missed ticks within this many ms are added late, marked backfilled. */
  backfillMs: number;
  /** Where it was declared, for messages: `Class.method`, `crontab line N` or `upsertSchedule`. */
  source: string;
  /** The first tick strictly after `after`. */
  next(after: Date): Date;
}

export interface CronItemSpec {
  identifier: string;
  task: string;
  expression: unknown;
  timeZone?: unknown;
  utcOffset?: unknown;
  payload?: Record<string, unknown>;
  queueName?: string;
  priority?: number;
  maxAttempts?: number;
  backfillPeriod?: number | string;
  source: string;
}

/** Checks a schedule declared in code and makes its tick function with the `cron` package @nestjs/schedule uses. */
export function createCronItem(spec: CronItemSpec): CronItem {
  const where = `cron '${spec.identifier}' (${spec.source})`;
  if (typeof spec.expression !== 'string') {
    throw new JobQueueError('JQ_INVALID_CRON_EXPRESSION', `${where}: the schedule must be a cron expression string, got ${String(spec.expression)}`);
  }
  // as @nestjs/schedule: the system's time zone when none is given
  const zone = scheduleZone(spec.timeZone, spec.utcOffset, where, Intl.DateTimeFormat().resolvedOptions().timeZone);
  const timing = cronTiming(spec.expression, zone, where);
  const backfillMs = spec.backfillPeriod === undefined ? 0 : parseDuration(spec.backfillPeriod);
  if (backfillMs === undefined) {
    throw new JobQueueError('JQ_INVALID_TASK_OPTIONS', `${where}: backfillPeriod must be milliseconds or a period such as '1d' or '2h30m', got ${String(spec.backfillPeriod)}`);
  }
  try {
    validateJob(spec.task, spec.payload ?? {}, { queueName: spec.queueName, priority: spec.priority, maxAttempts: spec.maxAttempts });
  } catch (error) {
    JobQueueError.rethrowAt(where, error);
  }
  return {
    identifier: spec.identifier,
    task: spec.task,
    expression: spec.expression,
    timeZone: zone,
    everyMs: null,
    payload: spec.payload ?? {},
    queueName: spec.queueName,
    priority: spec.priority,
    maxAttempts: spec.maxAttempts,
    backfillMs,
    source: spec.source,
    next: timing.next,
  };
}

/** Ticks in (from, to], oldest first, at most `limit` of them (the latest ones). */
export function ticksBetween(item: CronItem, from: Date, to: Date, limit = 100_000): Date[] {
  const ticks: Date[] = [];
  for (let tick = item.next(from); tick <= to; tick = item.next(tick)) {
    ticks.push(tick);
    if (ticks.length > limit) ticks.shift();
  }
  return ticks;
}

/**
 * A wake-up this late after the first tick it owes is a hiccup (a stalled event loop, a slow
 * or briefly unreachable database): every tick since the last one handled is added, on time
 * if late. Later than this, the process slept or the clock jumped: see ticksDue.
 */
export const LATE_TICK_GRACE_MS = 10_000;

/** The latest tick in (after, upTo], found by looking back in growing windows from `upTo`. */
function latestTick(item: CronItem, after: Date, upTo: Date): Date | undefined {
  for (let span = 60_000; ; span *= 16) {
    const start = new Date(Math.max(after.getTime(), upTo.getTime() - span));
    const [tick] = ticksBetween(item, start, upTo, 1);
    if (tick || start.getTime() === after.getTime()) return tick;
  }
}

/**
 * What a wake-up at `now` adds, given the last tick handled (`cursor`): `onTime`, the ticks
 * to add as live ones, and `missed`, older ones to add marked backfilled, oldest first.
 * Within LATE_TICK_GRACE_MS of the first tick owed, every tick since the cursor is on time.
 * Later than that (the process slept, the clock jumped forward), only the latest tick is,
 * and older missed ones are added only within the backfill period: one tick, not a burst.
 * A clock that jumped back adds nothing until it passes the cursor again.
 */
export function ticksDue(item: CronItem, cursor: Date, now: Date): { onTime: Date[]; missed: Date[] } {
  const first = item.next(cursor);
  if (first > now) return { onTime: [], missed: [] };
  if (now.getTime() - first.getTime() <= LATE_TICK_GRACE_MS) return { onTime: ticksBetween(item, cursor, now), missed: [] };
  const latest = latestTick(item, cursor, now)!;
  const fillFrom = new Date(Math.max(cursor.getTime(), now.getTime() - Math.max(item.backfillMs, 0)));
  const missed = fillFrom < latest ? ticksBetween(item, fillFrom, new Date(latest.getTime() - 1)) : [];
  return { onTime: [latest], missed };
}

/**
 * When a wake-up at `now` should be followed by the next: the earliest tick of any schedule
 * after `now` and after its cursor. Counted from the wake-up's own `now`, not from the clock
 * read later: a timer may fire a millisecond before its tick (Node's timers and Date.now()
 * round differently), and a tick between the two readings would be skipped for good.
 */
export function nextWakeAt(items: CronItem[], cursors: ReadonlyMap<string, Date>, now: Date): Date {
  const from = (item: CronItem) => new Date(Math.max(now.getTime(), cursors.get(item.identifier)?.getTime() ?? 0));
  return new Date(Math.min(...items.map((item) => item.next(from(item)).getTime())));
}
