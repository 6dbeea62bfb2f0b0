import { CronTime } from 'cron';
import { DAY_MS, parseDuration } from './duration';
import { JobQueueError } from './errors';

/**
 * Schedules, as pure rules shared by the cron scheduler, the service (upsertSchedule,
 * listSchedules) and the dashboard: when a schedule ticks, and what a schedule given at run
 * time may be. Nothing here touches the database.
 */

/** When a schedule ticks: a cron expression read in a time zone, or a fixed interval. */
export interface ScheduleTiming {
  /** The cron expression, or null for an interval. */
  expression: string | null;
  /** The interval in ms, or null for a cron expression. */
  everyMs: number | null;
  /** The time zone a cron expression is read in (an IANA name or `UTC+hh:mm`); null for an interval. */
  timeZone: string | null;
  /** The first tick strictly after `after`. */
  next(after: Date): Date;
}

/** The shortest and the longest `every`: ticks are whole milliseconds, at most one a second. */
export const MIN_EVERY_MS = 1_000;
export const MAX_EVERY_MS = 366 * DAY_MS;

/** `utcOffset` (minutes east of UTC, as the cron package reads it) as a fixed zone name. */
function offsetZone(minutes: number): string {
  const sign = minutes < 0 ? '-' : '+';
  const abs = Math.abs(Math.trunc(minutes));
  return `UTC${sign}${String(Math.trunc(abs / 60)).padStart(2, '0')}:${String(abs % 60).padStart(2, '0')}`;
}

/**
 * The time zone of a cron schedule, as @nestjs/schedule takes it: `timeZone` (an IANA name),
 * `utcOffset` (minutes), or neither (`fallback`). JQ_INVALID_TIME_ZONE names `where`.
 */
export function scheduleZone(timeZone: unknown, utcOffset: unknown, where: string, fallback: string): string {
  if (timeZone != null && utcOffset != null) {
    throw new JobQueueError('JQ_INVALID_TIME_ZONE', `${where}: give timeZone or utcOffset, not both`);
  }
  if (timeZone != null) {
    if (typeof timeZone !== 'string') throw new JobQueueError('JQ_INVALID_TIME_ZONE', `${where}: timeZone must be a string`);
    try {
      new CronTime('* * * * *', timeZone);
    } catch {
      throw new JobQueueError('JQ_INVALID_TIME_ZONE', `${where}: unknown time zone '${timeZone}'`);
    }
    return timeZone;
  }
  if (utcOffset != null) {
    const offset = typeof utcOffset === 'string' ? Number(utcOffset) : utcOffset;
    if (typeof offset !== 'number' || !Number.isFinite(offset) || Math.abs(offset) > 14 * 60) {
      throw new JobQueueError('JQ_INVALID_TIME_ZONE', `${where}: invalid utcOffset ${String(utcOffset)}`);
    }
    return offsetZone(offset);
  }
  return fallback;
}

/** A cron expression's ticks in `zone`, with the `cron` package @nestjs/schedule uses. JQ_INVALID_CRON_EXPRESSION names `where`. */
export function cronTiming(expression: unknown, zone: string, where: string): ScheduleTiming {
  if (typeof expression !== 'string') {
    throw new JobQueueError('JQ_INVALID_CRON_EXPRESSION', `${where}: the schedule must be a cron expression string, got ${String(expression)}`);
  }
  let cronTime: CronTime;
  try {
    cronTime = new CronTime(expression, zone);
  } catch (error) {
    throw new JobQueueError('JQ_INVALID_CRON_EXPRESSION', `${where}: invalid cron expression '${expression}': ${(error as Error).message}`);
  }
  return { expression, everyMs: null, timeZone: zone, next: (after) => cronTime.getNextDateFrom(after, zone).toJSDate() };
}

/** An interval's ticks: the whole multiples of `everyMs` since the Unix epoch, the same in every process. */
export function everyTiming(everyMs: number): ScheduleTiming {
  return { expression: null, everyMs, timeZone: null, next: (after) => new Date((Math.floor(after.getTime() / everyMs) + 1) * everyMs) };
}

/** `every` as ms: a duration of core/duration.ts, from MIN_EVERY_MS to MAX_EVERY_MS. JQ_INVALID_SCHEDULE names `where`. */
export function everyMs(value: unknown, where: string): number {
  const ms = typeof value === 'number' || typeof value === 'string' ? parseDuration(value) : undefined;
  if (ms === undefined || !Number.isInteger(ms) || ms < MIN_EVERY_MS || ms > MAX_EVERY_MS) {
    throw new JobQueueError(
      'JQ_INVALID_SCHEDULE',
      `${where}: every must be a whole number of ms from ${MIN_EVERY_MS} (1s) to ${MAX_EVERY_MS} (366d), or a duration such as '30s' or '1h30m', got ${JSON.stringify(value) ?? String(value)}`,
    );
  }
  return ms;
}

/** The timing a stored schedule row says, or null if it says nothing this version can read. */
export function storedTiming(row: { expression: string | null; every_ms: string | number | null; time_zone: string | null }): ScheduleTiming | null {
  try {
    if (row.every_ms !== null) return everyTiming(Number(row.every_ms));
    if (row.expression !== null) return cronTiming(row.expression, row.time_zone ?? 'UTC', 'stored schedule');
  } catch {
    // an expression this version's cron package refuses: shown, never ticked here
  }
  return null;
}

/** A schedule as listSchedules() returns it: declared in code (`@Cron`, crontab) or given at run time (upsertSchedule). */
export interface JobSchedule {
  /** The schedule's id (`@Cron`'s name, the crontab's `id`, upsertSchedule's first argument). */
  id: string;
  /** The task its jobs run (null for a schedule an older version recorded without it). */
  identifier: string | null;
  /** The cron expression, or null for an interval. */
  cron: string | null;
  /** The interval in ms, or null for a cron expression. */
  every: number | null;
  /** The time zone a cron expression is read in; null for an interval. */
  timeZone: string | null;
  /** What each tick's job carries, besides `_cron`. */
  payload: Record<string, unknown>;
  queueName: string | null;
  priority: number | null;
  maxAttempts: number | null;
  /** Missed ticks within this many ms are added late, marked backfilled. */
  backfillPeriod: number;
  /** Declared by `@Cron` or a crontab line: changed only in code, never removed at run time (but it can be paused). */
  declaredInCode: boolean;
  paused: boolean;
  pausedAt: Date | null;
  /** The last tick any replica added. */
  lastTick: Date | null;
  /** The next tick (null while paused, or when this version cannot read the schedule). */
  nextTick: Date | null;
  knownSince: Date;
  /** When its definition last changed (null before this version). */
  updatedAt: Date | null;
  /** When a replica last declared it (code), or it was last upserted. */
  registeredAt: Date | null;
}

/** What upsertSchedule takes: `cron` (with an optional `timeZone`, default UTC) or `every`, the task and its jobs' spec. */
export interface ScheduleSpec {
  cron?: string;
  every?: number | string;
  timeZone?: string;
  identifier: string;
  payload?: Record<string, unknown>;
  queueName?: string;
  priority?: number;
  backfillPeriod?: number | string;
}

const SPEC_KEYS = new Set(['cron', 'every', 'timeZone', 'identifier', 'payload', 'queueName', 'priority', 'backfillPeriod']);

/** The longest schedule id (the job key `cron:<id>:<tick>` must stay within 512 characters). */
export const MAX_SCHEDULE_ID_LENGTH = 128;

/** A schedule id: a non-empty string of at most 128 characters, none of them a control character. */
export function validateScheduleId(id: unknown): string {
  // eslint-disable-next-line no-control-regex
  if (typeof id !== 'string' || id.length === 0 || id.length > MAX_SCHEDULE_ID_LENGTH || /[\u0000-\u001f\u007f]/.test(id)) {
    const got = typeof id === 'string' ? (id.length > 40 ? `a string of ${id.length} characters` : JSON.stringify(id)) : String(id);
    throw new JobQueueError('JQ_INVALID_SCHEDULE', `a schedule id must be a non-empty string of at most ${MAX_SCHEDULE_ID_LENGTH} characters, without control characters, got ${got}`);
  }
  return id;
}

/** A run-time schedule's timing and backfill, checked; the payload, queue and priority are checked as a job's (the service). */
export interface CheckedScheduleSpec {
  timing: ScheduleTiming;
  backfillMs: number;
}

/** Checks what upsertSchedule was given, before anything is written. */
export function checkScheduleSpec(id: string, spec: unknown): CheckedScheduleSpec {
  const where = `schedule '${id}'`;
  const fail = (why: string): never => {
    throw new JobQueueError('JQ_INVALID_SCHEDULE', `${where}: ${why}`);
  };
  if (spec === null || typeof spec !== 'object' || Array.isArray(spec)) return fail('the schedule must be an object: { cron | every, identifier, ... }');
  const unknown = Object.keys(spec).filter((key) => !SPEC_KEYS.has(key));
  if (unknown.length > 0) fail(`unknown option(s) ${unknown.join(', ')} (known: ${[...SPEC_KEYS].join(', ')})`);
  const { cron, every, timeZone, payload, backfillPeriod } = spec as ScheduleSpec;
  if ((cron === undefined) === (every === undefined)) fail('give either cron (an expression) or every (a duration), not both or neither');
  if (payload !== undefined && (payload === null || typeof payload !== 'object' || Array.isArray(payload) || Object.getPrototypeOf(payload) !== Object.prototype && Object.getPrototypeOf(payload) !== null)) {
    fail('payload must be a plain JSON object');
  }
  if (payload && Object.hasOwn(payload, '_cron')) fail('payload must not have the key _cron: each tick sets it');
  let backfillMs = 0;
  if (backfillPeriod !== undefined) {
    const ms = typeof backfillPeriod === 'number' || typeof backfillPeriod === 'string' ? parseDuration(backfillPeriod) : undefined;
    if (ms === undefined || ms > MAX_EVERY_MS) fail(`backfillPeriod must be a duration up to 366d (ms, or a string such as '1d'), got ${JSON.stringify(backfillPeriod)}`);
    backfillMs = Math.round(ms!);
  }
  if (every !== undefined) {
    if (timeZone !== undefined) fail('timeZone applies to a cron expression, not to every (intervals are counted from the Unix epoch)');
    return { timing: everyTiming(everyMs(every, where)), backfillMs };
  }
  const zone = scheduleZone(timeZone, undefined, where, 'UTC');
  return { timing: cronTiming(cron, zone, where), backfillMs };
}
